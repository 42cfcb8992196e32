//! Governed network egress (DESIGN.md §2b): a hostile guest tries a corpus
//! of refused destinations through wasi:http and wasi:sockets, against
//! listeners this test starts on loopback addresses. Every listener counts
//! what reaches it: a refusal means zero. Only loopback addresses are ever
//! contacted; every other address is refused before any connection.

use crate::common::*;
use serde_json::{Value, json};
use std::net::{IpAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use toolhost::policy::Policy;
use toolhost::policy::egress::StaticResolver;
use toolhost::{Host, Limits, SandboxMode};

mod oracle;
use oracle::egress_oracle;

toolhost_conformance::foreach_egress!(assert_test_exists);

/// A TCP listener on a loopback address that accepts and counts
/// connections (and answers nothing).
struct Counted {
    port: u16,
    ip: &'static str,
    /// Connections accepted so far, and a wake-up for each.
    count: Arc<(Mutex<usize>, Condvar)>,
    stop: Arc<AtomicBool>,
}

impl Counted {
    fn start(ip: &'static str) -> Counted {
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let count = Arc::new((Mutex::new(0), Condvar::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (count.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    let (n, accepted) = &*c;
                    *n.lock().unwrap() += 1;
                    accepted.notify_all();
                    held.push(stream);
                }
            }
        });
        Counted {
            port,
            ip,
            count,
            stop,
        }
    }

    fn count(&self) -> usize {
        *self.count.0.lock().unwrap()
    }

    /// The count once it reaches `n`, or after 5 s, whichever is first: a
    /// connection the guest made is accepted on the listener's own thread,
    /// possibly after the guest's call has returned.
    fn count_reaching(&self, n: usize) -> usize {
        let (count, accepted) = &*self.count;
        let guard = count.lock().unwrap();
        let (guard, _) = accepted
            .wait_timeout_while(guard, Duration::from_secs(5), |c| *c < n)
            .unwrap();
        *guard
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect((self.ip, self.port));
    }
}

async fn egress_host(policy: &str, resolver: Option<StaticResolver>) -> (tempfile::TempDir, Host) {
    let ws = tempfile::tempdir().unwrap();
    let mut b = builder(
        probes::EGRESS_CORPUS,
        ws.path(),
        Limits::default(),
        suite_options(),
    );
    b.policy(Policy::from_toml(policy, "egress.toml").unwrap());
    if let Some(r) = resolver {
        b.resolver(Arc::new(r));
    }
    let host = b.build().await.unwrap();
    (ws, host)
}

/// The `code` of each of a call's network records (null for one allowed).
fn record_codes(r: &toolhost::CallResult) -> Vec<Value> {
    r.receipt
        .network
        .iter()
        .map(|n| serde_json::to_value(n).unwrap()["code"].clone())
        .collect()
}

/// The URLs of a call's refused network records.
fn refused_urls(r: &toolhost::CallResult) -> Vec<String> {
    r.receipt
        .network
        .iter()
        .filter(|n| {
            matches!(
                n.outcome,
                toolhost::policy::egress::EgressOutcome::Refused { .. }
            )
        })
        .map(|n| n.url.clone())
        .collect()
}

/// Asserts that each of `attempts` failed, with `error` in its detail.
fn refused_with(attempts: &[Value], error: &str) {
    for a in attempts {
        assert_eq!(a["ok"], false, "{a}");
        let detail = a["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(error), "{error}: {a}");
    }
}

async fn run(host: &Host, args: Value) -> Vec<Value> {
    let r = call(host, "egress", args, SandboxMode::None).await;
    assert!(r.is_ok(), "{r:?}");
    r.canonical["attempts"].as_array().unwrap().clone()
}

/// At least 40 attempts, each refused inside the guest with the interface's
/// own error, none reaching the listeners; then the granted TCP address
/// connects, and the per-call request limit holds.
#[tokio::test]
async fn egress_corpus() {
    let target = Counted::start("127.0.0.1");
    let tcp_ok = Counted::start("127.0.0.1");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let (p, u, t) = (target.port, udp.local_addr().unwrap().port(), tcp_ok.port);
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
        .with("v6metadata.test", &["fd00:ec2::254".parse().unwrap()])
        .with("private.test", &["192.168.0.10".parse().unwrap()])
        .with("mapped.test", &["::ffff:127.0.0.1".parse().unwrap()]);
    let policy = format!(
        r#"version = 1
default = "allow"

[network]
allow = [
  "http://127.0.0.2:8080",
  "tcp://127.0.0.1:{t}",
  "http://rebind.test:{p}",
  "http://mixed.test:{p}",
  "http://metadata.test",
  "http://v6metadata.test",
  "http://private.test",
  "http://mapped.test:{p}",
]
"#
    );
    let (_ws, host) = egress_host(&policy, Some(resolver)).await;
    let http: Vec<String> = [
        format!("http://127.0.0.1:{p}/"),
        format!("http://127.1:{p}/"),
        format!("http://127.0.1:{p}/"),
        format!("http://0x7f000001:{p}/"),
        format!("http://0x7F.0x0.0x0.0x1:{p}/"),
        format!("http://2130706433:{p}/"),
        format!("http://017700000001:{p}/"),
        format!("http://0177.0.0.1:{p}/"),
        format!("http://0x7f.1:{p}/"),
        format!("http://127.0.0.1.:{p}/"),
        format!("https://127.0.0.1:{p}/"),
        format!("http://[::ffff:127.0.0.1]:{p}/"),
        format!("http://[::ffff:7f00:1]:{p}/"),
        format!("http://[0:0:0:0:0:ffff:127.0.0.1]:{p}/"),
        format!("http://[::127.0.0.1]:{p}/"),
        format!("http://[64:ff9b::7f00:1]:{p}/"),
        format!("http://[2002:7f00:1::]:{p}/"),
        format!("http://[::1]:{p}/"),
        format!("http://0.0.0.0:{p}/"),
        format!("http://0:{p}/"),
        format!("http://localhost:{p}/"),
        format!("http://127.0.0.2:{p}/"),
        "http://127.0.0.2:8081/".to_string(),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://[fd00:ec2::254]/latest/meta-data/".to_string(),
        "http://100.100.100.200/".to_string(),
        "http://168.63.129.16/".to_string(),
        "http://10.0.0.1/".to_string(),
        "http://172.16.0.1/".to_string(),
        "http://192.168.1.1/".to_string(),
        "http://100.64.0.1/".to_string(),
        "http://[fe80::1]/".to_string(),
        "http://[fc00::1]/".to_string(),
        "http://224.0.0.1/".to_string(),
        "http://255.255.255.255/".to_string(),
        "http://198.18.0.1/".to_string(),
        format!("http://rebind.test:{p}/"),
        format!("http://mixed.test:{p}/"),
        "http://metadata.test/latest/meta-data/".to_string(),
        "http://v6metadata.test/".to_string(),
        "http://private.test/".to_string(),
        format!("http://mapped.test:{p}/"),
        format!("http://rebind.test:{}/", p.wrapping_add(1)),
    ]
    .to_vec();
    let args = json!({
        "http": http,
        "tcp": [format!("127.0.0.1:{p}"), "127.0.0.2:8080", "10.0.0.1:80", "169.254.169.254:80"],
        "udp": [format!("127.0.0.1:{u}"), "10.0.0.1:53"],
        "lookup": ["localhost", "rebind.test", "example.com"],
    });
    let r = call(&host, "egress", args, SandboxMode::None).await;
    assert!(r.is_ok(), "{r:?}");
    let attempts = r.canonical["attempts"].as_array().unwrap().clone();
    assert!(attempts.len() >= 40, "only {} attempts", attempts.len());
    for a in &attempts {
        let target = a["target"].as_str().unwrap();
        let detail = a["detail"].as_str().unwrap();
        assert_eq!(a["ok"], false, "{target} must be refused: {detail}");
        if target.starts_with("http ") {
            assert!(
                detail.starts_with("HTTP-request-denied")
                    || detail.starts_with("destination-IP-prohibited"),
                "{target}: refused by the host, not by accident: {detail}"
            );
        } else {
            assert!(
                detail.contains("AccessDenied") || detail.contains("access-denied"),
                "{target}: {detail}"
            );
        }
    }
    // Every HTTP, TCP and UDP attempt has its refusal in the receipt (the
    // `denied` list keeps its first lines, then counts).
    let refused = refused_urls(&r);
    assert_eq!(refused.len(), http.len() + 6, "{refused:?}");
    // The four TCP and two UDP targets' records, by the address tried.
    for tcp in [
        format!("tcp://127.0.0.1:{p}"),
        "tcp://127.0.0.2:8080".to_string(),
        "tcp://10.0.0.1:80".to_string(),
        "tcp://169.254.169.254:80".to_string(),
        format!("udp://127.0.0.1:{u}"),
        "udp://10.0.0.1:53".to_string(),
    ] {
        assert!(refused.contains(&tcp), "{tcp}: {refused:?}");
    }
    assert_eq!(target.count(), 0, "a refused attempt reached the listener");
    let mut buf = [0u8; 64];
    match udp.recv_from(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the UDP socket received a datagram: {other:?}"),
    }

    // A name lookup is refused at once and recorded.
    let r = call(
        &host,
        "egress",
        json!({"lookup": ["localhost", "rebind.test"]}),
        SandboxMode::None,
    )
    .await;
    for a in r.canonical["attempts"].as_array().unwrap() {
        let detail = a["detail"].as_str().unwrap_or_default();
        assert!(
            detail.starts_with("resolve: ") && detail.contains("access-denied"),
            "{a}"
        );
    }
    for name in ["localhost", "rebind.test"] {
        let line = format!("network: lookup {name:?}: lookup_refused");
        assert!(r.receipt.denied.contains(&line), "{:?}", r.receipt.denied);
    }

    // The granted TCP address connects; the request limit holds per call.
    let attempts = run(&host, json!({"tcp": [format!("127.0.0.1:{t}")]})).await;
    assert_eq!(attempts[0]["ok"], true, "{attempts:?}");
    assert_eq!(tcp_ok.count_reaching(1), 1);

    let limited = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"tcp://127.0.0.1:{t}\"]\nmax_requests = 2\n"
    );
    let (_ws2, host2) = egress_host(&limited, None).await;
    let r = call(
        &host2,
        "egress",
        json!({"tcp": [format!("127.0.0.1:{t}"), format!("127.0.0.1:{t}"), format!("127.0.0.1:{t}")]}),
        SandboxMode::None,
    )
    .await;
    let attempts = r.canonical["attempts"].as_array().unwrap();
    let oks: Vec<bool> = attempts.iter().map(|a| a["ok"] == true).collect();
    assert_eq!(oks, [true, true, false], "{attempts:?}");
    assert_eq!(tcp_ok.count_reaching(3), 3);
    let codes = record_codes(&r);
    assert_eq!(codes.last(), Some(&json!("limit_reached")), "{codes:?}");
}

/// A bind to port 0 (what a UDP client does before its first datagram)
/// reaches nothing and needs no grant; the datagram after it is decided on
/// its own, with its destination. With only an `ask` grant that this call
/// was not approved for (`approval = "never"`), the send is refused inside
/// the guest, recorded as `approval_required` with the address it was for,
/// and nothing arrives; with an `allow` grant the datagram arrives.
#[tokio::test]
async fn egress_a_bind_reaches_nothing_and_its_datagram_is_decided() {
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let u = udp.local_addr().unwrap().port();
    let target = format!("127.0.0.1:{u}");
    for (list, sent) in [("ask", false), ("allow", true)] {
        let policy = format!(
            "version = 1\ndefault = \"allow\"\napproval = \"never\"\n\n[network]\n{list} = [\"udp://{target}\"]\n"
        );
        let (_ws, host) = egress_host(&policy, None).await;
        let r = call(&host, "egress", json!({"udp": [target]}), SandboxMode::None).await;
        assert!(r.is_ok(), "{r:?}");
        let attempt = &r.canonical["attempts"][0];
        let detail = attempt["detail"].as_str().unwrap();
        assert!(
            !r.receipt.denied.iter().any(|d| d.contains("bind_refused")),
            "{list}: {:?}",
            r.receipt.denied
        );
        let mut buf = [0u8; 64];
        if sent {
            assert_eq!(attempt["ok"], true, "{list}: {detail}");
            udp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let (n, _) = udp.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"escaped");
        } else {
            refused_with(std::slice::from_ref(attempt), "access-denied");
            assert!(
                !detail.starts_with("start-bind") && !detail.starts_with("finish-bind"),
                "the bind needs no grant: {detail}"
            );
            assert_eq!(record_codes(&r), [json!("approval_required")]);
            assert_eq!(refused_urls(&r), [format!("udp://{target}")]);
            udp.set_nonblocking(true).unwrap();
            match udp.recv_from(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                got => panic!("a refused datagram arrived: {got:?}"),
            }
            udp.set_nonblocking(false).unwrap();
        }
    }
}

/// Each socket bound without a grant of its protocol holds one of the
/// machine's ports, so a call may hold only a few: with no network, the
/// guest binds UDP sockets and holds them until a bind is refused
/// (`bind_refused`, `limit_reached`), after exactly the limit; a call that
/// may use a UDP grant binds more.
#[tokio::test]
async fn egress_sockets_bound_without_a_grant_are_bounded() {
    let limit = 64;
    let (_ws, host) = egress_host("version = 1\ndefault = \"allow\"\n", None).await;
    let attempts = run(&host, json!({"hold_udp": limit + 10})).await;
    let detail = attempts[0]["detail"].as_str().unwrap();
    assert_eq!(attempts[0]["ok"], false, "{detail}");
    assert!(
        detail.starts_with(&format!("bound {limit}, then bind: "))
            && detail.contains("access-denied"),
        "{detail}"
    );
    let r = call(
        &host,
        "egress",
        json!({"hold_udp": limit + 1}),
        SandboxMode::None,
    )
    .await;
    assert!(
        r.receipt
            .denied
            .iter()
            .any(|d| d.contains("bind_refused (limit_reached")),
        "{:?}",
        r.receipt.denied
    );
    // The limit is per call: the next call binds as many again.
    let again = run(&host, json!({"hold_udp": limit})).await;
    assert_eq!(again[0]["detail"], format!("bound {limit}"), "{again:?}");

    let (_ws, granted) = egress_host(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"udp://127.0.0.1:9\"]\n",
        None,
    )
    .await;
    let attempts = run(&granted, json!({"hold_udp": limit + 1})).await;
    assert_eq!(
        attempts[0]["detail"],
        format!("bound {}", limit + 1),
        "{attempts:?}"
    );
}

/// `toolhost conformance` names the socket destinations a tool's example
/// tried, as it does a URL's: the bind before each is not refused, so the
/// connect and the datagram are, each recorded with its address.
#[tokio::test]
async fn egress_conformance_names_socket_destinations() {
    let runtime = Arc::new(toolhost::Runtime::new(suite_options()).unwrap());
    let bytes = std::fs::read(probes::EGRESS_CORPUS).unwrap();
    let report = toolhost::conformance::check_component(runtime, "egress", &bytes).await;
    let row = |name: &str| {
        report
            .checks
            .iter()
            .find(|c| c.check == name)
            .unwrap_or_else(|| panic!("no {name} row: {report:#?}"))
    };
    let network = row("network:egress");
    assert_eq!(network.verdict, toolhost::conformance::Verdict::Warn);
    assert!(
        network
            .detail
            .contains("its calls ask for connect tcp://127.0.0.1:9, connect udp://127.0.0.1:9:"),
        "{network:?}"
    );
    assert_eq!(
        row("example:egress[0]").verdict,
        toolhost::conformance::Verdict::Pass
    );
    assert!(report.passed(), "{report:#?}");
}

/// A body that made a connection and then got stuck in a host system call
/// (reading a FIFO nobody writes) is abandoned at its deadline; its call
/// still reports the connection it made and the one it was refused: a
/// guest cannot hide its traffic by getting itself abandoned. (That nothing
/// it starts after that goes out is `runtime::store`'s unit test.)
#[tokio::test]
async fn egress_an_abandoned_body_keeps_its_network_records() {
    let target = Counted::start("127.0.0.1");
    let t = target.port;
    let ws = tempfile::tempdir().unwrap();
    let pipe = Fifo::make(ws.path().join("pipe"));
    let policy = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"tcp://127.0.0.1:{t}\"]\n"
    );
    let mut b = builder(
        probes::EGRESS_CORPUS,
        ws.path(),
        Limits {
            deadline: Duration::from_secs(5),
            ..Limits::default()
        },
        suite_options(),
    );
    b.policy(Policy::from_toml(&policy, "egress.toml").unwrap());
    let host = b.build().await.unwrap();
    let r = call(
        &host,
        "egress",
        json!({"tcp": [format!("127.0.0.1:{t}"), "127.0.0.2:9"], "then_read": "pipe"}),
        SandboxMode::ReadOnly,
    )
    .await;
    pipe.release();
    assert_eq!(r.code(), Some(toolhost::ErrorCode::Timeout), "{r:?}");
    assert_eq!(target.count_reaching(1), 1);
    let urls: Vec<&str> = r.receipt.network.iter().map(|n| n.url.as_str()).collect();
    assert_eq!(
        urls,
        [format!("tcp://127.0.0.1:{t}").as_str(), "tcp://127.0.0.2:9"],
        "{:?}",
        r.receipt.network
    );
    assert_eq!(record_codes(&r), [Value::Null, json!("address_refused")]);
    assert!(
        r.receipt
            .denied
            .iter()
            .any(|d| d.contains("tcp://127.0.0.2:9")),
        "{:?}",
        r.receipt.denied
    );
}

/// With a UDP grant, datagrams go to the granted address only: one sent to
/// another port of the same host, or to a private address, on a socket
/// connected to it or naming it in the datagram, is refused inside the
/// guest (`access-denied`), recorded, and never arrives.
#[tokio::test]
async fn egress_udp_sends_reach_only_granted_addresses() {
    let granted = UdpSocket::bind("127.0.0.1:0").unwrap();
    granted
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let other = UdpSocket::bind("127.0.0.1:0").unwrap();
    other.set_nonblocking(true).unwrap();
    let g = format!("127.0.0.1:{}", granted.local_addr().unwrap().port());
    let o = format!("127.0.0.1:{}", other.local_addr().unwrap().port());
    let policy =
        format!("version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"udp://{g}\"]\n");
    let (_ws, host) = egress_host(&policy, None).await;
    let r = call(
        &host,
        "egress",
        json!({"udp": [o], "udp_to": [o, "10.0.0.1:53", "169.254.169.254:53", g]}),
        SandboxMode::None,
    )
    .await;
    assert!(r.is_ok(), "{r:?}");
    let attempts = r.canonical["attempts"].as_array().unwrap();
    let oks: Vec<bool> = attempts.iter().map(|a| a["ok"] == true).collect();
    assert_eq!(oks, [false, false, false, false, true], "{attempts:?}");
    refused_with(&attempts[..4], "access-denied");
    let mut buf = [0u8; 64];
    let (n, _) = granted.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"escaped");
    match other.recv_from(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        got => panic!("an ungranted port received a datagram: {got:?}"),
    }
    assert_eq!(refused_urls(&r).len(), 4, "{:?}", r.receipt.network);
}

/// A policy rule's `tcp://` grant reaches the calls the rule matches and
/// no other: with no `[network]` section, a call whose first target is the
/// granted address binds and connects (the listener counts it); a call the
/// rule does not match is refused each connect (`address_refused`: a
/// loopback address no grant of its names), the granted address among
/// them, each destination recorded, and nothing more reaches the listener.
#[tokio::test]
async fn egress_a_rules_socket_grant_reaches_only_the_calls_it_matches() {
    let target = Counted::start("127.0.0.1");
    let t = target.port;
    let policy = format!(
        "version = 1\ndefault = \"allow\"\n\n[[rules]]\ntool = \"egress\"\ndecision = \"allow\"\n\
         args = [{{ pointer = \"/tcp/0\", glob = \"127.0.0.1:{t}\" }}]\nnetwork = [\"tcp://127.0.0.1:{t}\"]\n"
    );
    let (_ws, host) = egress_host(&policy, None).await;
    let r = call(
        &host,
        "egress",
        json!({"tcp": [format!("127.0.0.1:{t}")]}),
        SandboxMode::None,
    )
    .await;
    let attempts = r.canonical["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["ok"], true, "{attempts:?}");
    assert_eq!(target.count_reaching(1), 1);
    let rule = serde_json::to_value(&r.receipt.network[0]).unwrap();
    assert_eq!(
        rule["rule"],
        format!("rules[0].network[0] \"tcp://127.0.0.1:{t}\""),
        "{rule}"
    );

    let r = call(
        &host,
        "egress",
        json!({"tcp": ["127.0.0.2:9", format!("127.0.0.1:{t}")]}),
        SandboxMode::None,
    )
    .await;
    let attempts = r.canonical["attempts"].as_array().unwrap();
    refused_with(attempts, "access-denied");
    assert_eq!(
        refused_urls(&r),
        [
            "tcp://127.0.0.2:9".to_string(),
            format!("tcp://127.0.0.1:{t}")
        ]
    );
    assert_eq!(record_codes(&r), vec![json!("address_refused"); 2]);
    assert_eq!(target.count(), 1, "an unmatched call reached the listener");
}

/// TRACE echoes a request back, headers included, so a guest could read
/// the credential the host attaches to its origin; CONNECT would make the
/// host a tunnel. Granted origin and credential or not, neither is sent:
/// the guest gets `HTTP-request-method-invalid`, nothing reaches the
/// listener, and the receipt records `method_refused`.
#[tokio::test]
async fn egress_trace_and_connect_are_never_sent() {
    let target = Counted::start("127.0.0.1");
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("token");
    std::fs::write(&secret, "sk-conformance-secret\n").unwrap();
    let policy = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"http://127.0.0.1:{p}\"]\n\n\
         [[credentials]]\nhost = \"127.0.0.1\"\nscheme = \"http\"\nport = {p}\nheader = \"Authorization\"\nvalue_file = {f:?}\n",
        p = target.port,
        f = secret.display().to_string(),
    );
    let (_ws, host) = egress_host(&policy, None).await;
    for method in ["TRACE", "trace", "TRACK", "CONNECT"] {
        let url = format!("http://127.0.0.1:{}/", target.port);
        let r = call(
            &host,
            "egress",
            json!({"http": [url], "method": method}),
            SandboxMode::None,
        )
        .await;
        let attempts = r.canonical["attempts"].as_array().unwrap();
        assert_eq!(attempts[0]["ok"], false, "{method}: {attempts:?}");
        let detail = attempts[0]["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("HTTP-request-method-invalid"),
            "{method}: {detail}"
        );
        let codes = record_codes(&r);
        assert_eq!(codes, [json!("method_refused")], "{method}");
    }
    // Without any grant it is refused for its method too, not for want
    // of a grant: no policy could let it go (`toolhost conformance` then
    // does not list it among the destinations to grant).
    let (_ws, off) = egress_host("version = 1\ndefault = \"allow\"\n", None).await;
    let url = format!("http://127.0.0.1:{}/", target.port);
    let r = call(
        &off,
        "egress",
        json!({"http": [url], "method": "TRACE"}),
        SandboxMode::None,
    )
    .await;
    let codes = record_codes(&r);
    assert_eq!(codes, [json!("method_refused")]);
    assert_eq!(
        target.count(),
        0,
        "a TRACE or CONNECT request reached the listener"
    );
}

/// A request the host cannot read as an HTTP request it may send (a
/// scheme other than http and https, a method longer than 32 bytes) is
/// refused inside the guest with wasi:http's own error, never connects,
/// and is recorded like any refusal (a record and a `denied` line); what a
/// guest chose is kept bounded: 300 requests with a 100 KB method leave a
/// receipt of a few tens of KB, not 30 MB.
#[tokio::test]
async fn egress_unreadable_requests_are_refused_and_recorded_bounded() {
    let target = Counted::start("127.0.0.1");
    let p = target.port;
    let policy = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"http://127.0.0.1:{p}\"]\n"
    );
    let (_ws, host) = egress_host(&policy, None).await;
    let r = call(
        &host,
        "egress",
        json!({"http": [format!("ws://127.0.0.1:{p}/chat"), format!("ftp://127.0.0.1:{p}/f")]}),
        SandboxMode::None,
    )
    .await;
    let attempts = r.canonical["attempts"].as_array().unwrap();
    refused_with(attempts, "HTTP-protocol-error");
    let codes = record_codes(&r);
    assert_eq!(
        codes,
        vec![json!("unsupported_scheme"); 2],
        "{:?}",
        r.receipt
    );
    assert!(
        r.receipt
            .denied
            .iter()
            .any(|d| d.contains("ws://127.0.0.1")),
        "{:?}",
        r.receipt.denied
    );

    let method = "M".repeat(100_000);
    let urls = vec![format!("http://127.0.0.1:{p}/"); 300];
    let r = call(
        &host,
        "egress",
        json!({"http": urls, "method": method}),
        SandboxMode::None,
    )
    .await;
    let attempts = r.canonical["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 300);
    refused_with(attempts, "HTTP-request-method-invalid");
    let receipt = serde_json::to_string(&r.receipt).unwrap();
    assert!(
        receipt.len() < 200_000,
        "the receipt holds {} bytes",
        receipt.len()
    );
    assert!(
        r.receipt.network.iter().all(|n| {
            let v = serde_json::to_value(n).unwrap();
            v["code"] == "method_refused" && v["method"].as_str().is_some_and(|m| m.len() < 64)
        }),
        "{:?}",
        r.receipt.network.first()
    );
    assert_eq!(target.count(), 0, "an unreadable request connected");
}

/// Answers `n` requests on 127.0.0.1, one connection each, with the
/// request's head as the body: a server that echoes the credential the
/// host attached. Returns its port; the thread ends after the `n`th.
fn echo_heads(n: usize) -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(n) {
            let Ok(mut stream) = stream else { continue };
            let mut head = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                head.push_str(&line);
                line.clear();
            }
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{head}",
                head.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    port
}

/// The egress probe's GET of `path` on the echo server at `port`, passing
/// the body on (`echo`); its result and the messages of its progress
/// reports.
async fn echoed(host: &Host, port: u16, path: &str) -> (toolhost::CallResult, Vec<String>) {
    let reports = Arc::new(Mutex::new(Vec::new()));
    let mut request = toolhost::CallRequest::new(
        "egress",
        json!({"http": [format!("http://127.0.0.1:{port}{path}")], "echo": true}),
    )
    .mode(SandboxMode::None);
    let seen = reports.clone();
    request.progress = Some(Arc::new(move |p: &toolhost::Progress| {
        seen.lock()
            .unwrap()
            .push(p.message.clone().unwrap_or_default());
    }));
    let r = host.call(request).await;
    let reports = reports.lock().unwrap().clone();
    (r, reports)
}

/// A tool that passes on what a server echoed, the credential the host
/// attached among it, never gets the secret out: not in its progress
/// reports (which leave the host while the body runs, as MCP progress
/// notifications and task status messages), not in its log records, not
/// in its result.
#[tokio::test]
async fn egress_an_echoed_credential_never_leaves_through_progress_or_logs() {
    const SECRET: &str = "sk-conformance-echoed-0123456789";
    let port = echo_heads(1);
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("token");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    let policy = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"http://127.0.0.1:{port}\"]\n\n\
         [[credentials]]\nhost = \"127.0.0.1\"\nscheme = \"http\"\nport = {port}\nheader = \"Authorization\"\nvalue_file = {f:?}\nprefix = \"Bearer \"\n",
        f = secret.display().to_string(),
    );
    let (_ws, host) = egress_host(&policy, None).await;
    let (r, reports) = echoed(&host, port, "/echo").await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(reports.len(), 1, "{reports:?}");
    // The server did echo the header; the tool read it masked.
    assert!(
        reports[0].to_ascii_lowercase().contains(&format!(
            "authorization: bearer {}",
            "*".repeat(SECRET.len())
        )),
        "{reports:?}"
    );
    let everything = format!("{reports:?} {:?} {r:?}", r.receipt.logs);
    assert!(
        !everything.contains(SECRET),
        "the secret left the host: {everything}"
    );
    assert!(
        !everything.contains("sk-conformance-echoed"),
        "part of the secret left the host"
    );
}

/// The policy's `[post_execute]` text rules reach what a tool sends beside
/// its content: its progress reports (while the body runs) and its log
/// records. A `redact` match is replaced there as in the content; what
/// `block_matching` matches is withheld there as the result is blocked.
#[tokio::test]
async fn egress_post_execute_rules_screen_progress_and_logs() {
    let port = echo_heads(2);
    let policy = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"http://127.0.0.1:{port}\"]\n\n\
         [post_execute]\nredact = [\"sk-[a-z]{{6,}}\"]\nblock_matching = \"BEGIN-PRIVATE-KEY\"\n"
    );
    let (_ws, host) = egress_host(&policy, None).await;
    let (r, reports) = echoed(&host, port, "/echo?key=sk-abcdefgh").await;
    assert!(r.is_ok(), "{r:?}");
    let logs: Vec<String> = r.receipt.logs.iter().map(|l| l.message.clone()).collect();
    for text in [&reports, &logs] {
        assert_eq!(text.len(), 1, "{text:?}");
        assert!(
            text[0].contains("GET /echo?key=[REDACTED]") && !text[0].contains("sk-abcdefgh"),
            "{text:?}"
        );
    }

    let (r, reports) = echoed(&host, port, "/echo?BEGIN-PRIVATE-KEY").await;
    assert_eq!(
        r.error.as_ref().map(|e| e.code.to_string()).as_deref(),
        Some("POST_EXECUTE_BLOCKED"),
        "{r:?}"
    );
    let logs: Vec<String> = r.receipt.logs.iter().map(|l| l.message.clone()).collect();
    for text in [&reports, &logs] {
        assert_eq!(text.len(), 1, "{text:?}");
        assert!(
            text[0].contains("withheld") && !text[0].contains("BEGIN-PRIVATE-KEY"),
            "{text:?}"
        );
    }
}

/// A host for the `concurrent` probe granting `ports` on 127.0.0.1, with
/// a request time far beyond the call's 20 s deadline.
async fn concurrent_host(ports: &[u16]) -> (tempfile::TempDir, Host) {
    let grants: Vec<String> = ports
        .iter()
        .map(|p| format!("\"http://127.0.0.1:{p}\""))
        .collect();
    let policy = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [{}]\nrequest_timeout_ms = 600000\n",
        grants.join(", ")
    );
    let ws = tempfile::tempdir().unwrap();
    let mut b = builder(
        probes::EGRESS_CONCURRENT,
        ws.path(),
        Limits {
            deadline: Duration::from_secs(20),
            ..Limits::default()
        },
        suite_options(),
    );
    b.policy(Policy::from_toml(&policy, "egress.toml").unwrap());
    let host = b.build().await.unwrap();
    (ws, host)
}

/// The `concurrent` probe's outcomes for `args`.
async fn outcomes(host: &Host, args: Value) -> Vec<String> {
    let r = call(host, "concurrent", args, SandboxMode::None).await;
    assert!(r.is_ok(), "{r:?}");
    serde_json::from_value(r.canonical["outcomes"].clone()).unwrap()
}

/// `handle` never waits for the network: a guest that sends a request to a
/// server that never answers, then one to a server that does, gets the
/// second response while the first is still pending (a `handle` that waited
/// for the first response would hold the guest until its deadline).
#[test]
fn egress_concurrent() {
    in_each_place(|| async {
        let silent = Counted::start("127.0.0.1");
        let answering = echo_heads(1);
        let (_ws, host) = concurrent_host(&[silent.port, answering]).await;
        let urls = [
            format!("http://127.0.0.1:{}/never", silent.port),
            format!("http://127.0.0.1:{answering}/now"),
        ];
        let got = outcomes(&host, json!({"http": urls})).await;
        assert_eq!(got, ["pending", "status 200"]);
        assert_eq!(silent.count_reaching(1), 1);
    });
}

/// A guest that never waits on its responses, only asks for them (`get`)
/// between sleeps on a timer, still gets them, however its requests are
/// exchanged.
#[test]
fn egress_a_response_only_asked_for_comes() {
    in_each_place(|| async {
        let (a, b, c) = (echo_heads(1), echo_heads(1), echo_heads(1));
        let (_ws, host) = concurrent_host(&[a, b, c]).await;
        let urls = [
            format!("http://127.0.0.1:{a}/a"),
            format!("http://127.0.0.1:{b}/b"),
        ];
        let got = outcomes(&host, json!({"http": urls, "get_only": true})).await;
        assert_eq!(got, ["status 200", "status 200"]);
        // One alone, which only its looks drive.
        let alone = [format!("http://127.0.0.1:{c}/c")];
        let got = outcomes(&host, json!({"http": alone, "get_only": true})).await;
        assert_eq!(got, ["status 200"]);
    });
}

/// A request the guest sends and drops, never waiting on it nor asking for
/// it, keeps its record in the receipt: allowed, no status, and either not
/// sent (its exchange had not started when it was dropped) or no response
/// (it had: dropping the response's future ends its exchange, as
/// wasmtime-wasi-http's `handle` runs it, in a task of its own). A request
/// in a task of its own that has not started when the call ends is never
/// sent: `egress::call`'s
/// `a_request_not_started_when_the_receipt_is_taken_is_never_sent`.
#[test]
fn egress_a_request_never_waited_for_is_recorded_not_sent() {
    in_each_place(|| async {
        let target = Counted::start("127.0.0.1");
        let (_ws, host) = concurrent_host(&[target.port]).await;
        let url = format!("http://127.0.0.1:{}/dropped", target.port);
        let got = call(
            &host,
            "concurrent",
            json!({"http": [url], "never_wait": true}),
            SandboxMode::None,
        )
        .await;
        assert!(got.is_ok(), "{got:?}");
        assert_eq!(got.canonical["outcomes"], json!(["dropped"]));
        let records = serde_json::to_value(&got.receipt.network).unwrap();
        assert_eq!(records.as_array().map(Vec::len), Some(1), "{records}");
        assert_eq!(records[0]["decision"], "allowed", "{records}");
        assert!(records[0]["status"].is_null(), "{records}");
        let error = records[0]["error"].as_str().unwrap_or_default();
        assert!(
            error.starts_with("not sent") || error.starts_with("no response"),
            "{records}"
        );
        // At most the one connection it may have started, never answered.
        assert!(target.count() <= 1);
    });
}

/// An allowed request that fails before its response (here, a granted
/// loopback port nobody listens on) keeps why in its record.
#[test]
fn egress_a_failed_request_records_why() {
    in_each_place(|| async {
        // Bound, never listening: the port stays this test's, and refuses.
        let closed = tokio::net::TcpSocket::new_v4().unwrap();
        closed.bind(([127, 0, 0, 1], 0).into()).unwrap();
        let port = closed.local_addr().unwrap().port();
        let (_ws, host) = concurrent_host(&[port]).await;
        let url = format!("http://127.0.0.1:{port}/nobody");
        let r = call(
            &host,
            "concurrent",
            json!({"http": [url], "sequential": true}),
            SandboxMode::None,
        )
        .await;
        assert!(
            r.canonical["outcomes"][0]
                .as_str()
                .is_some_and(|o| o.starts_with("error")),
            "{r:?}"
        );
        let records = serde_json::to_value(&r.receipt.network).unwrap();
        assert_eq!(records[0]["decision"], "allowed", "{records}");
        assert!(records[0]["status"].is_null(), "{records}");
        let error = records[0]["error"].as_str().unwrap_or_default();
        assert!(error.starts_with("connection error"), "{records}");
    });
}

/// Answers one request on 127.0.0.1 with `first`, then with `rest` after
/// `pause` (or, without one, once the returned sender is dropped).
fn staged(
    first: &'static str,
    pause: Option<Duration>,
    rest: &'static str,
) -> (u16, std::sync::mpsc::Sender<()>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let (release, released) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let Some(Ok(mut stream)) = listener.incoming().next() else {
            return;
        };
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
            line.clear();
        }
        let _ = stream.write_all(first.as_bytes());
        let _ = match pause {
            Some(p) => released.recv_timeout(p).ok(),
            None => released.recv().ok(),
        };
        let _ = stream.write_all(rest.as_bytes());
    });
    (port, release)
}

/// A server on 127.0.0.1 that answers one connection with `100 Continue`
/// heads, one every 200 µs, for at most 30 s or until the connection is
/// gone; the response's real head never comes. Returns its port and the
/// count of heads it sent.
fn dribbling() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = sent.clone();
    std::thread::spawn(move || {
        // The call connects within its 20 s deadline, or never.
        let until = std::time::Instant::now() + Duration::from_secs(30);
        listener.set_nonblocking(true).unwrap();
        let mut stream = loop {
            match listener.accept() {
                Ok((stream, _)) => break stream,
                Err(_) if std::time::Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return,
            }
        };
        stream.set_nonblocking(false).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
            line.clear();
        }
        while std::time::Instant::now() < until
            && stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").is_ok()
        {
            counted.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_micros(200));
        }
    });
    (port, sent)
}

/// A server that keeps sending a little (interim heads, which the client
/// skips) cannot hold the call past the guest's first-byte timeout, in any
/// place the call runs: the host's waits for the socket give the call's
/// timers their turn.
#[test]
fn egress_a_dribbling_server_cannot_hold_the_call() {
    in_each_place(|| async {
        let (port, sent) = dribbling();
        let (_ws, host) = concurrent_host(&[port]).await;
        let started = std::time::Instant::now();
        let got = outcomes(
            &host,
            json!({"http": [format!("http://127.0.0.1:{port}/")], "sequential": true,
                   "first_byte_timeout_ms": 300}),
        )
        .await;
        assert_eq!(got, ["error ErrorCode::ConnectionReadTimeout"]);
        // Heads kept coming while the call waited.
        assert!(sent.load(Ordering::SeqCst) >= 3, "{sent:?}");
        // Long before the server's 30 s of interim heads end.
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    });
}

/// The guest's request options hold as wasi:http defines them, each for
/// its own phase and within the request's time: a first-byte timeout ends
/// a wait for a head that never comes; a between-bytes timeout ends a body
/// that stops; a connect timeout does not cut a body that takes longer.
/// And options passed with every request do not fill the call's resource
/// table (the guest gives them away with each request).
#[test]
fn egress_concurrent_request_options() {
    in_each_place(|| async {
        let silent = Counted::start("127.0.0.1");
        let head = "HTTP/1.1 200 OK\r\ncontent-length: 10\r\nconnection: close\r\n\r\nhello";
        let (stalls, _hold) = staged(head, None, "world");
        let (slow, _release) = staged(head, Some(Duration::from_millis(1500)), "world");
        let (paused, _later) = staged(head, Some(Duration::from_millis(100)), "world");
        let (_ws, host) = concurrent_host(&[silent.port, stalls, slow, paused]).await;
        let one = |port: u16, timeouts: Value| {
            let mut args = json!({"http": [format!("http://127.0.0.1:{port}/")], "sequential": true, "read_body": true});
            args.as_object_mut()
                .unwrap()
                .extend(timeouts.as_object().unwrap().clone());
            args
        };
        let got = outcomes(
            &host,
            one(silent.port, json!({"first_byte_timeout_ms": 300})),
        )
        .await;
        assert_eq!(got, ["error ErrorCode::ConnectionReadTimeout"]);
        // Ended by the gap, long before the request's time (the call's 20 s).
        let started = std::time::Instant::now();
        let got = outcomes(&host, one(stalls, json!({"between_bytes_timeout_ms": 300}))).await;
        assert_eq!(got, ["status 200, body error connection read timeout"]);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        // The guest's own pause between reads is not the server's gap: the
        // rest came 100 ms after the first part, while the guest paused 800 ms.
        let got = outcomes(
            &host,
            one(
                paused,
                json!({"between_bytes_timeout_ms": 300, "pause_ms": 800}),
            ),
        )
        .await;
        assert_eq!(got, ["status 200, 10 bytes"]);
        let got = outcomes(&host, one(slow, json!({"connect_timeout_ms": 1000}))).await;
        assert_eq!(got, ["status 200, 10 bytes"]);
        // 1100 refused requests, each with its options: more than the call's
        // 1024 resources.
        let refused = vec!["http://127.0.0.2:9/"; 1100];
        let got = outcomes(
            &host,
            json!({"http": refused, "sequential": true, "connect_timeout_ms": 1000}),
        )
        .await;
        let refused = got
            .iter()
            .filter(|o| *o == "error ErrorCode::DestinationIpProhibited")
            .count();
        assert_eq!((got.len(), refused), (1100, 1100), "{:?}", got.last());
    });
}
