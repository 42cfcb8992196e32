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
        #[allow(unused_imports, reason = "the import only checks that the test exists")]
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

/// A named pipe nobody writes: a program or tool that opens it for reading
/// blocks in a host system call (where neither the epoch nor a dropped
/// future stops it) until [`Fifo::release`], which the drop calls too, so a
/// failing assertion does not leave its reader stuck.
pub struct Fifo(pub PathBuf);

impl Fifo {
    /// Makes the pipe at `path`.
    pub fn make(path: PathBuf) -> Fifo {
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success(), "mkfifo {}", path.display());
        Fifo(path)
    }

    /// Lets its readers go: a writer opens and closes it (non-blocking:
    /// with no reader it does nothing).
    pub fn release(&self) {
        use std::os::unix::fs::OpenOptionsExt;
        const O_NONBLOCK: i32 = 0o4000; // Linux
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(O_NONBLOCK)
            .open(&self.0);
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        self.release();
    }
}

/// A TCP listener on 127.0.0.1 that counts connections and answers each
/// first line with `echo: LINE`. Stops when dropped.
pub struct EchoListener {
    pub port: u16,
    count: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl EchoListener {
    pub fn start() -> EchoListener {
        use std::io::{BufRead, BufReader};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (c, s) = (count.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                c.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut line = String::new();
                if let Ok(reader) = stream.try_clone() {
                    let _ = BufReader::new(reader).read_line(&mut line);
                }
                let _ = std::io::Write::write_all(&mut stream, format!("echo: {line}").as_bytes());
            }
        });
        EchoListener { port, count, stop }
    }

    pub fn count(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for EchoListener {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Runs `c` (its stdin empty) and returns how it ended, reading its stderr,
/// and its stdout unless `leave_stdout` (nobody reads it then: a program
/// writing it blocks once the pipe is full). Kills it and fails the test if
/// it has not ended within `bound`.
pub fn exits_within(
    c: &mut std::process::Command,
    bound: std::time::Duration,
    leave_stdout: bool,
) -> std::process::Output {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let stdout = child.stdout.take().unwrap();
    let (stdout, _unread) = if leave_stdout {
        (None, Some(stdout))
    } else {
        (Some(read(Box::new(stdout))), None)
    };
    let end = std::time::Instant::now() + bound;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{c:?} did not end within {bound:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    std::process::Output {
        status,
        stdout: stdout.map(|h| h.join().unwrap()).unwrap_or_default(),
        stderr: stderr.join().unwrap(),
    }
}

/// Runs `test` in each kind of place a call runs: on a current-thread
/// runtime (the guest and tokio's I/O on one thread), and in a task of a
/// multi-thread runtime, as the MCP server's calls run. A request's
/// exchange runs in a task of its own in both (wasmtime-wasi-http's
/// `handle`). Each place gets fresh state from `test`; a failure says which
/// place it was.
pub fn in_each_place<F, Fut>(test: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let place = |name: &str, run: &dyn Fn()| {
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
            eprintln!("failed on {name}");
            std::panic::resume_unwind(panic);
        }
    };
    place("a current-thread runtime", &|| current.block_on(test()));
    place("a task of a multi-thread runtime", &|| {
        multi.block_on(async {
            match tokio::spawn(test()).await {
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                joined => joined.unwrap(),
            }
        })
    });
}
