//! Audit on every path (issue 18, item 7): each call, however it ends, has
//! exactly one after-call record — the `audit` of its one `tool/result`
//! event and one [`AfterCall`] handed to each observer — with its duration;
//! observers are off the call's path and bounded. And approval
//! announcements: pending and decided, to listeners, bounded.

use super::layers::{builder_for, cases};
use super::*;
use std::sync::Mutex;
use std::sync::mpsc;
use toolhost::log::{FailingStorage, MemStorage, Op, SessionLog};
use toolhost::{AfterCall, ApprovalAnnouncement, CallResult, Host, HostBuilder, Limits, Observer};

/// How long a test waits for a record it is owed before it fails.
const OWED: Duration = Duration::from_secs(30);

/// Sends every after-call record to the test.
struct Channel(Mutex<mpsc::Sender<AfterCall>>);

impl Observer for Channel {
    fn after_call(&self, record: &AfterCall) {
        let _ = self.0.lock().unwrap().send(record.clone());
    }
}

fn observed(b: &mut HostBuilder) -> mpsc::Receiver<AfterCall> {
    let (tx, rx) = mpsc::channel();
    b.observer(Box::new(Channel(Mutex::new(tx))));
    rx
}

/// The next record, which must be `r`'s, agreeing with its `tool/result`
/// event's `audit` when the log could take it.
fn assert_one_record(
    host: &Host,
    rx: &mpsc::Receiver<AfterCall>,
    r: &CallResult,
    logged: bool,
    name: &str,
) -> AfterCall {
    let record = rx
        .recv_timeout(OWED)
        .unwrap_or_else(|e| panic!("{name}: no after-call record: {e}"));
    assert_eq!(
        record.call_id, r.call_id,
        "{name}: a record of another call"
    );
    assert_eq!(record.code, r.code(), "{name}");
    assert_eq!(record.status, r.status, "{name}");
    assert_eq!(record.tool, r.tool, "{name}");
    assert_eq!(record.result.call_id, r.call_id, "{name}");
    if logged {
        // `result_event` asserts there is exactly one tool/result.
        let audit = result_event(host, r)["audit"].clone();
        assert_eq!(
            audit["duration_us"].as_u64(),
            Some(u64::try_from(record.duration.as_micros()).unwrap()),
            "{name}: the log and the observer disagree on the duration: {audit}"
        );
        assert_eq!(audit["principal"], record.principal.as_str(), "{name}");
        assert_eq!(audit["scope"], json!(record.scope), "{name}");
    }
    record
}

/// Proves that nothing more was recorded for the calls before: the next
/// record is this call's.
async fn assert_nothing_more(host: &Host, rx: &mpsc::Receiver<AfterCall>, name: &str) {
    let sentinel = host.call(CallRequest::new("sentinel", json!({}))).await;
    assert_one_record(host, rx, &sentinel, true, &format!("{name} (sentinel)"));
}

#[tokio::test]
async fn every_refusal_path_of_the_governance_suite_has_exactly_one_after_call_record() {
    let mut codes = std::collections::BTreeSet::new();
    for c in cases() {
        let ws = workspace();
        std::fs::write(ws.path().join("a.txt"), "hello").unwrap();
        let mut b = builder_for(&c, ws.path());
        let rx = observed(&mut b);
        let host = b.build().await.unwrap();
        let r = host.call(c.request.clone()).await;
        let record = assert_one_record(&host, &rx, &r, true, c.name);
        let principal = c.request.principal.as_deref().unwrap_or("local");
        assert_eq!(record.principal, principal, "{}", c.name);
        assert_eq!(record.scope, c.request.scope, "{}", c.name);
        assert_nothing_more(&host, &rx, c.name).await;
        codes.insert(r.code().map(|c| c.as_str()).unwrap_or("OK"));
    }
    assert_eq!(
        codes.into_iter().collect::<Vec<_>>(),
        [
            "APPROVAL_CANCELLED",
            "APPROVAL_REJECTED",
            "APPROVAL_UNAVAILABLE",
            "ESCALATION_INVALID",
            "GUARD_DENIED",
            "INVALID_ARGS",
            "OK",
            "POLICY_DENIED",
            "SANDBOX_UNAVAILABLE",
            "UNKNOWN_TOOL",
        ]
    );
}

const LIMITED: &str = r#"
version = 1
mode = "workspace-write"
[[rate_limits.tools]]
tool = "write_file"
calls = 1
per_seconds = 3600
[post_execute]
block_matching = "BLOCK-ME"
[subagents]
withheld = ["list_dir"]
"#;

#[tokio::test]
async fn paths_after_admission_and_outside_the_refusals_have_exactly_one_record_too() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "hello").unwrap();
    std::fs::write(ws.path().join("blocked.txt"), "BLOCK-ME").unwrap();
    let mut b = builder(ws.path());
    b.policy(policy(LIMITED))
        .limits(Limits {
            deadline: Duration::from_millis(300),
            ..Limits::default()
        })
        .scope("lead", ScopeSpec::default())
        .scope(
            "helper",
            ScopeSpec {
                parent: Some("lead".into()),
                ..ScopeSpec::default()
            },
        );
    let rx = observed(&mut b);
    let host = b.build().await.unwrap();
    let read = |p: &str| CallRequest::new("read_file", json!({ "path": p }));
    let cancelled = Interrupt::default();
    cancelled.cancel();
    let paths: Vec<(&str, CallRequest, Option<ErrorCode>)> = vec![
        ("ok", read("a.txt"), None),
        (
            "tool error",
            read("missing.txt"),
            Some(ErrorCode::ToolError),
        ),
        (
            "timeout",
            CallRequest::new("sleep", json!({ "ms": 20_000 })),
            Some(ErrorCode::Timeout),
        ),
        (
            "post-execute blocked",
            read("blocked.txt"),
            Some(ErrorCode::PostExecuteBlocked),
        ),
        ("first write", write("w.txt", "1"), None),
        (
            "rate limited",
            write("w2.txt", "2"),
            Some(ErrorCode::RateLimited),
        ),
        (
            "cancelled before dispatch",
            read("a.txt").interrupt(cancelled),
            Some(ErrorCode::Cancelled),
        ),
        (
            "withheld from a subagent",
            CallRequest::new("list_dir", json!({ "path": "." })).scope("helper"),
            Some(ErrorCode::PolicyDenied),
        ),
        (
            "a subagent's other tools",
            read("a.txt").scope("helper"),
            None,
        ),
    ];
    for (name, request, code) in paths {
        let scope = request.scope.clone();
        let r = host.call(request).await;
        assert_eq!(r.code(), code, "{name}: {r:?}");
        let record = assert_one_record(&host, &rx, &r, true, name);
        assert_eq!(record.scope, scope, "{name}");
    }
    // A batch: one record per call, in call order.
    let batch = host
        .call_batch(vec![
            read("a.txt"),
            CallRequest::new("nope", json!({})),
            read("missing.txt"),
        ])
        .await;
    for r in &batch {
        assert_one_record(&host, &rx, r, true, "batch");
    }
    assert_nothing_more(&host, &rx, "after the batch").await;
    assert_eq!(host.observer_drops(), 0);
}

#[tokio::test]
async fn an_abort_before_dispatch_is_observed_once_though_the_log_is_broken() {
    let ws = workspace();
    let storage = FailingStorage::healthy(MemStorage::new(), &Op::ALL);
    let fault = storage.handle();
    let log = Arc::new(SessionLog::open_with_backend(storage).unwrap());
    let mut b = builder(ws.path());
    b.policy(policy(super::ASK_WRITES))
        .approver(Box::new(Counting::new(ApprovalOutcome::AllowedOnce)))
        .guard(Box::new(BreakStorage {
            fault,
            poison: None,
        }))
        .session_log(log);
    let rx = observed(&mut b);
    let host = b.build().await.unwrap();
    let r = host.call(write("out.txt", "x")).await;
    assert_eq!(r.code(), Some(ErrorCode::AbortedBeforeDispatch), "{r:?}");
    // The log refuses every write now: the observer's record is the audit.
    assert_one_record(&host, &rx, &r, false, "aborted");
    let again = host.call(write("out.txt", "x")).await;
    assert_one_record(&host, &rx, &again, false, "aborted again");
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

/// Blocks inside its first record until the test lets it go.
struct Stuck {
    entered: Mutex<mpsc::Sender<()>>,
    release: Mutex<mpsc::Receiver<()>>,
    seen: Mutex<mpsc::Sender<String>>,
}

impl Observer for Stuck {
    fn after_call(&self, record: &AfterCall) {
        let first = self.entered.lock().unwrap().send(()).is_ok();
        if first {
            let _ = self.release.lock().unwrap().recv_timeout(OWED);
        }
        let _ = self.seen.lock().unwrap().send(record.call_id.clone());
    }
}

#[tokio::test]
async fn a_stuck_observer_holds_up_no_call_and_what_overflows_its_queue_is_dropped_and_counted() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "hello").unwrap();
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let (seen_tx, seen) = mpsc::channel();
    let mut b = builder(ws.path());
    b.observer(Box::new(Stuck {
        entered: Mutex::new(entered_tx),
        release: Mutex::new(release_rx),
        seen: Mutex::new(seen_tx),
    }))
    .observer_queue(2);
    let host = b.build().await.unwrap();
    let read = || CallRequest::new("read_file", json!({ "path": "a.txt" }));
    let first = host.call(read()).await;
    entered
        .recv_timeout(OWED)
        .expect("the observer got the first record");
    // Only the first `entered` send may succeed: later ones find the
    // receiver gone.
    drop(entered);
    // The observer is stuck in the first record: four more calls end all
    // the same; two fit its queue, two are dropped.
    let mut ids = Vec::new();
    for _ in 0..4 {
        let r = host.call(read()).await;
        assert!(r.is_ok(), "{r:?}");
        ids.push(r.call_id.clone());
    }
    assert_eq!(host.observer_drops(), 2);
    release.send(()).unwrap();
    let got: Vec<String> = (0..3).map(|_| seen.recv_timeout(OWED).unwrap()).collect();
    assert_eq!(
        got,
        [first.call_id.clone(), ids[0].clone(), ids[1].clone()],
        "the stuck observer saw the queued records, in order"
    );
    // Its queue is empty again: the next record reaches it, not a dropped one.
    let last = host.call(read()).await;
    assert_eq!(seen.recv_timeout(OWED).unwrap(), last.call_id);
    assert_eq!(host.observer_drops(), 2);
}

// ─────────────────────── approval announcements ───────────────────────

#[tokio::test]
async fn approvals_are_announced_pending_then_decided_after_the_log_holds_them() {
    let (ws, host, _approver) = ask_host(ApprovalOutcome::AllowedOnce).await;
    let mut listener = host.approval_listener();
    let r = host.call(write("out.txt", "x").principal("local")).await;
    assert!(r.is_ok(), "{r:?}");
    let (asked, decided) = assert_pair(&host, &r, "allowed-once");
    match listener.try_recv() {
        Some(ApprovalAnnouncement::Pending {
            approval_id,
            call_id,
            principal,
            request,
            approver,
        }) => {
            assert_eq!(
                approval_id,
                asked["request"]["approval_id"].as_str().unwrap()
            );
            assert_eq!(call_id, r.call_id);
            assert_eq!(principal, "local");
            assert_eq!(request.args["path"], "out.txt");
            assert_eq!(approver, asked["approver"].as_str().unwrap());
        }
        other => panic!("expected a pending announcement, got {other:?}"),
    }
    match listener.try_recv() {
        Some(ApprovalAnnouncement::Decided {
            approval_id,
            outcome,
            ..
        }) => {
            assert_eq!(approval_id, decided["approval_id"].as_str().unwrap());
            assert_eq!(outcome, ApprovalOutcome::AllowedOnce);
        }
        other => panic!("expected a decided announcement, got {other:?}"),
    }
    assert!(
        listener.try_recv().is_none(),
        "two announcements per approval"
    );
    assert_eq!(listener.dropped(), 0);
    // A call that needs no approval announces nothing.
    let plain = host
        .call(
            CallRequest::new("read_file", json!({ "path": "out.txt" }))
                .mode(SandboxMode::WorkspaceWrite),
        )
        .await;
    assert!(plain.is_ok(), "{plain:?}");
    assert!(listener.try_recv().is_none());
    assert!(ws.path().join("out.txt").exists());
}

#[tokio::test]
async fn a_listener_that_never_reads_loses_the_oldest_and_counts_them() {
    let (_ws, host, approver) = ask_host(ApprovalOutcome::Rejected).await;
    let mut idle = host.approval_listener();
    let calls = toolhost::queue::ANNOUNCE_CAPACITY / 2 + 3;
    for i in 0..calls {
        let r = host.call(write(&format!("f{i}.txt"), "x")).await;
        assert_eq!(r.code(), Some(ErrorCode::ApprovalRejected));
    }
    assert_eq!(
        approver.count(),
        calls,
        "nobody was held up by the listener"
    );
    let mut kept = 0;
    while idle.try_recv().is_some() {
        kept += 1;
    }
    assert_eq!(kept, toolhost::queue::ANNOUNCE_CAPACITY);
    assert_eq!(
        idle.dropped() as usize,
        2 * calls - toolhost::queue::ANNOUNCE_CAPACITY
    );
}
