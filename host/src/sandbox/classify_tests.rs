//! One test per way a body can end: each case built from the types the
//! store sees, none from an error's text.

#![expect(clippy::expect_used, reason = "a test that cannot set up fails loudly")]

use super::*;
use bytes::Bytes;
use wasmtime_wasi::p2::OutputStream;

fn seen(stderr: &CapturedOutput) -> Seen<'_> {
    Seen {
        transfer_cap: 16 << 20,
        max_output: 4 << 20,
        stopped_by: None,
        limit_hit: None,
        stderr,
    }
}

fn trap(t: Trap) -> wasmtime::Error {
    wasmtime::Error::new(t)
}

#[test]
fn a_stop_by_the_deadline_is_timeout_whatever_the_trap() {
    let stderr = CapturedOutput::new(64);
    let seen = Seen {
        stopped_by: Some(ErrorCode::Timeout),
        ..seen(&stderr)
    };
    let (code, message) = classify(&trap(Trap::Interrupt), &seen);
    assert_eq!(code, ErrorCode::Timeout);
    assert_eq!(message, "the call ran past its deadline and was stopped");
}

#[test]
fn a_stop_by_cancellation_is_cancelled() {
    let stderr = CapturedOutput::new(64);
    let seen = Seen {
        stopped_by: Some(ErrorCode::Cancelled),
        ..seen(&stderr)
    };
    let (code, message) = classify(&trap(Trap::Interrupt), &seen);
    assert_eq!(code, ErrorCode::Cancelled);
    assert_eq!(message, "the call was cancelled; the tool was stopped");
}

#[test]
fn the_out_of_fuel_trap_is_out_of_fuel() {
    let stderr = CapturedOutput::new(64);
    let (code, _) = classify(&trap(Trap::OutOfFuel), &seen(&stderr));
    assert_eq!(code, ErrorCode::OutOfFuel);
}

#[test]
fn a_refused_memory_growth_is_memory_limit_whatever_the_trap() {
    // The guest's allocator fails and the guest aborts: the trap says
    // `unreachable`, the limiter's record says why.
    let stderr = CapturedOutput::new(64);
    let seen = Seen {
        limit_hit: Some(LimitHit::Memory { limit: 64 << 20 }),
        ..seen(&stderr)
    };
    let (code, message) = classify(&trap(Trap::UnreachableCodeReached), &seen);
    assert_eq!(code, ErrorCode::MemoryLimit);
    assert!(
        message.contains("memory") && message.contains("67108864"),
        "{message}"
    );
}

#[test]
fn a_refused_table_growth_is_memory_limit_naming_the_table() {
    let stderr = CapturedOutput::new(64);
    let seen = Seen {
        limit_hit: Some(LimitHit::Table { limit: 1 }),
        ..seen(&stderr)
    };
    // wasmtime fails the instantiation with an untyped message here.
    let err = wasmtime::Error::msg("table minimum size of 2 elements exceeds table limits");
    let (code, message) = classify(&err, &seen);
    assert_eq!(code, ErrorCode::MemoryLimit);
    assert!(
        message.contains("table") && message.contains("1 table elements"),
        "{message}"
    );
}

#[test]
fn too_many_instances_is_memory_limit_naming_the_instance_count() {
    let stderr = CapturedOutput::new(64);
    let err = wasmtime::Error::new(LimitHit::Instances {
        needed: 4,
        limit: 1,
    });
    let (code, message) = classify(&err, &seen(&stderr));
    assert_eq!(code, ErrorCode::MemoryLimit);
    assert!(message.contains("instance count 4"), "{message}");
}

#[test]
fn too_many_memories_is_memory_limit_naming_the_memory_count() {
    let stderr = CapturedOutput::new(64);
    let err = wasmtime::Error::new(LimitHit::Memories {
        needed: 3,
        limit: 2,
    });
    let (code, message) = classify(&err, &seen(&stderr));
    assert_eq!(code, ErrorCode::MemoryLimit);
    assert!(message.contains("memory count 3"), "{message}");
}

#[test]
fn too_many_tables_is_memory_limit_naming_the_table_count() {
    let stderr = CapturedOutput::new(64);
    // Context added on the way up does not hide the type.
    let err = wasmtime::Error::new(LimitHit::Tables {
        needed: 5,
        limit: 4,
    })
    .context("instantiating the component");
    let (code, message) = classify(&err, &seen(&stderr));
    assert_eq!(code, ErrorCode::MemoryLimit);
    assert!(message.contains("table count 5"), "{message}");
}

#[test]
fn wasmtimes_untyped_count_error_is_not_guessed_from_its_text() {
    // The text wasmtime uses when it enforces a count itself (a component
    // whose footprint could not be counted): no longer matched, so it is a
    // trap with wasmtime's words, not a guessed MEMORY_LIMIT.
    let stderr = CapturedOutput::new(64);
    let err = wasmtime::Error::msg("resource limit exceeded: instance count too high at 2");
    let (code, message) = classify(&err, &seen(&stderr));
    assert_eq!(code, ErrorCode::Trap);
    assert!(message.contains("instance count too high"), "{message}");
}

#[test]
fn any_other_trap_is_trap_with_the_tail_of_stderr() {
    let mut stderr = CapturedOutput::new(1024);
    let lines: String = (1..=7).map(|i| format!("line {i}\n")).collect();
    stderr.write(Bytes::from(lines)).expect("captured");
    let (code, message) = classify(&trap(Trap::StackOverflow), &seen(&stderr));
    assert_eq!(code, ErrorCode::Trap);
    assert!(message.starts_with("the tool trapped: "), "{message}");
    assert!(message.contains("stack"), "{message}");
    assert!(
        message.ends_with("line 3\nline 4\nline 5\nline 6\nline 7"),
        "{message}"
    );
    assert!(!message.contains("line 2"), "{message}");
}

#[test]
fn a_host_error_that_is_no_trap_is_trap_with_its_text() {
    let stderr = CapturedOutput::new(64);
    let err = wasmtime::Error::msg("the host could not do it");
    let (code, message) = classify(&err, &seen(&stderr));
    assert_eq!(code, ErrorCode::Trap);
    assert_eq!(message, "the tool trapped: the host could not do it");
}

#[test]
fn too_much_data_handed_to_the_host_is_output_too_large() {
    // wasmtime's own error (private type) as it reaches the host, wrapped.
    let stderr = CapturedOutput::new(64);
    let err = wasmtime::Error::msg(
        "too much data is being copied between the host and the guest: fuel allocated for \
         hostcalls has been exhausted",
    )
    .context("error while lifting the result");
    let (code, message) = classify(&err, &seen(&stderr));
    assert_eq!(code, ErrorCode::OutputTooLarge);
    assert!(
        message.contains("more than 16777216 bytes") && message.contains("limit is 4194304"),
        "{message}"
    );
    // Any other untyped error stays a trap.
    let (code, _) = classify(&wasmtime::Error::msg("hostcalls"), &seen(&stderr));
    assert_eq!(code, ErrorCode::Trap);
}
