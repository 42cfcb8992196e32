//! `toolhost serve --http ADDR` end to end, with a plain HTTP/1.1 client
//! (hyper): the session handshake, `tools/list` and `tools/call` over SSE
//! responses; the `Host`/`Origin`/token checks refusing before anything is
//! dispatched (the session log stays empty); oversized bodies; elicitations
//! reaching only the session whose call asks; stopping on SIGTERM, idle and
//! with a call in flight; 2026-07-28 approvals as multi-round-trip requests
//! (approve, reject, replay also across a SIGKILL and restart, altered,
//! mismatched and expired states); tasks (result, progress, cancel, and
//! `TOOL_OUTCOME_UNKNOWN` after a SIGKILL and restart). Loopback only;
//! every wait is bounded.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{HeaderMap, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);
const ASK_WRITES: &str = "version = 1\nmode = \"workspace-write\"\n\n[[rules]]\ntool = \"write_file\"\ndecision = \"ask\"\nreason = \"writes need a human\"\n";

struct Server {
    child: Option<Child>,
    addr: SocketAddr,
    ws: tempfile::TempDir,
    state: tempfile::TempDir,
    /// stderr lines after the address line.
    stderr: Receiver<String>,
}

/// Starts `toolhost serve --http` on a free port; the child, its address
/// and its stderr lines after the address line.
fn launch(
    ws: &std::path::Path,
    state: &std::path::Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Child, SocketAddr, Receiver<String>) {
    let mut child = Command::new(crate::support::bin())
        .args(["serve", "--http", "127.0.0.1:0", "--workspace"])
        .arg(ws)
        .arg("--state")
        .arg(state)
        .args(extra)
        .envs(env.iter().copied())
        .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let marker = "serving MCP over Streamable HTTP at http://";
    let addr = loop {
        let line = lines
            .recv_timeout(WAIT)
            .unwrap_or_else(|e| panic!("the server did not say where it listens: {e}"));
        if let Some(rest) = line.split(marker).nth(1) {
            break rest.trim_end_matches("/mcp").parse().unwrap();
        }
    };
    (child, addr, lines)
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        Server::start_with(extra, &[])
    }

    /// [`Server::start`] with `env` set for the server.
    fn start_with(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let ws = crate::support::tempdir();
        let state = crate::support::tempdir();
        let (child, addr, lines) = launch(ws.path(), state.path(), extra, env);
        Server {
            child: Some(child),
            addr,
            ws,
            state,
            stderr: lines,
        }
    }

    /// Kills the server (SIGKILL: nothing is flushed or shut down) and
    /// starts another on the same workspace and state.
    fn kill_and_restart(&mut self, extra: &[&str]) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        let (child, addr, lines) = launch(self.ws.path(), self.state.path(), extra, &[]);
        self.child = Some(child);
        self.addr = addr;
        self.stderr = lines;
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.addr.port())
    }

    fn client(&self) -> Client {
        Client {
            addr: self.addr,
            host: self.host(),
            extra: Vec::new(),
            session: None,
        }
    }

    /// The session log's events once `ready` holds of them: refusals and
    /// read-only calls are committed lazily (within the server's flush
    /// window), so another process sees them a little later. Bounded by
    /// [`WAIT`]; the last events read if `ready` never holds.
    fn events_when(&self, ready: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let events = self.events();
            if ready(&events) || std::time::Instant::now() >= deadline {
                return events;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The session log's events, as `toolhost log --json` prints them.
    fn events(&self) -> Vec<Value> {
        let out = Command::new(crate::support::bin())
            .args(["log", "--json", "--state"])
            .arg(self.state.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap()
    }

    /// Waits (bounded) for the process to exit; its exit code.
    fn exit_code(&mut self) -> Option<i32> {
        let (tx, rx) = channel();
        let mut child = self.child.take().unwrap();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait().map(|s| s.code()));
        });
        match rx.recv_timeout(WAIT) {
            Ok(Ok(code)) => code,
            other => panic!("the server did not exit: {other:?}"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A response: status, headers, and the body to read as SSE events.
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Incoming,
    buf: String,
}

impl Reply {
    /// The next SSE event with JSON data (priming events have none).
    async fn next_message(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() || data.iter().all(|d| d.is_empty()) {
                    continue;
                }
                return serde_json::from_str(&data.join("\n")).ok();
            }
            let frame = self.body.frame().await?.ok()?;
            if let Ok(data) = frame.into_data() {
                self.buf
                    .push_str(&String::from_utf8_lossy(&data).replace("\r\n", "\n"));
            }
        }
    }

    /// The next SSE message, waiting at most [`WAIT`].
    async fn message(&mut self) -> Value {
        tokio::time::timeout(WAIT, self.next_message())
            .await
            .expect("no SSE message in time")
            .expect("the stream ended without a message")
    }

    async fn text(self) -> String {
        let bytes = self.body.collect().await.unwrap().to_bytes();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// One HTTP connection per request, unless a connection is kept (see
/// [`Client::connect`]).
#[derive(Clone)]
struct Client {
    addr: SocketAddr,
    host: String,
    extra: Vec<(&'static str, String)>,
    session: Option<String>,
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

impl Client {
    fn with(mut self, name: &'static str, value: &str) -> Client {
        self.extra.push((name, value.to_string()));
        self
    }

    async fn connect(&self) -> Sender {
        let stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        sender
    }

    fn request(&self, body: Bytes) -> Request<Full<Bytes>> {
        let mut b = Request::builder()
            .method("POST")
            .uri("/mcp")
            .header("host", &self.host)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(s) = &self.session {
            b = b
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-06-18");
        }
        for (k, v) in &self.extra {
            b = b.header(*k, v);
        }
        b.body(Full::new(body)).unwrap()
    }

    async fn send_on(&self, sender: &mut Sender, body: Bytes) -> Reply {
        let response = tokio::time::timeout(WAIT, sender.send_request(self.request(body)))
            .await
            .expect("no response in time")
            .unwrap();
        let (parts, body) = response.into_parts();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body,
            buf: String::new(),
        }
    }

    async fn post(&self, message: &Value) -> Reply {
        let mut sender = self.connect().await;
        self.send_on(&mut sender, Bytes::from(message.to_string()))
            .await
    }

    /// `tools/call` of `tool` with `args`; its answer.
    async fn call_tool(&self, id: u64, tool: &str, args: Value) -> Value {
        self.rpc(id, "tools/call", json!({"name": tool, "arguments": args}))
            .await
    }

    /// A request whose answer is the first message of its SSE stream.
    async fn rpc(&self, id: u64, method: &str, params: Value) -> Value {
        let mut reply = self
            .post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        if reply.status != StatusCode::OK {
            let status = reply.status;
            panic!("{method}: {status} {}", reply.text().await);
        }
        let answer = reply.message().await;
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }

    /// A request (`message`, with its id) whose answer is the first
    /// message of its SSE stream.
    async fn rpc_value(&self, message: &Value) -> Value {
        let mut reply = self.post(message).await;
        assert_eq!(reply.status, StatusCode::OK, "{message}");
        reply.message().await
    }

    /// `initialize` and `notifications/initialized`; the client now
    /// speaks in its session.
    async fn initialize(mut self, capabilities: Value) -> Client {
        let mut reply = self
            .post(
                &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": capabilities,
                "clientInfo": {"name": "http-test", "version": "0"}}}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK);
        let session = reply
            .headers
            .get("mcp-session-id")
            .expect("a session id")
            .to_str()
            .unwrap()
            .to_string();
        let init = reply.message().await;
        assert_eq!(init["result"]["serverInfo"]["name"], "toolhost", "{init}");
        self.session = Some(session);
        let done = self
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(done.status, StatusCode::ACCEPTED);
        self
    }
}

fn call(id: u64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args}})
}

fn has_tool_events(events: &[Value]) -> bool {
    !events.is_empty()
}

#[tokio::test]
async fn http_initialize_list_and_call_read_file() {
    let mut s = Server::start(&[]);
    std::fs::write(s.ws.path().join("hello.txt"), "hello over http\n").unwrap();
    let c = s.client().initialize(json!({})).await;
    let list = c.rpc(1, "tools/list", json!({})).await;
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"read_file"), "{list}");
    let read = c
        .call_tool(2, "read_file", json!({"path": "hello.txt"}))
        .await;
    assert_eq!(read["result"]["isError"], false, "{read}");
    assert!(
        read["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("hello over http")),
        "{read}"
    );
    // A refusal is a result with a stable code, as over stdio.
    let missing = c.call_tool(3, "no_such_tool", json!({})).await;
    assert_eq!(missing["result"]["isError"], true, "{missing}");
    // An unknown session is 404, another path is 404.
    let mut stale = s.client();
    stale.session = Some("not-a-session".into());
    let r = stale
        .post(&call(4, "read_file", json!({"path": "hello.txt"})))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    s.terminate();
    assert_eq!(s.exit_code(), Some(0));
}

#[tokio::test]
async fn http_refuses_bad_origin_and_host_before_dispatch() {
    let s = Server::start(&["--allowed-origin", "https://app.example:*"]);
    std::fs::write(s.ws.path().join("a.txt"), "a").unwrap();
    let c = s.client().initialize(json!({})).await;

    let bad_origin = c.clone().with("origin", "http://evil.example");
    let r = bad_origin
        .post(&call(1, "read_file", json!({"path": "a.txt"})))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let mut bad_host = c.clone();
    bad_host.host = format!("evil.example:{}", s.addr.port());
    let r = bad_host
        .post(&call(2, "read_file", json!({"path": "a.txt"})))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let mut other_port = c.clone();
    other_port.host = format!("localhost:{}", s.addr.port().wrapping_add(1));
    let r = other_port
        .post(&call(3, "read_file", json!({"path": "a.txt"})))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // Not a new session either.
    let r = s
        .client()
        .with("origin", "http://evil.example")
        .post(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "evil", "version": "0"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // None of the refused calls ran.
    let events = s.events();
    assert!(!has_tool_events(&events), "{events:?}");

    // Loopback origins (any port), localhost by name and an allowed origin pass.
    let local = c.clone().with("origin", "http://localhost:5173");
    let ok = local
        .call_tool(4, "read_file", json!({"path": "a.txt"}))
        .await;
    assert_eq!(ok["result"]["isError"], false, "{ok}");
    let mut by_name = c.clone().with("origin", "https://app.example:8443");
    by_name.host = format!("localhost:{}", s.addr.port());
    let ok = by_name
        .call_tool(5, "read_file", json!({"path": "a.txt"}))
        .await;
    assert_eq!(ok["result"]["isError"], false, "{ok}");
    // Read-only calls are committed lazily: another process sees them once
    // the server has flushed, within its flush delay of the response.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !has_tool_events(&s.events()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the admitted calls are logged"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[tokio::test]
async fn http_bearer_tokens() {
    let dir = crate::support::tempdir();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "# who may call\n\nfirst-token\nsecond.token\n").unwrap();
    let s = Server::start(&["--tokens", tokens.to_str().unwrap()]);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}});
    let r = s.client().post(&init).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let challenge = r.headers.get("www-authenticate").unwrap().to_str().unwrap();
    assert!(challenge.starts_with("Bearer"), "{challenge}");
    let r = s
        .client()
        .with("authorization", "Bearer first-token-not")
        .post(&init)
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(
        r.headers
            .get("www-authenticate")
            .unwrap()
            .to_str()
            .unwrap()
            .contains("invalid_token")
    );
    let c = s
        .client()
        .with("authorization", "Bearer second.token")
        .initialize(json!({}))
        .await;
    let list = c.rpc(1, "tools/list", json!({})).await;
    assert!(list["result"]["tools"].is_array(), "{list}");
    // The session alone is not enough: every request needs the token.
    let mut no_token = c.clone();
    no_token.extra.clear();
    let r = no_token
        .post(&call(2, "read_file", json!({"path": "x"})))
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(!has_tool_events(&s.events()));
}

#[tokio::test]
async fn http_oversized_body_is_413_and_the_server_keeps_serving() {
    let s = Server::start(&[]);
    let c = s.client().initialize(json!({})).await;
    let big = "x".repeat(toolhost::mcp::MAX_MESSAGE_BYTES + 1);
    let message = call(1, "read_file", json!({"path": big}));
    let r = c.post(&message).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(!has_tool_events(&s.events()));
    let list = c.rpc(2, "tools/list", json!({})).await;
    assert!(list["result"]["tools"].is_array(), "{list}");
}

/// Garbage on the wire gets an error answer (never a crash, never a tool
/// event), and the same session goes on: a body that is not JSON, not
/// UTF-8, a JSON value that is no JSON-RPC message, a request without a
/// method, a truncated message.
#[tokio::test]
async fn http_garbage_bodies_are_refused_and_the_server_keeps_serving() {
    let s = Server::start(&[]);
    std::fs::write(s.ws.path().join("a.txt"), "still here\n").unwrap();
    let c = s.client().initialize(json!({})).await;
    let garbage: [&[u8]; 6] = [
        b"{not json",
        b"\xff\xfe\x00garbage",
        b"42",
        b"{\"jsonrpc\": \"2.0\", \"id\": 1}",
        b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/call\", \"params\": {\"name\": ",
        b"",
    ];
    for body in garbage {
        let mut sender = c.connect().await;
        let mut reply = c.send_on(&mut sender, Bytes::from_static(body)).await;
        let status = reply.status;
        let shown = String::from_utf8_lossy(body).into_owned();
        if status == StatusCode::OK {
            // Answered in the stream: a JSON-RPC error, never a result.
            let m = reply.message().await;
            assert!(m.get("error").is_some(), "{shown:?}: {m}");
        } else {
            assert!(status.is_client_error(), "{shown:?}: {status}");
        }
    }
    assert!(!has_tool_events(&s.events()));
    let r = c.call_tool(2, "read_file", json!({"path": "a.txt"})).await;
    assert_eq!(r["result"]["isError"], false, "{r}");
}

/// Slowloris: connections that send part of a request and stop neither
/// block other clients nor stay open: each is closed once
/// `HEADER_READ_TIMEOUT` has passed without a whole header.
#[tokio::test]
async fn http_partial_requests_are_cut_off_and_others_are_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = Server::start(&[]);
    std::fs::write(s.ws.path().join("a.txt"), "served\n").unwrap();
    let c = s.client();
    let mut slow = Vec::new();
    for _ in 0..32 {
        let mut stream = tokio::net::TcpStream::connect(c.addr).await.unwrap();
        let part = format!(
            "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: appl",
            c.host
        );
        stream.write_all(part.as_bytes()).await.unwrap();
        slow.push(stream);
    }
    // While they hang, a whole client is served.
    let c = c.initialize(json!({})).await;
    let r = c.call_tool(2, "read_file", json!({"path": "a.txt"})).await;
    assert_eq!(r["result"]["isError"], false, "{r}");
    // Each slow connection ends (EOF, or a reset) within the header timeout
    // plus a margin; a connection still open past it fails the test.
    let limit = toolhost::mcp::HEADER_READ_TIMEOUT + Duration::from_secs(20);
    for mut stream in slow {
        let mut buf = [0u8; 512];
        let ended = tokio::time::timeout(limit, async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => continue, // a 408 answer, then the close
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "a partial request kept its connection open");
    }
    let r = c.rpc(3, "tools/list", json!({})).await;
    assert!(r["result"]["tools"].is_array(), "{r}");
}

#[tokio::test]
async fn http_shutdown_while_idle_exits_zero() {
    let mut s = Server::start(&[]);
    let _c = s.client().initialize(json!({})).await;
    s.terminate();
    assert_eq!(s.exit_code(), Some(0));
}

#[test]
fn http_on_a_remote_address_needs_allow_remote() {
    let out = Command::new(crate::support::bin())
        .args(["serve", "--http", "0.0.0.0:0", "--state"])
        .arg(crate::support::tempdir().path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--allow-remote"), "{err}");
}

/// Two sessions on one server, both able to elicit, each call asking for
/// approval: each session is asked about its own call only (the message
/// names its own file), and each answer decides its own call.
#[tokio::test]
async fn http_elicitation_goes_to_the_session_that_called() {
    let dir = crate::support::tempdir();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, ASK_WRITES).unwrap();
    let s = Server::start(&["--policy", policy.to_str().unwrap()]);
    let a = s.client().initialize(json!({"elicitation": {}})).await;
    let b = s.client().initialize(json!({"elicitation": {}})).await;

    let mut call_a = a
        .post(&call(
            1,
            "write_file",
            json!({"path": "a.txt", "content": "A"}),
        ))
        .await;
    let mut call_b = b
        .post(&call(
            1,
            "write_file",
            json!({"path": "b.txt", "content": "B"}),
        ))
        .await;
    assert_eq!(call_a.status, StatusCode::OK);
    assert_eq!(call_b.status, StatusCode::OK);
    let ask_a = call_a.message().await;
    let ask_b = call_b.message().await;
    for (ask, own, other) in [(&ask_a, "a.txt", "b.txt"), (&ask_b, "b.txt", "a.txt")] {
        assert_eq!(ask["method"], "elicitation/create", "{ask}");
        let text = ask["params"]["message"].as_str().unwrap();
        assert!(text.contains(own) && !text.contains(other), "{text}");
    }
    // A approves, B declines: each answer decides its own session's call.
    let r = a
        .post(&json!({"jsonrpc": "2.0", "id": ask_a["id"], "result": {
            "action": "accept", "content": {"approve": true}}}))
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let r = b
        .post(&json!({"jsonrpc": "2.0", "id": ask_b["id"], "result": {"action": "decline"}}))
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let done_a = call_a.message().await;
    let done_b = call_b.message().await;
    assert_eq!(done_a["result"]["isError"], false, "{done_a}");
    assert_eq!(done_b["result"]["isError"], true, "{done_b}");
    assert!(
        done_b["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("APPROVAL_REJECTED")),
        "{done_b}"
    );
    assert_eq!(
        std::fs::read_to_string(s.ws.path().join("a.txt")).unwrap(),
        "A"
    );
    assert!(!s.ws.path().join("b.txt").exists());
}

/// SIGTERM with a call in flight (waiting on its approval): the server
/// takes no new session, lets the call finish, then exits 0.
#[tokio::test]
async fn http_shutdown_waits_for_the_call_in_flight() {
    let dir = crate::support::tempdir();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, ASK_WRITES).unwrap();
    let mut s = Server::start(&["--policy", policy.to_str().unwrap()]);
    let c = s.client().initialize(json!({"elicitation": {}})).await;
    // A connection opened now, to answer after the listener has closed.
    let mut kept = c.connect().await;
    let mut pending = c
        .post(&call(
            1,
            "write_file",
            json!({"path": "late.txt", "content": "L"}),
        ))
        .await;
    let ask = pending.message().await;
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    s.terminate();
    // Once it stops, the server accepts no connection: wait (bounded) for
    // that, so the answer below comes after the stop began.
    let deadline = std::time::Instant::now() + WAIT;
    while tokio::net::TcpStream::connect(s.addr).await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server kept accepting"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let answer = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {
        "action": "accept", "content": {"approve": true}}});
    let r = c.send_on(&mut kept, Bytes::from(answer.to_string())).await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let done = pending.message().await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        std::fs::read_to_string(s.ws.path().join("late.txt")).unwrap(),
        "L"
    );
    assert_eq!(s.exit_code(), Some(0));
}

/// Each bearer token maps to a principal: the owner's token sees and calls
/// an owner-only tool, another token neither sees nor calls it, and a token
/// without a name is `anonymous` (not an owner).
#[tokio::test]
async fn http_tokens_map_to_principals_for_owner_only_tools() {
    let dir = crate::support::tempdir();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alice-token alice\nbob-token bob\nplain-token\n").unwrap();
    let policy = dir.path().join("owners.toml");
    std::fs::write(
        &policy,
        "version = 1\nmode = \"workspace-write\"\n[principals]\nowners = [\"alice\"]\nowner_only = [\"write_file\"]\n",
    )
    .unwrap();
    let s = Server::start(&[
        "--tokens",
        tokens.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
    ]);
    let mut id = 10;
    for (token, owner) in [
        ("alice-token", true),
        ("bob-token", false),
        ("plain-token", false),
    ] {
        let c = s
            .client()
            .with("authorization", &format!("Bearer {token}"))
            .initialize(json!({}))
            .await;
        let list = c.rpc(id, "tools/list", json!({})).await;
        let names: Vec<&str> = list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.contains(&"write_file"), owner, "{token}: {names:?}");
        let file = format!("{token}.txt");
        let mut reply = c
            .post(&call(
                id + 1,
                "write_file",
                json!({"path": file, "content": "x"}),
            ))
            .await;
        let r = reply.message().await;
        assert_eq!(r["result"]["isError"], !owner, "{token}: {r}");
        if !owner {
            let text = r["result"]["content"][0]["text"].as_str().unwrap();
            assert!(text.starts_with("POLICY_DENIED:"), "{text}");
        }
        assert_eq!(s.ws.path().join(&file).exists(), owner, "{token}");
        id += 2;
    }
}

/// `GET /approvals` or `POST /approvals/ID` with `token`: status and JSON.
async fn operator(
    s: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Value,
) -> (StatusCode, Value) {
    let client = s.client();
    let mut sender = client.connect().await;
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header("host", s.host())
        .header("content-type", "application/json");
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    let request = b.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let response = tokio::time::timeout(WAIT, sender.send_request(request))
        .await
        .expect("no response in time")
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// With `--tokens`, a session answers only the token that opened it: its
/// id is no credential another principal can use (bob could list tools, call
/// them, and read alice's session's stream with her session id).
#[tokio::test]
async fn http_a_session_answers_only_the_token_that_opened_it() {
    let dir = crate::support::tempdir();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alice-token alice\nbob-token bob\n").unwrap();
    let s = Server::start(&["--tokens", tokens.to_str().unwrap()]);
    let alice = s
        .client()
        .with("authorization", "Bearer alice-token")
        .initialize(json!({}))
        .await;
    let bob = Client {
        extra: vec![("authorization", "Bearer bob-token".to_string())],
        ..alice.clone()
    };
    let reply = bob
        .post(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}))
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    let list = alice.rpc(6, "tools/list", json!({})).await;
    assert!(list["result"]["tools"].is_array(), "{list}");
}

/// A session id that is not visible ASCII is refused (400). rmcp reads
/// such an id as none, so an `initialize` carrying one opened a session that
/// the front door neither counted against its limit nor gave an owner.
#[tokio::test]
async fn http_a_session_id_that_is_not_ascii_is_refused() {
    let s = Server::start(&[]);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "http-test", "version": "0"}}});
    let reply = s
        .client()
        .with("mcp-session-id", "\u{e9}")
        .post(&init)
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.headers.get("mcp-session-id").is_none());
    let text = reply.text().await;
    assert!(text.contains("Mcp-Session-Id"), "{text}");
    // Without the header, the same request opens a session.
    let reply = s.client().post(&init).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.headers.get("mcp-session-id").is_some());
}

/// A request whose id another request of its session still holds is
/// refused (400, a JSON-RPC error without an id). rmcp let the second take
/// the id's route over, so the first request's stream never ended and its
/// channel stayed in the session for good: a client repeating that grew the
/// server without bound. Another session may use the id; once the first
/// request is done (here: cancelled, which ends its stream) the id is free.
#[tokio::test]
async fn http_a_request_id_open_in_its_session_is_refused() {
    let s = Server::start(&[]);
    let c = s.client().initialize(json!({})).await;
    let mut first = c.post(&call(7, "sleep", json!({"ms": 600_000}))).await;
    assert_eq!(first.status, StatusCode::OK);
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    let again = c.post(&ping).await;
    assert_eq!(again.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        again.headers.get("content-type").unwrap(),
        "application/json"
    );
    let error: Value = serde_json::from_str(&again.text().await).unwrap();
    assert_eq!(error["id"], Value::Null, "{error}");
    assert_eq!(error["error"]["code"], -32600, "{error}");
    assert!(
        error["error"]["message"].as_str().unwrap().contains("id 7"),
        "{error}"
    );
    // The same id as a string is another id; in another session, the same.
    let as_text = c
        .rpc_value(&json!({"jsonrpc": "2.0", "id": "7", "method": "ping"}))
        .await;
    assert_eq!(as_text["id"], "7", "{as_text}");
    let other = s.client().initialize(json!({})).await;
    assert_eq!(other.rpc(7, "ping", json!({})).await["id"], 7);
    // The first request is still served: cancelled, its stream ends.
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 7}});
    assert_eq!(c.post(&cancel).await.status, StatusCode::ACCEPTED);
    tokio::time::timeout(WAIT, async {
        while first.next_message().await.is_some() {}
    })
    .await
    .expect("the cancelled request's stream did not end");
    // rmcp is done with the id: it is free again (bounded: at most about a
    // second after the handler returned).
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut reply = c.post(&ping).await;
        if reply.status == StatusCode::OK {
            assert_eq!(reply.message().await["id"], 7);
            break;
        }
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the id stayed held after its request ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Posts `body` with `token` until the answer is `want` (within [`WAIT`]);
/// `never`, if given, is a status no answer on the way may have.
async fn post_until(
    c: &Client,
    token: &str,
    body: &Value,
    want: StatusCode,
    never: Option<StatusCode>,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut seen = std::collections::BTreeMap::new();
    loop {
        let reply = c
            .clone()
            .with("authorization", &format!("Bearer {token}"))
            .post(body)
            .await;
        let status = reply.status;
        if status == want {
            return;
        }
        assert!(
            never != Some(reply.status),
            "{token}: answered {}",
            reply.status
        );
        let (n, text) = seen.entry(status).or_insert((0, String::new()));
        if *n == 0 {
            *text = reply.text().await;
        }
        *n += 1;
        assert!(
            tokio::time::Instant::now() < deadline,
            "{token}: never answered {want}; answered (count, first text) {seen:?}"
        );
        tokio::task::yield_now().await;
    }
}

/// With `--tokens`, one token has at most `MAX_REQUESTS_PER_TOKEN` requests
/// open (here: POSTs whose bodies never come); the next gets 429 while
/// another token is served, and the token is served again once its requests
/// end. One token could hold every connection.
#[tokio::test]
async fn http_one_token_cannot_hold_every_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = crate::support::tempdir();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alice-token alice\nbob-token bob\n").unwrap();
    let s = Server::start(&["--tokens", tokens.to_str().unwrap()]);
    let c = s.client();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer alice-token\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{{",
        c.host
    );
    // One request more than her share, in whatever order the server reads
    // them: exactly one is answered (429), the others wait for their
    // bodies. Each connection's first answer is reported as it comes.
    let (tx, mut answered) = tokio::sync::mpsc::unbounded_channel();
    let mut writers = Vec::new();
    let mut readers = Vec::new();
    for n in 0..=toolhost::mcp::MAX_REQUESTS_PER_TOKEN {
        let mut stream = tokio::net::TcpStream::connect(c.addr).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        let (mut read, write) = stream.into_split();
        writers.push(write);
        let tx = tx.clone();
        readers.push(tokio::spawn(async move {
            let mut first = vec![0; 256];
            let got = read.read(&mut first).await.unwrap_or(0);
            let _ = tx.send((n, String::from_utf8_lossy(&first[..got]).into_owned()));
            let mut rest = Vec::new();
            let _ = read.read_to_end(&mut rest).await;
        }));
    }
    let (_, first) = tokio::time::timeout(WAIT, answered.recv())
        .await
        .expect("one request answered")
        .expect("an answer");
    assert!(first.starts_with("HTTP/1.1 429"), "{first}");
    // Her share is held: she is refused, bob is served.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}});
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let alice = c
        .clone()
        .with("authorization", "Bearer alice-token")
        .post(&ping)
        .await;
    assert_eq!(alice.status, StatusCode::TOO_MANY_REQUESTS);
    let bob = c
        .clone()
        .with("authorization", "Bearer bob-token")
        .post(&init)
        .await;
    assert_eq!(bob.status, StatusCode::OK);
    // Her requests end (connections closed): she is served again.
    for mut write in writers {
        let _ = write.shutdown().await;
    }
    for reader in readers {
        reader.await.unwrap();
    }
    post_until(&c, "alice-token", &init, StatusCode::OK, None).await;
}

/// A session opened with `token` whose `write_file` of `path` (request `id`)
/// waits for its approval; its answer once decided.
async fn write_in_session(
    s: &Server,
    token: &str,
    id: u64,
    path: &str,
) -> tokio::task::JoinHandle<Value> {
    // The client elicits: with `--approver queue` it is still not asked
    // (it must not approve its own call); the operator's queue is.
    let c = s
        .client()
        .with("authorization", &format!("Bearer {token}"))
        .initialize(json!({"elicitation": {}}))
        .await;
    let path = path.to_string();
    tokio::spawn(async move {
        let mut reply = c
            .post(&call(
                id,
                "write_file",
                json!({"path": path, "content": "x"}),
            ))
            .await;
        reply.message().await
    })
}

/// The approval id of the pending `write_file` request `principal` made,
/// as the owner alice lists it (polled until it is there).
async fn pending_of(s: &Server, principal: &str) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, pending) =
            operator(s, "GET", "/approvals", Some("alice-token"), json!(null)).await;
        assert_eq!(status, StatusCode::OK, "{pending}");
        if let Some(r) = pending
            .as_array()
            .and_then(|a| a.iter().find(|r| r["principal"] == principal))
        {
            assert_eq!(r["tool"], "write_file");
            return r["approval_id"].as_str().unwrap().to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing of {principal} became pending"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An operator decides a call's approval over HTTP (`--approver queue`):
/// only with a token of an owner, exactly once.
#[tokio::test]
async fn http_operator_decides_a_queued_approval() {
    let dir = crate::support::tempdir();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alice-token alice\nbob-token bob\n").unwrap();
    let policy = dir.path().join("ask.toml");
    std::fs::write(
        &policy,
        format!("{ASK_WRITES}[principals]\nowners = [\"alice\"]\n"),
    )
    .unwrap();
    let s = Server::start(&[
        "--tokens",
        tokens.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
        "--approver",
        "queue",
    ]);
    let waiting = write_in_session(&s, "bob-token", 1, "out.txt").await;
    let id = pending_of(&s, "bob").await;
    // alice's own call: listed with her as its principal, and her token
    // cannot decide it (the agent that made it holds that token).
    let _mine = write_in_session(&s, "alice-token", 2, "own.txt").await;
    let own = pending_of(&s, "alice").await;
    let (status, body) = operator(
        &s,
        "POST",
        &format!("/approvals/{own}"),
        Some("alice-token"),
        json!({"decision": "allow"}),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(!s.ws.path().join("own.txt").exists());
    // A request the pending list does not show (here one it cannot read;
    // or one its call is still registering) has no principal to check
    // against the caller: it is not decided.
    let approvals = s.state.path().join("approvals");
    std::fs::write(approvals.join("call-unlisted-approval.request.json"), "{").unwrap();
    let (status, body) = operator(
        &s,
        "POST",
        "/approvals/call-unlisted-approval",
        Some("alice-token"),
        json!({"decision": "allow"}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        !approvals
            .join("call-unlisted-approval.decision.json")
            .exists()
    );
    let path = format!("/approvals/{id}");
    let allow = json!({"decision": "allow"});
    // bob fills the session limit (his and alice's sessions are open): a new
    // session is refused, but deciding
    // an approval opens no session and still gets through (it got 503).
    let mut open = Vec::new();
    for _ in 2..toolhost::mcp::MAX_SESSIONS {
        open.push(
            s.client()
                .with("authorization", "Bearer bob-token")
                .initialize(json!({}))
                .await,
        );
    }
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}});
    let (status, _) = operator(&s, "POST", "/mcp", Some("bob-token"), init).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "the limit is full");
    // bob made the call and is no owner: he cannot approve it; nor can
    // someone without a token.
    let (status, _) = operator(&s, "POST", &path, Some("bob-token"), allow.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = operator(&s, "POST", &path, None, allow.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = operator(&s, "POST", &path, Some("alice-token"), allow.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = operator(
        &s,
        "POST",
        &path,
        Some("alice-token"),
        json!({"decision": "reject"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["decision"]["outcome"], "allowed-once");
    assert_eq!(body["decision"]["by"], "alice");

    let r = waiting.await.unwrap();
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert!(s.ws.path().join("out.txt").exists());

    let (status, _) = operator(
        &s,
        "POST",
        "/approvals/call-nope-approval",
        Some("alice-token"),
        allow,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// The `code` of a `tools/call` answer.
fn code_of(answer: &Value) -> Value {
    answer["result"]["_meta"]["toolhost"]["code"].clone()
}

/// Over HTTP the rate-limit client is what the server can verify: the
/// bearer token with `--tokens`, else the remote address. New sessions and
/// session-less 2026-07-28 requests do not get new buckets.
#[tokio::test]
async fn http_rate_limits_follow_the_token_not_the_session() {
    let dir = crate::support::tempdir();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[rate_limits]\nper_client = { calls = 2, per_seconds = 3600 }\n",
    )
    .unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alpha\nbravo\n").unwrap();
    let s = Server::start(&[
        "--policy",
        policy.to_str().unwrap(),
        "--tokens",
        tokens.to_str().unwrap(),
    ]);
    std::fs::write(s.ws.path().join("a.txt"), "a\n").unwrap();
    let read = json!({"name": "read_file", "arguments": {"path": "a.txt"}});
    let alpha = || s.client().with("authorization", "Bearer alpha");
    let first = alpha().initialize(json!({})).await;
    for id in 1..=2 {
        let r = first.rpc(id, "tools/call", read.clone()).await;
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
    let over = first.rpc(3, "tools/call", read.clone()).await;
    assert_eq!(code_of(&over), "RATE_LIMITED", "{over}");
    assert!(
        over["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("RATE_LIMITED: ")),
        "{over}"
    );
    // A new session with the same token is the same client.
    let again = alpha().initialize(json!({})).await;
    let r = again.rpc(1, "tools/call", read.clone()).await;
    assert_eq!(code_of(&r), "RATE_LIMITED", "{r}");
    // So is a session-less 2026-07-28 request.
    let mut stateless = read.clone();
    stateless["_meta"] = meta_2026(json!({}));
    let r = alpha()
        .with("mcp-protocol-version", "2026-07-28")
        .with("mcp-method", "tools/call")
        .with("mcp-name", "read_file")
        .rpc(1, "tools/call", stateless)
        .await;
    assert_eq!(code_of(&r), "RATE_LIMITED", "{r}");
    // Another token is another client.
    let bravo = s
        .client()
        .with("authorization", "Bearer bravo")
        .initialize(json!({}))
        .await;
    let r = bravo.rpc(1, "tools/call", read.clone()).await;
    assert_eq!(r["result"]["isError"], false, "{r}");
    // Logged like any refusal (lazily: read from another process once the
    // server has flushed, within its flush delay of the response).
    let refused = |events: Vec<Value>| {
        events
            .iter()
            .filter(|e| e["payload"]["error"]["code"] == "RATE_LIMITED")
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while refused(s.events()) < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(refused(s.events()), 3);

    // Without tokens, sessions from one address share the client.
    let s = Server::start(&["--policy", policy.to_str().unwrap()]);
    std::fs::write(s.ws.path().join("a.txt"), "a\n").unwrap();
    for id in 1..=2 {
        let c = s.client().initialize(json!({})).await;
        let r = c.rpc(id, "tools/call", read.clone()).await;
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
    let c = s.client().initialize(json!({})).await;
    let r = c.rpc(3, "tools/call", read).await;
    assert_eq!(code_of(&r), "RATE_LIMITED", "{r}");
}

/// `tools/list`'s hints of `name`: [readOnly, destructive, idempotent, openWorld],
/// asked with request id `id` (a session never reuses an id: the server
/// refuses one still open, as it may be just after its answer).
async fn hints_of(c: &Client, id: u64, name: &str) -> [Value; 4] {
    let list = c.rpc(id, "tools/list", json!({})).await;
    let tool = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} not listed: {list}"));
    let a = &tool["annotations"];
    [
        a["readOnlyHint"].clone(),
        a["destructiveHint"].clone(),
        a["idempotentHint"].clone(),
        a["openWorldHint"].clone(),
    ]
}

#[tokio::test]
async fn http_annotations_say_what_the_host_enforces() {
    // Calls that may write the workspace: a tool that declares writes is
    // neither read-only nor harmless; one that declares it only reads is
    // granted no write (it runs read-only), so it is read-only.
    let s = Server::start(&["--mode", "workspace-write"]);
    let c = s.client().initialize(json!({})).await;
    let writable = [json!(false), json!(true), json!(false), json!(false)];
    let read_only = [json!(true), json!(false), json!(true), json!(false)];
    assert_eq!(hints_of(&c, 1, "read_file").await, read_only);
    assert_eq!(hints_of(&c, 2, "write_file").await, writable);
    // Calls that run read-only change nothing, whatever the tool declares:
    // write_file's calls are refused before they run.
    let s = Server::start(&["--mode", "read-only"]);
    let c = s.client().initialize(json!({})).await;
    assert_eq!(hints_of(&c, 1, "read_file").await, read_only);
    assert_eq!(hints_of(&c, 2, "write_file").await, read_only);
}

/// A server of the MCP conformance fixtures alone.
fn fixtures_server() -> (Server, tempfile::TempDir) {
    let tools = crate::support::tempdir();
    std::fs::copy(
        env!("TOOLHOST_MCP_FIXTURES"),
        tools.path().join("fixtures.wasm"),
    )
    .unwrap();
    let s = Server::start(&["--tools", tools.path().to_str().unwrap(), "--tools-only"]);
    (s, tools)
}

/// Calls `tool` and returns the notifications sent on the call's stream
/// before its response, and the response.
async fn call_collecting(c: &Client, id: u64, tool: &str) -> (Vec<Value>, Value) {
    let reply = c.post(&call(id, tool, json!({}))).await;
    until_response(reply, id).await
}

/// The messages on a request's stream before its response, and the
/// response.
async fn until_response(mut reply: Reply, id: u64) -> (Vec<Value>, Value) {
    assert_eq!(reply.status, StatusCode::OK);
    let mut notes = Vec::new();
    loop {
        let m = reply.message().await;
        if m["id"] == id {
            return (notes, m);
        }
        notes.push(m);
    }
}

#[tokio::test]
async fn http_images_audio_and_resources_reach_the_client_as_mcp_content() {
    use base64::Engine as _;
    let (s, _tools) = fixtures_server();
    let c = s.client().initialize(json!({})).await;
    let image = c
        .rpc(1, "tools/call", json!({"name": "test_image_content"}))
        .await;
    let block = &image["result"]["content"][0];
    assert_eq!(block["type"], "image", "{image}");
    assert_eq!(block["mimeType"], "image/png");
    let png = base64::engine::general_purpose::STANDARD
        .decode(block["data"].as_str().unwrap())
        .unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{png:?}");
    let audio = c
        .rpc(2, "tools/call", json!({"name": "test_audio_content"}))
        .await;
    assert_eq!(audio["result"]["content"][0]["type"], "audio", "{audio}");
    assert_eq!(audio["result"]["content"][0]["mimeType"], "audio/wav");
    // Blocks keep the order the tool gave them.
    let mixed = c
        .rpc(
            3,
            "tools/call",
            json!({"name": "test_multiple_content_types"}),
        )
        .await;
    let content = mixed["result"]["content"].as_array().unwrap();
    let types: Vec<&str> = content.iter().filter_map(|b| b["type"].as_str()).collect();
    assert_eq!(types, ["text", "image", "resource"], "{mixed}");
    assert_eq!(
        content[2]["resource"],
        json!({"uri": "test://mixed-content-resource", "mimeType": "application/json",
               "text": "{\"test\":\"data\",\"value\":123}"})
    );
}

/// The session's standalone stream (`GET /mcp`), where the server sends
/// what belongs to no request stream (log notifications, list changes).
async fn standalone_stream(c: &Client) -> Reply {
    let mut sender = c.connect().await;
    let mut b = Request::builder()
        .method("GET")
        .uri("/mcp")
        .header("host", &c.host)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2025-06-18");
    if let Some(session) = &c.session {
        b = b.header("mcp-session-id", session);
    }
    let response = tokio::time::timeout(
        WAIT,
        sender.send_request(b.body(Full::new(Bytes::new())).unwrap()),
    )
    .await
    .expect("no response in time")
    .unwrap();
    let (parts, body) = response.into_parts();
    assert_eq!(parts.status, StatusCode::OK);
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
        buf: String::new(),
    }
}

/// The `notifications/message` data on `stream` until the first
/// notification whose data is `until` (included).
async fn log_messages_until(stream: &mut Reply, until: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let m = stream.message().await;
        if m["method"] != "notifications/message" {
            continue;
        }
        let done = m["params"]["data"] == until;
        seen.push(m);
        if done {
            return seen;
        }
    }
}

#[tokio::test]
async fn http_tool_logs_become_log_notifications_once_the_client_sets_a_level() {
    let (s, _tools) = fixtures_server();
    let c = s.client().initialize(json!({})).await;
    let mut stream = standalone_stream(&c).await;
    // No level set: the call's records are not sent.
    let (_, done) = call_collecting(&c, 1, "test_tool_with_logging").await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    // At `error`, info records are not sent either.
    let set = c
        .rpc(2, "logging/setLevel", json!({"level": "error"}))
        .await;
    assert!(set.get("error").is_none(), "{set}");
    call_collecting(&c, 3, "test_tool_with_logging").await;
    c.rpc(4, "logging/setLevel", json!({"level": "info"})).await;
    // The first log notification of the session is the warning of this
    // failing call: nothing before reached the client.
    call_collecting(&c, 5, "test_error_handling").await;
    let first = log_messages_until(&mut stream, "Failing on purpose").await;
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0]["params"]["level"], "warning");
    call_collecting(&c, 6, "test_tool_with_logging").await;
    let logs = log_messages_until(&mut stream, "Tool execution completed").await;
    let messages: Vec<&Value> = logs.iter().map(|n| &n["params"]["data"]).collect();
    assert_eq!(
        messages,
        [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed"
        ],
        "{logs:?}"
    );
    assert!(logs.iter().all(
        |n| n["params"]["level"] == "info" && n["params"]["logger"] == "test_tool_with_logging"
    ));
}

/// A 2026-07-28 `tools/call` with `level` (if any) as its
/// `io.modelcontextprotocol/logLevel`: the messages on its stream before
/// its response, and the response.
async fn call_2026_collecting(
    s: &Server,
    id: u64,
    tool: &str,
    level: Option<&str>,
) -> (Vec<Value>, Value) {
    let mut meta = meta_2026(json!({}));
    if let Some(level) = level {
        meta["io.modelcontextprotocol/logLevel"] = json!(level);
    }
    let c = s
        .client()
        .with("mcp-protocol-version", "2026-07-28")
        .with("mcp-method", "tools/call")
        .with("mcp-name", tool);
    let reply = c
        .post(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {}, "_meta": meta}}))
        .await;
    until_response(reply, id).await
}

/// A 2026-07-28 request has no session to set a level on: it opts in to
/// its own call's log records in `_meta`, and they arrive on its stream
/// before the response, at or above the level asked; without it, none.
#[tokio::test]
async fn http_2026_requests_ask_for_their_log_records_in_meta() {
    let (s, _tools) = fixtures_server();
    let (notes, done) = call_2026_collecting(&s, 1, "test_tool_with_logging", None).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert!(notes.is_empty(), "{notes:?}");
    let (notes, _) = call_2026_collecting(&s, 2, "test_tool_with_logging", Some("error")).await;
    assert!(notes.is_empty(), "{notes:?}");
    let (notes, done) = call_2026_collecting(&s, 3, "test_tool_with_logging", Some("info")).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    let messages: Vec<&Value> = notes
        .iter()
        .filter(|n| n["method"] == "notifications/message")
        .map(|n| &n["params"]["data"])
        .collect();
    assert_eq!(
        messages,
        [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed"
        ],
        "{notes:?}"
    );
}

/// A 2026-07-28 request: no session, the lifecycle in `_meta`, the method in
/// `Mcp-Method`; its answer.
async fn rpc_2026(s: &Server, id: u64, method: &str, params: Value) -> Value {
    rpc_2026_with(s, id, method, params, json!({"elicitation": {}})).await
}

/// The `_meta` of a 2026-07-28 request from a client with `capabilities`.
fn meta_2026(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "http-test-2026", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

/// [`rpc_2026`] from a client with `capabilities`. `Mcp-Name` names the
/// tool of a call, the task of `tasks/*`.
async fn rpc_2026_with(
    s: &Server,
    id: u64,
    method: &str,
    mut params: Value,
    capabilities: Value,
) -> Value {
    params["_meta"] = meta_2026(capabilities);
    let c = s
        .client()
        .with("mcp-protocol-version", "2026-07-28")
        .with("mcp-method", method);
    let c = match params["name"].as_str().or(params["taskId"].as_str()) {
        Some(name) => c.with("mcp-name", name),
        None => c,
    };
    c.rpc(id, method, params).await
}

/// A 2026-07-28 request has no session to send `notifications/cancelled`
/// in: a client cancels it by closing its stream. Once the response has
/// begun (a progress notification: the body is running), closing the
/// connection stops the body, and the call ends `CANCELLED` long before
/// its 30 s sleep would have ended.
#[tokio::test]
async fn http_2026_closing_the_stream_cancels_the_call() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = Server::start(&[]);
    let c = s.client();
    let mut meta = meta_2026(json!({}));
    meta["progressToken"] = json!("p");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"ms": 30000}, "_meta": meta}})
    .to_string();
    // A connection of its own, so that dropping it closes the socket.
    let mut stream = tokio::net::TcpStream::connect(c.addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n\
         mcp-method: tools/call\r\nmcp-name: sleep\r\ncontent-length: {}\r\n\r\n{body}",
        c.host,
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&seen).contains("notifications/progress") {
        let n = tokio::time::timeout(WAIT, stream.read(&mut buf))
            .await
            .expect("no progress in time")
            .unwrap();
        assert!(
            n > 0,
            "the stream ended: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(seen.starts_with(b"HTTP/1.1 200"));
    drop(stream);
    // The call's events reach the log when it ends (its intent is lazy).
    let ended = s.events_when(|e| e.iter().any(|e| e["kind"] == "tool/result"));
    let result = ended
        .iter()
        .find(|e| e["kind"] == "tool/result")
        .expect("the call ended when its stream closed");
    assert_eq!(result["payload"]["error"]["code"], "CANCELLED", "{result}");
}

/// A client of the 2026-07-28 revision over HTTP (rmcp's stateless
/// lifecycle): `server/discover` and `tools/call` without `initialize`; an
/// `ask` comes back as an input-required result (see the `mrtr_` tests),
/// and nothing runs until a retry carries the answer.
#[tokio::test]
async fn http_2026_07_28_discover_and_call_without_initialize() {
    let policy_dir = crate::support::tempdir();
    let policy = policy_dir.path().join("policy.toml");
    std::fs::write(&policy, ASK_WRITES).unwrap();
    let s = Server::start(&["--policy", policy.to_str().unwrap()]);
    std::fs::write(s.ws.path().join("a.txt"), "hello 2026\n").unwrap();
    let discover = rpc_2026(&s, 1, "server/discover", json!({})).await;
    let versions = &discover["result"]["supportedVersions"];
    assert!(
        versions
            .as_array()
            .is_some_and(|v| v.contains(&json!("2026-07-28")) && v.contains(&json!("2025-11-25"))),
        "{discover}"
    );
    assert!(
        discover["result"]["capabilities"]["tools"].is_object(),
        "{discover}"
    );
    let read = rpc_2026(
        &s,
        2,
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "a.txt"}}),
    )
    .await;
    assert_eq!(read["result"]["isError"], false, "{read}");
    let write = rpc_2026(
        &s,
        3,
        "tools/call",
        json!({"name": "write_file", "arguments": {"path": "b.txt", "content": "x"}}),
    )
    .await;
    assert_eq!(write["result"]["resultType"], "input_required", "{write}");
    assert!(!s.ws.path().join("b.txt").exists());
}

// --- approvals of 2026-07-28 clients: multi-round-trip requests ---

fn write_args() -> Value {
    json!({"path": "b.txt", "content": "approved\n"})
}

/// A server whose policy asks about every `write_file`.
fn ask_server(extra: &[&str]) -> (Server, tempfile::TempDir) {
    let policy_dir = crate::support::tempdir();
    let policy = policy_dir.path().join("policy.toml");
    std::fs::write(&policy, ASK_WRITES).unwrap();
    let mut args = vec!["--policy", policy.to_str().unwrap()];
    args.extend_from_slice(extra);
    (Server::start(&args), policy_dir)
}

/// The first round of a `write_file` call: the input-required result, whose
/// state is returned.
async fn ask_for_write(s: &Server, id: u64) -> String {
    let first = rpc_2026(
        s,
        id,
        "tools/call",
        json!({"name": "write_file", "arguments": write_args()}),
    )
    .await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    assert_eq!(
        result["inputRequests"]["approval"]["method"], "elicitation/create",
        "{first}"
    );
    let message = result["inputRequests"]["approval"]["params"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("write_file") && message.contains("writes need a human"),
        "{first}"
    );
    assert!(!s.ws.path().join("b.txt").exists(), "ran before an answer");
    result["requestState"].as_str().unwrap().to_string()
}

/// The retry: the same call with an answer and a state.
async fn retry(s: &Server, id: u64, args: Value, answer: Value, state: &str) -> Value {
    let r = rpc_2026(
        s,
        id,
        "tools/call",
        json!({"name": "write_file", "arguments": args,
               "inputResponses": {"approval": answer}, "requestState": state}),
    )
    .await;
    r["result"].clone()
}

fn approve() -> Value {
    json!({"action": "accept", "content": {"approve": true}})
}

fn code(result: &Value) -> Value {
    result["_meta"]["toolhost"]["code"].clone()
}

/// The events of `call_id`, in order.
fn events_of<'a>(events: &'a [Value], call_id: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["call_id"] == call_id).collect()
}

/// With an approver outside the client (`--approver` other than `none`),
/// a 2026-07-28 client that elicits is not asked through an input-required
/// result: the configured approver decides (here it rejects).
#[tokio::test]
async fn mrtr_clients_are_not_asked_when_an_approver_is_configured() {
    let (s, _policy) = ask_server(&["--approver", "auto-reject"]);
    let answer = rpc_2026(
        &s,
        1,
        "tools/call",
        json!({"name": "write_file", "arguments": write_args()}),
    )
    .await;
    let result = &answer["result"];
    assert_ne!(result["resultType"], "input_required", "{answer}");
    assert_eq!(code(result), "APPROVAL_REJECTED", "{answer}");
    assert!(!s.ws.path().join("b.txt").exists());
}

/// Approve: the retry runs, and its `approval/decided` (with the state's
/// use) precedes its intent. Replayed (with the same answer) it is refused,
/// in the same process and after a SIGKILL and restart on the same state,
/// and nothing runs again.
#[tokio::test]
async fn mrtr_approval_runs_once_and_a_replay_is_refused_across_restart() {
    let (mut s, _policy) = ask_server(&[]);
    let state = ask_for_write(&s, 1).await;
    let done = retry(&s, 2, write_args(), approve(), &state).await;
    assert_eq!(done["isError"], false, "{done}");
    let path = s.ws.path().join("b.txt");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "approved\n");
    let call_id = done["_meta"]["toolhost"]["call_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(call_id.ends_with("-mrtr"), "{done}");

    std::fs::remove_file(&path).unwrap();
    let again = retry(&s, 3, write_args(), approve(), &state).await;
    assert_eq!(code(&again), "APPROVAL_STATE_REPLAYED", "{again}");
    assert!(!path.exists(), "a replayed state ran the tool");
    let replays = |events: &[Value]| {
        events
            .iter()
            .filter(|e| {
                e["kind"] == "tool/result"
                    && e["payload"]["error"]["code"] == "APPROVAL_STATE_REPLAYED"
            })
            .count()
    };
    // The refusal is committed lazily (within the server's flush window):
    // a SIGKILL before that would lose it, as docs/design/durability.md says.
    assert_eq!(replays(&s.events_when(|e| replays(e) >= 1)), 1);

    s.kill_and_restart(&[
        "--policy",
        _policy.path().join("policy.toml").to_str().unwrap(),
    ]);
    let after = retry(&s, 4, write_args(), approve(), &state).await;
    assert_eq!(code(&after), "APPROVAL_STATE_REPLAYED", "{after}");
    assert!(
        !path.exists(),
        "a replayed state ran the tool after a restart"
    );

    let events = s.events_when(|e| replays(e) >= 2);
    let retried = events_of(&events, &call_id);
    let kinds: Vec<&str> = retried.iter().filter_map(|e| e["kind"].as_str()).collect();
    let decided = kinds.iter().position(|k| *k == "approval/decided");
    let intent = kinds.iter().position(|k| *k == "tool/intent");
    assert!(
        matches!((decided, intent), (Some(d), Some(i)) if d < i),
        "{kinds:?}"
    );
    let decided = retried[decided.unwrap()];
    assert_eq!(decided["payload"]["outcome"], "allowed-once", "{decided}");
    assert_eq!(
        decided["payload"]["single_use"]["kind"], "mcp-request-state",
        "{decided}"
    );
    // Both replays were logged as refusals.
    assert_eq!(replays(&events), 2, "{events:?}");
}

/// Reject: the call is refused and its use is durable at once, so that a
/// replay of the state with another answer ("approve", after a SIGKILL
/// that flushed nothing) is refused too.
#[tokio::test]
async fn mrtr_rejection_is_durable_and_cannot_be_turned_into_approval() {
    let (mut s, policy) = ask_server(&[]);
    let state = ask_for_write(&s, 1).await;
    let no = retry(&s, 2, write_args(), json!({"action": "decline"}), &state).await;
    assert_eq!(code(&no), "APPROVAL_REJECTED", "{no}");
    s.kill_and_restart(&[
        "--policy",
        policy.path().join("policy.toml").to_str().unwrap(),
    ]);
    let yes = retry(&s, 3, write_args(), approve(), &state).await;
    assert_eq!(code(&yes), "APPROVAL_STATE_REPLAYED", "{yes}");
    assert!(!s.ws.path().join("b.txt").exists());
}

/// Altered, foreign-argument, other-tool and expired states are refused
/// with their codes, logged, and nothing runs; the state itself stays
/// good for its own call.
#[tokio::test]
async fn mrtr_altered_mismatched_and_expired_states_are_refused() {
    let (s, _policy) = ask_server(&[]);
    let state = ask_for_write(&s, 1).await;
    let mut altered = state.clone().into_bytes();
    let i = altered.len() - 3;
    altered[i] = if altered[i] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    let r = retry(&s, 2, write_args(), approve(), &altered).await;
    assert_eq!(code(&r), "APPROVAL_STATE_INVALID", "{r}");
    let r = retry(&s, 3, write_args(), approve(), "not-a-state").await;
    assert_eq!(code(&r), "APPROVAL_STATE_INVALID", "{r}");
    let other = json!({"path": "other.txt", "content": "approved\n"});
    let r = retry(&s, 4, other, approve(), &state).await;
    assert_eq!(code(&r), "APPROVAL_STATE_MISMATCH", "{r}");
    assert!(!s.ws.path().join("other.txt").exists());
    std::fs::write(s.ws.path().join("a.txt"), "x").unwrap();
    let r = rpc_2026(
        &s,
        5,
        "tools/call",
        json!({"name": "read_file", "arguments": write_args(),
               "inputResponses": {"approval": approve()}, "requestState": state}),
    )
    .await;
    assert_eq!(code(&r["result"]), "APPROVAL_STATE_MISMATCH", "{r}");
    assert!(!s.ws.path().join("b.txt").exists());
    // Refusals are results in the log.
    let logged = |events: &[Value], c: &str| {
        events
            .iter()
            .any(|e| e["kind"] == "tool/result" && e["payload"]["error"]["code"] == c)
    };
    let events = s.events_when(|e| {
        logged(e, "APPROVAL_STATE_INVALID") && logged(e, "APPROVAL_STATE_MISMATCH")
    });
    for c in ["APPROVAL_STATE_INVALID", "APPROVAL_STATE_MISMATCH"] {
        assert!(
            events
                .iter()
                .any(|e| e["kind"] == "tool/result" && e["payload"]["error"]["code"] == c),
            "{c} not logged"
        );
    }
    // None of that used the state.
    let ok = retry(&s, 6, write_args(), approve(), &state).await;
    assert_eq!(ok["isError"], false, "{ok}");

    // A state past its expiry (a TTL of zero: expired one millisecond
    // after it was issued).
    let (s, _policy) = ask_server(&["--approval-state-ttl", "0"]);
    let state = ask_for_write(&s, 1).await;
    let issued = std::time::Instant::now();
    while issued.elapsed() < Duration::from_millis(2) {
        std::thread::yield_now();
    }
    let r = retry(&s, 2, write_args(), approve(), &state).await;
    assert_eq!(code(&r), "APPROVAL_STATE_EXPIRED", "{r}");
    assert!(!s.ws.path().join("b.txt").exists());
}

/// The key is created once in the state directory, private, and kept
/// across restarts: a state issued before a restart still verifies after.
#[tokio::test]
async fn mrtr_key_is_private_and_survives_a_restart() {
    let (mut s, policy) = ask_server(&[]);
    let state = ask_for_write(&s, 1).await;
    let key = s.state.path().join("mcp-approval.key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let before = std::fs::read(&key).unwrap();
    s.kill_and_restart(&[
        "--policy",
        policy.path().join("policy.toml").to_str().unwrap(),
    ]);
    let done = retry(&s, 2, write_args(), approve(), &state).await;
    assert_eq!(done["isError"], false, "{done}");
    assert_eq!(std::fs::read(&key).unwrap(), before);
}

/// A 2025-11-25 session client keeps its elicitation approvals: no
/// input-required result reaches it.
#[tokio::test]
async fn mrtr_is_not_offered_to_a_2025_session() {
    let (s, _policy) = ask_server(&[]);
    let c = s.client().initialize(json!({})).await;
    let r = c
        .rpc(
            1,
            "tools/call",
            json!({"name": "write_file", "arguments": write_args()}),
        )
        .await;
    assert!(r["result"]["resultType"].is_null(), "{r}");
    assert_eq!(code(&r["result"]), "APPROVAL_UNAVAILABLE", "{r}");
}

// --- tasks (the io.modelcontextprotocol/tasks extension) ---

/// A 2026-07-28 request that declares the tasks extension.
async fn rpc_tasks(s: &Server, id: u64, method: &str, params: Value) -> Value {
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    rpc_2026_with(s, id, method, params, tasks).await
}

/// Polls `tasks/get` (as the extension asks clients to) until the task is
/// no longer working; bounded by [`WAIT`].
async fn poll_task(s: &Server, id: &str) -> Value {
    let deadline = std::time::Instant::now() + WAIT;
    let mut n = 1000;
    loop {
        n += 1;
        let got = rpc_tasks(s, n, "tasks/get", json!({"taskId": id})).await;
        if got["result"]["status"] != "working" {
            return got["result"].clone();
        }
        assert!(std::time::Instant::now() < deadline, "{got}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A call from a client that declares tasks returns a task handle; the
/// task completes with the call's result, which `tasks/get` returns; a
/// refusal is a completed task whose result has the code.
#[tokio::test]
async fn tasks_complete_with_the_calls_result() {
    let s = Server::start(&[]);
    std::fs::write(s.ws.path().join("a.txt"), "task text\n").unwrap();
    let discover = rpc_tasks(&s, 1, "server/discover", json!({})).await;
    assert!(
        discover["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"]
            .is_object(),
        "{discover}"
    );
    let started = rpc_tasks(
        &s,
        2,
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "a.txt"}}),
    )
    .await;
    assert_eq!(started["result"]["resultType"], "task", "{started}");
    let id = started["result"]["taskId"].as_str().unwrap().to_string();
    let done = poll_task(&s, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("task text")),
        "{done}"
    );
    assert_eq!(done["result"]["_meta"]["toolhost"]["call_id"], id.as_str());

    let refused = rpc_tasks(
        &s,
        3,
        "tools/call",
        json!({"name": "read_file", "arguments": {"nope": 1}}),
    )
    .await;
    let id = refused["result"]["taskId"].as_str().unwrap().to_string();
    let done = poll_task(&s, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["_meta"]["toolhost"]["code"], "INVALID_ARGS",
        "{done}"
    );

    // An unknown task is an error, not a guess.
    let unknown = rpc_tasks(&s, 4, "tasks/get", json!({"taskId": "call-nope-1"})).await;
    assert!(unknown["error"].is_object(), "{unknown}");
}

/// A task whose intent was durable when the server was killed (SIGKILL,
/// paused right after the intent commit) reports TOOL_OUTCOME_UNKNOWN
/// after a restart on the same state, and its body is not run again.
#[tokio::test]
async fn tasks_after_a_restart_report_tool_outcome_unknown() {
    let dir = crate::support::tempdir();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "version = 1\nmode = \"workspace-write\"\n").unwrap();
    let args = ["--policy", policy.to_str().unwrap()];
    // The first server pauses every call right after its intent is durable.
    let mut s = Server::start_with(&args, &[("TOOLHOST_TEST_PAUSE_AT", "after-intent")]);
    let started = rpc_tasks(
        &s,
        1,
        "tools/call",
        json!({"name": "write_file", "arguments": {"path": "t.txt", "content": "x"}}),
    )
    .await;
    assert_eq!(started["result"]["resultType"], "task", "{started}");
    assert_eq!(started["result"]["status"], "working", "{started}");
    let id = started["result"]["taskId"].as_str().unwrap().to_string();
    loop {
        let line = s.stderr.recv_timeout(WAIT).expect("the call did not pause");
        if line.contains("toolhost-paused:after-intent") {
            break;
        }
    }
    s.kill_and_restart(&args);
    let got = rpc_tasks(&s, 2, "tasks/get", json!({"taskId": id})).await;
    let task = &got["result"];
    assert_eq!(task["status"], "completed", "{got}");
    assert_eq!(task["result"]["isError"], true, "{got}");
    assert_eq!(
        task["result"]["_meta"]["toolhost"]["code"], "TOOL_OUTCOME_UNKNOWN",
        "{got}"
    );
    assert!(!s.ws.path().join("t.txt").exists(), "the body ran");
    // Asked again, the same answer (the log's, not a re-run).
    let again = rpc_tasks(&s, 3, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(again["result"]["result"], task["result"], "{again}");
    assert!(!s.ws.path().join("t.txt").exists(), "the body ran");
    let results = s
        .events()
        .iter()
        .filter(|e| e["call_id"] == id.as_str() && e["kind"] == "tool/result")
        .count();
    assert_eq!(results, 1);
}

/// A running task reports the tool's progress through `tasks/get`, and
/// `tasks/cancel` interrupts its body: the task completes with `CANCELLED`.
#[tokio::test]
async fn tasks_report_progress_and_cancel() {
    let s = Server::start(&[]);
    let started = rpc_tasks(
        &s,
        1,
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 600_000}}),
    )
    .await;
    let id = started["result"]["taskId"].as_str().unwrap().to_string();
    // The sleep tool reports progress about every 100 ms: poll (bounded)
    // until a report shows.
    let deadline = std::time::Instant::now() + WAIT;
    let mut n = 10;
    loop {
        n += 1;
        let got = rpc_tasks(&s, n, "tasks/get", json!({"taskId": id})).await;
        assert_eq!(got["result"]["status"], "working", "{got}");
        if got["result"]["statusMessage"]
            .as_str()
            .is_some_and(|m| m.ends_with("/600000"))
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no progress: {got}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ack = rpc_tasks(&s, 2, "tasks/cancel", json!({"taskId": id})).await;
    assert!(ack["result"].is_object(), "{ack}");
    let done = poll_task(&s, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["_meta"]["toolhost"]["code"], "CANCELLED",
        "{done}"
    );
}
