//! Protocol-level garbage against `toolhost serve --mcp`: bad JSON, JSON
//! that is not JSON-RPC, unknown methods and a 10 MiB line each get a
//! JSON-RPC error (or, for notifications, nothing), and the server keeps
//! answering afterwards. Stdout carries only protocol messages.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// `toolhost serve --mcp` on the workspace `ws` and state `state`, with `extra`.
fn serve_command(ws: &std::path::Path, state: &std::path::Path, extra: &[&str]) -> Command {
    let mut c = Command::new(crate::support::bin());
    c.args(["serve", "--mcp", "--workspace"])
        .arg(ws)
        .arg("--state")
        .arg(state)
        .args(extra)
        .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir());
    c
}

pub(crate) struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Server {
    fn start() -> Server {
        Server::start_with(&[], json!({}))
    }

    /// A server with `extra` arguments, initialized by a client that
    /// declares `capabilities`.
    pub(crate) fn start_with(extra: &[&str], capabilities: Value) -> Server {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let mut child = serve_command(ws.path(), state.path(), extra)
            .env("TOOLHOST_LOG", "debug")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
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
        let mut s = Server {
            child,
            stdin,
            lines,
            _dirs: (ws, state),
        };
        s.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": capabilities, "clientInfo": {"name": "garbage-test", "version": "0"}}}));
        let init = s.response(&json!(1));
        assert_eq!(init["result"]["serverInfo"]["name"], "toolhost", "{init}");
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    pub(crate) fn send(&mut self, v: &Value) {
        self.raw(format!("{v}\n").as_bytes());
    }

    /// Every line on stdout must be a JSON-RPC message.
    fn next(&mut self, timeout: Duration) -> Option<Value> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => {
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout carried a non-JSON line {line:?}: {e}"));
                assert_eq!(v["jsonrpc"], "2.0", "{v}");
                Some(v)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => panic!("the server closed stdout (did it die?)"),
        }
    }

    /// The response with `id`, skipping notifications.
    pub(crate) fn response(&mut self, id: &Value) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(v) = self.next(Duration::from_millis(200))
                && v.get("id") == Some(id)
            {
                return v;
            }
        }
        panic!("no response with id {id}");
    }

    /// Messages that arrive within `wait`.
    fn drain(&mut self, wait: Duration) -> Vec<Value> {
        let mut out = Vec::new();
        let deadline = Instant::now() + wait;
        while let Some(v) = self.next(deadline.saturating_duration_since(Instant::now())) {
            out.push(v);
        }
        out
    }

    /// The first message that satisfies `pred`, skipping others.
    fn drain_until(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(v) = self.next(Duration::from_millis(200))
                && pred(&v)
            {
                return v;
            }
        }
        panic!("no such message in time");
    }

    fn assert_alive(&mut self, id: i64) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
        let r = self.response(&json!(id));
        assert_eq!(
            r["result"]["tools"].as_array().map(Vec::len),
            Some(6),
            "{r}"
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn error_code(v: &Value) -> Option<i64> {
    v.pointer("/error/code").and_then(Value::as_i64)
}

#[test]
fn bad_json_gets_a_parse_error_and_the_server_goes_on() {
    let mut s = Server::start();
    s.raw(b"{this is not json\n");
    let got = s.drain(Duration::from_secs(2));
    assert!(
        got.iter()
            .any(|v| error_code(v) == Some(-32700) && v["id"].is_null()),
        "{got:?}"
    );
    s.raw(b"\xff\xfe\x00 binary\n");
    let got = s.drain(Duration::from_secs(2));
    assert!(got.iter().any(|v| error_code(v) == Some(-32700)), "{got:?}");
    s.assert_alive(10);
}

#[test]
fn json_that_is_not_json_rpc_gets_invalid_request() {
    let mut s = Server::start();
    s.send(&json!({"hello": "world"}));
    let got = s.drain(Duration::from_secs(2));
    assert!(got.iter().any(|v| error_code(v) == Some(-32600)), "{got:?}");
    s.send(&json!([1, 2, 3]));
    s.send(&json!(42));
    let _ = s.drain(Duration::from_secs(1));
    s.assert_alive(11);
}

#[test]
fn unknown_methods_get_method_not_found() {
    let mut s = Server::start();
    s.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/explode", "params": {}}));
    let r = s.response(&json!(7));
    assert_eq!(error_code(&r), Some(-32601), "{r}");
    // An unknown notification gets no answer at all.
    s.send(&json!({"jsonrpc": "2.0", "method": "notifications/whatever"}));
    // tools/call with the wrong shape is an error response, not a crash.
    s.send(&json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": 5}}));
    let r = s.response(&json!(8));
    assert!(r.get("error").is_some(), "{r}");
    s.assert_alive(12);
}

#[test]
fn a_ten_mib_line_is_refused_without_killing_the_server() {
    let mut s = Server::start();
    let mut big = Vec::with_capacity(10 << 20);
    big.extend_from_slice(br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read_file","arguments":{"path":""#);
    big.resize(10 << 20, b'a');
    big.extend_from_slice(b"\"}}}\n");
    s.raw(&big);
    let got = s.drain(Duration::from_secs(3));
    assert!(
        got.iter()
            .any(|v| error_code(v) == Some(-32600) && v["id"].is_null()),
        "{got:?}"
    );
    s.assert_alive(13);
}

#[test]
fn tool_refusals_are_results_not_protocol_errors() {
    let mut s = Server::start();
    s.send(&json!({"jsonrpc": "2.0", "id": 20, "method": "tools/call", "params": {"name": "read_file", "arguments": {"nope": 1}}}));
    let r = s.response(&json!(20));
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("INVALID_ARGS: "), "{r}");
    assert!(r["result"].get("structuredContent").is_none(), "{r}");
    s.send(
        &json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": "nope"}}),
    );
    let r = s.response(&json!(21));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .starts_with("UNKNOWN_TOOL: "),
        "{r}"
    );
}

/// A client cannot make the server hold any number of calls: with
/// `MAX_CALLS_IN_FLIGHT` calls waiting on approvals the client never gives,
/// one more call is refused at once (a result, not a protocol error), and a
/// call is admitted again as soon as one has finished.
#[test]
fn calls_in_flight_are_bounded() {
    const ASK_WRITES: &str = "version = 1\nmode = \"workspace-write\"\n\n[[rules]]\ntool = \"write_file\"\ndecision = \"ask\"\nreason = \"writes need a human\"\n";
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, ASK_WRITES).unwrap();
    let policy = policy.display().to_string();
    let mut s = Server::start_with(
        &["--policy", &policy, "--approval-timeout", "600"],
        json!({"elicitation": {}}),
    );
    let limit = toolhost::mcp::MAX_CALLS_IN_FLIGHT;
    let call = |id: usize| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "write_file", "arguments": {"path": format!("f{id}.txt"), "content": "x"}}})
    };
    for id in 1000..1000 + limit + 1 {
        s.send(&call(id));
    }
    // Every admitted call asks the client; exactly one call is refused.
    let (mut asks, mut refused) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(120);
    while (asks.len() < limit || refused.is_empty()) && Instant::now() < deadline {
        let Some(v) = s.next(Duration::from_millis(500)) else {
            continue;
        };
        if v["method"] == "elicitation/create" {
            asks.push(v["id"].clone());
        } else if v.get("result").is_some() {
            refused.push(v);
        }
    }
    assert_eq!(asks.len(), limit, "every admitted call asks");
    assert_eq!(refused.len(), 1, "{refused:?}");
    let r = &refused[0]["result"];
    assert_eq!(r["isError"], true, "{r}");
    assert!(
        r["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("SANDBOX_UNAVAILABLE: ")),
        "{r}"
    );
    // Decline one ask: its call ends, and a new call gets in (and asks).
    s.send(&json!({"jsonrpc": "2.0", "id": asks[0], "result": {"action": "decline"}}));
    let declined = s.drain_until(|v| v.get("result").is_some());
    assert_eq!(declined["result"]["isError"], true, "{declined}");
    s.send(&call(5000));
    let asked = s.drain_until(|v| v["method"] == "elicitation/create" || v["id"] == 5000);
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
}

/// The stdio server's `--principal` is the client's profile: a non-owner
/// neither sees nor can call an owner-only tool; the local default can.
#[test]
fn stdio_principal_profile_hides_and_refuses_owner_only_tools() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("owners.toml");
    std::fs::write(
        &policy,
        "version = 1\nmode = \"workspace-write\"\n[principals]\nowner_only = [\"write_file\"]\n",
    )
    .unwrap();
    let policy = policy.to_str().unwrap();
    let listed = |s: &mut Server| -> Vec<String> {
        s.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        let r = s.response(&json!(2));
        r["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let write = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}});

    let mut bob = Server::start_with(&["--policy", policy, "--principal", "bob"], json!({}));
    assert!(!listed(&mut bob).contains(&"write_file".to_string()));
    bob.send(&write);
    let r = bob.response(&json!(3));
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("POLICY_DENIED:"), "{text}");
    assert!(!bob._dirs.0.path().join("out.txt").exists(), "the body ran");

    let mut local = Server::start_with(&["--policy", policy], json!({}));
    assert!(listed(&mut local).contains(&"write_file".to_string()));
    local.send(&write);
    let r = local.response(&json!(3));
    assert_eq!(r["result"]["isError"], false, "{r}");
}

/// Over stdio, a tool's log records arrive as `notifications/message`
/// before the call's response once the client set a level, and its
/// images as image content; the session is rate limited as `mcp-stdio`.
#[test]
fn stdio_log_notifications_content_and_rate_limits() {
    let tools = tempfile::tempdir().unwrap();
    std::fs::copy(
        env!("TOOLHOST_MCP_FIXTURES"),
        tools.path().join("fixtures.wasm"),
    )
    .unwrap();
    let policy = tools.path().join("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[[rate_limits.tools]]\ntool = \"test_image_content\"\ncalls = 1\nper_seconds = 3600\n",
    )
    .unwrap();
    let mut s = Server::start_with(
        &[
            "--tools",
            tools.path().to_str().unwrap(),
            "--tools-only",
            "--policy",
            policy.to_str().unwrap(),
        ],
        json!({}),
    );
    s.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "debug"}}));
    s.response(&json!(2));
    s.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "test_tool_with_logging", "arguments": {}}}));
    let mut logs = Vec::new();
    let done = loop {
        let v = s.next(Duration::from_secs(30)).expect("a message");
        if v["id"] == 3 {
            break v;
        }
        if v["method"] == "notifications/message" {
            logs.push(v["params"]["data"].clone());
        }
    };
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        logs,
        [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed"
        ]
    );
    let image = json!({"name": "test_image_content", "arguments": {}});
    s.send(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": image}));
    let r = s.response(&json!(4));
    assert_eq!(r["result"]["content"][0]["type"], "image", "{r}");
    s.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": image}));
    let r = s.response(&json!(5));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(
        r["result"]["_meta"]["toolhost"]["code"], "RATE_LIMITED",
        "{r}"
    );
}

/// A server whose policy asks before `write_file` and whose approver
/// says yes (its policy file goes in `dir`).
fn asking_writes(dir: &std::path::Path) -> Server {
    let policy = dir.join("ask.toml");
    std::fs::write(
        &policy,
        "version = 1\nmode = \"workspace-write\"\n[[rules]]\ntool = \"write_file\"\ndecision = \"ask\"\nreason = \"writes need a human\"\n",
    )
    .unwrap();
    Server::start_with(
        &[
            "--policy",
            policy.to_str().unwrap(),
            "--approver",
            "auto-approve",
        ],
        json!({}),
    )
}

/// The state of an approval notice (`pending`, `decided`), `None` for any
/// other message.
fn approval_state(v: &Value) -> Option<&str> {
    (v["method"] == "notifications/message"
        && v["params"]["logger"] == toolhost::mcp::APPROVALS_LOGGER)
        .then(|| v["params"]["data"]["state"].as_str().unwrap_or("?"))
}

/// Over stdio, approvals are announced to the client as
/// `notifications/message` (logger `toolhost/approvals`): pending, then
/// decided, once the client set a log level.
#[test]
fn stdio_approvals_are_announced_pending_then_decided() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = asking_writes(dir.path());
    s.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "info"}}));
    s.response(&json!(2));
    s.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}}));
    // The notifications travel apart from the response: take all three, in
    // whatever order they come.
    let (mut pending, mut decided, mut response) = (None, None, None);
    while pending.is_none() || decided.is_none() || response.is_none() {
        let v = s.next(Duration::from_secs(30)).expect("a message");
        if v["id"] == 3 {
            response = Some(v);
        } else {
            match approval_state(&v) {
                None => {}
                Some("pending") => pending = Some(v),
                Some("decided") => {
                    assert!(pending.is_some(), "decided before pending: {v}");
                    decided = Some(v);
                }
                _ => panic!("{v}"),
            }
        }
    }
    let (pending, decided, r) = (pending.unwrap(), decided.unwrap(), response.unwrap());
    let data = &pending["params"]["data"];
    assert_eq!(pending["params"]["level"], "notice", "{pending}");
    assert_eq!(data["request"]["tool"], "write_file", "{pending}");
    assert_eq!(data["request"]["args"]["path"], "out.txt", "{pending}");
    assert_eq!(data["principal"], "local", "{pending}");
    assert_eq!(data["dropped"], 0, "{pending}");
    assert_eq!(
        decided["params"]["data"]["approval_id"], data["approval_id"],
        "{decided}"
    );
    assert_eq!(
        decided["params"]["data"]["outcome"], "allowed-once",
        "{decided}"
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
}

/// A session initializes once: a repeated `initialize` is refused, and it
/// does not enter the client in the session list again (each entry would
/// get its own copy of every approval notice).
#[test]
fn a_repeated_initialize_is_refused_and_notices_come_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = asking_writes(dir.path());
    for id in 2..5 {
        s.send(&json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "again", "version": "0"}}}));
        let r = s.response(&json!(id));
        assert_eq!(error_code(&r), Some(-32600), "{r}");
    }
    s.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "logging/setLevel", "params": {"level": "info"}}));
    s.response(&json!(5));
    s.send(&json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
        "params": {"name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}}));
    let mut seen = Vec::new();
    loop {
        let v = s.next(Duration::from_secs(30)).expect("a message");
        if v["id"] == 6 {
            assert_eq!(v["result"]["isError"], false, "{v}");
            break;
        }
        seen.push(v);
    }
    // Notices travel apart from the response: wait for the two this call
    // makes (however loaded the machine), then for a while longer, in
    // which a duplicate would arrive.
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.iter().filter_map(approval_state).count() < 2 && Instant::now() < deadline {
        seen.extend(s.next(Duration::from_millis(200)));
    }
    seen.extend(s.drain(Duration::from_secs(1)));
    let states: Vec<&str> = seen.iter().filter_map(approval_state).collect();
    assert_eq!(states, ["pending", "decided"], "{seen:?}");
    s.assert_alive(7);
}

/// stdin a socket pair (as Node's libuv gives a child) and stdout a pipe:
/// both are served without blocking, a call goes through, and once the
/// client closes stdin the server exits and leaves both in blocking mode
/// (non-blocking mode belongs to the open file, which others may share).
#[test]
fn stdio_over_a_socket_pair_and_a_pipe_serves_and_leaves_them_blocking() {
    use std::os::unix::net::UnixStream;
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("hello.txt"), "hello over a socket\n").unwrap();
    let (mut to_server, server_stdin) = UnixStream::pair().unwrap();
    let (from_server, server_stdout) = std::io::pipe().unwrap();
    // Our own handles on the server's ends, to read their flags after.
    let stdin_end = server_stdin.try_clone().unwrap();
    let stdout_end = server_stdout.try_clone().unwrap();
    let mut child = Command::new(crate::support::bin())
        .args(["serve", "--mcp", "--mode", "read-only", "--workspace"])
        .arg(ws.path())
        .arg("--state")
        .arg(state.path())
        .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(server_stdin)))
        .stdout(Stdio::from(server_stdout))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(from_server).lines();
    let mut ask = |v: Value| {
        writeln!(to_server, "{v}").unwrap();
        to_server.flush().unwrap();
    };
    ask(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "socket-test", "version": "0"}}}),
    );
    ask(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    ask(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": "hello.txt"}}}));
    let mut answered = Vec::new();
    while answered.len() < 2 {
        let line = lines.next().expect("the server closed stdout").unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        if v.get("id").is_some() {
            answered.push(v);
        }
    }
    assert_eq!(answered[0]["result"]["serverInfo"]["name"], "toolhost");
    assert_eq!(
        answered[1]["result"]["content"][0]["text"], "hello over a socket\n",
        "{}",
        answered[1]
    );
    // The client closes stdin: the server ends its session and exits.
    to_server.shutdown(std::net::Shutdown::Write).unwrap();
    drop(to_server);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    for (name, flags) in [
        ("stdin", rustix::fs::fcntl_getfl(&stdin_end).unwrap()),
        ("stdout", rustix::fs::fcntl_getfl(&stdout_end).unwrap()),
    ] {
        assert!(
            !flags.contains(rustix::fs::OFlags::NONBLOCK),
            "the server left its {name} non-blocking: {flags:?}"
        );
    }
}

/// When the client goes away, the tasks it started are interrupted and
/// waited for: the server records each one's result (CANCELLED) before it
/// exits, instead of leaving an intent that the next start would report as
/// TOOL_OUTCOME_UNKNOWN.
#[test]
fn a_task_running_when_the_client_leaves_is_cancelled_and_recorded() {
    let mut s = Server::start_with(
        &["--mode", "workspace-write"],
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
    );
    s.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 30000}}}));
    let started = s.response(&json!(2));
    assert_eq!(started["result"]["resultType"], "task", "{started}");
    let id = started["result"]["taskId"].as_str().unwrap().to_string();
    let at = Instant::now();
    drop(s.stdin.take());
    let status = loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            at.elapsed() < Duration::from_secs(20),
            "the server did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    assert!(at.elapsed() < Duration::from_secs(15), "{:?}", at.elapsed());
    let out = Command::new(crate::support::bin())
        .args(["log", "--json", "--workspace"])
        .arg(s._dirs.0.path())
        .arg("--state")
        .arg(s._dirs.1.path())
        .output()
        .unwrap();
    let results: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["kind"] == "tool/result" && e["call_id"] == id.as_str())
        .collect();
    assert_eq!(results.len(), 1, "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        results[0]["payload"]["error"]["code"], "CANCELLED",
        "{}",
        results[0]
    );
}

/// Sends `count` requests of `method` on `stdin` from a thread, and
/// returns once that thread has stalled (its count has not moved for a
/// second; at most 60 s) with the thread and how many it had sent.
fn flood_until_stalled(
    stdin: ChildStdin,
    method: &'static str,
    count: usize,
) -> (std::thread::JoinHandle<()>, usize) {
    flood_lines_until_stalled(stdin, count, move |id| {
        json!({"jsonrpc": "2.0", "id": id, "method": method}).to_string()
    })
}

/// [`flood_until_stalled`] with the `n`th message's lines given by `lines`.
fn flood_lines_until_stalled(
    mut stdin: ChildStdin,
    count: usize,
    lines: impl Fn(usize) -> String + Send + 'static,
) -> (std::thread::JoinHandle<()>, usize) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let sent = std::sync::Arc::new(AtomicUsize::new(0));
    let writer = {
        let sent = sent.clone();
        std::thread::spawn(move || {
            for id in 0..count {
                if writeln!(stdin, "{}", lines(id)).is_err() {
                    return;
                }
                sent.store(id + 1, Ordering::Relaxed);
            }
            let _ = stdin.flush();
        })
    };
    let (mut last, mut still_since) = (usize::MAX, Instant::now());
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let now = sent.load(Ordering::Relaxed);
        if now != last {
            (last, still_since) = (now, Instant::now());
        } else if still_since.elapsed() > Duration::from_secs(1) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (writer, last)
}

/// A child process killed when dropped (a failed test leaves none behind).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Killed {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Killed {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

/// `toolhost serve --mcp` on fresh directories, initialized, with stdout
/// not read any further.
fn started_unread(
    extra: &[&str],
    stderr: Stdio,
) -> (
    Killed,
    ChildStdin,
    BufReader<std::process::ChildStdout>,
    [tempfile::TempDir; 2],
) {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut child = serve_command(ws.path(), state.path(), extra)
        .env("TOOLHOST_LOG", "toolhost=info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})).unwrap();
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("\"init\""), "{line}");
    (Killed(child), stdin, stdout, [ws, state])
}

/// A client that sends requests and does not read the answers is slowed
/// down, not buffered: the server stops reading once
/// `MAX_IN_FLIGHT` requests wait for their answers to be written (and
/// the pipes are full), so the client's writes stall far short of what it
/// wants to send. rmcp alone handled every request and kept every answer
/// (400,000 pings held 856 MB). Once the client reads, every request is
/// answered, none lost.
#[test]
fn a_client_that_does_not_read_is_slowed_not_buffered() {
    const PINGS: usize = 20_000;
    let (mut child, stdin, mut stdout, _dirs) = started_unread(&[], Stdio::null());
    let (writer, sent) = flood_until_stalled(stdin, "ping", PINGS);
    let bound = toolhost::mcp::MAX_IN_FLIGHT;
    assert!(
        sent < PINGS && sent < bound + 8_000,
        "the client sent {sent} of {PINGS} pings without reading an answer (bound {bound} plus the pipes)"
    );
    // Now read: every ping is answered, once.
    let mut answered = vec![false; PINGS];
    let mut count = 0;
    let mut line = String::new();
    while count < PINGS {
        line.clear();
        if stdout.read_line(&mut line).unwrap() == 0 {
            break;
        }
        let v: Value = serde_json::from_str(&line).unwrap();
        if let Some(id) = v["id"].as_u64() {
            assert!(v.get("result").is_some(), "{v}");
            assert!(!answered[id as usize], "answered twice: {id}");
            answered[id as usize] = true;
            count += 1;
        }
    }
    assert_eq!(count, PINGS, "every ping is answered");
    writer.join().unwrap();
    let _ = child.kill();
    let _ = child.wait();
}

/// The bound counts requests, not ids: a client that does not read is
/// stopped just the same when it cancels each request before sending it
/// (rmcp ignores such a cancellation and answers), and a client that sends
/// every ping under one id never leaves a count held for good (rmcp never
/// cancels the tokens of requests whose id another took over). Both used to
/// pass the bound, each answer waiting in memory to be written, without
/// end; the second, once bounded, stalled the session for good.
#[test]
fn a_client_that_reuses_ids_or_cancels_first_is_slowed_not_buffered() {
    const PINGS: usize = 40_000;
    let bound = toolhost::mcp::MAX_IN_FLIGHT;
    type Lines = fn(usize) -> String;
    // The last line of each flood is a ping with the id "last".
    let last = |n: usize| n == PINGS - 1;
    let floods: [(&str, Lines); 2] = [
        ("one id", |n| {
            let id = if n == PINGS - 1 {
                json!("last")
            } else {
                json!(1)
            };
            json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string()
        }),
        ("cancelled first", |n| {
            let id = if n == PINGS - 1 {
                json!("last")
            } else {
                json!(n)
            };
            let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": id}});
            let ping = json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
            format!("{cancel}\n{ping}")
        }),
    ];
    assert!(last(PINGS - 1));
    for (what, lines) in floods {
        let (mut child, stdin, stdout, _dirs) = started_unread(&[], Stdio::null());
        let (writer, sent) = flood_lines_until_stalled(stdin, PINGS, lines);
        // Under one id rmcp drops the answers of requests it sees open
        // twice: those hold nothing, and their count ends a second after
        // their handler (see `in_flight`), so such a flood trickles on at a
        // pace set by that timer and the scheduler, and its `sent` bounds
        // nothing; that nothing stays counted for good is checked below.
        if what != "one id" {
            let most = bound + 8_000;
            assert!(
                sent < most,
                "{what}: the client sent {sent} of {PINGS} pings without reading an answer \
                 (at most {most} expected: bound {bound} plus the pipes)"
            );
        }
        // Once the client reads, the server reads on to the end: the last
        // ping is answered (nothing stays counted for good).
        let (tx, answered) = channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                if line.contains("\"last\"") && tx.send(line).is_err() {
                    break;
                }
            }
        });
        let got = answered.recv_timeout(Duration::from_secs(60));
        assert!(got.is_ok(), "{what}: the last ping was never answered");
        writer.join().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Hot reload goes on when a client does not read: with its answers
/// (`tools/list`, several KiB each) filling the pipes, the
/// `tools/list_changed` it cannot take is dropped after a bounded wait, and
/// the next change of the tools directory is loaded too (the first
/// notification used to wait forever, and no change was loaded again).
#[test]
fn reload_goes_on_when_a_client_does_not_read() {
    let tools = tempfile::tempdir().unwrap();
    let dir = tools.path().to_str().unwrap().to_string();
    let (mut child, stdin, _stdout, _dirs) =
        started_unread(&["--tools", &dir, "--poll-ms", "100"], Stdio::piped());
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (tx, reloads) = channel();
    std::thread::spawn(move || {
        for line in stderr.lines() {
            let Ok(line) = line else { break };
            if line.contains("reloaded the tools directory") && tx.send(line).is_err() {
                break;
            }
        }
    });
    let (_writer, _) = flood_until_stalled(stdin, "tools/list", 20_000);
    let tool = tools.path().join("a.wasm");
    std::fs::copy(env!("TOOLHOST_BENCH_GUEST"), &tool).unwrap();
    let got = reloads.recv_timeout(Duration::from_secs(60));
    assert!(got.is_ok(), "the new tool was not loaded: {got:?}");
    std::fs::remove_file(&tool).unwrap();
    let got = reloads.recv_timeout(Duration::from_secs(60));
    assert!(got.is_ok(), "the removal was not loaded: {got:?}");
    let _ = child.kill();
    let _ = child.wait();
}

/// A tools directory inside the workspace is not served: a call granted writes
/// could rewrite the tools the server reloads (a manifest says what its tool
/// declares, and so what it is granted).
#[test]
fn a_tools_directory_inside_the_workspace_is_refused() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("tools")).unwrap();
    let tools = ws.path().join("tools");
    let out = serve_command(
        ws.path(),
        state.path(),
        &["--tools", tools.to_str().unwrap()],
    )
    .stdin(Stdio::null())
    .output()
    .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is inside the workspace"), "{err}");
}

/// A stop (SIGTERM) ends a server whose client has stopped reading: the
/// answers rmcp still holds are given up after a short grace. It waited for
/// them forever.
#[test]
fn sigterm_stops_a_server_whose_client_does_not_read() {
    let (mut child, stdin, _stdout, _dirs) = started_unread(&[], Stdio::null());
    let (_writer, _) = flood_until_stalled(stdin, "tools/list", 20_000);
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "the server did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Cancelled requests do not count against the bound on unanswered
/// requests: rmcp drops a cancelled request's answer, so a count kept until
/// the answer is written would grow by one per cancellation until, at 512,
/// the server stopped reading for good. 800 calls, each cancelled at once,
/// and the server still answers.
#[test]
fn cancelled_requests_do_not_fill_the_bound() {
    let mut s = Server::start();
    for id in 0..800u64 {
        s.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "sleep", "arguments": {"ms": 30000}}}),
        );
        s.send(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "test"}}),
        );
    }
    s.send(&json!({"jsonrpc": "2.0", "id": 5000, "method": "ping"}));
    let pong = s.response(&json!(5000));
    assert!(pong.get("result").is_some(), "{pong}");
}

/// A client that stops reading and then dies does not leave its server
/// running: the reader, waiting for room, stops once stdout is gone.
#[test]
fn a_server_whose_stalled_client_dies_exits() {
    let (mut child, stdin, stdout, _dirs) = started_unread(&[], Stdio::null());
    let (_writer, _) = flood_until_stalled(stdin, "tools/list", 20_000);
    drop(stdout);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "the server outlived its client");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A call cancelled while its approval is asked of the client withdraws the
/// question: the client gets `notifications/cancelled` for the elicitation.
/// Before, nothing told it, and rmcp kept the question's answer slot for as
/// long as the session lasted (one more per such call).
#[test]
fn a_cancelled_call_withdraws_its_elicitation() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("ask.toml");
    std::fs::write(
        &policy,
        "version = 1\nmode = \"workspace-write\"\n[[rules]]\ntool = \"write_file\"\ndecision = \"ask\"\nreason = \"writes need a human\"\n",
    )
    .unwrap();
    let mut s = Server::start_with(
        &[
            "--policy",
            policy.to_str().unwrap(),
            "--approval-timeout",
            "600",
        ],
        json!({"elicitation": {}}),
    );
    s.send(
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "write_file", "arguments": {"path": "w.txt", "content": "x"}}}),
    );
    let asked = s.drain_until(|v| v["method"] == "elicitation/create");
    s.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 7, "reason": "changed my mind"}}),
    );
    let withdrawn = s.drain_until(|v| v["method"] == "notifications/cancelled");
    assert_eq!(withdrawn["params"]["requestId"], asked["id"], "{withdrawn}");
    // The server goes on, and nothing was written.
    s.assert_alive(8);
    assert!(!s._dirs.0.path().join("w.txt").exists());
}
