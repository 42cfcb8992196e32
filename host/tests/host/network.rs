//! Governed network egress (DESIGN.md §2b) through the embedded `http_fetch`
//! tool, against HTTP servers this test starts on loopback addresses
//! (127.0.0.1 and 127.0.0.2): allowed GET and POST, refusals by host,
//! method and port, no grant at all, credentials attached only to their
//! host and never recorded, redirects not followed, `ask` grants, per-call
//! limits, and hostile spellings of refused addresses.
//!
//! Each server counts the connections it accepts: a refusal means zero.
//! Only loopback addresses are ever contacted: every other address in these
//! tests is refused before any connection.

use crate::support::{builder_with, runtime_options_with_pool, tempdir};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use toolhost::policy::Policy;
use toolhost::policy::egress::StaticResolver;
use toolhost::{
    ApprovalOutcome, ApprovalRequest, Approver, BoxFuture, CallRequest, CallResult, ErrorCode,
    Host, SandboxMode,
};

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

type Respond = dyn Fn(&Seen) -> Vec<u8> + Send + Sync;

/// A tiny HTTP/1.1 server on a loopback address: one thread, one request
/// per connection, answers with `respond`. Counts connections.
struct Server {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

impl Server {
    fn start(ip: &str, respond: Box<Respond>) -> Server {
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s, st) = (connections.clone(), seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                c.fetch_add(1, Ordering::SeqCst);
                if let Some(req) = read_request(&stream) {
                    let answer = respond(&req);
                    s.lock().unwrap().push(req);
                    let mut stream = stream;
                    let _ = stream.write_all(&answer);
                    let _ = stream.flush();
                }
            }
        });
        Server {
            addr,
            connections,
            seen,
            stop,
        }
    }

    /// A server answering every request with `200` and `body`.
    fn ok(ip: &str, body: &'static str) -> Server {
        Server::start(ip, Box::new(move |_| response(200, &[], body.as_bytes())))
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn read_request(stream: &TcpStream) -> Option<Seen> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    Some(Seen {
        method,
        target,
        headers,
        body,
    })
}

fn response(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// A server that answers with the request's headers, one per line (as a
/// server that echoes a credential back would).
fn echo_headers(ip: &str) -> Server {
    Server::start(
        ip,
        Box::new(|req| {
            let text: String = req
                .headers
                .iter()
                .map(|(k, v)| format!("{}: {v}\n", k.to_ascii_lowercase()))
                .collect();
            response(200, &[], text.as_bytes())
        }),
    )
}

async fn host(policy: &str) -> (tempfile::TempDir, Host) {
    host_with(policy, |_| {}).await
}

async fn host_with(
    policy: &str,
    configure: impl FnOnce(&mut toolhost::HostBuilder),
) -> (tempfile::TempDir, Host) {
    let ws = tempdir();
    let mut b = builder_with(ws.path(), runtime_options_with_pool(8));
    b.policy(Policy::from_toml(policy, "test.toml").unwrap());
    configure(&mut b);
    let host = b.build().await.unwrap();
    (ws, host)
}

/// Why a host over `ws` with `policy` does not build (it must not).
async fn build_error(ws: &std::path::Path, policy: &str) -> String {
    let mut b = builder_with(ws, runtime_options_with_pool(2));
    b.policy(Policy::from_toml(policy, "test.toml").unwrap());
    b.build().await.unwrap_err().to_string()
}

async fn fetch(host: &Host, args: Value) -> CallResult {
    host.call(CallRequest::new("http_fetch", args).mode(SandboxMode::None))
        .await
}

/// The tool's error code (wasi:http's, as `http_fetch` reports it).
fn tool_error(r: &CallResult) -> String {
    assert_eq!(r.code(), Some(ErrorCode::ToolError), "{r:?}");
    r.error.as_ref().unwrap().message.clone()
}

fn record_codes(r: &CallResult) -> Vec<String> {
    r.receipt
        .network
        .iter()
        .map(|n| {
            serde_json::to_value(n).unwrap()["code"]
                .as_str()
                .unwrap_or("allowed")
                .to_string()
        })
        .collect()
}

fn grant_policy(grants: &str) -> String {
    format!("version = 1\ndefault = \"allow\"\n\n[network]\nallow = [{grants}]\n")
}

/// A body that is not valid UTF-8 comes to the model as text, each
/// invalid sequence replaced (U+FFFD), the valid text around it whole.
#[tokio::test]
async fn a_body_not_in_utf8_comes_as_text_with_its_invalid_bytes_replaced() {
    let server = Server::start(
        "127.0.0.1",
        Box::new(|req| match req.target.as_str() {
            "/valid" => response(200, &[], "caf\u{e9} \u{1f600}".as_bytes()),
            _ => response(200, &[], b"caf\xe9 \xf0\x9f\x98 ok"),
        }),
    );
    let (_ws, host) = host(&grant_policy(&format!(
        "\"http://127.0.0.1:{}\"",
        server.port()
    )))
    .await;
    let r = fetch(&host, json!({"url": server.url("/valid")})).await;
    assert_eq!(r.canonical["body"], "caf\u{e9} \u{1f600}", "{r:?}");
    let r = fetch(&host, json!({"url": server.url("/invalid")})).await;
    assert_eq!(r.canonical["body"], "caf\u{fffd} \u{fffd} ok", "{r:?}");
}

#[tokio::test]
async fn a_granted_get_and_post_reach_the_server_and_are_recorded() {
    let server = Server::start(
        "127.0.0.1",
        Box::new(|req| {
            let body = format!(
                "{} {} {}",
                req.method,
                req.target,
                String::from_utf8_lossy(&req.body)
            );
            response(200, &[("Content-Type", "text/plain")], body.as_bytes())
        }),
    );
    let (_ws, host) = host(&grant_policy(&format!(
        "\"http://127.0.0.1:{}\"",
        server.port()
    )))
    .await;

    let r = fetch(&host, json!({"url": server.url("/items?key=secret-query")})).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.canonical["status"], 200);
    assert_eq!(r.canonical["body"], "GET /items?key=secret-query ");
    assert_eq!(r.canonical["headers"]["content-type"], "text/plain");
    let rec = serde_json::to_value(&r.receipt.network).unwrap();
    assert_eq!(rec.as_array().unwrap().len(), 1, "{rec}");
    assert_eq!(rec[0]["method"], "GET");
    assert_eq!(rec[0]["decision"], "allowed");
    assert_eq!(rec[0]["status"], 200);
    assert_eq!(
        rec[0]["url"],
        format!("http://127.0.0.1:{}/items", server.port()),
        "the record's URL has no query"
    );
    assert_eq!(rec[0]["bytes_in"], 28);
    assert!(
        rec[0].get("error").is_none(),
        "a request that ended well: {rec}"
    );
    assert!(r.receipt.denied.is_empty(), "{:?}", r.receipt.denied);

    let r = fetch(
        &host,
        json!({"url": server.url("/submit"), "method": "POST", "body": "hello=1",
               "headers": {"content-type": "application/x-www-form-urlencoded"}}),
    )
    .await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.canonical["body"], "POST /submit hello=1");
    let rec = serde_json::to_value(&r.receipt.network).unwrap();
    assert_eq!(rec[0]["method"], "POST");
    assert_eq!(rec[0]["bytes_out"], 7);
    assert_eq!(server.connections(), 2);
    let seen = server.seen();
    assert_eq!(
        seen[1].header("host"),
        Some(format!("127.0.0.1:{}", server.port()).as_str())
    );

    // The intent names what the call may reach, and the result event
    // carries the records.
    let events = host.log().events_for_call(&r.call_id).unwrap();
    let intent = events
        .iter()
        .find(|e| e.kind == toolhost::log::EventKind::ToolIntent)
        .unwrap();
    assert_eq!(
        intent.payload["network"],
        json!([format!("http://127.0.0.1:{}", server.port())])
    );
    let result = events
        .iter()
        .find(|e| e.kind == toolhost::log::EventKind::ToolResult)
        .unwrap();
    assert_eq!(result.payload["receipt"]["network"][0]["status"], 200);
}

/// A request is the same exchange wherever its call runs (in a multi-thread
/// runtime's `block_on` or in a runtime task), with a body or without:
/// the same records, one connection each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_the_same_exchange_wherever_its_call_runs() {
    let server = Server::start(
        "127.0.0.1",
        Box::new(|req| {
            let body = format!("{} {}", req.method, String::from_utf8_lossy(&req.body));
            response(200, &[("Content-Type", "text/plain")], body.as_bytes())
        }),
    );
    let (_ws, host) = host(&grant_policy(&format!(
        "\"http://127.0.0.1:{}\"",
        server.port()
    )))
    .await;
    let host = Arc::new(host);
    let get = json!({"url": server.url("/a")});
    let post = json!({"url": server.url("/b"), "method": "POST", "body": "hello"});
    let check = |r: &CallResult, body: &str, bytes_out: u64| {
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(r.canonical["body"], body, "{r:?}");
        let rec = &r.receipt.network;
        assert_eq!(rec.len(), 1, "{rec:?}");
        assert_eq!(rec[0].status, Some(200));
        assert_eq!(rec[0].bytes_in, body.len() as u64);
        assert_eq!(rec[0].bytes_out, bytes_out);
    };
    // In the test's `block_on`.
    check(&fetch(&host, get.clone()).await, "GET ", 0);
    check(&fetch(&host, post.clone()).await, "POST hello", 5);
    // In a runtime task.
    let in_task = {
        let host = host.clone();
        tokio::spawn(async move { (fetch(&host, get).await, fetch(&host, post).await) })
            .await
            .unwrap()
    };
    check(&in_task.0, "GET ", 0);
    check(&in_task.1, "POST hello", 5);
    assert_eq!(server.connections(), 4);
}

#[tokio::test]
async fn without_a_grant_every_mode_is_refused_inside_the_guest() {
    let server = Server::ok("127.0.0.1", "never");
    // A policy without [network], and one in danger-full-access: no mode
    // implies a grant.
    for policy in [
        "version = 1\ndefault = \"allow\"\n",
        "version = 1\npreset = \"danger-full-access\"\ndefault = \"allow\"\n",
    ] {
        let (_ws, host) = host(policy).await;
        for mode in [SandboxMode::None, SandboxMode::DangerFullAccess] {
            let r = host
                .call(CallRequest::new("http_fetch", json!({"url": server.url("/")})).mode(mode))
                .await;
            let msg = tool_error(&r);
            assert!(msg.starts_with("HTTP-request-denied"), "{mode}: {msg}");
            assert_eq!(record_codes(&r), ["network_off"], "{mode}");
            assert!(
                r.receipt
                    .denied
                    .iter()
                    .any(|d| d.starts_with("network: GET ")),
                "{:?}",
                r.receipt.denied
            );
        }
    }
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn refused_host_method_and_port_never_connect() {
    let granted = Server::ok("127.0.0.1", "granted");
    let other_port = Server::ok("127.0.0.1", "other port");
    let other_host = Server::ok("127.0.0.2", "other host");
    let policy = grant_policy(&format!(
        "{{ url = \"http://127.0.0.1:{}\", methods = [\"GET\"] }}",
        granted.port()
    ));
    let (_ws, host) = host(&policy).await;

    let r = fetch(
        &host,
        json!({"url": granted.url("/"), "method": "POST", "body": "x"}),
    )
    .await;
    assert!(tool_error(&r).starts_with("HTTP-request-denied"), "{r:?}");
    assert_eq!(record_codes(&r), ["method_not_granted"]);

    let r = fetch(&host, json!({"url": other_port.url("/")})).await;
    assert!(tool_error(&r).starts_with("HTTP-request-denied"), "{r:?}");
    assert_eq!(record_codes(&r), ["port_not_granted"]);

    // Another loopback address: refused as an address, before any lookup.
    let r = fetch(&host, json!({"url": other_host.url("/")})).await;
    assert!(
        tool_error(&r).starts_with("destination-IP-prohibited"),
        "{r:?}"
    );
    assert_eq!(record_codes(&r), ["address_refused"]);

    // A name is not the address it might resolve to.
    let r = fetch(
        &host,
        json!({"url": format!("http://localhost:{}/", granted.port())}),
    )
    .await;
    assert!(tool_error(&r).starts_with("HTTP-request-denied"), "{r:?}");
    assert_eq!(record_codes(&r), ["host_not_granted"]);

    // https to a host granted for http only.
    let r = fetch(
        &host,
        json!({"url": format!("https://127.0.0.1:{}/", granted.port())}),
    )
    .await;
    assert!(tool_error(&r).starts_with("HTTP-request-denied"), "{r:?}");
    assert_eq!(record_codes(&r), ["scheme_not_granted"]);

    assert_eq!(granted.connections(), 0);
    assert_eq!(other_port.connections(), 0);
    assert_eq!(other_host.connections(), 0);

    // The granted request itself goes through.
    let r = fetch(&host, json!({"url": granted.url("/")})).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(granted.connections(), 1);
}

const SECRET: &str = "sk-test-8f2e1c9a7b6d5e4f";

#[tokio::test]
async fn a_credential_goes_only_to_its_host_and_is_never_recorded() {
    let with = echo_headers("127.0.0.1");
    let without = echo_headers("127.0.0.2");
    // The same host on another port: another service, another origin.
    let other_port = echo_headers("127.0.0.1");
    let dir = tempdir();
    let secret_file = dir.path().join("token");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let policy = format!(
        r#"version = 1
default = "allow"

[network]
allow = ["http://127.0.0.1:{}", "http://127.0.0.2:{}", "http://127.0.0.1:{}"]

[[credentials]]
host = "127.0.0.1"
scheme = "http"
port = {}
header = "Authorization"
value_file = "{}"
prefix = "Bearer "
"#,
        with.port(),
        without.port(),
        other_port.port(),
        with.port(),
        secret_file.display()
    );
    let (_ws, host) = host(&policy).await;

    // The guest's own Authorization header to that host is replaced.
    let r = fetch(
        &host,
        json!({"url": with.url("/whoami"), "headers": {"authorization": "Bearer guest-made"}}),
    )
    .await;
    assert!(r.is_ok(), "{r:?}");
    let seen = with.seen();
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {SECRET}").as_str())
    );
    assert_eq!(
        seen[0]
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("authorization"))
            .count(),
        1
    );
    // The server echoed it; the guest read it masked.
    let text = serde_json::to_string(&r).unwrap();
    assert!(!text.contains(SECRET), "{text}");
    assert!(
        r.canonical["body"].as_str().unwrap().contains(&format!(
            "authorization: Bearer {}",
            "*".repeat(SECRET.len())
        )),
        "{r:?}"
    );

    let r2 = fetch(&host, json!({"url": without.url("/whoami")})).await;
    assert!(r2.is_ok(), "{r2:?}");
    assert_eq!(without.seen()[0].header("authorization"), None);
    let r3 = fetch(&host, json!({"url": other_port.url("/whoami")})).await;
    assert!(r3.is_ok(), "{r3:?}");
    assert_eq!(other_port.seen()[0].header("authorization"), None);

    // Not in the session log (intents, results), not in any Debug output.
    let events = host.log().events().unwrap();
    let log = serde_json::to_string(&events).unwrap();
    assert!(!log.contains(SECRET), "the secret is in the session log");
    assert!(!log.contains("sk-test"), "part of the secret is in the log");
    assert!(!format!("{host:?} {r:?} {r2:?}").contains(SECRET));
}

/// The content cap never leaves part of a credential: the secret is
/// redacted before the policy cuts the content, so a cut that falls inside
/// it keeps no prefix of it. (A server's echo is masked before a tool
/// reads it; here the secret reaches the tool another way, in a file of
/// the workspace that `read_file` returns whole.)
#[tokio::test]
async fn the_content_cap_never_cuts_a_credential_in_two() {
    let dir = tempdir();
    let secret_file = dir.path().join("token");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let policy = |cap: Option<usize>| {
        format!(
            "version = 1\ndefault = \"allow\"\n{}\n[network]\nallow = [\"https://api.example.com\"]\n\n\
             [[credentials]]\nhost = \"api.example.com\"\nheader = \"Authorization\"\nvalue_file = \"{}\"\nprefix = \"Bearer \"\n",
            cap.map(|c| format!("[post_execute]\nmax_content_chars = {c}\n"))
                .unwrap_or_default(),
            secret_file.display()
        )
    };
    let leaked = format!("config dump\nauthorization: Bearer {SECRET}\nmore lines after it\n");
    let read =
        || CallRequest::new("read_file", json!({"path": "leaked.txt"})).mode(SandboxMode::ReadOnly);
    // Where the secret starts in the content the model reads.
    let (ws1, uncapped) = host(&policy(None)).await;
    std::fs::write(ws1.path().join("leaked.txt"), &leaked).unwrap();
    let r = uncapped.call(read()).await;
    assert!(r.is_ok(), "{r:?}");
    let text = r.content[0].as_text().to_string();
    assert!(!text.contains(SECRET), "{text}");
    let at = text.find("[REDACTED]").expect("the secret, redacted");
    let at = text[..at].chars().count();
    // A cap that falls six characters into it.
    let (ws2, capped) = host(&policy(Some(at + 6))).await;
    std::fs::write(ws2.path().join("leaked.txt"), &leaked).unwrap();
    let r = capped.call(read()).await;
    assert!(r.is_ok(), "{r:?}");
    let text = r.content[0].as_text();
    assert!(text.contains("characters cut by policy"), "{text}");
    assert!(!text.contains(&SECRET[..6]), "{text}");
    let log = serde_json::to_string(&capped.log().events().unwrap()).unwrap();
    assert!(
        !log.contains(&SECRET[..6]),
        "part of the secret is in the log"
    );
}

/// A server that echoes the credential (in a header, and in a body whose
/// chunks cut it in two) never shows it to the guest: the host masks it
/// before the guest reads, so a tool that cuts the body inside the secret
/// (`max_body_bytes`, chosen by the model) passes on no part of it.
#[tokio::test]
async fn an_echoed_credential_is_masked_before_the_guest_reads_it() {
    let echo = Server::start(
        "127.0.0.1",
        Box::new(|req| {
            let value = req.header("authorization").unwrap_or("").to_string();
            let (head, tail) = value.split_at(value.len().min(15));
            let (first, second) = (format!("body: {head}"), format!("{tail} end"));
            format!(
                "HTTP/1.1 200 X\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\
                 X-Echo: {value}\r\n\r\n{:x}\r\n{first}\r\n{:x}\r\n{second}\r\n0\r\n\r\n",
                first.len(),
                second.len()
            )
            .into_bytes()
        }),
    );
    let dir = tempdir();
    let secret_file = dir.path().join("token");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let policy = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"http://127.0.0.1:{port}\"]\n\n\
         [[credentials]]\nhost = \"127.0.0.1\"\nscheme = \"http\"\nport = {port}\nheader = \"Authorization\"\nvalue_file = \"{}\"\nprefix = \"Bearer \"\n",
        secret_file.display(),
        port = echo.port(),
    );
    let (_ws, host) = host(&policy).await;
    let masked = "*".repeat(SECRET.len());
    let r = fetch(
        &host,
        json!({"url": echo.url("/"), "response_headers": ["x-echo"]}),
    )
    .await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(
        echo.seen()[0].header("authorization"),
        Some(format!("Bearer {SECRET}").as_str()),
        "the server got the credential"
    );
    assert_eq!(r.canonical["headers"]["x-echo"], format!("Bearer {masked}"));
    assert_eq!(r.canonical["body"], format!("body: Bearer {masked} end"));
    // Cut one byte before the secret's end: nothing of it is left.
    let cut = "body: Bearer ".len() + SECRET.len() - 1;
    let r = fetch(&host, json!({"url": echo.url("/"), "max_body_bytes": cut})).await;
    assert!(r.is_ok(), "{r:?}");
    let everything = serde_json::to_string(&r).unwrap();
    assert!(!everything.contains(&SECRET[..4]), "{everything}");
    assert!(
        r.canonical["body"]
            .as_str()
            .is_some_and(|b| b.starts_with("body: Bearer ****")),
        "{r:?}"
    );
}

/// A request that carries a credential asks for its response whole and
/// uncompressed, whatever the guest asked (compression or a range could
/// hide an echo of the secret from the mask); a compressed response to it
/// is refused (`HTTP-response-content-coding`). A request to another host
/// keeps the guest's headers.
#[tokio::test]
async fn a_credentialed_request_asks_for_its_response_whole_and_uncompressed() {
    let compressing = Server::start(
        "127.0.0.1",
        Box::new(|_| response(200, &[("Content-Encoding", "gzip")], b"\x1f\x8b")),
    );
    let plain = echo_headers("127.0.0.2");
    let dir = tempdir();
    let secret_file = dir.path().join("token");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let policy = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"http://127.0.0.1:{port}\", \"http://127.0.0.2:{other}\"]\n\n\
         [[credentials]]\nhost = \"127.0.0.1\"\nscheme = \"http\"\nport = {port}\nheader = \"Authorization\"\nvalue_file = \"{}\"\n",
        secret_file.display(),
        port = compressing.port(),
        other = plain.port(),
    );
    let (_ws, host) = host(&policy).await;
    let asked = json!({"accept-encoding": "gzip, br", "range": "bytes=0-5", "if-range": "\"e1\"", "te": "gzip"});
    let r = fetch(
        &host,
        json!({"url": compressing.url("/"), "headers": asked}),
    )
    .await;
    let seen = &compressing.seen()[0];
    assert_eq!(seen.header("accept-encoding"), Some("identity"));
    assert_eq!(seen.header("range"), None);
    assert_eq!(seen.header("if-range"), None);
    assert_eq!(seen.header("te"), None);
    assert!(
        tool_error(&r).starts_with(
            "HTTP-response-content-coding: the response came compressed with content-coding \"gzip\""
        ),
        "{r:?}"
    );
    let record = serde_json::to_value(&r.receipt.network[0]).unwrap();
    assert!(
        record["error"].as_str().is_some_and(|e| e.contains("gzip")),
        "{record}"
    );
    // Another host: the guest's headers as it sent them.
    let r = fetch(&host, json!({"url": plain.url("/"), "headers": asked})).await;
    assert!(r.is_ok(), "{r:?}");
    let seen = &plain.seen()[0];
    assert_eq!(seen.header("accept-encoding"), Some("gzip, br"));
    assert_eq!(seen.header("range"), Some("bytes=0-5"));
}

#[tokio::test]
async fn a_missing_credential_stops_the_host() {
    let policy = r#"version = 1

[network]
allow = ["https://api.example.com"]

[[credentials]]
host = "api.example.com"
header = "Authorization"
value_file = "/nonexistent/toolhost-test-token"
"#;
    let ws = tempdir();
    let mut b = builder_with(ws.path(), runtime_options_with_pool(2));
    b.policy(Policy::from_toml(policy, "test.toml").unwrap());
    let err = b.build().await.unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("credentials[0]") && msg.contains("toolhost-test-token"),
        "{msg}"
    );
}

/// Sockets are decided by address: a `tcp://`/`udp://` grant that names a
/// host name could never match, so the host refuses to start with one.
#[tokio::test]
async fn a_socket_grant_by_name_stops_the_host() {
    for grant in ["tcp://db.example.com:5432", "udp://*.example.com:53"] {
        // In [network], and in a rule's network.
        let policies = [
            (
                format!("version = 1\n\n[network]\nallow = [\"{grant}\"]\n"),
                "network grant",
            ),
            (
                format!(
                    "version = 1\n\n[[rules]]\ntool = \"*\"\ndecision = \"allow\"\nnetwork = [\"{grant}\"]\n"
                ),
                "rules[0].network grant",
            ),
        ];
        for (policy, named) in policies {
            let ws = tempdir();
            let msg = build_error(ws.path(), &policy).await;
            assert!(
                msg.contains(&format!("{named} \"{grant}\""))
                    && msg.contains("must name an IP address"),
                "{msg}"
            );
        }
    }
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let target = Server::ok("127.0.0.1", "moved here");
    let location = target.url("/new");
    let redirect = Server::start(
        "127.0.0.1",
        Box::new(move |_| response(302, &[("Location", location.as_str())], b"")),
    );
    // Both are granted: still, the host does not follow.
    let (_ws, host) = host(&grant_policy(&format!(
        "\"http://127.0.0.1:{}\", \"http://127.0.0.1:{}\"",
        redirect.port(),
        target.port()
    )))
    .await;
    let r = fetch(&host, json!({"url": redirect.url("/old")})).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.canonical["status"], 302);
    assert_eq!(r.canonical["headers"]["location"], target.url("/new"));
    assert_eq!(r.receipt.network.len(), 1);
    assert_eq!(redirect.connections(), 1);
    assert_eq!(target.connections(), 0);
}

#[tokio::test]
async fn the_response_byte_limit_and_the_request_timeout_hold() {
    let big = Server::ok("127.0.0.1", "0123456789abcdefghijklmnopqrstuvwxyz");
    // A server that accepts and never answers, until the test ends.
    let (hold, held) = std::sync::mpsc::channel::<()>();
    let held = Mutex::new(held);
    let silent = Server::start(
        "127.0.0.1",
        Box::new(move |_| {
            let _ = held.lock().unwrap().recv();
            Vec::new()
        }),
    );
    let policy = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"http://127.0.0.1:{}\", \"http://127.0.0.1:{}\"]\nmax_response_bytes = 10\nrequest_timeout_ms = 300\n",
        big.port(),
        silent.port()
    );
    let (_ws, host) = host(&policy).await;
    let r = fetch(&host, json!({"url": big.url("/")})).await;
    // The body stream fails; wasi:http reports it as a stream error whose
    // text names the limit.
    assert!(
        tool_error(&r).contains("body size exceeds limit: 10 bytes"),
        "{r:?}"
    );
    assert_eq!(r.receipt.network[0].status, Some(200));
    let started = std::time::Instant::now();
    let r = fetch(&host, json!({"url": silent.url("/")})).await;
    assert!(tool_error(&r).starts_with("connection-timeout"), "{r:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    drop(hold);
}

/// A server that tells the test each request it read (through `seen`),
/// then never answers, until `held` is let go. It serves one connection at
/// a time, so it reads one request only while it holds one.
fn silent_server(
    seen: tokio::sync::mpsc::UnboundedSender<()>,
    held: Arc<Mutex<std::sync::mpsc::Receiver<()>>>,
) -> Server {
    let seen = Mutex::new(seen);
    Server::start(
        "127.0.0.1",
        Box::new(move |_| {
            let _ = seen.lock().unwrap().send(());
            let _ = held.lock().unwrap().recv();
            Vec::new()
        }),
    )
}

/// `n` [`silent_server`]s, the `allow` list that grants them, the requests
/// they read (one message each), and what holds their answers (dropping it
/// lets them go).
struct Silent {
    servers: Vec<Server>,
    grants: String,
    requests: tokio::sync::mpsc::UnboundedReceiver<()>,
    hold: std::sync::mpsc::Sender<()>,
}

fn silent_servers(n: usize) -> Silent {
    let (seen, requests) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (hold, held) = std::sync::mpsc::channel::<()>();
    let held = Arc::new(Mutex::new(held));
    let servers: Vec<Server> = (0..n)
        .map(|_| silent_server(seen.clone(), held.clone()))
        .collect();
    let grants = servers
        .iter()
        .map(|s| format!("\"http://127.0.0.1:{}\"", s.port()))
        .collect::<Vec<_>>()
        .join(", ");
    Silent {
        servers,
        grants,
        requests,
        hold,
    }
}

/// A guest waiting for a response's head, with a request time far longer
/// than the call's, ends at the call's deadline (`TIMEOUT`), and on
/// cancellation once the server holds its request (`CANCELLED`); in mode
/// `none` (the body on the caller's thread) and with a workspace (on a
/// thread of its own).
#[tokio::test]
async fn a_guest_waiting_for_a_response_ends_at_the_deadline_and_on_cancel() {
    // One server per call: each holds the request it read.
    let Silent {
        servers,
        grants,
        mut requests,
        hold,
    } = silent_servers(4);
    let policy = format!("{}request_timeout_ms = 600000\n", grant_policy(&grants));
    let deadline = std::time::Duration::from_secs(3);
    let (_ws, host) = host_with(&policy, |b| {
        b.limits(toolhost::Limits {
            deadline,
            ..toolhost::Limits::default()
        });
    })
    .await;
    let get = |server: &Server, mode| {
        CallRequest::new("http_fetch", json!({"url": server.url("/")})).mode(mode)
    };
    let modes = [SandboxMode::None, SandboxMode::ReadOnly];
    for (mode, pair) in modes.into_iter().zip(servers.chunks(2)) {
        let started = std::time::Instant::now();
        let r = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            host.call(get(&pair[0], mode)),
        )
        .await
        .expect("the call outlived its deadline by 30 s");
        assert_eq!(r.code(), Some(ErrorCode::Timeout), "{mode:?}: {r:?}");
        assert!(started.elapsed() >= deadline, "{mode:?}");
        tokio::time::timeout(std::time::Duration::from_secs(30), requests.recv())
            .await
            .expect("the timed-out call's request never reached the server")
            .unwrap();

        let interrupt = toolhost::Interrupt::default();
        let call = host.call(get(&pair[1], mode).interrupt(interrupt.clone()));
        let cancel = async {
            requests.recv().await.unwrap();
            interrupt.cancel();
        };
        let (r, ()) = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            tokio::join!(call, cancel)
        })
        .await
        .expect("the request never reached the server, or the call outlived its cancel");
        assert_eq!(r.code(), Some(ErrorCode::Cancelled), "{mode:?}: {r:?}");
    }
    drop(hold);
}

/// The results in `host`'s log of the calls whose id `of` picks, each
/// `TOOL_OUTCOME_UNKNOWN` (a call dropped by its caller).
fn dropped_results(host: &Host, of: impl Fn(&str) -> bool) -> Vec<Value> {
    host.log()
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == toolhost::log::EventKind::ToolResult && of(&e.call_id))
        .map(|e| {
            assert_eq!(
                e.payload["error"]["code"], "TOOL_OUTCOME_UNKNOWN",
                "{}",
                e.payload
            );
            e.payload
        })
        .collect()
}

/// A call its caller drops while the guest waits for a response (a
/// client's timeout, a transport that drops its handler) ends
/// `TOOL_OUTCOME_UNKNOWN` in the log, and that result still records the
/// request the guest made: in mode `none` (the body in the caller's future)
/// and with a workspace (on a thread of its own), and each call of a
/// dropped batch its own. A caller cannot hide a tool's traffic from the
/// log by dropping its call.
#[tokio::test]
async fn a_dropped_call_still_records_its_requests() {
    let Silent {
        servers,
        grants,
        mut requests,
        hold,
    } = silent_servers(4);
    let (_ws, host) = host(&grant_policy(&grants)).await;
    for (i, (mode, server)) in [SandboxMode::None, SandboxMode::ReadOnly]
        .into_iter()
        .zip(&servers)
        .enumerate()
    {
        let id = format!("dropped-{i}");
        let mut request =
            CallRequest::new("http_fetch", json!({"url": server.url("/x?q=1")})).mode(mode);
        request.call_id = Some(id.clone());
        let call = host.call(request);
        // Dropped once the server holds the request.
        tokio::select! {
            r = call => panic!("{mode:?}: the call ended first: {r:?}"),
            got = tokio::time::timeout(std::time::Duration::from_secs(30), requests.recv()) => {
                got.expect("the request never reached the server").unwrap();
            }
        }
        let results = dropped_results(&host, |id_of| id_of == id);
        assert_eq!(results.len(), 1, "{mode:?}: {results:?}");
        let result = &results[0];
        let network = result["receipt"]["network"].as_array().unwrap();
        assert_eq!(network.len(), 1, "{mode:?}: {result}");
        assert_eq!(network[0]["url"], server.url("/x"), "{result}");
        assert_eq!(network[0]["decision"], "allowed", "{result}");
        assert_eq!(result["receipt"]["mode"], json!(mode), "{result}");
    }

    // A batch dropped while both its bodies wait: each call's result holds
    // its own request, and no other.
    let more = &servers[2..];
    let batch = host.call_batch(
        more.iter()
            .enumerate()
            .map(|(i, server)| {
                CallRequest::new("http_fetch", json!({"url": server.url(&format!("/b{i}"))}))
                    .mode(SandboxMode::None)
            })
            .collect(),
    );
    tokio::select! {
        r = batch => panic!("the batch ended first: {r:?}"),
        got = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            requests.recv().await;
            requests.recv().await;
        }) => got.expect("both requests never reached their servers"),
    }
    // (A batch names its calls itself.)
    let mut urls: Vec<Value> = dropped_results(&host, |id| !id.starts_with("dropped-"))
        .iter()
        .map(|result| {
            let network = result["receipt"]["network"].as_array().unwrap();
            assert_eq!(network.len(), 1, "{result}");
            network[0]["url"].clone()
        })
        .collect();
    let mut wanted = vec![json!(more[0].url("/b0")), json!(more[1].url("/b1"))];
    urls.sort_by_key(|u| u.to_string());
    wanted.sort_by_key(|u| u.to_string());
    assert_eq!(urls, wanted);
    drop(hold);
}

/// A request without a body whose `content-length` promises one is refused
/// inside the guest before anything is connected (a server would wait for
/// bytes that never come).
#[tokio::test]
async fn a_length_without_a_body_is_refused_before_connecting() {
    let server = Server::ok("127.0.0.1", "never");
    let (_ws, host) = host(&grant_policy(&format!("\"{}\"", server.url("")))).await;
    let r = fetch(
        &host,
        json!({"url": server.url("/"), "headers": {"content-length": "10"}}),
    )
    .await;
    assert!(
        tool_error(&r).starts_with("HTTP-request-body-size"),
        "{r:?}"
    );
    assert_eq!(server.connections(), 0);
    // A length of zero is no promise: the request goes.
    let r = fetch(
        &host,
        json!({"url": server.url("/"), "headers": {"content-length": "0"}}),
    )
    .await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(server.connections(), 1);
}

/// A resolver whose every lookup hangs until the test lets it go (a
/// name server that does not answer).
struct HangingResolver(Mutex<std::sync::mpsc::Receiver<()>>);

impl toolhost::policy::egress::Resolver for HangingResolver {
    fn resolve(
        &self,
        _host: &str,
        _port: u16,
    ) -> Result<Vec<std::net::SocketAddr>, toolhost::policy::egress::ResolveError> {
        let _ = self.0.lock().unwrap().recv();
        Err(toolhost::policy::egress::ResolveError::new("let go"))
    }
}

/// The request timeout covers the name's lookup: a lookup that does not
/// answer ends the request with DNS-timeout at the request's time, long
/// before the call's deadline, and nothing is connected.
#[tokio::test]
async fn a_lookup_that_never_answers_ends_at_the_request_timeout() {
    let (release, hang) = std::sync::mpsc::channel::<()>();
    let resolver = HangingResolver(Mutex::new(hang));
    let policy = "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"http://silent.test\"]\nrequest_timeout_ms = 300\n";
    let (_ws, host) = host_with(policy, move |b| {
        b.resolver(Arc::new(resolver));
    })
    .await;
    let started = std::time::Instant::now();
    let r = fetch(&host, json!({"url": "http://silent.test/"})).await;
    assert!(tool_error(&r).starts_with("DNS-timeout"), "{r:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(record_codes(&r), ["dns_timeout"], "{r:?}");
    assert_eq!(r.receipt.network[0].status, None);
    drop(release);
}

/// An approver that answers `outcome` and remembers what it was asked.
#[derive(Clone)]
struct Asked {
    outcome: ApprovalOutcome,
    requests: Arc<Mutex<Vec<ApprovalRequest>>>,
}

impl Approver for Asked {
    fn name(&self) -> String {
        "asked".into()
    }

    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        self.requests.lock().unwrap().push(request.clone());
        let outcome = self.outcome;
        Box::pin(async move { (outcome, None) })
    }
}

/// `http_fetch` of `url` on a host with `policy` whose approver answers
/// `outcome`: the result, and what the approver was asked.
async fn fetch_asked(
    policy: &str,
    outcome: ApprovalOutcome,
    url: &str,
) -> (CallResult, Vec<ApprovalRequest>) {
    let asked = Asked {
        outcome,
        requests: Arc::default(),
    };
    let approver = asked.clone();
    let (_ws, host) = host_with(policy, move |b| {
        b.approver(Box::new(approver));
    })
    .await;
    let r = fetch(&host, json!({ "url": url })).await;
    let requests = asked.requests.lock().unwrap().clone();
    (r, requests)
}

#[tokio::test]
async fn an_ask_grant_is_approved_per_call_before_the_body() {
    let server = Server::ok("127.0.0.1", "asked for");
    let policy = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nask = [\"http://127.0.0.1:{}\", \
         {{ url = \"https://*.example.com\", methods = [\"GET\", \"HEAD\"] }}]\n",
        server.port()
    );
    for (outcome, ok) in [
        (ApprovalOutcome::AllowedOnce, true),
        (ApprovalOutcome::Rejected, false),
    ] {
        let before = server.connections();
        let (r, requests) = fetch_asked(&policy, outcome, &server.url("/")).await;
        assert_eq!(requests.len(), 1, "asked once");
        assert_eq!(requests[0].tool, "http_fetch");
        // The approval names each host it unlocks, with its methods.
        assert_eq!(
            requests[0].network,
            [
                format!("http://127.0.0.1:{} (any method)", server.port()),
                "https://*.example.com:443 (GET, HEAD)".to_string()
            ]
        );
        if ok {
            assert!(r.is_ok(), "{r:?}");
            let rec = serde_json::to_value(&r.receipt.network).unwrap();
            assert_eq!(rec[0]["decision"], "approved");
            assert_eq!(server.connections(), before + 1);
        } else {
            assert_eq!(r.code(), Some(ErrorCode::ApprovalRejected), "{r:?}");
            assert_eq!(server.connections(), before);
        }
    }
}

/// A policy whose second rule grants `http://127.0.0.1:PORT` (GET) to the
/// calls of `http_fetch` whose URL is under `/granted/`, with `decision`
/// (and `tail` after the rules); no `[network]` grant at all.
fn rule_grant_policy(port: u16, decision: &str, tail: &str) -> String {
    format!(
        "version = 1\ndefault = \"allow\"\n\n\
         [[rules]]\ntool = \"read_file\"\ndecision = \"allow\"\n\n\
         [[rules]]\ntool = \"http_fetch\"\ndecision = \"{decision}\"\nreason = \"fetches need a human\"\n\
         args = [{{ pointer = \"/url\", glob = \"http://127.0.0.1:{port}/granted/**\" }}]\n\
         network = [{{ url = \"http://127.0.0.1:{port}\", methods = [\"GET\"] }}]\n{tail}"
    )
}

/// A rule's `network` grants the calls it matches, and only those: with
/// no `[network]` grant, `http_fetch`'s GET of a URL the rule matches
/// reaches the loopback server (an exact address the grant names, unlocked
/// as a `[network]` grant of it would be), and its record and intent name
/// the rule's grant; a call whose URL the rule's matcher does not match
/// gets nothing and never connects. Limits come from `[network]`.
#[tokio::test]
async fn a_rules_network_grant_reaches_only_the_calls_it_matches() {
    let server = Server::ok("127.0.0.1", "by rule");
    let port = server.port();
    let grant = format!("http://127.0.0.1:{port}");
    let (_ws, host) = host(&rule_grant_policy(port, "allow", "")).await;
    assert!(host.may_reach_network("http_fetch"));
    assert!(!host.may_reach_network("read_file"));

    let r = fetch(&host, json!({"url": server.url("/granted/items")})).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.canonical["body"], "by rule");
    let rec = serde_json::to_value(&r.receipt.network).unwrap();
    assert_eq!(rec[0]["decision"], "allowed", "{rec}");
    assert_eq!(rec[0]["rule"], format!("rules[1].network[0] \"{grant}\""));
    assert_eq!(server.connections(), 1);
    let intent = crate::governance::common::intent_event(&host, &r);
    assert_eq!(intent["network"], json!([grant]));

    // A URL the rule's matcher does not match: the call runs (the default
    // allows it) without the rule's grant, and never connects.
    let r = fetch(&host, json!({"url": server.url("/other")})).await;
    assert!(
        tool_error(&r).starts_with("destination-IP-prohibited"),
        "{r:?}"
    );
    assert_eq!(record_codes(&r), ["address_refused"]);
    let intent = crate::governance::common::intent_event(&host, &r);
    assert!(intent.get("network").is_none(), "{intent}");
    // A call the rule matches, with a method its grant does not list.
    let r = fetch(
        &host,
        json!({"url": server.url("/granted/x"), "method": "POST", "body": "x"}),
    )
    .await;
    assert!(tool_error(&r).starts_with("HTTP-request-denied"), "{r:?}");
    assert_eq!(record_codes(&r), ["method_not_granted"]);
    assert_eq!(server.connections(), 1);

    // The limits are [network]'s, with or without grants of its own.
    let (_ws, limited) = self::host(&rule_grant_policy(
        port,
        "allow",
        "\n[network]\nmax_response_bytes = 4\n",
    ))
    .await;
    let r = fetch(&limited, json!({"url": server.url("/granted/")})).await;
    assert!(
        tool_error(&r).contains("body size exceeds limit: 4 bytes"),
        "{r:?}"
    );
    assert_eq!(r.receipt.network[0].status, Some(200));
    assert_eq!(server.connections(), 2);
}

/// An `ask` rule's grants are reached once its call is approved: the
/// approver is told of them; rejected, the call never runs.
#[tokio::test]
async fn an_ask_rules_network_grant_is_reached_once_approved() {
    let server = Server::ok("127.0.0.1", "approved");
    let port = server.port();
    let grant = format!("http://127.0.0.1:{port}");
    for (outcome, ok) in [
        (ApprovalOutcome::AllowedOnce, true),
        (ApprovalOutcome::Rejected, false),
    ] {
        let before = server.connections();
        let policy = rule_grant_policy(port, "ask", "");
        let (r, requests) = fetch_asked(&policy, outcome, &server.url("/granted/")).await;
        assert_eq!(requests.len(), 1, "asked once");
        // The approval names the rule's grant with its methods.
        let described = format!("{grant} (GET)");
        assert_eq!(requests[0].network, std::slice::from_ref(&described));
        assert!(
            requests[0].reason.starts_with("fetches need a human; ")
                && requests[0].reason.contains(&described),
            "{}",
            requests[0].reason
        );
        if ok {
            assert!(r.is_ok(), "{r:?}");
            let rec = serde_json::to_value(&r.receipt.network).unwrap();
            assert_eq!(rec[0]["decision"], "allowed", "{rec}");
            assert_eq!(rec[0]["rule"], format!("rules[1].network[0] \"{grant}\""));
            assert_eq!(server.connections(), before + 1);
        } else {
            assert_eq!(r.code(), Some(ErrorCode::ApprovalRejected), "{r:?}");
            assert_eq!(server.connections(), before);
        }
    }
}

#[tokio::test]
async fn hostile_spellings_and_names_of_refused_addresses_never_connect() {
    // The listener every hostile URL points at, one way or another.
    let target = Server::ok("127.0.0.1", "reached");
    let granted = Server::ok("127.0.0.2", "granted");
    let p = target.port();
    // Names granted by name, resolving (through the injected resolver) to
    // refused addresses: a grant by name never unlocks them.
    let resolver = StaticResolver::new()
        .with("rebind.test", &["127.0.0.1".parse::<IpAddr>().unwrap()])
        .with(
            "mixed.test",
            &[
                "93.184.216.34".parse().unwrap(),
                "127.0.0.1".parse().unwrap(),
            ],
        )
        .with("metadata.test", &["169.254.169.254".parse().unwrap()])
        .with("private.test", &["10.0.0.1".parse().unwrap()])
        .with("mapped.test", &["::ffff:127.0.0.1".parse().unwrap()]);
    let policy = grant_policy(&format!(
        "\"http://127.0.0.2:{}\", \"http://rebind.test:{p}\", \"http://mixed.test:{p}\", \
         \"http://metadata.test\", \"http://private.test\", \"http://mapped.test:{p}\"",
        granted.port()
    ));
    let (_ws, host) = host_with(&policy, move |b| {
        b.resolver(Arc::new(resolver));
    })
    .await;
    let urls = [
        format!("http://127.1:{p}/"),
        format!("http://0x7f000001:{p}/"),
        format!("http://2130706433:{p}/"),
        format!("http://0177.0.0.1:{p}/"),
        format!("http://0x7f.0.0.1:{p}/"),
        format!("http://127.0.0.1:{p}/"),
        format!("http://[::ffff:127.0.0.1]:{p}/"),
        format!("http://[::ffff:7f00:1]:{p}/"),
        format!("http://[::127.0.0.1]:{p}/"),
        format!("http://[::1]:{p}/"),
        format!("http://0.0.0.0:{p}/"),
        format!("http://0:{p}/"),
        format!("http://localhost:{p}/"),
        format!("http://127.0.0.2:{p}/"),
        format!("http://granted@127.0.0.1:{p}/"),
        format!("http://127.0.0.2:{}@127.0.0.1:{p}/", granted.port()),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://[fd00:ec2::254]/latest/meta-data/".to_string(),
        "http://100.100.100.200/".to_string(),
        "http://10.0.0.1/".to_string(),
        "http://192.168.1.1/".to_string(),
        "http://172.16.0.1/".to_string(),
        "http://100.64.0.1/".to_string(),
        format!("http://rebind.test:{p}/"),
        format!("http://mixed.test:{p}/"),
        "http://metadata.test/latest/meta-data/".to_string(),
        "http://private.test/".to_string(),
        format!("http://mapped.test:{p}/"),
    ];
    for url in &urls {
        let r = fetch(&host, json!({"url": url})).await;
        let msg = tool_error(&r);
        if msg.starts_with("invalid-url") {
            // wasi:http itself refused the authority (userinfo): nothing
            // was sent.
            assert!(r.receipt.network.is_empty(), "{url}: {r:?}");
            continue;
        }
        assert!(
            msg.starts_with("HTTP-request-denied") || msg.starts_with("destination-IP-prohibited"),
            "{url}: {msg}"
        );
        assert_eq!(r.receipt.network.len(), 1, "{url}: {:?}", r.receipt.network);
        assert_eq!(
            r.receipt.network[0].status, None,
            "{url}: {:?}",
            r.receipt.network
        );
    }
    assert_eq!(
        target.connections(),
        0,
        "a refused request reached the listener"
    );
    // The one granted server is still reachable.
    let r = fetch(&host, json!({"url": granted.url("/")})).await;
    assert!(r.is_ok(), "{r:?}");
}

/// An HTTPS server on 127.0.0.1 with a self-signed certificate for that
/// address: one thread, counts connections and complete requests, and
/// tells, for each response it sent, whether the client ended that
/// connection with TLS's closure alert (`close_notify`) before closing it.
struct TlsServer {
    port: u16,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    closed_with_alert: tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<bool>>,
    ca_pem: String,
    stop: Arc<AtomicBool>,
}

impl TlsServer {
    fn start() -> TlsServer {
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let ca_pem = certified.cert.pem();
        let cert = certified.cert.der().clone();
        let key =
            rustls_pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![cert], key)
                .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, r, s) = (connections.clone(), requests.clone(), stop.clone());
        let (alerted, closed_with_alert) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                c.fetch_add(1, Ordering::SeqCst);
                let Ok(conn) = rustls::ServerConnection::new(config.clone()) else {
                    continue;
                };
                let mut tls = rustls::StreamOwned::new(conn, stream);
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match tls.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => break,
                    }
                }
                if head.ends_with(b"\r\n\r\n") {
                    r.fetch_add(1, Ordering::SeqCst);
                    let _ = tls.write_all(&response(200, &[], b"over tls"));
                    let _ = tls.flush();
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                    // Then what the client sends until it closes: its
                    // alert ends the reading cleanly; a close without one
                    // is an unexpected end.
                    let _ = tls
                        .sock
                        .set_read_timeout(Some(std::time::Duration::from_secs(10)));
                    let mut rest = Vec::new();
                    let _ = alerted.send(tls.read_to_end(&mut rest).is_ok());
                }
            }
        });
        TlsServer {
            port,
            connections,
            requests,
            closed_with_alert: tokio::sync::Mutex::new(closed_with_alert),
            ca_pem,
            stop,
        }
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

#[tokio::test]
async fn https_trusts_the_policy_ca_file_and_nothing_else() {
    trusts_the_policy_ca_file_and_nothing_else().await;
}

/// The same from a multi-thread runtime's `block_on` (the CLI's place),
/// where the exchange's socket waits on the caller's own thread (and,
/// once it has waited there a millisecond, as a debug build's handshake
/// may, through tokio): the handshake and the exchange over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_from_a_callers_thread_trusts_the_policy_ca_file_and_nothing_else() {
    trusts_the_policy_ca_file_and_nothing_else().await;
}

/// The same from a runtime task (the MCP server's place): a request
/// without a body is exchanged by the task that makes the call, on a
/// worker (one with a body, in a task of its own, in each of these).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_from_a_task_trusts_the_policy_ca_file_and_nothing_else() {
    tokio::spawn(trusts_the_policy_ca_file_and_nothing_else())
        .await
        .unwrap();
}

async fn trusts_the_policy_ca_file_and_nothing_else() {
    let server = TlsServer::start();
    let dir = tempdir();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &server.ca_pem).unwrap();
    let url = format!("https://127.0.0.1:{}/secure", server.port);

    // Without the CA file, the self-signed certificate is refused: the
    // handshake fails and no request is sent.
    let (_ws, untrusting) = host(&grant_policy(&format!(
        "\"https://127.0.0.1:{}\"",
        server.port
    )))
    .await;
    let r = fetch(&untrusting, json!({"url": url})).await;
    assert!(tool_error(&r).starts_with("TLS-certificate-error"), "{r:?}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 0);

    let policy = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"https://127.0.0.1:{}\"]\nca_file = \"{}\"\n",
        server.port,
        ca.display()
    );
    let (_ws, trusting) = host(&policy).await;
    // A GET (exchanged where the call runs: the guest has the whole body,
    // and the call its result, before the alert is sent, by a task) and a
    // POST (in a task of its own, which sends it as the body ends): each
    // connection ends as TLS requires, with the client's closure alert.
    for (n, args) in [
        json!({"url": url}),
        json!({"url": url, "method": "POST", "body": "sent"}),
    ]
    .into_iter()
    .enumerate()
    {
        let r = fetch(&trusting, args).await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(r.canonical["status"], 200);
        assert_eq!(r.canonical["body"], "over tls");
        assert_eq!(server.requests.load(Ordering::SeqCst), n + 1);
        let alerted = tokio::time::timeout(std::time::Duration::from_secs(20), async {
            server.closed_with_alert.lock().await.recv().await
        })
        .await;
        assert_eq!(alerted, Ok(Some(true)), "request {n}");
    }
    assert!(server.connections.load(Ordering::SeqCst) >= 3);
}

/// A `ca_file` or a credential's `value_file` that is not a regular file
/// (a directory, a device that never ends) stops the host with a message
/// naming it, before any call; nothing is read from it.
#[tokio::test]
async fn certificate_and_secret_files_must_be_regular_files() {
    let dir = tempdir();
    let (ca, secret) = (dir.path().display().to_string(), "/dev/zero".to_string());
    for (key, path, policy) in [
        (
            "ca_file",
            &ca,
            format!(
                "version = 1\n\n[network]\nallow = [\"https://127.0.0.1:1\"]\nca_file = {ca:?}\n"
            ),
        ),
        (
            "value_file",
            &secret,
            format!(
                "version = 1\n\n[network]\nallow = [\"https://api.example.com\"]\n\n\
                 [[credentials]]\nhost = \"api.example.com\"\nheader = \"Authorization\"\nvalue_file = {secret:?}\n"
            ),
        ),
    ] {
        let ws = tempdir();
        let msg = build_error(ws.path(), &policy).await;
        assert!(
            msg.contains(path.as_str()) && msg.contains("not a regular file"),
            "{key}: {msg}"
        );
    }
}

/// A secret file or a CA file inside the workspace, where a tool could
/// read the secret or plant a root, stops the host with a message naming
/// it: a symlink from outside into the workspace included, and a path
/// through a link inside the workspace that points out today (a call could
/// re-point it).
#[tokio::test]
async fn secret_and_ca_files_inside_the_workspace_stop_the_host() {
    let ws = tempdir();
    let inside = ws.path().join("secrets");
    std::fs::create_dir(&inside).unwrap();
    std::fs::write(inside.join("token"), "sk-in-the-workspace\n").unwrap();
    std::fs::write(inside.join("ca.pem"), "not read").unwrap();
    let outside = tempdir();
    let link = outside.path().join("token-link");
    std::os::unix::fs::symlink(inside.join("token"), &link).unwrap();
    // A link inside the workspace that points out today: a call could
    // re-point it.
    std::fs::write(outside.path().join("real-token"), "sk-outside-today\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("certs")).unwrap();
    let through = ws.path().join("certs").join("real-token");
    let cases = [
        (
            format!(
                "ca_file = {:?}\n",
                inside.join("ca.pem").display().to_string()
            ),
            "network.ca_file",
        ),
        (
            format!(
                "\n[[credentials]]\nhost = \"api.example.com\"\nheader = \"A\"\nvalue_file = {:?}\n",
                inside.join("token").display().to_string()
            ),
            "credentials[0].value_file",
        ),
        (
            format!(
                "\n[[credentials]]\nhost = \"api.example.com\"\nheader = \"A\"\nvalue_file = {:?}\n",
                link.display().to_string()
            ),
            "credentials[0].value_file",
        ),
        (
            format!(
                "\n[[credentials]]\nhost = \"api.example.com\"\nheader = \"A\"\nvalue_file = {:?}\n",
                through.display().to_string()
            ),
            "credentials[0].value_file",
        ),
    ];
    for (extra, named) in cases {
        let policy =
            format!("version = 1\n\n[network]\nallow = [\"https://api.example.com\"]\n{extra}");
        let msg = build_error(ws.path(), &policy).await;
        assert!(
            msg.contains(named) && msg.contains("inside the workspace"),
            "{named}: {msg}"
        );
        assert!(!msg.contains("sk-in-the-workspace"), "{msg}");
    }
}

/// A guest's connection that fails (nothing listens on its granted port)
/// is the guest's error and its record's, not a warning in the host's log:
/// a guest must not be able to fill the operator's log.
#[test]
fn a_guests_failed_connection_is_not_a_host_warning() {
    // A port bound but not listening, held for the whole test: a connect
    // to it is refused, and no other test can take it meanwhile.
    let held = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    held.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let port = held.local_addr().unwrap().as_socket().unwrap().port();
    let dir = tempdir();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        grant_policy(&format!("\"http://127.0.0.1:{port}\"")),
    )
    .unwrap();
    let workspace = tempdir();
    let out = cli_fetch(
        &format!("http://127.0.0.1:{port}/"),
        &policy,
        &dir.path().join("state"),
        workspace.path(),
    )
    .env_remove("TOOLHOST_LOG")
    .output()
    .unwrap();
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let message = result["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("connection-refused"), "{result:#}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("WARN"), "{err}");
}

/// `toolhost run http_fetch --mode none --json` of `url`, with `policy`,
/// `state` and `workspace`, on the suite's compile cache.
fn cli_fetch(
    url: &str,
    policy: &std::path::Path,
    state: &std::path::Path,
    workspace: &std::path::Path,
) -> std::process::Command {
    let mut command = std::process::Command::new(crate::support::bin());
    command
        .args(["run", "http_fetch", "--mode", "none", "--json", "--args"])
        .arg(json!({ "url": url }).to_string())
        .arg("--policy")
        .arg(policy)
        .arg("--state")
        .arg(state)
        .arg("--workspace")
        .arg(workspace)
        .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir());
    command
}

/// HTTPS trusts the system's roots: the CLI, with `SSL_CERT_FILE` naming
/// the test server's certificate (how a system store is pointed elsewhere),
/// reaches the server with no `ca_file` in its policy; with the machine's
/// own store, which does not hold that certificate, the handshake fails and
/// no request is sent.
#[test]
fn https_trusts_the_system_roots() {
    let server = TlsServer::start();
    let dir = tempdir();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &server.ca_pem).unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        grant_policy(&format!("\"https://127.0.0.1:{}\"", server.port)),
    )
    .unwrap();
    let workspace = tempdir();
    let url = format!("https://127.0.0.1:{}/secure", server.port);
    let state = dir.path().join("state");
    let run = |cert_file: Option<&std::path::Path>| {
        let mut command = cli_fetch(&url, &policy, &state, workspace.path());
        command
            .env_remove("SSL_CERT_DIR")
            .env_remove("SSL_CERT_FILE");
        if let Some(file) = cert_file {
            command.env("SSL_CERT_FILE", file);
        }
        let out = command.output().unwrap();
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    let untrusted = run(None);
    let message = untrusted["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("TLS-certificate-error"),
        "{untrusted:#}"
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 0);
    let trusted = run(Some(&ca));
    assert_eq!(trusted["canonical"]["status"], 200, "{trusted:#}");
    assert_eq!(trusted["canonical"]["body"], "over tls", "{trusted:#}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
    // A store the environment names but that cannot be read stops the
    // host: no quiet fall-back to other roots.
    let out = cli_fetch(&url, &policy, &state, workspace.path())
        .env_remove("SSL_CERT_DIR")
        .env("SSL_CERT_FILE", dir.path().join("no-such-bundle.pem"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("SSL_CERT_FILE"), "{stderr}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
}

/// What the CLI and the MCP server show of the network: `run --json` and
/// MCP results' `_meta.toolhost.receipt` carry every request with its rule
/// or refusal (or, allowed, why it failed); `toolhost log` shows the
/// intent's reachable grants and each request's outcome.
#[test]
fn network_shows_in_json_in_mcp_meta_and_in_the_log() {
    let server = Server::ok("127.0.0.1", "shown");
    // A granted port nobody listens on (bound, never listening: it stays
    // this test's, and refuses).
    let closed = tokio::net::TcpSocket::new_v4().unwrap();
    closed.bind(([127, 0, 0, 1], 0).into()).unwrap();
    let down = closed.local_addr().unwrap().port();
    let dir = tempdir();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        grant_policy(&format!(
            "\"http://127.0.0.1:{}\", \"http://127.0.0.1:{down}\"",
            server.port()
        )),
    )
    .unwrap();
    let workspace = tempdir();
    let state = dir.path().join("state");
    let run = |url: &str| {
        let out = cli_fetch(url, &policy, &state, workspace.path())
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    let allowed = run(&server.url("/ok"));
    let record = &allowed["receipt"]["network"][0];
    assert_eq!(record["decision"], "allowed", "{allowed:#}");
    assert_eq!(record["status"], 200, "{allowed:#}");
    // A port neither grant names.
    let ungranted = (1..=u16::MAX)
        .map(|d| server.port().wrapping_add(d).max(1))
        .find(|p| *p != server.port() && *p != down)
        .unwrap();
    let other = format!("http://127.0.0.1:{ungranted}/no");
    let refused = run(&other);
    assert_eq!(
        refused["receipt"]["network"][0]["decision"], "refused",
        "{refused:#}"
    );
    let unreachable = format!("http://127.0.0.1:{down}/down");
    let failed = run(&unreachable);
    let record = &failed["receipt"]["network"][0];
    assert_eq!(record["decision"], "allowed", "{failed:#}");
    assert!(
        record["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("connection error")),
        "{failed:#}"
    );

    let log = std::process::Command::new(crate::support::bin())
        .args(["log", "--state"])
        .arg(&state)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&log.stdout);
    let grant = format!(
        "network=[http://127.0.0.1:{}, http://127.0.0.1:{down}]",
        server.port()
    );
    assert!(log.contains(&grant), "{log}");
    assert!(
        log.contains(&format!("requests=[GET {} 200]", server.url("/ok"))),
        "{log}"
    );
    assert!(
        log.contains(&format!("requests=[GET {other} refused:")),
        "{log}"
    );
    assert!(
        log.contains(&format!("requests=[GET {unreachable} failed]")),
        "{log}"
    );

    let mut mcp =
        crate::mcp_protocol::Server::start_with(&["--policy", policy.to_str().unwrap()], json!({}));
    mcp.send(
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "http_fetch", "arguments": {"url": server.url("/mcp")}}}),
    );
    let r = mcp.response(&json!(7));
    let record = &r["result"]["_meta"]["toolhost"]["receipt"]["network"][0];
    assert_eq!(record["decision"], "allowed", "{r:#}");
    assert_eq!(record["url"], server.url("/mcp"), "{r:#}");
    assert_eq!(server.connections(), 2);
}

/// What tools/list's annotations say about the network follows the
/// policy and the tool's declaration: the grants reach only tools that
/// declare `external`, and without `[network]` none.
#[tokio::test]
async fn which_tools_may_reach_the_network_follows_the_grants() {
    let (_ws, none) = host("version = 1\ndefault = \"allow\"\n").await;
    assert!(!none.may_reach_network("read_file"));
    assert!(!none.may_reach_network("http_fetch"));
    let (_ws, allowed) = host(&grant_policy("\"https://api.example.com\"")).await;
    assert!(!allowed.may_reach_network("read_file"));
    assert!(allowed.may_reach_network("http_fetch"));
    let (_ws, asked) = host(
        "version = 1\ndefault = \"allow\"\n\n[network]\nask = [\"https://api.example.com\"]\n",
    )
    .await;
    assert!(!asked.may_reach_network("read_file"));
    assert!(asked.may_reach_network("http_fetch"));
}
