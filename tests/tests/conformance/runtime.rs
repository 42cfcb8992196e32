//! Runtime limits: traps, timeouts, memory and output caps end with their own
//! code, and the host stays healthy (a normal call on the same host works
//! after each one).

use crate::common::*;
use serde_json::json;
use std::time::Duration;
use toolhost::{ErrorCode, Limits, RuntimeOptions, SandboxMode};

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
