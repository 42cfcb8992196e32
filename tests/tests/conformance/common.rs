//! Shared harness: build a host around a probe, run calls, inspect results
//! and the host's real filesystem.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use toolhost::{
    CallRequest, CallResult, Host, HostBuilder, HostError, Limits, RuntimeOptions, SandboxMode,
};

pub use toolhost_conformance as probes;

/// Makes the build fail when a probe has no test of the same name.
macro_rules! assert_test_exists {
    ($name:ident) => {
        #[allow(unused_imports)]
        use self::$name as _;
    };
}

/// The compile cache shared by the suite (so each probe compiles once).
pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("toolhost-cache")
}

/// The runtime options of the suite: the shared cache, a small pool.
pub fn suite_options() -> RuntimeOptions {
    RuntimeOptions {
        cache_dir: Some(cache_dir()),
        max_concurrent_calls: 16,
        ..RuntimeOptions::default()
    }
}

/// A builder with the component at `probe` loaded, the given workspace,
/// limits and runtime options.
pub fn builder(
    probe: &str,
    workspace: &Path,
    limits: Limits,
    options: RuntimeOptions,
) -> HostBuilder {
    let mut b = HostBuilder::new();
    b.tool_file(probe)
        .workspace(workspace)
        .limits(limits)
        .runtime_options(options);
    b
}

/// A host with the component at `probe` loaded, the given workspace and limits.
pub async fn host_with(probe: &str, workspace: &Path, limits: Limits) -> Host {
    host_with_options(probe, workspace, limits, suite_options()).await
}

/// Like [`host_with`], with explicit runtime options.
pub async fn host_with_options(
    probe: &str,
    workspace: &Path,
    limits: Limits,
    options: RuntimeOptions,
) -> Host {
    builder(probe, workspace, limits, options)
        .build()
        .await
        .expect("host builds")
}

/// Builds a host around `probe` and returns the error the build must fail with.
pub async fn build_error(probe: &str) -> HostError {
    let ws = tempfile::tempdir().unwrap();
    match builder(probe, ws.path(), Limits::default(), suite_options())
        .build()
        .await
    {
        Ok(host) => panic!(
            "{probe} must not load, but the host offers {:?}",
            host.tools(None)
                .iter()
                .map(|t| t.descriptor.name.clone())
                .collect::<Vec<_>>()
        ),
        Err(e) => e,
    }
}

/// Calls `tool` with `args` in `mode`.
pub async fn call(
    host: &Host,
    tool: &str,
    args: serde_json::Value,
    mode: SandboxMode,
) -> CallResult {
    host.call(CallRequest::new(tool, args).mode(mode)).await
}

/// Calls the `echo` tool that the runtime probes export next to their
/// hostile tool and asserts it works: the host is still healthy.
pub async fn assert_echo_works(host: &Host) {
    let r = call(
        host,
        "echo",
        serde_json::json!({"text": "still alive"}),
        SandboxMode::None,
    )
    .await;
    assert!(
        r.is_ok(),
        "a normal call after the failure must succeed: {r:?}"
    );
    assert_eq!(r.canonical, serde_json::json!({"text": "still alive"}));
}

/// One entry of a directory snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A regular file and its bytes.
    File(Vec<u8>),
    /// A directory.
    Dir,
    /// A symbolic link and its target (never followed).
    Symlink(PathBuf),
}

/// Everything under `root` (relative paths), without following symlinks:
/// compare two snapshots to prove that nothing changed.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, Entry> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Entry>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(rel, Entry::Symlink(std::fs::read_link(&path).unwrap()));
            } else if meta.is_dir() {
                out.insert(rel, Entry::Dir);
                walk(root, &path, out);
            } else {
                out.insert(rel, Entry::File(std::fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The `toolhost` binary next to this test binary (`target/debug/toolhost`).
///
/// Cargo builds a package's binaries only for that package's own
/// integration tests, so build it first: `cargo build -p toolhost`.
pub fn toolhost_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/debug/deps/conformance-<hash> -> target/debug/toolhost
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = dir.join(format!("toolhost{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "the toolhost binary is not at {}: run `cargo build -p toolhost` before `cargo test -p toolhost-conformance`",
        bin.display()
    );
    bin
}
