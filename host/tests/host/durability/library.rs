//! Durability through the library: fsync cost, fault injection on every
//! write path, cancellation, and a batch larger than the instance pool.

use super::support::*;
use crate::support::fifo;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost::log::{
    CountingStorage, EventKind, FailingStorage, FileStorage, GatedStorage, MemStorage, Op,
    SessionLog, SyncCounter,
};
use toolhost::policy::Policy;
use toolhost::{
    ApprovalOutcome, CallRequest, CallResult, ErrorCode, FixedApprover, Host, Interrupt,
    RuntimeOptions, SandboxMode,
};

fn read(path: &str) -> CallRequest {
    CallRequest::new("read_file", json!({ "path": path })).mode(SandboxMode::ReadOnly)
}

fn write(path: &str, content: &str) -> CallRequest {
    CallRequest::new("write_file", json!({ "path": path, "content": content }))
        .mode(SandboxMode::WorkspaceWrite)
}

/// The fsyncs of a log's database and of its intent journal.
struct Counters {
    db: SyncCounter,
    journal: SyncCounter,
}

/// A host whose log is built as `SessionLog::open` builds it (database and
/// intent journal, real files), with both files' fsyncs counted.
async fn counted_host(ws: &std::path::Path, state: &std::path::Path) -> (Host, Counters) {
    let storage = CountingStorage::new(FileStorage::open(&state.join("session.redb")).unwrap());
    let journal = CountingStorage::new(FileStorage::open(&state.join("session.wal")).unwrap());
    let counters = Counters {
        db: storage.counter(),
        journal: journal.counter(),
    };
    let log = Arc::new(SessionLog::open_with_journal(storage, journal).unwrap());
    let host = builder(ws).session_log(log).build().await.unwrap();
    (host, counters)
}

/// Runs `f` and returns the (database, journal) fsyncs it cost.
async fn cost<T>(c: &Counters, f: impl std::future::Future<Output = T>) -> (T, u64, u64) {
    let (d, j) = (c.db.fsyncs(), c.journal.fsyncs());
    let value = f.await;
    (value, c.db.fsyncs() - d, c.journal.fsyncs() - j)
}

#[tokio::test]
async fn one_fdatasync_for_a_write_call_and_none_for_a_read_only_call() {
    let sb = Sandbox::new();
    std::fs::create_dir(sb.state()).unwrap();
    std::fs::write(sb.ws().join("a.txt"), "hello").unwrap();
    let (host, counters) = counted_host(&sb.ws(), &sb.state()).await;
    for i in 0..100 {
        // A read-only call cannot change anything: its intent rides on the
        // next durable commit.
        let (r, db, journal) = cost(&counters, host.call(read("a.txt"))).await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(
            (db, journal),
            (0, 0),
            "read {i}: (database, journal) fsyncs"
        );
        // A call granted a writable workspace: one durable write (the
        // intent, in the journal), which also carries the read's events;
        // the database is synced only at checkpoints, far apart.
        let (r, db, journal) = cost(&counters, host.call(write("out.txt", "x"))).await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(
            (db, journal),
            (0, 1),
            "write {i}: (database, journal) fsyncs"
        );
    }
    // A refusal before dispatch writes no intent: no fsync at all.
    let (r, db, journal) = cost(&counters, host.call(read("a.txt").mode(SandboxMode::None))).await;
    assert_eq!(r.code(), Some(ErrorCode::SandboxUnavailable), "{r:?}");
    assert_eq!((db, journal), (0, 0));
}

/// The rule follows the enforced grant, not what the tool says: a tool
/// that declares `external` but is granted no network in a read-only call
/// is lazy; a tool that declares `read` is never granted a write (it runs
/// read-only in a `workspace-write` call), so it is lazy too, and a write
/// it attempts fails.
#[tokio::test]
async fn durability_follows_the_enforced_grant_not_the_tool() {
    let sb = Sandbox::new();
    std::fs::create_dir(sb.state()).unwrap();
    std::fs::write(sb.ws().join("a.txt"), "hello").unwrap();
    let (host, counters) = counted_host(&sb.ws(), &sb.state()).await;
    let (r, _, journal) = cost(&counters, host.call(read("a.txt"))).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(journal, 0, "read_file in read-only");
    let (r, _, journal) = cost(
        &counters,
        host.call(read("a.txt").mode(SandboxMode::WorkspaceWrite)),
    )
    .await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.receipt.mode, Some(SandboxMode::ReadOnly), "{r:?}");
    assert_eq!(journal, 0, "read_file asked for workspace-write");
    let fetch = CallRequest::new("http_fetch", json!({ "url": "http://127.0.0.1:9/" }))
        .mode(SandboxMode::ReadOnly);
    let (r, _, journal) = cost(&counters, host.call(fetch)).await;
    assert!(!r.is_ok(), "no network is granted: {r:?}");
    assert_eq!(journal, 0, "an external tool granted nothing");
    let (r, _, journal) = cost(&counters, host.call(write("out.txt", "x"))).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(journal, 1, "write_file in workspace-write");
}

#[tokio::test]
async fn a_batch_of_16_reads_commits_its_intents_once() {
    let sb = Sandbox::new();
    std::fs::create_dir(sb.state()).unwrap();
    std::fs::write(sb.ws().join("a.txt"), "hello").unwrap();
    let (host, counters) = counted_host(&sb.ws(), &sb.state()).await;
    let batch: Vec<_> = (0..16).map(|_| read("a.txt")).collect();
    let (results, db, journal) = cost(&counters, host.call_batch(batch)).await;
    assert!(results.iter().all(CallResult::is_ok), "{results:?}");
    assert_eq!((db, journal), (0, 0), "a read-only batch syncs nothing");
    // One write in the batch makes its one commit durable.
    let mut batch: Vec<_> = (0..15).map(|_| read("a.txt")).collect();
    batch.push(write("out.txt", "x"));
    let (results, db, journal) = cost(&counters, host.call_batch(batch)).await;
    assert!(results.iter().all(CallResult::is_ok), "{results:?}");
    eprintln!("batch of 15 reads and a write: {db} database + {journal} journal fsyncs");
    assert_eq!((db, journal), (0, 1), "one group commit for the batch");
    // One commit holds all 16 intents: they are adjacent in the log.
    let events = host.log().events().unwrap();
    let ids: Vec<_> = results.iter().map(|r| r.call_id.as_str()).collect();
    let intents: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolIntent && ids.contains(&e.call_id.as_str()))
        .collect();
    assert_eq!(intents.len(), 16);
    assert_eq!(
        intents[15].seq - intents[0].seq,
        15,
        "the intents were not committed together"
    );
    assert!(
        intents
            .iter()
            .all(|e| e.at_unix_ms == intents[0].at_unix_ms)
    );
}

/// Durable calls from concurrent callers share fsyncs (group commit in the
/// session log): the journal's syncs are held until all 8 intents are
/// written, so the calls meet whatever the scheduling.
#[tokio::test(flavor = "multi_thread", worker_threads = 10)]
async fn eight_concurrent_write_calls_share_fsyncs() {
    const CALLS: u64 = 8;
    let sb = Sandbox::new();
    std::fs::create_dir(sb.state()).unwrap();
    let state = sb.state();
    let db = CountingStorage::new(FileStorage::open(&state.join("session.redb")).unwrap());
    let journal = CountingStorage::new(FileStorage::open(&state.join("session.wal")).unwrap());
    let counters = Counters {
        db: db.counter(),
        journal: journal.counter(),
    };
    let journal = GatedStorage::new(journal);
    let gate = journal.gate();
    let log = Arc::new(SessionLog::open_with_journal(db, journal).unwrap());
    let host = Arc::new(builder(&sb.ws()).session_log(log).build().await.unwrap());
    let before = counters.journal.fsyncs();
    gate.hold_syncs_until_writes(CALLS, Duration::from_secs(60));
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            let host = Arc::clone(&host);
            tokio::spawn(async move { host.call(write(&format!("f{i}.txt"), "x")).await })
        })
        .collect();
    for c in calls {
        let r = c.await.unwrap();
        assert!(r.is_ok(), "{r:?}");
    }
    let fsyncs = counters.journal.fsyncs() - before;
    eprintln!("{CALLS} concurrent write calls: {fsyncs} journal fsyncs");
    assert!(
        fsyncs * 2 <= CALLS,
        "{fsyncs} fsyncs for {CALLS} concurrent durable calls (more than 0.5 per call)"
    );
    for i in 0..CALLS {
        assert!(sb.ws().join(format!("f{i}.txt")).exists());
    }
}

/// Which storage of the log fails.
#[derive(Debug, Clone, Copy)]
enum Faulty {
    /// A log without a journal, whose database fails.
    Database,
    /// A journaled log (as `SessionLog::open` builds it) whose journal fails.
    Journal,
}

/// A log over in-memory storages whose `faulty` one fails after `k` ops.
fn faulty_log(faulty: Faulty, k: u64, kinds: &[Op]) -> (Option<SessionLog>, [MemStorage; 2]) {
    let (db, journal) = (MemStorage::new(), MemStorage::new());
    let log = match faulty {
        Faulty::Database => {
            SessionLog::open_with_backend(FailingStorage::new(db.clone(), k, kinds)).ok()
        }
        Faulty::Journal => SessionLog::open_with_journal(
            db.clone(),
            FailingStorage::new(journal.clone(), k, kinds),
        )
        .ok(),
    };
    (log, [db, journal])
}

/// Reopens the images a power loss (`crash`) or a process exit would leave.
fn reopen(faulty: Faulty, [db, journal]: &[MemStorage; 2], crash: bool) -> SessionLog {
    let image = |m: &MemStorage| if crash { m.crash() } else { m.process_exit() };
    match faulty {
        Faulty::Database => SessionLog::open_with_backend(image(db)),
        Faulty::Journal => SessionLog::open_with_journal(image(db), image(journal)),
    }
    .unwrap_or_else(|e| panic!("{faulty:?}, crash {crash}: the log does not reopen: {e}"))
}

/// What a faulty-storage run of `requests` must show: no body without a
/// durable intent, no panic.
async fn under_faults(
    faulty: Faulty,
    kinds: &[Op],
    make: impl Fn() -> Vec<CallRequest>,
    approve: bool,
) -> u64 {
    for k in 0..2_000 {
        let sb = Sandbox::new();
        let what = format!("{faulty:?} faults {kinds:?} after {k} ops");
        let (log, mems) = faulty_log(faulty, k, kinds);
        let Some(log) = log else {
            continue;
        };
        let mut b = builder(&sb.ws());
        b.session_log(Arc::new(log));
        if approve {
            // Every call asks, so the approval events are written too.
            b.policy(Policy::from_toml("version = 1\ndefault = \"ask\"\n", "test").unwrap())
                .approver(Box::new(FixedApprover(ApprovalOutcome::AllowedOnce)));
        }
        let host = b.build().await.unwrap();
        let requests = make();
        let paths: Vec<String> = requests
            .iter()
            .map(|r| {
                serde_json::from_str::<serde_json::Value>(&r.args).unwrap()["path"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        let results = if requests.len() == 1 {
            vec![host.call(requests.into_iter().next().unwrap()).await]
        } else {
            host.call_batch(requests).await
        };
        let _ = host.log().flush();
        drop(host);
        // What survives power loss, and what survives the process dying.
        for (crash, label) in [(true, "power loss"), (false, "process exit")] {
            let log = reopen(faulty, &mems, crash);
            let events = log.events().unwrap();
            let calls = check_log(&events);
            for (r, path) in results.iter().zip(&paths) {
                let exists = sb.ws().join(path).exists();
                // A result without a sandbox mode in its receipt never reached the body.
                let before_dispatch = !r.is_ok() && r.receipt.mode.is_none();
                if before_dispatch {
                    assert!(
                        !exists,
                        "{what}: {path} exists but the call ended before dispatch: {r:?}"
                    );
                }
                if exists {
                    let c = calls.get(&r.call_id).unwrap_or_else(|| {
                        panic!("{what}, {label}: {path} exists, the call is not in the log")
                    });
                    assert!(
                        c.intent_seq.is_some(),
                        "{what}, {label}: {path} exists without a durable intent"
                    );
                }
            }
            // Recovery resolves what is pending and leaves a clean log.
            let recovered = log.recover().unwrap();
            assert_eq!(recovered.recovered, pending(&calls), "{what}, {label}");
        }
        if results.iter().all(CallResult::is_ok) {
            return k;
        }
    }
    panic!("the calls never succeeded");
}

#[tokio::test]
async fn no_body_runs_without_a_durable_intent_under_storage_faults() {
    let one = || vec![write("out.txt", "x")];
    let three = || {
        vec![
            write("a.txt", "a"),
            write("b.txt", "b"),
            write("c.txt", "c"),
        ]
    };
    for faulty in [Faulty::Database, Faulty::Journal] {
        for kinds in [&Op::ALL[..], &[Op::Write], &[Op::SyncData], &[Op::SetLen]] {
            let k = under_faults(faulty, kinds, one, false).await;
            eprintln!("one call, {faulty:?} faults on {kinds:?}: first success after {k} ops");
            let k = under_faults(faulty, kinds, one, true).await;
            eprintln!(
                "one approved call, {faulty:?} faults on {kinds:?}: first success after {k} ops"
            );
        }
        let k = under_faults(faulty, &Op::ALL, three, true).await;
        eprintln!("a batch of three approved calls, {faulty:?} faults: first success after {k}");
    }
}

#[tokio::test]
async fn a_cancelled_sleep_ends_cancelled_and_is_logged() {
    let sb = Sandbox::new();
    let host = builder(&sb.ws()).build().await.unwrap();
    let interrupt = Interrupt::default();
    let req = CallRequest::new("sleep", json!({"ms": 10_000})).interrupt(interrupt.clone());
    let started = Instant::now();
    let (r, ()) = tokio::join!(host.call(req), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        interrupt.cancel();
    });
    let took = started.elapsed();
    assert_eq!(r.code(), Some(ErrorCode::Cancelled), "{r:?}");
    assert!(
        took < Duration::from_secs(5),
        "cancelling a 10 s sleep took {took:?}"
    );
    let events = host.log().events_for_call(&r.call_id).unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EventKind::ToolCall,
            EventKind::ToolIntent,
            EventKind::ToolResult
        ]
    );
    assert_eq!(events[2].payload["error"]["code"], "CANCELLED");
}

#[tokio::test]
async fn a_call_cancelled_before_dispatch_has_a_result_and_no_intent() {
    let sb = Sandbox::new();
    let host = builder(&sb.ws()).build().await.unwrap();
    let interrupt = Interrupt::default();
    interrupt.cancel();
    let r = host
        .call(write("never.txt", "x").interrupt(interrupt.clone()))
        .await;
    assert_eq!(r.code(), Some(ErrorCode::Cancelled), "{r:?}");
    assert!(!sb.ws().join("never.txt").exists());
    let events = host.log().events_for_call(&r.call_id).unwrap();
    assert!(
        !events.iter().any(|e| e.kind == EventKind::ToolIntent),
        "{events:?}"
    );
    let results: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .collect();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].payload["error"]["code"], "CANCELLED");
    // The same in a batch.
    let rs = host
        .call_batch(vec![
            write("n1.txt", "x").interrupt(interrupt.clone()),
            read("n1.txt").interrupt(interrupt),
        ])
        .await;
    for r in &rs {
        assert_eq!(r.code(), Some(ErrorCode::Cancelled), "{r:?}");
        let events = host.log().events_for_call(&r.call_id).unwrap();
        assert!(
            !events.iter().any(|e| e.kind == EventKind::ToolIntent),
            "{events:?}"
        );
        assert_eq!(
            events
                .iter()
                .filter(|e| e.kind == EventKind::ToolResult)
                .count(),
            1
        );
    }
}

#[tokio::test]
async fn a_batch_cancelled_midway_loses_no_call() {
    let sb = Sandbox::new();
    let host = builder(&sb.ws()).build().await.unwrap();
    let interrupt = Interrupt::default();
    let with = |r: CallRequest| r.interrupt(interrupt.clone());
    let batch = vec![
        with(CallRequest::new("sleep", json!({"ms": 20}))),
        with(CallRequest::new("sleep", json!({"ms": 10_000}))),
        with(write("late.txt", "x")),
        with(CallRequest::new("sleep", json!({"ms": 0}))),
    ];
    let started = Instant::now();
    let (results, ()) = tokio::join!(host.call_batch(batch), async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        interrupt.cancel();
    });
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let codes: Vec<_> = results.iter().map(CallResult::code).collect();
    assert_eq!(
        codes,
        [
            None,
            Some(ErrorCode::Cancelled),
            Some(ErrorCode::Cancelled),
            Some(ErrorCode::Cancelled)
        ],
        "{results:?}"
    );
    assert!(
        !sb.ws().join("late.txt").exists(),
        "a call started after the batch was cancelled"
    );
    let events = host.log().events().unwrap();
    let calls = check_log(&events);
    for r in &results {
        let c = &calls[&r.call_id];
        assert_eq!(c.fate, Fate::Completed, "{c:?}");
        assert_eq!(
            c.result.as_ref().unwrap()["status"],
            serde_json::to_value(r.status).unwrap()
        );
    }
    // Results in call order.
    let order: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .map(|e| e.call_id.clone())
        .collect();
    let ids: Vec<_> = results.iter().map(|r| r.call_id.clone()).collect();
    assert_eq!(order, ids);
}

#[tokio::test]
async fn a_batch_larger_than_the_instance_pool_runs_every_call() {
    let sb = Sandbox::new();
    let host = builder(&sb.ws())
        .runtime_options(RuntimeOptions {
            max_concurrent_calls: 2,
            ..runtime_options()
        })
        .build()
        .await
        .unwrap();
    let batch: Vec<_> = (0..8)
        .map(|i| CallRequest::new("sleep", json!({"ms": 20 + i})))
        .collect();
    let results = host.call_batch(batch).await;
    for r in &results {
        assert!(r.is_ok(), "{r:?}");
    }
}

/// A process killed while it creates a new log leaves only a temporary
/// file (the log is built under another name, synced, then linked into
/// place): the next open creates the log and removes the leftover. Before
/// this, a kill during creation could leave a `session.redb` that redb
/// refused forever.
#[test]
fn a_creation_interrupted_by_a_kill_leaves_an_openable_state() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    // What a killed creator leaves behind: a half-written temporary file.
    let leftover = state.join("session.redb.creating-4242-1");
    std::fs::write(&leftover, vec![0xAB; 4096]).unwrap();
    let log = SessionLog::open(&state).unwrap();
    assert!(log.events().unwrap().is_empty());
    drop(log);
    assert!(
        !leftover.exists(),
        "the leftover of a dead creation is removed"
    );
    let mut names: Vec<String> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["session.redb", "session.wal"], "{names:?}");
    // And it opens again.
    SessionLog::open(&state).unwrap();
}

/// A host over `ws` whose calls have `deadline`.
async fn host_with_deadline(ws: &std::path::Path, deadline: Duration) -> Host {
    let mut b = builder(ws);
    b.limits(toolhost::Limits {
        deadline,
        ..toolhost::Limits::default()
    });
    b.build().await.unwrap()
}

/// The deadline holds for a body stuck in a host file system call (its file
/// operations run on its own thread): the call ends TIMEOUT shortly after
/// its deadline, and the host goes on serving calls.
#[tokio::test]
async fn a_body_blocked_in_a_file_system_call_still_ends_at_its_deadline() {
    let sb = Sandbox::new();
    let pipe = fifo(&sb.ws());
    std::fs::write(sb.ws().join("a.txt"), "hello").unwrap();
    let deadline = Duration::from_millis(400);
    let host = host_with_deadline(&sb.ws(), deadline).await;
    let started = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(20), host.call(read("pipe"))).await;
    let took = started.elapsed();
    pipe.release();
    let r = r.expect("the call outlived its deadline by 20 s: the deadline does not hold");
    assert_eq!(r.code(), Some(ErrorCode::Timeout), "{r:?}");
    assert!(
        took >= deadline && took < deadline + Duration::from_secs(2),
        "ended after {took:?} for a {deadline:?} deadline"
    );
    assert!(host.call(read("a.txt")).await.is_ok());
}

/// Cancelling a body stuck in a host file system call ends the call
/// CANCELLED without waiting for its deadline.
#[tokio::test]
async fn a_body_blocked_in_a_file_system_call_can_be_cancelled() {
    let sb = Sandbox::new();
    let pipe = fifo(&sb.ws());
    let host = builder(&sb.ws()).build().await.unwrap();
    let interrupt = Interrupt::default();
    let started = Instant::now();
    let call = host.call(read("pipe").interrupt(interrupt.clone()));
    let (r, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(20), call), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        interrupt.cancel();
    });
    let took = started.elapsed();
    pipe.release();
    let r = r.expect("the cancelled call was still running 20 s later");
    assert_eq!(r.code(), Some(ErrorCode::Cancelled), "{r:?}");
    assert!(took < Duration::from_secs(3), "cancelling took {took:?}");
}

/// A guest's sleep in a mode with file system access (its body runs on a
/// thread of its own, where file operations may block) still ends at the
/// deadline, and is still cancellable.
#[tokio::test]
async fn a_sleep_with_file_access_ends_at_its_deadline_and_on_cancel() {
    let sb = Sandbox::new();
    let deadline = Duration::from_millis(300);
    let host = host_with_deadline(&sb.ws(), deadline).await;
    let sleep = || CallRequest::new("sleep", json!({"ms": 10_000})).mode(SandboxMode::ReadOnly);
    let started = Instant::now();
    let r = host.call(sleep()).await;
    let took = started.elapsed();
    assert_eq!(r.code(), Some(ErrorCode::Timeout), "{r:?}");
    assert!(
        took >= deadline && took < deadline + Duration::from_secs(5),
        "a 10 s sleep with a {deadline:?} deadline ended after {took:?}"
    );
    // Stopped on its own thread by the deadline race, not abandoned by the
    // backstop that only a body stuck in a system call needs.
    let stopped = |r: &CallResult| {
        let message = &r.error.as_ref().unwrap().message;
        assert!(message.contains("was stopped"), "{message}");
        assert!(!message.contains("abandoned"), "{message}");
    };
    stopped(&r);
    let interrupt = Interrupt::default();
    let started = Instant::now();
    let (r, ()) = tokio::join!(host.call(sleep().interrupt(interrupt.clone())), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        interrupt.cancel();
    });
    assert_eq!(r.code(), Some(ErrorCode::Cancelled), "{r:?}");
    stopped(&r);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// The call `id` left no intent in `host`'s log.
fn assert_no_intent(host: &toolhost::Host, id: &str) {
    let events = host.log().events().unwrap();
    assert!(
        !events
            .iter()
            .any(|e| e.call_id == id && e.kind == toolhost::log::EventKind::ToolIntent),
        "{id} has an intent: {events:?}"
    );
}

/// Bodies abandoned in a host system call hold their instance slots until
/// the call returns. Once half the pool is held so, calls with file system
/// access are refused SANDBOX_UNAVAILABLE before their body starts (instead
/// of every call failing once the pool is gone), calls in mode `none` still
/// run, and when the stuck calls return the host serves again.
#[tokio::test]
async fn abandoned_bodies_cannot_take_the_whole_pool() {
    let sb = Sandbox::new();
    let pipe = fifo(&sb.ws());
    std::fs::write(sb.ws().join("a.txt"), "hello").unwrap();
    let mut b = builder(&sb.ws());
    b.runtime_options(RuntimeOptions {
        max_concurrent_calls: 4,
        ..runtime_options()
    })
    .limits(toolhost::Limits {
        deadline: Duration::from_millis(300),
        ..toolhost::Limits::default()
    });
    let host = b.build().await.unwrap();
    let runtime = host.runtime().clone();
    assert_eq!(runtime.abandon_limit(), 2);
    assert_eq!(runtime.abandoned_bodies(), 0);

    let (a, b) = tokio::join!(host.call(read("pipe")), host.call(read("pipe")));
    for r in [&a, &b] {
        assert_eq!(r.code(), Some(ErrorCode::Timeout), "{r:?}");
        assert!(
            r.error.as_ref().unwrap().message.contains("abandoned"),
            "{r:?}"
        );
    }
    assert_eq!(runtime.abandoned_bodies(), 2);

    let refused = host.call(read("a.txt")).await;
    assert_eq!(
        refused.code(),
        Some(ErrorCode::SandboxUnavailable),
        "{refused:?}"
    );
    let message = &refused.error.as_ref().unwrap().message;
    assert!(
        message.contains("2 earlier calls are still blocked"),
        "{message}"
    );
    // Refused before its intent is written (and before anyone is asked).
    assert_no_intent(&host, &refused.call_id);
    let none = CallRequest::new("sleep", json!({"ms": 1})).mode(SandboxMode::None);
    let r = host.call(none).await;
    assert!(r.is_ok(), "mode none keeps its half of the pool: {r:?}");

    // A writer opens the FIFO: both stuck readers return.
    pipe.release();
    until("the released bodies are counted back", || {
        runtime.abandoned_bodies() == 0
    })
    .await;
    let r = host.call(read("a.txt")).await;
    assert!(r.is_ok(), "{r:?}");
}

/// A body that is not concurrency-safe runs alone, and one abandoned while
/// stuck in a host system call still runs: it keeps its pass through the
/// exclusivity gate until it stops. Meanwhile every call whose body would
/// overlap it is refused SANDBOX_UNAVAILABLE at once (not left waiting for a
/// body that may never return), and once it returns the host serves again.
#[tokio::test]
async fn an_abandoned_exclusive_body_keeps_the_gate_until_it_stops() {
    let sb = Sandbox::new();
    let pipe = fifo(&sb.ws());
    std::fs::write(sb.ws().join("a.txt"), "hello").unwrap();
    // Writes are asked about, and approved once each.
    let approver = crate::governance::common::Counting::new(toolhost::ApprovalOutcome::AllowedOnce);
    let mut b = builder(&sb.ws());
    b.limits(toolhost::Limits {
        deadline: Duration::from_millis(300),
        ..toolhost::Limits::default()
    })
    .policy(crate::governance::common::policy(
        crate::governance::ASK_WRITES,
    ))
    .approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    let runtime = host.runtime().clone();
    // write_file is not concurrency-safe; opening a FIFO for writing with
    // no reader blocks its body in the host's `open`.
    let stuck = host.call(write("pipe", "x")).await;
    assert_eq!(approver.count(), 1);
    assert_eq!(stuck.code(), Some(ErrorCode::Timeout), "{stuck:?}");
    assert!(
        stuck.error.as_ref().unwrap().message.contains("abandoned"),
        "{stuck:?}"
    );
    assert_eq!(runtime.abandoned_bodies(), 1);

    // Another exclusive body, and a concurrency-safe one (with file access
    // or without), would each overlap the stuck body.
    // Each is refused before its intent is written (and before anyone
    // would be asked to approve it).
    let sleep = CallRequest::new("sleep", json!({"ms": 1})).mode(SandboxMode::None);
    let mut refused = Vec::new();
    for request in [write("b.txt", "y"), read("a.txt"), sleep] {
        let tool = request.tool.clone();
        let r = tokio::time::timeout(Duration::from_secs(20), host.call(request))
            .await
            .unwrap_or_else(|_| {
                panic!("{tool} waited for the stuck body instead of being refused")
            });
        assert_eq!(
            r.code(),
            Some(ErrorCode::SandboxUnavailable),
            "{tool}: {r:?}"
        );
        let message = &r.error.as_ref().unwrap().message;
        assert!(message.contains("exclusivity gate"), "{tool}: {message}");
        refused.push(r.call_id);
    }
    for id in &refused {
        assert_no_intent(&host, id);
    }
    assert_eq!(
        approver.count(),
        1,
        "a refused write was put to the approver"
    );
    assert!(
        !sb.ws().join("b.txt").exists(),
        "the refused write ran beside the stuck one"
    );

    // A reader opens the FIFO: the stuck body writes and returns.
    let reader = pipe.release_writers().expect("a reader opens the FIFO");
    until("the released body is counted back", || {
        runtime.abandoned_bodies() == 0
    })
    .await;
    drop(reader);
    let r = host.call(write("b.txt", "y")).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(std::fs::read_to_string(sb.ws().join("b.txt")).unwrap(), "y");
    assert!(host.call(read("a.txt")).await.is_ok());
}

/// `request` with the call id `id`.
fn with_id(mut request: CallRequest, id: &str) -> CallRequest {
    request.call_id = Some(id.to_string());
    request
}

/// Runs `request` (its call id `id`) on `host` until the log holds its
/// intent (bounded), then drops the call with its body still running.
/// Panics if the call ends first.
async fn drop_once_its_intent_is_written(host: &Host, id: &str, request: CallRequest) {
    let has_intent = || {
        host.log()
            .events_for_call(id)
            .unwrap()
            .iter()
            .any(|e| e.kind == EventKind::ToolIntent)
    };
    let call = host.call(with_id(request, id));
    drop_when(call, "its intent is written", has_intent).await;
}

/// The call `id` in `host`'s log ends with one `tool/result`, of
/// TOOL_OUTCOME_UNKNOWN, and nothing is pending.
fn assert_dropped_and_unknown(host: &Host, id: &str) {
    let log = host.log();
    assert_eq!(log.pending_calls().unwrap(), Vec::<String>::new());
    let events = log.events_for_call(id).unwrap();
    let results: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .collect();
    assert_eq!(results.len(), 1, "{events:?}");
    let result = &results[0].payload;
    assert_eq!(result["status"], "error", "{result}");
    assert_eq!(result["error"]["code"], "TOOL_OUTCOME_UNKNOWN", "{result}");
    assert!(
        result["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("dropped after its intent was written")),
        "{result}"
    );
}

/// A call whose future is dropped while its body runs (a caller's timeout,
/// a transport that drops its handler) still ends in the log: its result
/// is TOOL_OUTCOME_UNKNOWN, as recovery would say after a crash, and its
/// intent does not stay pending (the in-memory log would keep it forever).
#[tokio::test]
async fn a_call_dropped_while_its_body_runs_is_recorded_unknown() {
    let sb = Sandbox::new();
    let host = builder(&sb.ws()).build().await.unwrap();
    let sleep = CallRequest::new("sleep", json!({"ms": 60_000})).mode(SandboxMode::None);
    drop_once_its_intent_is_written(&host, "dropped", sleep).await;
    assert_dropped_and_unknown(&host, "dropped");
    // The same for a batch dropped midway: every call whose intent was
    // written ends TOOL_OUTCOME_UNKNOWN, none stays pending.
    let batch = host.call_batch(vec![
        CallRequest::new("sleep", json!({"ms": 60_000})).mode(SandboxMode::None),
        CallRequest::new("sleep", json!({"ms": 1})).mode(SandboxMode::None),
    ]);
    let before = host.log().events().unwrap().len();
    drop_when(batch, "its intents are written", || {
        host.log().events().unwrap().len() >= before + 4
    })
    .await;
    assert_eq!(host.log().pending_calls().unwrap(), Vec::<String>::new());
    let events = host.log().events().unwrap();
    let unknown = events[before..]
        .iter()
        .filter(|e| {
            e.kind == EventKind::ToolResult && e.payload["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
        })
        .count();
    assert_eq!(unknown, 2, "{:?}", &events[before..]);
}

/// A body on a thread of its own (it has file system access) whose call is
/// dropped is stopped: the exclusivity gate it holds is free again at once,
/// and a call that waited for it runs (it is not refused as behind a stuck
/// body). (A body stuck in a host system call is abandoned after the grace,
/// and holds the gate until it returns: `runtime::invoke`'s tests.)
#[tokio::test]
async fn a_dropped_call_stops_its_body() {
    let sb = Sandbox::new();
    let host = builder(&sb.ws()).build().await.unwrap();
    let runtime = host.runtime().clone();
    let (progressed, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let mut sleep = with_id(
        CallRequest::new("sleep", json!({"ms": 60_000})).mode(SandboxMode::ReadOnly),
        "sleeping",
    );
    sleep.progress = Some(Arc::new(move |_: &toolhost::Progress| {
        let _ = progressed.send(());
    }));
    tokio::select! {
        r = host.call(sleep) => panic!("the call ended before it could be dropped: {r:?}"),
        _ = progress.recv() => {}
    }
    assert_dropped_and_unknown(&host, "sleeping");
    // write_file runs alone: it waits for the sleep's body to stop.
    let r = tokio::time::timeout(Duration::from_secs(20), host.call(write("b.txt", "y")))
        .await
        .expect("the dropped call's body was not stopped");
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(runtime.abandoned_bodies(), 0);
}

/// A batch dropped while an exclusive body runs ends every call in call
/// order: the running call and a later admitted one `TOOL_OUTCOME_UNKNOWN`
/// (their intents were written), a refused call between them with its
/// refusal.
#[tokio::test]
async fn a_batch_dropped_during_a_body_ends_its_calls_in_order() {
    let sb = Sandbox::new();
    let _pipe = fifo(&sb.ws());
    std::fs::write(sb.ws().join("a.txt"), "a").unwrap();
    let host = builder(&sb.ws()).build().await.unwrap();
    // write_file runs alone (its body blocks opening the FIFO); the others
    // wait for it.
    let batch = host.call_batch(vec![
        write("pipe", "x"),
        CallRequest::new("no_such_tool", json!({})),
        read("a.txt"),
    ]);
    let intents_written = || logged(&host, EventKind::ToolIntent) >= 2;
    drop_when(batch, "its intents are written", intents_written).await;
    let events = host.log().events().unwrap();
    let results: Vec<(String, String)> = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .map(|e| {
            (
                e.payload["tool"].as_str().unwrap_or_default().to_string(),
                e.payload["error"]["code"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    let expected = [
        ("write_file", "TOOL_OUTCOME_UNKNOWN"),
        ("no_such_tool", "UNKNOWN_TOOL"),
        ("read_file", "TOOL_OUTCOME_UNKNOWN"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(t, c)| (t.to_string(), c.to_string()))
        .collect();
    assert_eq!(results, expected);
    assert_eq!(host.log().pending_calls().unwrap(), Vec::<String>::new());
}
