//! Capabilities beyond the filesystem (DESIGN.md §2): a tool sees no
//! environment, arguments or stdin, cannot reach the network, gets working
//! clocks and randomness, and cannot flood the host through its `host`
//! interface. Stdout/stderr floods are checked in `runtime`.

use crate::common::*;
use serde_json::{Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolhost::{ErrorCode, Limits, SandboxMode};

toolhost_conformance::foreach_capability!(assert_test_exists);

/// In every mode: no environment (except `PWD` in `danger-full-access`),
/// no arguments, an empty stdin; clocks that tell the host's time and
/// advance across a sleep; random bytes that differ between draws and calls.
#[tokio::test]
async fn capability_ambient() {
    let ws = tempfile::tempdir().unwrap();
    let ws_path = ws.path().canonicalize().unwrap().display().to_string();
    let host = host_with(probes::CAPABILITY_AMBIENT, ws.path(), Limits::default()).await;
    let mut draws = Vec::new();
    for mode in [
        SandboxMode::None,
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::DangerFullAccess,
    ] {
        let r = call(&host, "ambient", json!({}), mode).await;
        assert!(r.is_ok(), "{mode}: {r:?}");
        let out = &r.canonical;
        let strings = |key: &str| -> Vec<String> {
            out[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        let expected_env: Vec<String> = if mode == SandboxMode::DangerFullAccess {
            vec![format!("PWD={ws_path}")]
        } else {
            Vec::new()
        };
        assert_eq!(strings("env"), expected_env, "{mode}: wasi environment");
        assert_eq!(strings("std_env"), expected_env, "{mode}: std::env::vars");
        assert_eq!(strings("args"), Vec::<String>::new(), "{mode}: arguments");
        let cwd = out["initial_cwd"].as_str();
        if mode == SandboxMode::DangerFullAccess {
            assert_eq!(cwd, Some(ws_path.as_str()), "{mode}: initial cwd");
        } else {
            assert_eq!(cwd, None, "{mode}: initial cwd");
        }
        assert_eq!(
            out["stdin"], "closed",
            "{mode}: stdin must be empty and closed"
        );

        // Clocks and randomness work; they are not an escape.
        let host_now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let wall = out["wall_secs"].as_u64().unwrap();
        assert!(
            wall.abs_diff(host_now) < 3600,
            "{mode}: guest wall clock {wall} vs host {host_now}"
        );
        let slept = Duration::from_nanos(out["slept_ns"].as_u64().unwrap());
        assert!(
            slept >= Duration::from_millis(19) && slept < Duration::from_secs(10),
            "{mode}: a 20 ms sleep measured {slept:?} on the monotonic clock"
        );
        let random = strings("random");
        assert_eq!(random.len(), 2);
        for r in &random {
            assert_eq!(r.len(), 32, "{mode}: 16 random bytes in hex: {r}");
            assert_ne!(r, &"0".repeat(32), "{mode}: random bytes are all zero");
        }
        assert_ne!(random[0], random[1], "{mode}: two draws are equal");
        draws.extend(random);
    }
    let distinct: std::collections::BTreeSet<_> = draws.iter().collect();
    assert_eq!(
        distinct.len(),
        draws.len(),
        "random draws repeat across calls"
    );
}

/// TCP connect and UDP send to ports the test listens on, and a lookup of
/// `localhost`, all fail, through the WASI interfaces and through
/// `std::net`; the host's listeners never see anything. Every address the
/// guest tried to use is refused by the host's address check and listed in
/// the receipt's `denied`; so is the name lookup, refused at once with
/// `access-denied`.
#[tokio::test]
async fn capability_net() {
    let ws = tempfile::tempdir().unwrap();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let args = json!({
        "tcp_port": tcp.local_addr().unwrap().port(),
        "udp_port": udp.local_addr().unwrap().port(),
    });
    let host = host_with(probes::CAPABILITY_NET, ws.path(), Limits::default()).await;
    for mode in [SandboxMode::None, SandboxMode::DangerFullAccess] {
        let r = call(&host, "net", args.clone(), mode).await;
        assert!(r.is_ok(), "{mode}: {r:?}");
        let out = r.canonical.as_object().unwrap();
        for (what, attempt) in out {
            assert_eq!(
                attempt["ok"],
                Value::Bool(false),
                "{mode}: {what} must fail: {attempt}"
            );
        }
        for what in ["tcp_connect", "udp_send", "lookup_localhost"] {
            let detail = out[what]["detail"].as_str().unwrap();
            assert!(
                detail.contains("access-denied"),
                "{mode}: {what} must be refused by the host, not fail by accident: {detail}"
            );
        }
        assert!(
            r.receipt.denied.iter().all(|d| d.starts_with("network: ")),
            "{mode}: {:?}",
            r.receipt.denied
        );
        assert!(
            r.receipt
                .denied
                .iter()
                .any(|d| d.starts_with("network: lookup \"localhost\": ")),
            "{mode}: {:?}",
            r.receipt.denied
        );
        // A bind to port 0 reaches nothing and is not refused: the
        // connect and the datagram are, each recorded with where it was
        // going, by wasip2 calls and by the standard library's sockets.
        assert!(
            !r.receipt.denied.iter().any(|d| d.contains("Bind")),
            "{mode}: {:?}",
            r.receipt.denied
        );
        let refused: Vec<(String, Value)> = r
            .receipt
            .network
            .iter()
            .map(|n| {
                (
                    n.url.clone(),
                    serde_json::to_value(n).unwrap()["code"].clone(),
                )
            })
            .collect();
        let (t, u) = (&args["tcp_port"], &args["udp_port"]);
        let off = json!("network_off");
        assert_eq!(
            refused,
            [
                (format!("tcp://127.0.0.1:{t}"), off.clone()),
                (format!("udp://127.0.0.1:{u}"), off.clone()),
                (format!("tcp://127.0.0.1:{t}"), off.clone()),
                (format!("udp://127.0.0.1:{u}"), off),
            ],
            "{mode}"
        );
    }
    assert_nothing_reached(&tcp, &udp);
}

/// Asserts that no connection reached `tcp` and no datagram `udp` (both
/// non-blocking).
fn assert_nothing_reached(tcp: &std::net::TcpListener, udp: &std::net::UdpSocket) {
    match tcp.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the host's TCP listener saw a connection: {other:?}"),
    }
    let mut buf = [0u8; 64];
    match udp.recv_from(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the host's UDP socket received a datagram: {other:?}"),
    }
}

/// A policy's network grants reach only tools that declare the side
/// effect `external`: the same probe (which declares none), with its exact
/// TCP and UDP addresses granted, is refused every attempt, each recorded
/// as `not_external`, and nothing reaches the listeners.
#[tokio::test]
async fn network_grants_do_not_reach_a_tool_that_does_not_declare_external() {
    let ws = tempfile::tempdir().unwrap();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let (t, u) = (
        tcp.local_addr().unwrap().port(),
        udp.local_addr().unwrap().port(),
    );
    let policy = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"tcp://127.0.0.1:{t}\", \"udp://127.0.0.1:{u}\"]\n"
    );
    let mut b = builder(
        probes::CAPABILITY_NET,
        ws.path(),
        Limits::default(),
        suite_options(),
    );
    b.policy(toolhost::policy::Policy::from_toml(&policy, "test.toml").unwrap());
    let host = b.build().await.unwrap();
    assert!(!host.may_reach_network("net"));
    let r = call(
        &host,
        "net",
        json!({"tcp_port": t, "udp_port": u}),
        SandboxMode::None,
    )
    .await;
    assert!(r.is_ok(), "{r:?}");
    for what in ["tcp_connect", "udp_send", "std_tcp_connect", "std_udp_send"] {
        let attempt = &r.canonical[what];
        assert_eq!(attempt["ok"], false, "{what}: {attempt}");
    }
    assert!(
        !r.receipt.denied.is_empty()
            && r.receipt
                .denied
                .iter()
                .all(|d| d.ends_with(": not_external")),
        "{:?}",
        r.receipt.denied
    );
    assert_nothing_reached(&tcp, &udp);
}

/// The `host` interface abused: one 10 MiB log message is kept cut to
/// 4096 bytes, 100 000 records keep only 256, and 1 000 000 progress reports
/// are all counted; the call still succeeds, and the next call starts with
/// empty buffers.
#[tokio::test]
async fn capability_host_abuse() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(probes::CAPABILITY_HOST_ABUSE, ws.path(), Limits::default()).await;
    let r = call(
        &host,
        "flood",
        json!({"huge_log_bytes": 10 << 20, "records": 100_000, "progress": 1_000_000}),
        SandboxMode::None,
    )
    .await;
    assert!(r.is_ok(), "{:?}", r.error);
    assert_eq!(r.canonical, json!({"done": true}));
    assert_eq!(r.receipt.logs.len(), 256, "only 256 log records are kept");
    let huge = &r.receipt.logs[0].message;
    assert!(huge.starts_with("LLLL"), "the huge message comes first");
    let kept = huge.trim_end_matches('…');
    assert_eq!(kept.len(), 4096, "the huge message is cut to 4096 bytes");
    assert_eq!(r.receipt.logs[1].message, "record 0");
    assert_eq!(r.receipt.logs[255].message, "record 254");
    assert_eq!(r.receipt.progress_reports, 1_000_000);

    let small = call(
        &host,
        "flood",
        json!({"huge_log_bytes": 0, "records": 1, "progress": 1}),
        SandboxMode::None,
    )
    .await;
    assert!(small.is_ok(), "{small:?}");
    assert_eq!(small.receipt.logs.len(), 1);
    assert_eq!(small.receipt.progress_reports, 1);
}

/// A component that imports wasi:sockets (as every componentize-py
/// component does) is not a contract violation: the host grants no network,
/// so conformance warns and explains. No row fails for the imports; the
/// one that fails is the body's own doing: run with generated arguments
/// (it has no examples), it tries the network while it declares side
/// effect `none`, which no policy can grant.
#[tokio::test]
async fn network_imports_are_a_warning_in_conformance() {
    let runtime = std::sync::Arc::new(toolhost::Runtime::new(suite_options()).unwrap());
    let bytes = std::fs::read(probes::CAPABILITY_NET).unwrap();
    let report = toolhost::conformance::check_component(runtime, "net", &bytes).await;
    let rows: Vec<_> = report
        .checks
        .iter()
        .filter(|c| c.check.starts_with("capabilities:"))
        .collect();
    assert!(!rows.is_empty(), "{report:#?}");
    for row in rows {
        assert_eq!(row.verdict, toolhost::conformance::Verdict::Warn, "{row:?}");
        assert!(
            row.detail.contains("wasi:sockets/")
                && row
                    .detail
                    .contains("only a policy's grants ([network], a rule's network) open them"),
            "{row:?}"
        );
    }
    let failed: Vec<_> = report
        .checks
        .iter()
        .filter(|c| c.verdict == toolhost::conformance::Verdict::Fail)
        .collect();
    assert_eq!(failed.len(), 1, "{report:#?}");
    assert_eq!(failed[0].check, "generated:net", "{report:#?}");
    assert!(
        failed[0]
            .detail
            .contains("only tools that declare `external` are granted network"),
        "{report:#?}"
    );
}

/// A tool that understates its side effect (declares `read`, writes) under
/// a policy that gives calls `workspace-write` and asks before any tool that
/// declares writes: nobody is asked, and the tool is granted no write either.
/// It runs read-only (recorded so), every write it tries fails inside the
/// guest, the workspace is unchanged, and its intent is not durable (nothing
/// was granted that could change anything). An escalation would grant it
/// nothing, so one is refused. An honest `write` tool in the same host is
/// asked, and refused when the answer is no.
#[tokio::test]
async fn capability_understated_write() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "alpha").unwrap();
    let policy = r#"
version = 1
default = "allow"
mode = "workspace-write"

[[rules]]
tool = "*"
side_effect = ["write", "external"]
decision = "ask"
reason = "writes are asked about"
"#;
    let host = host_asking_no(probes::CAPABILITY_UNDERSTATED_WRITE, ws.path(), policy).await;
    let before = snapshot(ws.path());
    let ops = json!({ "ops": [
        {"op": "read", "path": "a.txt"},
        {"op": "write", "path": "a.txt", "data": "overwritten"},
        {"op": "create_new", "path": "new.txt"},
        {"op": "mkdir", "path": "d"},
        {"op": "remove_file", "path": "a.txt"},
        {"op": "rename", "from": "a.txt", "to": "b.txt"},
        {"op": "write", "path": "/tmp/scratch.txt", "data": "x"},
    ]});
    let r = host
        .call(toolhost::CallRequest::new("fs", ops.clone()))
        .await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.receipt.mode, Some(SandboxMode::ReadOnly), "{r:?}");
    let results = r.canonical["results"].as_array().unwrap();
    assert_eq!(results[0]["ok"], true, "the read works: {results:?}");
    assert_eq!(results[0]["detail"], "alpha", "{results:?}");
    for (i, o) in results.iter().enumerate().skip(1) {
        assert_eq!(o["ok"], false, "op {i} must fail: {o}");
    }
    assert_eq!(snapshot(ws.path()), before, "the workspace changed");
    let events = host.log().events().unwrap();
    assert!(
        !events
            .iter()
            .any(|e| e.call_id == r.call_id && e.kind == toolhost::log::EventKind::ApprovalAsked),
        "nobody is asked about a tool that declares `read`: {events:?}"
    );
    let intent = events
        .iter()
        .find(|e| e.call_id == r.call_id && e.kind == toolhost::log::EventKind::ToolIntent)
        .unwrap_or_else(|| panic!("no intent: {events:?}"));
    assert_eq!(intent.payload["mode"], "read-only", "{intent:?}");

    // Escalating it would grant nothing: refused before anyone is asked.
    let r = host
        .call(
            toolhost::CallRequest::new("fs", ops)
                .mode(SandboxMode::ReadOnly)
                .escalate(SandboxMode::DangerFullAccess, "need to write"),
        )
        .await;
    assert_eq!(
        r.code(),
        Some(toolhost::ErrorCode::EscalationInvalid),
        "{r:?}"
    );

    // The honest tool is asked, and the answer no keeps it out.
    let r = host
        .call(toolhost::CallRequest::new(
            "write_file",
            json!({"path": "a.txt", "content": "overwritten"}),
        ))
        .await;
    assert_eq!(
        r.code(),
        Some(toolhost::ErrorCode::ApprovalRejected),
        "{r:?}"
    );
    assert_eq!(snapshot(ws.path()), before, "the workspace changed");
}

/// A host of `probe` and the embedded tools under `policy` (TOML), whose
/// approver answers every question no.
async fn host_asking_no(probe: &str, ws: &std::path::Path, policy: &str) -> toolhost::Host {
    let mut b = builder(probe, ws, Limits::default(), suite_options());
    b.embedded_tools()
        .policy(toolhost::policy::Policy::from_toml(policy, "test.toml").unwrap())
        .approver(Box::new(toolhost::FixedApprover(
            toolhost::ApprovalOutcome::Rejected,
        )));
    b.build().await.unwrap()
}

/// A tool that declares `none` but runs with the workspace preopened can
/// read it, so the policy sees its call as a read: a rule that asks before
/// reads asks (and the answer no keeps the tool from running). In mode
/// `none` it cannot read and is seen as declared.
#[tokio::test]
async fn capability_understated_read() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("secret.txt"), "alpha").unwrap();
    let policy = r#"
version = 1
default = "allow"
mode = "read-only"

[[rules]]
tool = "*"
side_effect = ["read"]
decision = "ask"
reason = "reads are asked about"
"#;
    let host = host_asking_no(probes::CAPABILITY_UNDERSTATED_READ, ws.path(), policy).await;
    let ops = json!({ "ops": [{"op": "read", "path": "secret.txt"}] });
    let r = host
        .call(toolhost::CallRequest::new("fs", ops.clone()))
        .await;
    assert_eq!(
        r.code(),
        Some(toolhost::ErrorCode::ApprovalRejected),
        "{r:?}"
    );
    assert!(!format!("{r:?}").contains("alpha"), "{r:?}");
    let events = host.log().events().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.call_id == r.call_id && e.kind == toolhost::log::EventKind::ApprovalAsked),
        "the read is asked about: {events:?}"
    );
    // In mode `none` nothing is preopened: no question, and no read.
    let r = host
        .call(toolhost::CallRequest::new("fs", ops).mode(SandboxMode::None))
        .await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.receipt.mode, Some(SandboxMode::None), "{r:?}");
    assert_eq!(r.canonical["results"][0]["ok"], false, "{r:?}");
}

/// A guest that holds ever more host resources without any grant: socket
/// objects (a host file descriptor each, created before any address is
/// checked), opened files (in `read-only`) and wasi:http header fields
/// (host memory). A hundred are fine; five thousand end the call
/// `MEMORY_LIMIT` at the per-call cap, and the host's open descriptors are
/// back where they were once the call has ended.
#[tokio::test]
async fn capability_handle_flood() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("f.txt"), "x").unwrap();
    let host = host_with(
        probes::CAPABILITY_HANDLE_FLOOD,
        ws.path(),
        Limits::default(),
    )
    .await;
    let open_fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let before = open_fds();
    for (what, mode) in [
        ("tcp", SandboxMode::None),
        ("udp", SandboxMode::None),
        ("files", SandboxMode::ReadOnly),
        ("fields", SandboxMode::None),
    ] {
        let args = |count: u32| json!({"what": what, "count": count, "path": "f.txt"});
        let r = call(&host, "handle_flood", args(100), mode).await;
        assert!(r.is_ok(), "{what}: {r:?}");
        assert_eq!(r.canonical, json!({"held": 100}), "{what}");
        let r = call(&host, "handle_flood", args(5000), mode).await;
        assert_eq!(r.code(), Some(ErrorCode::MemoryLimit), "{what}: {r:?}");
        let message = &r.error.as_ref().unwrap().message;
        assert!(message.contains("host resources"), "{what}: {message}");
    }
    // Other tests of this binary run at the same time: a margin for theirs.
    let after = open_fds();
    assert!(
        after < before + 200,
        "descriptors held after the calls: {before} before, {after} after"
    );
}
