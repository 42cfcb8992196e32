//! The governed Python interpreter (`scripts/install-python-interpreter`):
//! CPython compiled to WASI, a program-backed tool. Runs code, reads a CSV
//! of the workspace with pandas in `read-only` and cannot write there; an
//! endless loop ends `TIMEOUT` and a huge allocation `MEMORY_LIMIT`, and
//! the host keeps serving; the code runs as `python -c` would run it (exit
//! status, traceback, atexit handlers, files held open) though the process
//! skips CPython's teardown; the interpreter is compiled once into the
//! cache and a second host loads it from there.
//!
//! Needs `TOOLHOST_PYTHON_TOOL_DIR` (the directory the install script
//! filled). Without it the test does nothing, except under CI (`CI` set),
//! where it fails: CI must run it. Compiling the interpreter takes minutes
//! in a debug build, so everything is one test, with one compile.

use crate::common::*;
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;
use toolhost::{ErrorCode, Host, HostBuilder, Limits, SandboxMode, Status};

fn tool_dir() -> Option<PathBuf> {
    match std::env::var_os("TOOLHOST_PYTHON_TOOL_DIR") {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but TOOLHOST_PYTHON_TOOL_DIR is not: run scripts/install-python-interpreter and export it"
            );
            eprintln!(
                "TOOLHOST_PYTHON_TOOL_DIR is not set: the Python interpreter tests do nothing"
            );
            None
        }
    }
}

async fn python_host(dir: &std::path::Path, ws: &std::path::Path, limits: Limits) -> Host {
    let mut b = HostBuilder::new();
    b.program_tool_file(dir.join("python.tool.toml"))
        .workspace(ws)
        .limits(limits)
        .runtime_options(suite_options());
    b.build()
        .await
        .unwrap_or_else(|e| panic!("the Python tool loads: {e}"))
}

async fn python(host: &Host, code: &str, mode: SandboxMode) -> toolhost::CallResult {
    call(host, "python", json!({ "code": code }), mode).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_tool_interpreter() {
    let Some(dir) = tool_dir() else { return };
    let ws = tempfile::tempdir().unwrap();
    let mut csv = String::from("name,x\n");
    for i in 0..1000 {
        csv.push_str(&format!("row{i},{i}\n"));
    }
    std::fs::write(ws.path().join("data.csv"), &csv).unwrap();
    let limits = Limits {
        deadline: Duration::from_secs(120),
        max_memory: 1 << 30,
        ..Limits::default()
    };
    let host = python_host(&dir, ws.path(), limits).await;

    let r = python(&host, "print(sum(range(10**6)))", SandboxMode::ReadOnly).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.canonical["stdout"], "499999500000\n");

    // pandas reads the workspace's CSV (a relative path: the workspace is /).
    let r = python(
        &host,
        "import pandas as pd\ndf = pd.read_csv('data.csv')\nprint(len(df), int(df['x'].sum()))",
        SandboxMode::ReadOnly,
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.canonical["stdout"], "1000 499500\n");

    // Writing fails in read-only, inside the interpreter, and nothing changes.
    let before = snapshot(ws.path());
    let r = python(
        &host,
        "open('out.txt', 'w').write('x')",
        SandboxMode::ReadOnly,
    )
    .await;
    assert_eq!(r.code(), Some(ErrorCode::ToolError), "{r:?}");
    let stderr = r.canonical["stderr"].as_str().unwrap_or_default();
    assert!(stderr.contains("Error"), "{stderr}");
    assert_eq!(r.canonical["exit_code"], 1);
    assert_eq!(snapshot(ws.path()), before);

    // The code runs as `python -c` runs it (scripts/python-run-code.py), and the
    // process ends without CPython's teardown: what outlives the code is still
    // finished (atexit handlers, files held by globals, buffered output).
    let r = python(
        &host,
        "import sys\nprint(sys.argv, __name__, sorted(k for k in globals() if not k.startswith('__')))",
        SandboxMode::ReadOnly,
    )
    .await;
    assert_eq!(r.canonical["stdout"], "['-c'] __main__ ['sys']\n", "{r:?}");
    for (code, status) in [
        ("import sys; sys.exit(3)", 3),
        ("import sys; sys.exit(300)", 300 & 0xFF),
        ("import sys; sys.exit(None)", 0),
        ("import os; print('flushed'); os._exit(5)", 5),
    ] {
        let r = python(&host, code, SandboxMode::ReadOnly).await;
        assert_eq!(r.canonical["exit_code"], status, "{code}: {r:?}");
    }
    let r = python(
        &host,
        "import sys; sys.exit('bad input')",
        SandboxMode::ReadOnly,
    )
    .await;
    assert_eq!(r.canonical["exit_code"], 1, "{r:?}");
    assert_eq!(r.canonical["stderr"], "bad input\n", "{r:?}");
    let r = python(
        &host,
        "def f():\n    raise ValueError('deep')\nf()",
        SandboxMode::ReadOnly,
    )
    .await;
    assert_eq!(r.canonical["exit_code"], 1, "{r:?}");
    assert_eq!(
        r.canonical["stderr"],
        "Traceback (most recent call last):\n  File \"<string>\", line 3, in <module>\n    f()\n    ~^^\n  \
         File \"<string>\", line 2, in f\n    raise ValueError('deep')\nValueError: deep\n",
        "{r:?}"
    );
    let r = python(
        &host,
        "import atexit\natexit.register(lambda: print('at exit'))\nprint('partial line', end='')",
        SandboxMode::ReadOnly,
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.canonical["stdout"], "partial lineat exit\n", "{r:?}");
    let r = python(
        &host,
        "f = open('kept.txt', 'w')\nf.write('held by a global, never closed')",
        SandboxMode::WorkspaceWrite,
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("kept.txt")).unwrap(),
        "held by a global, never closed"
    );
    std::fs::remove_file(ws.path().join("kept.txt")).unwrap();
    // The teardown is skipped: an object kept alive only by a reference cycle is
    // not finalized (plain `python -c` prints "finalized" twice here).
    let r = python(
        &host,
        "class C:\n    def __del__(self): print('finalized')\nc = C()\nc.me = c\nd = C()",
        SandboxMode::ReadOnly,
    )
    .await;
    assert_eq!(r.canonical["stdout"], "finalized\n", "{r:?}");

    // A huge allocation: MEMORY_LIMIT. Then the host still serves.
    let r = python(
        &host,
        "b = bytearray(1536 * 1024**2)",
        SandboxMode::ReadOnly,
    )
    .await;
    assert_eq!(r.code(), Some(ErrorCode::MemoryLimit), "{r:?}");
    let r = python(&host, "print('still here')", SandboxMode::ReadOnly).await;
    assert_eq!(r.canonical["stdout"], "still here\n", "{r:?}");

    // A second host with a short deadline loads the interpreter from the
    // cache (no compile) and stops an endless loop at its deadline.
    let short = Limits {
        deadline: Duration::from_secs(3),
        max_memory: 1 << 30,
        ..Limits::default()
    };
    let host2 = python_host(&dir, ws.path(), short).await;
    let r = python(&host2, "while True:\n    pass", SandboxMode::ReadOnly).await;
    assert_eq!(r.code(), Some(ErrorCode::Timeout), "{r:?}");
    let r = python(&host2, "print(6 * 7)", SandboxMode::ReadOnly).await;
    assert_eq!(r.canonical["stdout"], "42\n", "{r:?}");
    let stats = host2.runtime().cache_stats();
    assert_eq!(
        stats.compiles.load(Ordering::Relaxed),
        0,
        "the second host compiled the interpreter again"
    );
    assert_eq!(stats.hits.load(Ordering::Relaxed), 1);
}
