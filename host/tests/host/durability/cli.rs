//! The command line under interruption and with shared or unusable state:
//! SIGINT cancels a running call; a state directory that is a file and a
//! `session.redb` that is not a redb database fail with a clear message and
//! exit 2, touching nothing; a state held by another process (`run`, `serve
//! --mcp`) is read beside it by `toolhost log`, and refused to writers.
//!
//! A second writer on a held state waits a bounded time
//! (`DEFAULT_OPEN_WAIT`), then fails with exit 2, naming the holder ("held by
//! pid 1234 (toolhost serve), since ..."): the first may be paused on an
//! approval for minutes, and silently blocking an agent is worse than telling
//! it who has the state.

use super::support::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use toolhost::log::{DEFAULT_OPEN_WAIT, EventKind};

#[test]
fn sigint_cancels_a_running_call() {
    let sb = Sandbox::new();
    let mut cmd = sb.command(&["run", "sleep", "--args", r#"{"ms":10000}"#, "--json"]);
    // `during-body` only announces itself: the process goes on into the body.
    cmd.env("TOOLHOST_TEST_PAUSE_AT", "during-body");
    let mut running = Running::spawn(cmd);
    running.wait_marker("during-body", Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(300));
    let pid = running.child.id().to_string();
    let sent = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let ended = running.wait_timeout(Duration::from_secs(8));
    let took = sent.elapsed();
    assert_eq!(ended.status.code(), Some(1), "{ended:?}");
    assert!(took < Duration::from_secs(5), "cancelling took {took:?}");
    let out: serde_json::Value =
        serde_json::from_str(ended.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {ended:?}"));
    assert_eq!(out["status"], "error");
    assert_eq!(out["error"]["code"], "CANCELLED", "{out}");
    // The log holds the intent and the CANCELLED result (flushed before exit).
    let events = read_events(&sb.state());
    let calls = check_log(&events);
    let c = &calls[out["call_id"].as_str().unwrap()];
    assert_eq!(c.fate, Fate::Completed);
    assert_eq!(c.result.as_ref().unwrap()["error"]["code"], "CANCELLED");
}

fn assert_usage_error(ended: &std::process::Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&ended.stderr);
    assert_eq!(ended.status.code(), Some(2), "{ended:?}");
    assert!(ended.status.signal().is_none());
    assert!(
        stderr.contains(needle),
        "expected {needle:?} in stderr: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_state_path_that_is_a_file_is_refused_untouched() {
    let sb = Sandbox::new();
    std::fs::write(sb.state(), b"not a directory").unwrap();
    for (args, needle) in [
        (
            &["run", "sleep", "--args", r#"{"ms":0}"#][..],
            "is not writable",
        ),
        (&["log"], "cannot be read: not a directory"),
        (&["recover"], "is not writable"),
    ] {
        let out = sb.command(args).output().unwrap();
        assert_usage_error(&out, needle);
        assert_usage_error(&out, &sb.state().display().to_string());
    }
    assert_eq!(std::fs::read(sb.state()).unwrap(), b"not a directory");
}

#[test]
fn a_session_file_that_is_not_redb_is_refused_untouched() {
    let sb = Sandbox::new();
    std::fs::create_dir(sb.state()).unwrap();
    let file = sb.state().join("session.redb");
    let small = b"{\"this\": \"is JSON, not redb\"}\n".to_vec();
    let large: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for bytes in [small, large] {
        std::fs::write(&file, &bytes).unwrap();
        for args in [
            &["run", "sleep", "--args", r#"{"ms":0}"#][..],
            &["log", "--json"],
            &["recover"],
        ] {
            let out = sb.command(args).output().unwrap();
            assert_usage_error(&out, "not a toolhost session log");
            assert_eq!(
                std::fs::read(&file).unwrap(),
                bytes,
                "{args:?} changed the file"
            );
        }
    }
}

/// The lines of `toolhost log --json`, each one JSON object.
fn log_lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

/// Checks that a writer (`args`) on a state that process `pid` holds waits
/// its bounded time, then fails with exit 2 naming the holder.
fn assert_refused_naming_holder(sb: &Sandbox, args: &[&str], pid: u32, program: &str) {
    let started = Instant::now();
    let out = sb.command(args).output().unwrap();
    let took = started.elapsed();
    assert_usage_error(&out, "in use by another toolhost");
    assert_usage_error(&out, &format!("held by pid {pid} ({program}), since "));
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(took >= DEFAULT_OPEN_WAIT, "{args:?} gave up after {took:?}");
    assert!(took < Duration::from_secs(30), "{args:?} waited {took:?}");
}

#[test]
fn a_log_held_by_another_process_is_read_beside_it_and_refused_to_writers() {
    let sb = Sandbox::new();
    // A write in `workspace-write` (a writable preopen): the intent is
    // durable before the body; a read-only call's would ride on the next
    // commit.
    let mut cmd = sb.command(&[
        "run",
        "write_file",
        "--args",
        r#"{"path":"a.txt","content":"a"}"#,
        "--mode",
        "workspace-write",
        "--json",
    ]);
    cmd.env("TOOLHOST_TEST_PAUSE_AT", "after-intent");
    let mut first = Running::spawn(cmd);
    first.wait_marker("after-intent", Duration::from_secs(120));
    let pid = first.child.id();
    // Reading does not wait for the writer, and shows its durable intent.
    for args in [&["log", "--json"][..], &["log"]] {
        let started = Instant::now();
        let out = sb.command(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert!(
            started.elapsed() < DEFAULT_OPEN_WAIT,
            "{args:?} waited for the writer"
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("tool/intent"), "{args:?}: {text}");
    }
    let out = sb.command(&["log", "--json"]).output().unwrap();
    let intents: Vec<Value> = log_lines(&out)
        .into_iter()
        .filter(|l| l["kind"] == "tool/intent")
        .collect();
    assert_eq!(intents.len(), 1, "{intents:?}");
    assert_eq!(intents[0]["payload"]["tool"], "write_file", "{intents:?}");
    // Writers wait, then name the holder.
    for args in [
        &["run", "sleep", "--args", r#"{"ms":0}"#, "--json"][..],
        &["recover"],
    ] {
        assert_refused_naming_holder(&sb, args, pid, "toolhost run");
    }
    let ended = first.kill();
    assert_eq!(ended.status.signal(), Some(9));
    // Killed, the writer left its database for a writer to repair: `log`
    // does that once (nobody else holds the state) and still only reads the
    // call, intent-only.
    let out = sb.command(&["log", "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let lines = log_lines(&out);
    assert!(
        lines.iter().any(|l| l["kind"] == "tool/intent"),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l["kind"] == "tool/result"),
        "{lines:?}"
    );
    // The first process's call is intact: intent-only, then recovered.
    let calls = check_log(&read_events(&sb.state()));
    assert_eq!(pending(&calls).len(), 1, "{calls:?}");
    recover_and_check(&sb.state(), &sb.ws(), Via::Cli);
}

/// `toolhost serve --mcp` on a sandbox, driven over stdio.
struct McpServer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl McpServer {
    /// A server whose calls run in `workspace-write`, so that each intent
    /// is durable before its body (and readers see it at once).
    fn start(sb: &Sandbox) -> McpServer {
        let mut child = sb
            .command(&["serve", "--mcp", "--mode", "workspace-write"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut server = McpServer {
            child,
            stdin,
            lines,
        };
        let init = server.request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "state-sharing-test", "version": "0"}}),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "toolhost", "{init}");
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{message}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request and returns its response (notifications are skipped).
    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no response to {method} ({e})"));
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    /// Closes stdin (the end of the session) and waits, bounded, for the exit.
    fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn log_reads_beside_a_running_mcp_server_and_a_second_writer_names_it() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("a.txt"), "hello").unwrap();
    let mut server = McpServer::start(&sb);
    let pid = server.child.id();
    // A write: its intent is durable before its body (a read's rides on
    // the next durable commit).
    let r = server.request(
        2,
        "tools/call",
        json!({"name": "write_file", "arguments": {"path": "b.txt", "content": "b"}}),
    );
    assert_ne!(r["result"]["isError"], true, "{r}");
    let call_id = r["result"]["_meta"]["toolhost"]["call_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no call id in {r}"))
        .to_string();

    // While the server runs: `log` reads it at once and shows the call's intent.
    let started = Instant::now();
    let out = sb.command(&["log", "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(started.elapsed() < DEFAULT_OPEN_WAIT, "log waited");
    let lines = log_lines(&out);
    assert!(
        lines
            .iter()
            .any(|l| l["kind"] == "tool/intent" && l["call_id"] == call_id.as_str()),
        "no tool/intent of {call_id} in {lines:?}"
    );

    // A concurrent run is refused after its wait, naming the server.
    assert_refused_naming_holder(
        &sb,
        &[
            "run",
            "read_file",
            "--args",
            r#"{"path":"a.txt"}"#,
            "--json",
        ],
        pid,
        "toolhost serve",
    );

    // The server goes on serving, and its log is whole once it has ended.
    let again = server.request(
        3,
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "a.txt"}}),
    );
    assert_ne!(again["result"]["isError"], true, "{again}");
    assert!(server.finish().success());
    assert!(!sb.state().join("holder").exists());
    let out = sb.command(&["log", "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let results = log_lines(&out)
        .into_iter()
        .filter(|l| l["kind"] == "tool/result")
        .count();
    assert_eq!(results, 2);
}

#[test]
fn log_json_prints_one_event_per_line() {
    let sb = Sandbox::new();
    for args in [r#"{"ms":0}"#, r#"{"ms":1}"#] {
        let out = sb
            .command(&["run", "sleep", "--args", args, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let refused = sb
        .command(&["run", "no_such_tool", "--json"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let out = sb.command(&["log", "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?} is not one JSON object"))
        })
        .collect();
    let events = read_events(&sb.state());
    assert_eq!(lines.len(), events.len(), "{text}");
    for (line, e) in lines.iter().zip(&events) {
        assert!(line.is_object());
        assert_eq!(line["seq"], e.seq);
        assert_eq!(line["call_id"], e.call_id.as_str());
        assert_eq!(line["kind"], e.kind.as_str());
        assert_eq!(line["payload"], e.payload);
    }
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == EventKind::ToolIntent)
            .count(),
        2
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == EventKind::ToolResult)
            .count(),
        3
    );
}
