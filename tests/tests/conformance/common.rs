//! Shared harness: build a host around a probe, run calls, inspect results.

use std::path::Path;
use toolhost::{CallRequest, CallResult, Host, HostBuilder, Limits, RuntimeOptions, SandboxMode};

pub use toolhost_conformance as probes;

/// Makes the build fail when a probe has no test of the same name.
macro_rules! assert_test_exists {
    ($name:ident) => {
        #[allow(unused_imports)]
        use self::$name as _;
    };
}

/// The compile cache shared by the suite (so each probe compiles once).
pub fn cache_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("toolhost-cache")
}

/// A host with the component at `probe` loaded, the given workspace and limits.
pub async fn host_with(probe: &str, workspace: &Path, limits: Limits) -> Host {
    let mut b = HostBuilder::new();
    b.tool_file(probe)
        .workspace(workspace)
        .limits(limits)
        .runtime_options(RuntimeOptions {
            cache_dir: Some(cache_dir()),
            max_concurrent_calls: 16,
            ..RuntimeOptions::default()
        });
    b.build().await.expect("host builds")
}

/// Calls `tool` with `args` in `mode`.
pub async fn call(host: &Host, tool: &str, args: serde_json::Value, mode: SandboxMode) -> CallResult {
    host.call(CallRequest::new(tool, args).mode(mode)).await
}
