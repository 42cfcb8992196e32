//! Runtime limits: traps, timeouts, memory and output caps end with their own
//! code, and the host stays healthy (a normal call on the same host works
//! after each one).

use crate::common::*;
use serde_json::json;
use std::time::Duration;
use toolhost::{CallRequest, ErrorCode, Host, Limits, MAX_ARGS_BYTES, RuntimeOptions, SandboxMode};

toolhost_conformance::foreach_runtime!(assert_test_exists);

const DEADLINE: Duration = Duration::from_millis(500);

fn with_deadline() -> Limits {
    Limits {
        deadline: DEADLINE,
        ..Limits::default()
    }
}

/// The call ended close to its deadline: not before it, and not long after
/// (the bound is generous; it only catches a deadline that is not enforced).
fn assert_near_deadline(wall_us: u64) {
    let wall = Duration::from_micros(wall_us);
    assert!(
        wall >= DEADLINE - Duration::from_millis(50),
        "stopped after {wall:?}, before the {DEADLINE:?} deadline"
    );
    assert!(
        wall < DEADLINE + Duration::from_millis(2500),
        "stopped after {wall:?}, far past the {DEADLINE:?} deadline"
    );
}

#[tokio::test]
async fn runtime_panic() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(probes::RUNTIME_PANIC, ws.path(), Limits::default()).await;
    let r = call(&host, "panic", json!({}), SandboxMode::None).await;
    assert_eq!(r.code(), Some(ErrorCode::Trap), "{r:?}");
    assert!(
        r.error
            .as_ref()
            .unwrap()
            .message
            .contains("probe panicked on purpose"),
        "{r:?}"
    );
    // The host is still healthy: the next call traps the same way, cleanly.
    let again = call(&host, "panic", json!({}), SandboxMode::None).await;
    assert_eq!(again.code(), Some(ErrorCode::Trap));
}

/// A guest computing forever is stopped by epoch interruption.
#[tokio::test]
async fn runtime_spin() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(probes::RUNTIME_SPIN, ws.path(), with_deadline()).await;
    let r = call(&host, "spin", json!({}), SandboxMode::None).await;
    assert_eq!(r.code(), Some(ErrorCode::Timeout), "{r:?}");
    assert_near_deadline(r.receipt.wall_us);
    assert_echo_works(&host).await;
}

/// A guest blocked in a host call (sleeping) is stopped there too.
#[tokio::test]
async fn runtime_sleep_forever() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(probes::RUNTIME_SLEEP_FOREVER, ws.path(), with_deadline()).await;
    let r = call(&host, "sleep_forever", json!({}), SandboxMode::None).await;
    assert_eq!(r.code(), Some(ErrorCode::Timeout), "{r:?}");
    assert_near_deadline(r.receipt.wall_us);
    assert_echo_works(&host).await;
}

#[tokio::test]
async fn runtime_memory_bomb() {
    let ws = tempfile::tempdir().unwrap();
    let max_memory = 64 << 20;
    let limits = Limits {
        max_memory,
        ..Limits::default()
    };
    let host = host_with(probes::RUNTIME_MEMORY_BOMB, ws.path(), limits).await;
    let r = call(&host, "memory_bomb", json!({}), SandboxMode::None).await;
    assert_eq!(r.code(), Some(ErrorCode::MemoryLimit), "{r:?}");
    let peak = r.receipt.peak_memory_bytes;
    assert!(
        peak <= max_memory as u64,
        "peak memory {peak} is above the {max_memory} limit"
    );
    assert!(
        peak >= (max_memory / 2) as u64,
        "peak memory {peak}: the bomb should have come close to the limit"
    );
    assert_echo_works(&host).await;
}

#[tokio::test]
async fn runtime_output_flood() {
    let ws = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_output: 1 << 20,
        ..Limits::default()
    };
    let host = host_with(probes::RUNTIME_OUTPUT_FLOOD, ws.path(), limits).await;
    let r = call(&host, "output_flood", json!({"mib": 8}), SandboxMode::None).await;
    assert_eq!(r.code(), Some(ErrorCode::OutputTooLarge), "{r:?}");
    assert!(
        r.error.as_ref().unwrap().message.contains("1048576"),
        "the message names the limit: {r:?}"
    );
    assert_eq!(
        r.canonical,
        serde_json::Value::Null,
        "nothing of the oversized result is kept"
    );
    // The same tool with a small result works.
    let small = call(&host, "output_flood", json!({"mib": 0}), SandboxMode::None).await;
    assert!(small.is_ok(), "{small:?}");
    // An error message is part of the result: it is cut to the cap.
    let r = call(
        &host,
        "output_flood",
        json!({"mib": 0, "error_mib": 8}),
        SandboxMode::None,
    )
    .await;
    assert_eq!(r.code(), Some(ErrorCode::ToolError), "{r:?}");
    let message = &r.error.as_ref().unwrap().message;
    assert!(message.starts_with("flood: eee"), "{}", &message[..40]);
    assert!(message.len() <= (1 << 20) + 100, "{} bytes", message.len());
    assert!(
        message.ends_with("the limit is 1048576]"),
        "{}",
        &message[message.len() - 80..]
    );
    // So is the tool's error code: a 2 MiB code (over the cap by itself),
    // with newlines in it, is kept as a short token.
    let r = call(
        &host,
        "output_flood",
        json!({"mib": 0, "error_code": "x\ny", "error_code_mib": 2}),
        SandboxMode::None,
    )
    .await;
    assert_eq!(r.code(), Some(ErrorCode::ToolError), "{r:?}");
    let message = &r.error.as_ref().unwrap().message;
    assert!(message.len() < 200, "{} bytes", message.len());
    assert!(
        message.starts_with(&format!("x_y{}: e", "c".repeat(61))),
        "{message}"
    );
    // Empty blocks carry no text but are not free: too many is too large.
    let r = call(
        &host,
        "output_flood",
        json!({"mib": 0, "empty_blocks": 100_000}),
        SandboxMode::None,
    )
    .await;
    assert_eq!(r.code(), Some(ErrorCode::OutputTooLarge), "{r:?}");
    // Far above the cap, a result is refused while wasmtime lifts it, so
    // that the host never holds it whole: one string of 24 MiB, and a
    // million empty blocks (each takes the host a vector slot and a
    // string). The store's transfer cap is 16 MiB for this output cap.
    for args in [
        json!({"mib": 24}),
        json!({"mib": 0, "empty_blocks": 1_000_000}),
    ] {
        let r = call(&host, "output_flood", args.clone(), SandboxMode::None).await;
        assert_eq!(r.code(), Some(ErrorCode::OutputTooLarge), "{args}: {r:?}");
        let message = &r.error.as_ref().unwrap().message;
        assert!(
            message.contains("more than 16777216 bytes at once"),
            "{args}: {message}"
        );
    }
    let r = call(
        &host,
        "output_flood",
        json!({"mib": 0, "empty_blocks": 1000}),
        SandboxMode::None,
    )
    .await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.content.len(), 1000);
    assert_echo_works(&host).await;
}

/// Writing to stdout never traps: output is captured in a bounded buffer,
/// the rest is dropped, and the receipt counts every byte.
#[tokio::test]
async fn runtime_stdout_flood() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(probes::RUNTIME_STDOUT_FLOOD, ws.path(), Limits::default()).await;
    let r = call(&host, "stdout_flood", json!({}), SandboxMode::None).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.canonical, json!({"written": 100u64 << 20}));
    assert_eq!(r.receipt.stdout_bytes, 100 << 20);
    assert_eq!(r.receipt.stderr_bytes, 1 << 20);
    assert_echo_works(&host).await;
}

#[tokio::test]
async fn runtime_deep_recursion() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(probes::RUNTIME_DEEP_RECURSION, ws.path(), Limits::default()).await;
    let r = call(&host, "deep_recursion", json!({}), SandboxMode::None).await;
    assert_eq!(r.code(), Some(ErrorCode::Trap), "{r:?}");
    let message = &r.error.as_ref().unwrap().message;
    assert!(
        message.contains("stack"),
        "the message says the stack overflowed: {message}"
    );
    assert_echo_works(&host).await;
}

/// With fuel metering, a short call reports the fuel it used and an endless
/// loop ends with OUT_OF_FUEL having used exactly its budget.
#[tokio::test]
async fn runtime_fuel() {
    let ws = tempfile::tempdir().unwrap();
    let budget = 1_000_000;
    let limits = Limits {
        fuel: Some(budget),
        ..Limits::default()
    };
    let options = RuntimeOptions {
        fuel: true,
        ..suite_options()
    };
    let host = host_with_options(probes::RUNTIME_FUEL, ws.path(), limits, options).await;
    let short = call(&host, "count", json!({"n": 100}), SandboxMode::None).await;
    assert!(short.is_ok(), "{short:?}");
    assert_eq!(short.canonical, json!({"sum": 4950}));
    let used = short
        .receipt
        .fuel_used
        .expect("a metered call reports its fuel");
    assert!(used > 0 && used < budget, "fuel used {used} of {budget}");

    let endless = call(&host, "count", json!({"n": u64::MAX}), SandboxMode::None).await;
    assert_eq!(endless.code(), Some(ErrorCode::OutOfFuel), "{endless:?}");
    assert_eq!(endless.receipt.fuel_used, Some(budget));
    assert_echo_works(&host).await;
}

/// A fuel budget on a runtime that does not meter fuel cannot be enforced:
/// the call is refused before the body runs, not run unmetered.
#[tokio::test]
async fn runtime_fuel_without_metering_is_refused() {
    let ws = tempfile::tempdir().unwrap();
    let limits = Limits {
        fuel: Some(1_000_000),
        ..Limits::default()
    };
    let host = host_with(probes::RUNTIME_FUEL, ws.path(), limits).await;
    let r = call(&host, "count", json!({"n": 1}), SandboxMode::None).await;
    assert_eq!(r.code(), Some(ErrorCode::SandboxUnavailable), "{r:?}");
}

/// A host on the same runtime as `host` (same engine, pool and epoch
/// thread) with default limits: proves the runtime is healthy after a call
/// that failed under tighter limits.
async fn sibling_with_default_limits(host: &Host, ws: &std::path::Path) -> Host {
    let mut b = builder(probes::RUNTIME_FUEL, ws, Limits::default(), suite_options());
    b.runtime(host.runtime().clone());
    b.build().await.expect("a sibling host builds")
}

/// A table larger than `Limits.max_table_elements` ends with MEMORY_LIMIT.
/// Rust cannot emit `table.grow`, so the probe's own function table (set up
/// when the call instantiates it) is what exceeds a limit of 1 element.
#[tokio::test]
async fn runtime_table_limit() {
    let ws = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_table_elements: 1,
        ..Limits::default()
    };
    let host = host_with(probes::RUNTIME_FUEL, ws.path(), limits).await;
    let r = call(&host, "count", json!({"n": 1}), SandboxMode::None).await;
    assert_eq!(r.code(), Some(ErrorCode::MemoryLimit), "{r:?}");
    assert!(
        r.error.as_ref().unwrap().message.contains("table"),
        "the message names the table: {r:?}"
    );
    assert_echo_works(&sibling_with_default_limits(&host, ws.path()).await).await;
}

/// A component that needs more instances than `Limits.max_instances`
/// allows ends with MEMORY_LIMIT naming the instance count, like the memory
/// and table limits, not with a panic: the host counts the component's core
/// instances when it loads it and refuses the call before instantiating.
#[tokio::test]
async fn runtime_instance_limit() {
    let ws = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_instances: 1,
        ..Limits::default()
    };
    let host = host_with(probes::RUNTIME_FUEL, ws.path(), limits).await;
    let r = call(&host, "count", json!({"n": 1}), SandboxMode::None).await;
    assert_eq!(r.code(), Some(ErrorCode::MemoryLimit), "{r:?}");
    assert!(
        r.error.as_ref().unwrap().message.contains("instance count"),
        "the message names the instance limit: {r:?}"
    );
    assert_echo_works(&sibling_with_default_limits(&host, ws.path()).await).await;
}

/// Arguments above MAX_ARGS_BYTES (1 MiB) are refused before the body runs.
#[tokio::test]
async fn runtime_huge_args() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(probes::RUNTIME_FUEL, ws.path(), Limits::default()).await;
    let text = "x".repeat(2 << 20);
    let r = call(&host, "echo", json!({ "text": text }), SandboxMode::None).await;
    assert_eq!(r.code(), Some(ErrorCode::InvalidArgs), "{:?}", r.error);
    assert!(
        r.error
            .as_ref()
            .unwrap()
            .message
            .contains(&MAX_ARGS_BYTES.to_string()),
        "the message names the limit: {:?}",
        r.error
    );
    assert_eq!(r.receipt.mode, None, "the body must not have run");
    assert_echo_works(&host).await;
}

/// 10 000 levels of nested arrays or objects are refused as INVALID_ARGS
/// without overflowing the host's stack.
#[tokio::test]
async fn runtime_nested_args() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(probes::RUNTIME_FUEL, ws.path(), Limits::default()).await;
    let depth = 10_000;
    let arrays = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let objects = format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
    let in_text = format!(r#"{{"text":{arrays}}}"#);
    for args in [arrays, objects, in_text] {
        let req = CallRequest {
            args,
            ..CallRequest::new("echo", serde_json::Value::Null)
        }
        .mode(SandboxMode::None);
        let r = host.call(req).await;
        assert_eq!(r.code(), Some(ErrorCode::InvalidArgs), "{:?}", r.error);
        assert_eq!(r.receipt.mode, None, "the body must not have run");
    }
    assert_echo_works(&host).await;
}

/// A call never sees what an earlier call left in linear memory: the pool
/// reuses memory slots (and keeps part of them resident), so each reuse must
/// reset them. Zero-initialised statics and freshly grown pages must read
/// zero on every call, although every call dirties both.
#[tokio::test]
async fn runtime_residue() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(probes::RUNTIME_RESIDUE, ws.path(), Limits::default()).await;
    for i in 0..6 {
        let r = call(&host, "residue", json!({}), SandboxMode::None).await;
        assert!(r.is_ok(), "call {i}: {r:?}");
        assert_eq!(
            r.canonical,
            json!({ "static_dirty": 0, "grown_dirty": 0, "grown_pages": 32 }),
            "call {i} saw an earlier call's memory"
        );
    }
    assert_echo_works(&host).await;
}

/// Blocks attached through `content` follow the returned text, in order;
/// malformed ones, one too many and too many bytes are refused to the
/// guest and never shown; a failing call shows none of its blocks.
#[tokio::test]
async fn runtime_content_attach() {
    use toolhost::ContentItem;
    let ws = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_output: 4 << 10,
        ..Limits::default()
    };
    let host = host_with(probes::RUNTIME_CONTENT_ATTACH, ws.path(), limits).await;
    let attach = |case: &str| call(&host, "attach", json!({ "case": case }), SandboxMode::None);

    let ok = attach("ok").await;
    assert!(ok.is_ok(), "{ok:?}");
    let content = serde_json::to_value(&ok.content).unwrap();
    assert_eq!(
        content,
        json!([
            {"type": "text", "text": "first"},
            {"type": "image", "data": "BwcH", "mimeType": "image/png"},
            {"type": "text", "text": "between"},
            {"type": "resource_link", "uri": "file:///plot.svg", "name": "plot", "mimeType": "image/svg+xml"},
            {"type": "resource", "resource": {"uri": "test://blob", "blob": "AQID"}},
        ])
    );

    let malformed = attach("malformed").await;
    assert!(malformed.is_ok(), "{malformed:?}");
    assert_eq!(malformed.canonical["accepted"], 0, "{malformed:?}");
    let errors = malformed.canonical["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 6, "{errors:?}");
    assert!(errors[0].as_str().unwrap().contains("is not a MIME type"));
    assert!(errors[3].as_str().unwrap().contains("is not a URI"));
    assert!(errors[4].as_str().unwrap().contains("needs a name"));
    assert_eq!(malformed.content, vec![ContentItem::text("first")]);

    let many = attach("many").await;
    assert_eq!(many.canonical["accepted"], 64, "{many:?}");
    assert!(
        many.canonical["errors"][0]
            .as_str()
            .unwrap()
            .contains("already attached 64 blocks")
    );
    assert_eq!(many.content.len(), 65);

    let big = attach("big").await;
    assert_eq!(big.canonical["accepted"], 0, "{big:?}");
    assert!(
        big.canonical["errors"][0]
            .as_str()
            .unwrap()
            .contains("output cap is 4096")
    );

    let fail = attach("fail").await;
    assert_eq!(fail.code(), Some(ErrorCode::ToolError), "{fail:?}");
    assert_eq!(fail.content.len(), 1, "{fail:?}");
    assert!(fail.content[0].as_text().starts_with("TOOL_ERROR"));
}
