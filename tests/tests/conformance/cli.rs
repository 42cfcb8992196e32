//! The `toolhost` command line end to end (DESIGN.md §6): `run --json`
//! prints exactly one result object, exit codes 0/1/2, `list --json`,
//! `exec` passing a command program's output and exit status through, and
//! `serve --mcp` with probes in its tools directory (progress floods,
//! schemas with non-standard formats).
//!
//! Needs the binary: `cargo build -p toolhost` first (see `toolhost_bin`).

use crate::common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
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
        [
            "grep",
            "http_fetch",
            "list_dir",
            "read_file",
            "sleep",
            "write_file"
        ]
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

/// `toolhost serve --mcp` over stdio with `tools` as its tools directory
/// (loaded with the embedded tools), driven one JSON-RPC line at a time.
struct McpStdio {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    _state: tempfile::TempDir,
}

impl McpStdio {
    fn start(ws: &Path, tools: &Path) -> McpStdio {
        let state = tempfile::tempdir().unwrap();
        let mut child = toolhost()
            .args(["serve", "--mcp", "--workspace"])
            .arg(ws)
            .arg("--state")
            .arg(state.path())
            .arg("--tools")
            .arg(tools)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Read stdout on a thread of its own, so the server is never held
        // up by the test.
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut s = McpStdio {
            child,
            stdin,
            lines,
            _state: state,
        };
        s.send(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "conformance", "version": "0"}}}),
        );
        let init = s.response(&json!(1), Duration::from_secs(60));
        assert_eq!(init["result"]["serverInfo"]["name"], "toolhost", "{init}");
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, v: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{v}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// The next message, or `None` at the end of stdout.
    fn next(&mut self, deadline: Instant) -> Option<Value> {
        match self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(line) => Some(
                serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout carried a non-JSON line {line:?}: {e}")),
            ),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => panic!("no message from the server in time"),
        }
    }

    /// The response with `id`, skipping everything else.
    fn response(&mut self, id: &Value, wait: Duration) -> Value {
        let deadline = Instant::now() + wait;
        loop {
            match self.next(deadline) {
                Some(v) if v.get("id") == Some(id) && v.get("method").is_none() => return v,
                Some(_) => {}
                None => panic!("the server closed stdout before answering {id}"),
            }
        }
    }

    /// Closes stdin (the server then exits) and returns everything the
    /// server still wrote.
    fn close(mut self) -> Vec<Value> {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut rest = Vec::new();
        while let Some(v) = self.next(deadline) {
            rest.push(v);
        }
        rest
    }
}

impl Drop for McpStdio {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tools directory holding the component at `probe` as `name.wasm`.
fn tools_dir(probe: &str, name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(probe, dir.path().join(format!("{name}.wasm"))).unwrap();
    dir
}

fn is_progress(v: &Value, token: &str) -> bool {
    v["method"] == "notifications/progress" && v["params"]["progressToken"] == token
}

/// A tool that reports progress a million times, called with a progress
/// token over MCP: the client gets at most one notification per
/// `PROGRESS_INTERVAL` of the call's wall time (plus the first and the
/// last), at least one, the last one carrying the final count, and none
/// after the response.
#[test]
fn cli_progress_flood() {
    const REPORTS: u64 = 1_000_000;
    let ws = tempfile::tempdir().unwrap();
    let tools = tools_dir(probes::CLI_PROGRESS_FLOOD, "progress_flood");
    let mut s = McpStdio::start(ws.path(), tools.path());
    let started = Instant::now();
    s.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "progress_flood", "arguments": {"reports": REPORTS},
        "_meta": {"progressToken": "flood"}}}),
    );
    let deadline = started + Duration::from_secs(120);
    let mut progress = Vec::new();
    let response = loop {
        match s.next(deadline) {
            Some(v) if v["id"] == 2 && v.get("method").is_none() => break v,
            Some(v) if is_progress(&v, "flood") => progress.push(v),
            Some(_) => {}
            None => panic!("the server closed stdout during the call"),
        }
    };
    // Everything the server sends is seen before the wall time is taken,
    // so the bound below can only be generous.
    let wall = started.elapsed();
    assert_eq!(response["result"]["isError"], false, "{response}");
    assert_eq!(
        response["result"]["structuredContent"]["reported"], REPORTS,
        "{response}"
    );
    let later: Vec<Value> = s
        .close()
        .into_iter()
        .filter(|v| is_progress(v, "flood"))
        .collect();
    assert!(
        later.is_empty(),
        "{} progress notifications came after the response, e.g. {}",
        later.len(),
        later[0]
    );
    let interval = toolhost::mcp::PROGRESS_INTERVAL;
    let bound = (wall.as_micros() / interval.as_micros()) as usize + 2;
    assert!(
        !progress.is_empty() && progress.len() <= bound,
        "{} progress notifications for a call of {wall:?} (at most {bound}: one per {interval:?}, plus the last)",
        progress.len()
    );
    let last = &progress[progress.len() - 1]["params"];
    assert_eq!(last["progress"], REPORTS as f64, "{last}");
    assert_eq!(last["total"], REPORTS as f64, "{last}");
}

/// The formats JSON Schema 2020-12 defines. Written out here on purpose,
/// not taken from the host or the SDK: the test must not share the list it
/// checks them against.
const STANDARD_FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Every `"format": "<string>"` anywhere in `v` that is not a 2020-12
/// format, with its JSON pointer.
fn non_standard_formats(v: &Value, at: &str, found: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            for (k, child) in o {
                let here = format!("{at}/{k}");
                if let (true, Some(f)) = (k == "format", child.as_str())
                    && !STANDARD_FORMATS.contains(&f)
                {
                    found.push(format!("{here}: {f}"));
                }
                non_standard_formats(child, &here, found);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                non_standard_formats(child, &format!("{at}/{i}"), found);
            }
        }
        _ => {}
    }
}

/// Schemas handed to clients carry only JSON Schema 2020-12 formats, for
/// the embedded tools (built with the guest SDK) and for a tool whose own
/// schemas carry `uint64`, `int32`, `double`, ... at every depth: through
/// MCP `tools/list` and through `toolhost list --json`. The host still
/// validates against the tool's own schema.
#[test]
fn cli_schema_formats() {
    let ws = tempfile::tempdir().unwrap();
    let tools = tools_dir(probes::CLI_SCHEMA_FORMATS, "machine_formats");
    let mut s = McpStdio::start(ws.path(), tools.path());
    s.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let listed = s.response(&json!(2), Duration::from_secs(60));
    let listed = listed["result"]["tools"].as_array().unwrap().clone();
    let mut names: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "grep",
            "http_fetch",
            "list_dir",
            "machine_formats",
            "read_file",
            "sleep",
            "write_file"
        ]
    );
    let mut found = Vec::new();
    for t in &listed {
        non_standard_formats(t, &format!("tools/list {}", t["name"]), &mut found);
    }
    assert!(found.is_empty(), "non-standard formats listed: {found:#?}");

    // The widths survive as bounds; standard formats and a property named
    // `format` stay.
    let probe = listed
        .iter()
        .find(|t| t["name"] == "machine_formats")
        .unwrap();
    let props = &probe["inputSchema"]["properties"];
    assert_eq!(
        props["count"],
        json!({"type": "integer", "minimum": 0, "maximum": u64::MAX})
    );
    assert_eq!(
        props["offset"],
        json!({"type": "integer", "minimum": i32::MIN, "maximum": i32::MAX})
    );
    assert_eq!(
        props["when"],
        json!({"type": "string", "format": "date-time"})
    );
    assert_eq!(props["format"], json!({"type": "string"}));
    assert_eq!(
        probe["inputSchema"]["$defs"]["Small"],
        json!({"type": "integer", "minimum": 0})
    );
    assert_eq!(
        probe["outputSchema"]["properties"]["total"],
        json!({"type": "integer", "minimum": 0, "maximum": u64::MAX})
    );

    s.send(
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "machine_formats", "arguments": {"count": 3, "ratio": null}}}),
    );
    let r = s.response(&json!(3), Duration::from_secs(60));
    assert_eq!(r["result"]["isError"], false, "{r}");
    // The bounds clients are shown are the ones the host holds calls to:
    // an `offset` past `int32` is refused before the tool runs.
    s.send(
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
        "name": "machine_formats", "arguments": {"count": 3, "offset": 3_000_000_000_u64}}}),
    );
    let r = s.response(&json!(4), Duration::from_secs(60));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(
        r["result"]["_meta"]["toolhost"]["code"], "INVALID_ARGS",
        "{r}"
    );
    drop(s);

    for args in [vec![], vec![tools.path().as_os_str()]] {
        let out = toolhost()
            .args(["list", "--json"])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(!listed.as_array().unwrap().is_empty());
        let mut found = Vec::new();
        non_standard_formats(&listed, "list --json", &mut found);
        assert!(found.is_empty(), "non-standard formats listed: {found:#?}");
    }
}

/// Tools built with the guest SDK declare only 2020-12 formats in their own
/// schemas (not just in the client view): the embedded tools and the
/// progress probe, whose `reports: u64` keeps its width as bounds.
#[tokio::test]
async fn guest_sdk_declares_only_standard_formats() {
    let ws = tempfile::tempdir().unwrap();
    let mut b = toolhost::HostBuilder::new();
    b.embedded_tools()
        .tool_file(probes::CLI_PROGRESS_FLOOD)
        .workspace(ws.path())
        .runtime_options(suite_options());
    let host = b.build().await.unwrap();
    let mut found = Vec::new();
    for t in host.tools(None) {
        let d = &t.descriptor;
        non_standard_formats(&d.input_schema, &format!("{} input", d.name), &mut found);
        if let Some(o) = &d.output_schema {
            non_standard_formats(o, &format!("{} output", d.name), &mut found);
        }
    }
    assert!(found.is_empty(), "the SDK emitted: {found:#?}");
    let flood = host
        .tools(None)
        .into_iter()
        .find(|t| t.descriptor.name == "progress_flood")
        .unwrap();
    assert_eq!(
        flood.descriptor.input_schema["properties"]["reports"],
        json!({"type": "integer", "minimum": 0, "maximum": u64::MAX})
    );
}
