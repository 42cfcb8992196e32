//! What every area of the host's tests shares: the binary under test, one
//! compile cache (so each component compiles once per test run), and hosts
//! over the embedded tools.

use std::path::{Path, PathBuf};
use toolhost::{HostBuilder, RuntimeOptions};

/// The `toolhost` binary of this build.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_toolhost")
}

/// The compile cache shared by every test, library and CLI alike (the CLI
/// gets it through `TOOLHOST_CACHE_DIR`).
pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("toolhost-cache")
}

/// Runtime options for library hosts: the shared cache and a pool of
/// `max_concurrent_calls` instances.
pub fn runtime_options_with_pool(max_concurrent_calls: u32) -> RuntimeOptions {
    RuntimeOptions {
        cache_dir: Some(cache_dir()),
        max_concurrent_calls,
        ..RuntimeOptions::default()
    }
}

/// A builder with the embedded tools, `workspace` and the given runtime options.
pub fn builder_with(workspace: &Path, options: RuntimeOptions) -> HostBuilder {
    let mut b = HostBuilder::new();
    b.embedded_tools()
        .workspace(workspace)
        .runtime_options(options);
    b
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"))
}

/// How many events of `kind` `host`'s session log holds now.
pub fn logged(host: &toolhost::Host, kind: toolhost::log::EventKind) -> usize {
    let events = host.log().events().unwrap_or_else(|e| panic!("{e}"));
    events.iter().filter(|e| e.kind == kind).count()
}

/// Waits until `done` holds, checking every 5 ms; panics, naming `what`,
/// if it does not within 20 s.
pub async fn until(what: &str, done: impl Fn() -> bool) {
    let waited = std::time::Instant::now();
    while !done() {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(20),
            "never: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Runs `call` until `done` holds (see [`until`]), then drops it, as a
/// caller's timeout does; panics if the call ends first.
pub async fn drop_when<T: std::fmt::Debug>(
    call: impl std::future::Future<Output = T>,
    what: &str,
    done: impl Fn() -> bool,
) {
    tokio::select! {
        r = call => panic!("the call ended before {what}: {r:?}"),
        () = until(what, done) => {}
    }
}

/// A FIFO in the workspace with no writer: opening it blocks the reader in
/// the host's `open`, where neither the epoch nor a dropped future can stop
/// it. Dropping it releases the readers, so a failing assertion does not
/// leave the test's runtime waiting forever for their threads.
pub fn fifo(ws: &std::path::Path) -> Fifo {
    let path = ws.join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(made.success());
    Fifo(path)
}

pub struct Fifo(std::path::PathBuf);

/// `O_NONBLOCK` (Linux's value; the suite runs on Linux).
const O_NONBLOCK: i32 = 0o4000;

impl Fifo {
    /// Unblocks the readers stuck on the FIFO (a writer opens and closes
    /// it), so their abandoned threads end. Non-blocking: with no reader
    /// it does nothing.
    pub fn release(&self) {
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(O_NONBLOCK)
            .open(&self.0);
    }

    /// Unblocks the writers stuck on the FIFO: a reader opens it, and is
    /// kept open (so that their writes go into the pipe) until dropped.
    pub fn release_writers(&self) -> Option<std::fs::File> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(O_NONBLOCK)
            .open(&self.0)
            .ok()
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        self.release();
        drop(self.release_writers());
    }
}

/// The installed Python interpreter tool (`scripts/install-python-interpreter`,
/// `TOOLHOST_PYTHON_TOOL_DIR`), or `None` to skip outside CI; CI fails
/// without it rather than skip.
pub fn python_tool_dir() -> Option<PathBuf> {
    match std::env::var_os("TOOLHOST_PYTHON_TOOL_DIR") {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but TOOLHOST_PYTHON_TOOL_DIR is not: run scripts/install-python-interpreter"
            );
            eprintln!("TOOLHOST_PYTHON_TOOL_DIR is not set: the interpreter's tests do nothing");
            None
        }
    }
}
