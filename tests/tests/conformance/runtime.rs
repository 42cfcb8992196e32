//! Runtime limits: traps, timeouts, memory and output caps end with their own
//! code, and the host stays healthy.

use crate::common::*;
use toolhost::{ErrorCode, Limits, SandboxMode};

toolhost_conformance::foreach_runtime!(assert_test_exists);

#[tokio::test]
async fn runtime_panic() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(probes::RUNTIME_PANIC, ws.path(), Limits::default()).await;
    let r = call(&host, "panic", serde_json::json!({}), SandboxMode::None).await;
    assert_eq!(r.code(), Some(ErrorCode::Trap), "{r:?}");
    assert!(r.error.as_ref().unwrap().message.contains("probe panicked on purpose"), "{r:?}");
    // The host is still healthy: the next call traps the same way, cleanly.
    let again = call(&host, "panic", serde_json::json!({}), SandboxMode::None).await;
    assert_eq!(again.code(), Some(ErrorCode::Trap));
}
