//! The `toolhost` command line end to end (DESIGN.md §6): `run --json`
//! prints exactly one result object, exit codes 0/1/2, `list --json`, and
//! `exec` passing a command program's output and exit status through.
//!
//! Needs the binary: `cargo build -p toolhost` first (see `toolhost_bin`).

use crate::common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

toolhost_conformance::foreach_cli!(assert_test_exists);

/// A `toolhost` command that writes its cache under the target directory,
/// never to $HOME.
fn toolhost() -> Command {
    let mut c = Command::new(toolhost_bin());
    c.env("TOOLHOST_CACHE_DIR", cache_dir())
        .env_remove("TOOLHOST_STATE_DIR")
        .env_remove("TOOLHOST_LOG");
    c
}

/// `toolhost run TOOL --args ARGS --json` on `ws` with a private state dir.
fn run_json(ws: &Path, tool: &str, args: &str) -> Output {
    let state = tempfile::tempdir().unwrap();
    let out = toolhost()
        .args(["run", tool, "--json", "--args", args, "--workspace"])
        .arg(ws)
        .arg("--state")
        .arg(state.path())
        .output()
        .unwrap();
    assert!(
        state.path().read_dir().unwrap().next().is_some(),
        "the session log is written to --state"
    );
    out
}

/// Exactly one JSON object on stdout, nothing else.
fn one_object(stdout: &[u8]) -> serde_json::Map<String, Value> {
    let text = std::str::from_utf8(stdout).unwrap();
    let values: Vec<Value> = serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {text}"));
    match values.as_slice() {
        [Value::Object(o)] => o.clone(),
        _ => panic!("stdout must be exactly one JSON object: {text}"),
    }
}

fn assert_result_shape(o: &serde_json::Map<String, Value>) {
    let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "call_id",
            "canonical",
            "content",
            "error",
            "meta",
            "receipt",
            "status",
            "tool"
        ]
    );
    assert!(o["call_id"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(o["receipt"].is_object());
    for block in o["content"].as_array().unwrap() {
        assert_eq!(block["type"], "text");
        assert!(block["text"].is_string());
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn cli_run_json() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("hello.txt"), "hello, tools\n").unwrap();
    let out = run_json(ws.path(), "read_file", r#"{"path":"hello.txt"}"#);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let o = one_object(&out.stdout);
    assert_result_shape(&o);
    assert_eq!(o["tool"], "read_file");
    assert_eq!(o["status"], "ok");
    assert_eq!(o["error"], Value::Null);
    assert_eq!(o["canonical"]["content"], "hello, tools\n");
    assert_eq!(o["content"][0]["text"], "hello, tools\n");
    assert_eq!(o["receipt"]["mode"], "read-only");
}

/// A call that ends in an error result exits 1 and still prints one object.
#[test]
fn cli_run_error_exits_1() {
    let ws = tempfile::tempdir().unwrap();
    for (tool, args, code) in [
        ("read_file", r#"{"path":"missing.txt"}"#, "TOOL_ERROR"),
        ("read_file", r#"{"path":7}"#, "INVALID_ARGS"),
        ("no_such_tool", "{}", "UNKNOWN_TOOL"),
    ] {
        let out = run_json(ws.path(), tool, args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{tool} {args}: stderr: {}",
            stderr(&out)
        );
        let o = one_object(&out.stdout);
        assert_result_shape(&o);
        assert_eq!(o["status"], "error");
        assert_eq!(o["error"]["code"], code, "{tool} {args}: {o:?}");
        assert!(
            o["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
        assert_eq!(o["canonical"], Value::Null);
    }
}

/// Usage and configuration errors exit 2 with an `error:` line and print
/// no result.
#[test]
fn cli_usage_errors() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let not_wasm = ws.path().join("tool.wasm");
    std::fs::write(&not_wasm, "not wasm").unwrap();
    let missing = ws.path().join("no-such-dir");
    let run = |extra: &[&std::ffi::OsStr]| {
        let mut c = toolhost();
        c.arg("run")
            .args(extra)
            .arg("--state")
            .arg(state.path())
            .arg("--json");
        c.output().unwrap()
    };
    let os = |s: &str| std::ffi::OsString::from(s);
    let cases: Vec<(Vec<std::ffi::OsString>, &str, bool)> = vec![
        (
            vec![
                os("read_file"),
                os("--mode"),
                os("bogus"),
                os("--workspace"),
                ws.path().into(),
            ],
            "bogus",
            false,
        ),
        (
            vec![
                os("read_file"),
                os("--args"),
                os(r#"{"path":"x"}"#),
                os("--workspace"),
                missing.clone().into(),
            ],
            "does not exist",
            true,
        ),
        (
            vec![not_wasm.clone().into(), os("--workspace"), ws.path().into()],
            "is not a WebAssembly file",
            true,
        ),
    ];
    for (args, says, one_line) in cases {
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let out = run(&refs);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: stderr: {err}");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: a usage error prints no result"
        );
        let first = err.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("error:") && first.contains(says),
            "{args:?}: first line should say {says:?}: {err}"
        );
        if one_line {
            assert_eq!(
                err.trim_end().lines().count(),
                1,
                "{args:?}: one line expected: {err}"
            );
        }
    }
}

#[test]
fn cli_list_json() {
    let out = toolhost().args(["list", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let tools: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["grep", "list_dir", "read_file", "sleep", "write_file"]
    );
    for t in &tools {
        assert!(
            t["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{t}"
        );
        assert!(t["input_schema"].is_object(), "{t}");
        assert!(t["min_mode"].is_string(), "{t}");
    }
}

/// `exec` passes the program's stdout and its exit status through. WASI
/// 0.2's stable `wasi:cli/exit` carries only success or failure, so a
/// guest's `exit(3)` arrives as failure and `toolhost` exits 1; what must
/// hold is that success stays 0 and failure stays non-zero (and never 125,
/// which means the runtime stopped the program).
#[test]
fn cli_exit_code() {
    for (code, expect) in [("0", 0), ("3", 1)] {
        let out = toolhost()
            .args([
                "exec",
                probes::CLI_EXIT_CODE,
                "--",
                code,
                "one",
                "two words",
            ])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(expect),
            "exit({code}): stderr: {}",
            stderr(&out)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "arg: one\narg: two words\n",
            "exit({code})"
        );
    }
}

/// `exec` stops a program at its deadline and exits 125.
#[test]
fn cli_spin() {
    let started = Instant::now();
    let out = toolhost()
        .args(["exec", probes::CLI_SPIN, "--timeout-ms", "300"])
        .output()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(125), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("TIMEOUT"), "stderr: {}", stderr(&out));
    assert!(
        took < Duration::from_secs(30),
        "exec took {took:?} for a 300 ms deadline"
    );
}
