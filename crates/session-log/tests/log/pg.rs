//! What only the PostgreSQL engine has: schema versions, several replicas with leases
//! and fencing, group commit, and faults of the connection and the database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use toolhost_log::{
    Durability, EventKind, LogError, PG_SCHEMA_VERSION, PgEngine, Recovery, SessionLog,
};

use crate::engines::{TEST_SCHEMA, pg_options, pg_url, sql, sql_value, unique};
use crate::{call, intent, kinds_of, result, seqs, shape};

/// Opens `log` as `replica`; returns the log and its engine's counters.
fn open(
    url: &str,
    log: &str,
    replica: &str,
    lease: Duration,
) -> (SessionLog, toolhost_log::PgStatsHandle) {
    let engine = PgEngine::open(url, &pg_options(log, replica, lease)).unwrap();
    let stats = engine.stats_handle();
    (SessionLog::from_engine(engine), stats)
}

/// Polls `cond` until it holds, failing after `limit`.
fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::yield_now();
    }
}

#[test]
fn a_schema_written_by_a_newer_toolhost_is_refused_and_left_alone() {
    let Some(url) = pg_url() else { return };
    let schema = unique("newer").replace('-', "_");
    let mut options = pg_options("default", "r", Duration::from_secs(10));
    options.schema = schema.clone();
    drop(PgEngine::open(&url, &options).unwrap());
    sql(
        &url,
        &format!("UPDATE \"{schema}\".toolhost_schema SET version = 99"),
    );
    let err = PgEngine::open(&url, &options).unwrap_err();
    assert!(
        matches!(err, LogError::NewerFormat { found: 99, supported } if supported == PG_SCHEMA_VERSION),
        "{err:?}"
    );
    assert!(err.to_string().contains("newer toolhost"), "{err}");
    assert_eq!(
        sql_value(
            &url,
            &format!("SELECT version::text FROM \"{schema}\".toolhost_schema")
        ),
        Some("99".to_string())
    );
    sql(&url, &format!("DROP SCHEMA \"{schema}\" CASCADE"));
}

#[test]
fn a_malformed_url_or_schema_name_is_a_clear_error() {
    let err = PgEngine::open(
        "postgres://[::1",
        &pg_options("l", "r", Duration::from_secs(1)),
    )
    .unwrap_err();
    assert!(matches!(err, LogError::Invalid(_)), "{err:?}");
    let mut options = pg_options("l", "r", Duration::from_secs(1));
    options.schema = "Bad; DROP".to_string();
    let err = PgEngine::open("postgres://127.0.0.1:1/x", &options).unwrap_err();
    assert!(err.to_string().contains("schema"), "{err}");
}

/// Takes the row lock of `log` from another connection and holds it until the returned
/// sender sends (or is dropped); returns once the lock is held.
fn hold_log_lock(
    url: &str,
    log: &str,
) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    hold_uncommitted(
        url,
        &format!("SELECT 1 FROM {TEST_SCHEMA}.toolhost_logs WHERE log = '{log}' FOR UPDATE"),
    )
}

/// Runs `statement` in a transaction on another connection and holds that transaction
/// open (with its locks) until the returned sender sends (or is dropped), then rolls it
/// back; returns once the statement has run.
fn hold_uncommitted(
    url: &str,
    statement: &str,
) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (url, statement) = (url.to_string(), statement.to_string());
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (mut client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            let tx = client.transaction().await.unwrap();
            tx.batch_execute(&statement).await.unwrap();
            locked_tx.send(()).unwrap();
            let _ = tokio::task::spawn_blocking(move || release_rx.recv()).await;
            tx.rollback().await.unwrap();
        });
    });
    locked_rx.recv().unwrap();
    (release_tx, holder)
}

/// A write that waited for the log's row lock longer than a lease still leaves its
/// replica a whole lease: the lease runs from the update, after the wait, not from the
/// start of the transaction. It used to be over when the write committed, so another
/// replica's sweep declared the live replica dead, resolved its call as unknown and
/// fenced it.
#[test]
fn a_lease_renewed_after_a_long_wait_for_the_lock_is_a_whole_lease() {
    let Some(url) = pg_url() else { return };
    let name = unique("lockwait");
    let lease = Duration::from_secs(2);
    let (a, stats) = open(&url, &name, "a", lease);
    let a = Arc::new(a);
    a.record_intents_after(&[call("c1")], &[intent("c1")])
        .unwrap();
    let (release, holder) = hold_log_lock(&url, &name);
    let before = stats.get().submitted;
    let writer = {
        let a = a.clone();
        std::thread::spawn(move || a.append(&[call("c2")], Durability::Durable))
    };
    wait_until(
        "a's write to reach its worker",
        Duration::from_secs(20),
        || stats.get().submitted > before,
    );
    // The condition under test: more than a lease passes while the write waits.
    std::thread::sleep(lease + Duration::from_millis(500));
    release.send(()).unwrap();
    holder.join().unwrap();
    writer.join().unwrap().unwrap();
    // Another replica sweeps expired replicas at once: `a` is not one.
    let (b, _) = open(&url, &name, "b", lease);
    assert_eq!(b.recover().unwrap().recovered, Vec::<String>::new());
    a.append(&[result("c1")], Durability::Durable).unwrap();
    assert_eq!(b.pending_calls().unwrap(), Vec::<String>::new());
}

/// A durable append of no events makes earlier lazy ones durable, as any durable
/// append does: it used to return at once, without a synchronous commit.
#[test]
fn an_empty_durable_append_makes_earlier_lazy_appends_durable() {
    let Some(url) = pg_url() else { return };
    let name = unique("empty-durable");
    let (log, stats) = open(&url, &name, "r", Duration::from_secs(600));
    log.append(&[call("c1")], Durability::Lazy).unwrap();
    let before = stats.get().durable_commits;
    assert_eq!(
        log.append(&[], Durability::Durable).unwrap(),
        Vec::<u64>::new()
    );
    assert_eq!(stats.get().durable_commits, before + 1);
    // Nothing left to make durable: no commit.
    log.append(&[], Durability::Durable).unwrap();
    log.append(&[], Durability::Lazy).unwrap();
    assert_eq!(stats.get().durable_commits, before + 1);
}

#[test]
fn concurrent_appends_on_one_replica_share_commits() {
    let Some(url) = pg_url() else { return };
    let name = unique("group");
    // A long lease: no renewal commit of the worker's own during the test.
    let (log, stats) = open(&url, &name, "r", Duration::from_secs(600));
    let log = Arc::new(log);
    log.append(&[call("warm")], Durability::Durable).unwrap();
    // Hold the log's row lock from outside, so that the worker's first transaction
    // waits while every other append queues behind it.
    let (release_tx, holder) = hold_log_lock(&url, &name);
    let before = stats.get();
    const N: u64 = 12;
    let writers: Vec<_> = (0..N)
        .map(|i| {
            let log = log.clone();
            std::thread::spawn(move || {
                let id = format!("g{i}");
                log.record_intents_after(&[call(&id)], &[intent(&id)])
                    .unwrap()
            })
        })
        .collect();
    wait_until(
        "every append to reach the worker",
        Duration::from_secs(20),
        || stats.get().submitted - before.submitted == N,
    );
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    let mut all: Vec<u64> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    all.sort();
    assert_eq!(all, (2..2 + 2 * N).collect::<Vec<_>>());
    let after = stats.get();
    assert_eq!(after.appends - before.appends, N);
    // The worker took the first append (or, if it woke late, several) and waited for
    // the lock; every other append queued behind it and shared the next commit.
    let commits = after.durable_commits - before.durable_commits;
    assert!(
        (1..=2).contains(&commits),
        "{commits} commits for {N} appends: {after:?}"
    );
    assert_eq!(log.pending_calls().unwrap().len(), N as usize);
}

#[test]
fn a_replica_declared_dead_cannot_commit_a_result_after_its_unknown() {
    let Some(url) = pg_url() else { return };
    let name = unique("fence");
    // A long lease: the replica renews nothing by itself during the test.
    let (slow, _) = open(&url, &name, "slow", Duration::from_secs(600));
    slow.record_intents_after(&[call("c1")], &[intent("c1")])
        .unwrap();
    let (survivor, _) = open(&url, &name, "survivor", Duration::from_secs(600));
    // Nothing to recover while the slow replica's lease runs.
    assert_eq!(survivor.recover().unwrap(), Recovery::default());
    // The slow replica looks dead: its lease has run out (as after a long pause).
    sql(
        &url,
        &format!(
            "UPDATE {TEST_SCHEMA}.toolhost_replicas SET lease_until = now() - interval '1 second' \
             WHERE log = '{name}' AND id = 'slow'"
        ),
    );
    assert_eq!(survivor.recover().unwrap().recovered, ["c1"]);
    // Exactly once: a second survivor finds nothing.
    let (third, _) = open(&url, &name, "third", Duration::from_secs(600));
    assert_eq!(third.recover().unwrap(), Recovery::default());

    // The slow replica wakes up: its result is refused, and so is everything after.
    let err = slow.append(&[result("c1")], Durability::Lazy).unwrap_err();
    assert!(
        matches!(err, LogError::Fenced { ref replica } if replica == "slow"),
        "{err:?}"
    );
    assert!(err.to_string().contains("lost its lease"), "{err}");
    let err = slow
        .record_intents_after(&[call("c2")], &[intent("c2")])
        .unwrap_err();
    assert!(matches!(err, LogError::Fenced { .. }), "{err:?}");

    let events = survivor.events().unwrap();
    let results: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .collect();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].payload["error"]["code"], "TOOL_OUTCOME_UNKNOWN");
    assert!(events.iter().all(|e| e.call_id != "c2"));
    assert_eq!(seqs(&events), (1..=events.len() as u64).collect::<Vec<_>>());
}

/// A replica whose calls a survivor's recovery resolved is fenced, also when it renewed
/// its lease (a flush) after the survivor found it expired and before the survivor
/// fenced it. The fence used to be a separate update conditioned on the lease being
/// expired, which the renewal had made false: the calls were declared unknown, the
/// replica was not fenced, and it then committed a result for one of them.
#[test]
fn a_replica_that_renews_while_its_calls_are_recovered_is_still_fenced() {
    let Some(url) = pg_url() else { return };
    let name = unique("renew-race");
    let (a_id, b_id) = (unique("race-a"), unique("race-b"));
    // Long leases: no worker renews or sweeps by itself during the test.
    let (a, _) = open(&url, &name, &a_id, Duration::from_secs(600));
    a.record_intents_after(&[call("c1")], &[intent("c1")])
        .unwrap();
    // Something for a's flush to make durable: the flush is then a lease renewal.
    a.append(&[call("lazy")], Durability::Lazy).unwrap();
    let (b, _) = open(&url, &name, &b_id, Duration::from_secs(600));
    // a looks dead to b.
    sql(
        &url,
        &format!(
            "UPDATE {TEST_SCHEMA}.toolhost_replicas SET lease_until = now() - interval '1 second' \
             WHERE log = '{name}' AND id = '{a_id}'"
        ),
    );
    // b's recovery reads the pending calls (c1, a expired), then waits to insert its
    // results at the next sequence number, which another transaction holds.
    let next = sql_value(
        &url,
        &format!("SELECT next_seq::text FROM {TEST_SCHEMA}.toolhost_logs WHERE log = '{name}'"),
    )
    .unwrap();
    let (release, holder) = hold_uncommitted(
        &url,
        &format!(
            "INSERT INTO {TEST_SCHEMA}.toolhost_events (log, seq, call_id, kind, at_unix_ms, payload, replica) \
             VALUES ('{name}', {next}, 'x', 'tool/call', 0, '{{}}', 'x')"
        ),
    );
    let b = Arc::new(b);
    let recovering = {
        let b = b.clone();
        std::thread::spawn(move || b.recover())
    };
    let waiting = format!(
        "SELECT count(*)::text FROM pg_stat_activity \
         WHERE application_name = 'toolhost {b_id}' AND wait_event_type = 'Lock'"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while sql_value(&url, &waiting).as_deref() != Some("1") {
        assert!(Instant::now() < deadline, "b's recovery never waited");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Meanwhile a renews its lease.
    a.flush().unwrap();
    release.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(recovering.join().unwrap().unwrap().recovered, ["c1"]);
    // c1 was declared unknown: a cannot commit its result.
    let err = a.append(&[result("c1")], Durability::Durable).unwrap_err();
    assert!(matches!(err, LogError::Fenced { .. }), "{err:?}");
    let results: Vec<_> = b
        .events_for_call("c1")
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .collect();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].payload["error"]["code"], "TOOL_OUTCOME_UNKNOWN");
}

/// `refuse_live_identity` (what `toolhost recover` sets) does not take over an
/// identity whose lease runs: the live replica is not fenced and keeps writing. Once
/// that replica has stopped cleanly (its lease ended), the identity opens.
#[test]
fn an_identity_in_use_is_refused_to_whoever_must_not_fence_it() {
    let Some(url) = pg_url() else { return };
    let name = unique("inuse");
    let (live, _) = open(&url, &name, "r", Duration::from_secs(600));
    live.record_intents_after(&[call("c1")], &[intent("c1")])
        .unwrap();
    let mut options = pg_options(&name, "r", Duration::from_secs(600));
    options.refuse_live_identity = true;
    let err = PgEngine::open(&url, &options).unwrap_err();
    assert!(matches!(err, LogError::Invalid(_)), "{err:?}");
    assert!(err.to_string().contains("holds a lease until"), "{err}");
    live.append(&[result("c1")], Durability::Durable).unwrap();
    drop(live);
    let recovering = SessionLog::from_engine(PgEngine::open(&url, &options).unwrap());
    assert!(recovering.recover().unwrap().recovered.is_empty());
}

#[test]
fn a_restarted_replica_with_the_same_identity_recovers_its_calls_once() {
    let Some(url) = pg_url() else { return };
    let name = unique("restart");
    let (first, _) = open(&url, &name, "r1", Duration::from_secs(600));
    first
        .record_intents_after(&[call("c1")], &[intent("c1")])
        .unwrap();
    // The same identity starts again while the old one still runs: it takes over.
    let (second, _) = open(&url, &name, "r1", Duration::from_secs(600));
    assert_eq!(second.recover().unwrap().recovered, ["c1"]);
    assert_eq!(second.recover().unwrap(), Recovery::default());
    let err = first
        .append(&[result("c1")], Durability::Durable)
        .unwrap_err();
    assert!(matches!(err, LogError::Fenced { .. }), "{err:?}");
    drop(first);
    let (third, _) = open(&url, &name, "r1", Duration::from_secs(600));
    assert_eq!(third.recover().unwrap(), Recovery::default());
    assert_eq!(
        kinds_of(&third, "c1"),
        [
            EventKind::ToolCall,
            EventKind::ToolIntent,
            EventKind::ToolResult
        ]
    );
}

/// A replica whose worker is held up by a slow operation (longer than a lease, shorter
/// than the operation timeout) keeps its lease: it is not declared dead, and goes on
/// once the operation ends. Only the worker renewed the lease, so a slow read let it
/// expire and another replica's sweep would resolve the live replica's calls.
#[test]
fn a_replica_whose_worker_waits_longer_than_a_lease_keeps_its_lease() {
    let Some(url) = pg_url() else { return };
    let name = unique("slow-op");
    let a_id = unique("slow-a");
    let lease = Duration::from_secs(1);
    let (a, stats) = open(&url, &name, &a_id, lease);
    let a = Arc::new(a);
    a.record_intents_after(&[call("c1")], &[intent("c1")])
        .unwrap();
    let (b, _) = open(&url, &name, "b", Duration::from_secs(600));
    // a's next read waits for a lock on the events table.
    let (release, holder) = hold_uncommitted(
        &url,
        &format!("LOCK TABLE {TEST_SCHEMA}.toolhost_events IN ACCESS EXCLUSIVE MODE"),
    );
    let before = stats.get().submitted;
    let reader = {
        let a = a.clone();
        std::thread::spawn(move || a.events().map(|e| e.len()))
    };
    wait_until(
        "a's read to reach its worker",
        Duration::from_secs(20),
        || stats.get().submitted > before,
    );
    // The condition under test: more than a lease passes while the worker waits.
    std::thread::sleep(lease * 2);
    let live = format!(
        "SELECT (lease_until > now())::text FROM {TEST_SCHEMA}.toolhost_replicas \
         WHERE log = '{name}' AND id = '{a_id}'"
    );
    assert_eq!(sql_value(&url, &live).as_deref(), Some("true"));
    release.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(reader.join().unwrap().unwrap(), 2);
    assert_eq!(b.recover().unwrap(), Recovery::default());
    a.append(&[result("c1")], Durability::Durable).unwrap();
    assert!(b.pending_calls().unwrap().is_empty());
}

/// While something holds a writer's replica row (the worker's own long
/// transaction does), the lease keeper's renewals give up on the server's side and
/// are tried again on the same connection: at most one of its statements waits for
/// the row at a time. It used to drop the connection at each client-side timeout and
/// open another, leaving a backend blocked on the row per tick.
#[test]
fn a_lease_keeper_blocked_on_its_row_leaves_no_backends_waiting() {
    let Some(url) = pg_url() else { return };
    let name = unique("keeper-blocked");
    let a_id = unique("keeper-a");
    let lease = Duration::from_millis(600);
    let (a, _) = open(&url, &name, &a_id, lease);
    let (release, holder) = hold_uncommitted(
        &url,
        &format!(
            "SELECT 1 FROM {TEST_SCHEMA}.toolhost_replicas WHERE log = '{name}' AND id = '{a_id}' FOR UPDATE"
        ),
    );
    // This replica's keeper's renewals blocked on the row (its connection is
    // named after the replica).
    let waiting = format!(
        "SELECT count(*)::text FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
         AND application_name = '{}' AND datname = current_database()",
        toolhost_log::keeper_application(&a_id)
    );
    let (mut most, mut seen) = (0, 0);
    let until = std::time::Instant::now() + lease * 5;
    while std::time::Instant::now() < until {
        let n: u32 = sql_value(&url, &waiting)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        most = most.max(n);
        seen += usize::from(n > 0);
        std::thread::sleep(lease / 12);
    }
    release.send(()).unwrap();
    holder.join().unwrap();
    // The keeper tried (it is alive), one statement at a time.
    assert!(seen > 0, "the keeper never tried to renew");
    assert!(most <= 1, "{most} renewals waited on the row at once");
    drop(a);
}

/// A new epoch is above every epoch of the log's replicas, not only above the
/// database clock: after a clock that went back (here, a replica whose epoch is far
/// ahead of it), a registration still takes an epoch no replica of the log holds.
#[test]
fn a_new_epoch_is_above_every_epoch_of_the_log() {
    let Some(url) = pg_url() else { return };
    let name = unique("epoch-max");
    let (_a, _) = open(&url, &name, "a", Duration::from_secs(600));
    let ahead = 9_000_000_000_000_000_i64;
    sql_value(
        &url,
        &format!(
            "UPDATE {TEST_SCHEMA}.toolhost_replicas SET epoch = {ahead} \
             WHERE log = '{name}' AND id = 'a' RETURNING epoch::text"
        ),
    );
    let (_b, _) = open(&url, &name, "b", Duration::from_secs(600));
    let epoch_b: i64 = sql_value(
        &url,
        &format!(
            "SELECT epoch::text FROM {TEST_SCHEMA}.toolhost_replicas WHERE log = '{name}' AND id = 'b'"
        ),
    )
    .and_then(|v| v.parse().ok())
    .unwrap();
    assert!(epoch_b > ahead, "{epoch_b}");
}

/// An identity's epochs are never reused: an incarnation fenced by a restart stays
/// fenced after that restart closed cleanly and the identity came back a third time.
/// A clean close used to delete the identity's row, the third incarnation got epoch 1
/// again, the first one's, and the first one (only cut off) then committed a result
/// for a call already declared unknown.
#[test]
fn a_fenced_incarnation_stays_fenced_after_its_identity_closed_cleanly_and_returned() {
    let Some(url) = pg_url() else { return };
    let name = unique("epochs");
    let (first, _) = open(&url, &name, "x", Duration::from_secs(600));
    first
        .record_intents_after(&[call("c1")], &[intent("c1")])
        .unwrap();
    // A second incarnation takes the identity over, recovers c1 and closes cleanly
    // with nothing pending.
    let (second, _) = open(&url, &name, "x", Duration::from_secs(600));
    assert_eq!(second.recover().unwrap().recovered, ["c1"]);
    drop(second);
    // Its row is forgotten (nothing pending): closed identities leave no rows behind.
    let rows = format!(
        "SELECT count(*)::text FROM {TEST_SCHEMA}.toolhost_replicas WHERE log = '{name}' AND id = 'x'"
    );
    assert_eq!(sql_value(&url, &rows).as_deref(), Some("0"));
    // A third one starts; the first comes back.
    let (third, _) = open(&url, &name, "x", Duration::from_secs(600));
    let err = first
        .append(&[result("c1")], Durability::Durable)
        .unwrap_err();
    assert!(matches!(err, LogError::Fenced { .. }), "{err:?}");
    // The third writes; c1 has its one result, the unknown one.
    third.append(&[call("c2")], Durability::Durable).unwrap();
    let results: Vec<_> = third
        .events_for_call("c1")
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .collect();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].payload["error"]["code"], "TOOL_OUTCOME_UNKNOWN");
    // The closed identity lets `toolhost recover` take it over, and another replica's
    // sweep finds nothing to do.
    drop(third);
    let (other, _) = open(&url, &name, "other", Duration::from_secs(600));
    assert_eq!(other.recover().unwrap(), Recovery::default());
    let mut options = pg_options(&name, "x", Duration::from_secs(600));
    options.refuse_live_identity = true;
    let recovering = SessionLog::from_engine(PgEngine::open(&url, &options).unwrap());
    assert_eq!(recovering.recover().unwrap(), Recovery::default());
}

#[test]
fn a_survivor_recovers_a_killed_replicas_calls_after_its_lease_expires() {
    let Some(url) = pg_url() else { return };
    let name = unique("survivor");
    // The dying replica (another process): its lease is short, and it dies holding two
    // intents, without closing anything.
    let out = crate::child::run_child("pg-die", std::path::Path::new(&format!("{name}:{url}")));
    assert!(out.contains("CHILD: acknowledged"), "{out}");
    let (survivor, _) = open(&url, &name, "survivor", Duration::from_millis(300));
    // The survivor's worker sweeps by itself at every renewal.
    wait_until("the survivor's sweep", Duration::from_secs(30), || {
        survivor.pending_calls().unwrap().is_empty()
    });
    let events = survivor.events().unwrap();
    let recovered: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::SessionRecovered)
        .collect();
    assert_eq!(recovered.len(), 1, "{events:?}");
    assert_eq!(
        recovered[0].payload["calls"],
        serde_json::json!(["c1", "c2"])
    );
    assert_eq!(survivor.recover().unwrap(), Recovery::default());
}

/// Terminates the server processes of `replica`'s connections (as a network cut or
/// an administrator would).
fn cut_connections(url: &str, replica: &str) {
    let _ = sql_value(
        url,
        &format!(
            // With a timeout, pg_terminate_backend waits until the process is gone.
            "SELECT count(pg_terminate_backend(pid, 10000))::text FROM pg_stat_activity \
             WHERE application_name = 'toolhost {replica}'"
        ),
    );
}

#[test]
fn a_connection_cut_before_the_intent_commit_fails_the_append_and_the_next_one_reconnects() {
    let Some(url) = pg_url() else { return };
    let name = unique("cut");
    let replica = unique("cut-r");
    let (log, _) = open(&url, &name, &replica, Duration::from_secs(600));
    log.append(&[call("before")], Durability::Durable).unwrap();
    cut_connections(&url, &replica);
    // The engine finds out by using the connection: the append fails, and its intent is
    // not there (the host ends the call ABORTED_BEFORE_DISPATCH, the body never runs).
    // (Had the engine seen the connection closed before sending, it would have
    // reconnected and the append succeeded, its intent durable: equally correct.)
    match log.record_intents_after(&[call("lost")], &[intent("lost")]) {
        Err(err) => {
            assert!(matches!(err, LogError::Storage(_)), "{err:?}");
            assert!(err.to_string().contains("outcome is unknown"), "{err}");
            assert!(log.pending_calls().unwrap().is_empty());
            assert_eq!(shape(&log.events().unwrap()), [call("before")]);
        }
        Ok(seqs) => {
            assert_eq!(seqs, [2, 3]);
            assert_eq!(log.pending_calls().unwrap(), ["lost"]);
            return;
        }
    }
    // The engine reconnected, the sequence continues.
    assert_eq!(
        log.record_intents_after(&[call("next")], &[intent("next")])
            .unwrap(),
        [2, 3]
    );
}

#[test]
fn a_read_only_database_refuses_writes_clearly_and_the_log_stays_consistent() {
    let Some(url) = pg_url() else { return };
    let db = unique("ro").replace('-', "_");
    sql(&url, &format!("CREATE DATABASE {db}"));
    let db_url = match url.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{db}"),
        None => panic!("{url}"),
    };
    let replica = unique("ro-r");
    let (log, _) = open(&db_url, "default", &replica, Duration::from_secs(600));
    log.record_intents_after(&[call("c1")], &[intent("c1")])
        .unwrap();
    sql(
        &url,
        &format!("ALTER DATABASE {db} SET default_transaction_read_only = on"),
    );
    cut_connections(&url, &replica);
    let _ = log.events(); // the first operation after the cut may see the closed connection
    let err = log
        .record_intents_after(&[call("c2")], &[intent("c2")])
        .unwrap_err();
    assert!(err.to_string().contains("read-only"), "{err}");
    // Reading still works; nothing half-written.
    assert_eq!(shape(&log.events().unwrap()), [call("c1"), intent("c1")]);
    sql(
        &url,
        &format!("ALTER DATABASE {db} SET default_transaction_read_only = off"),
    );
    cut_connections(&url, &replica);
    let _ = log.events();
    assert_eq!(
        log.append(&[result("c1")], Durability::Durable).unwrap(),
        [3]
    );
    drop(log);
    sql(&url, &format!("DROP DATABASE {db} WITH (FORCE)"));
}

/// A database of the test's own on the test server, dropped at the end: what the test
/// does to its tables touches no other test.
struct OwnDatabase {
    admin: String,
    name: String,
    url: String,
}

impl OwnDatabase {
    fn create(admin: &str) -> OwnDatabase {
        let name = unique("own").replace('-', "_");
        sql(admin, &format!("CREATE DATABASE {name}"));
        let url = match admin.rsplit_once('/') {
            Some((base, _)) => format!("{base}/{name}"),
            None => panic!("a URL without a database: {admin}"),
        };
        OwnDatabase {
            admin: admin.to_string(),
            name,
            url,
        }
    }
}

impl Drop for OwnDatabase {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| {
            sql(
                &self.admin,
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            )
        });
    }
}

/// Makes the database at `url` refuse `tool/result` rows (and only those); the
/// returned closure lifts the refusal.
fn refuse_results(url: &str) -> impl FnOnce() {
    sql(
        url,
        &format!(
            "CREATE FUNCTION {TEST_SCHEMA}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'results refused by the test'; END $$; \
             CREATE TRIGGER refuse BEFORE INSERT ON {TEST_SCHEMA}.toolhost_events \
             FOR EACH ROW WHEN (NEW.kind = 'tool/result') EXECUTE FUNCTION {TEST_SCHEMA}.refuse()"
        ),
    );
    let url = url.to_string();
    move || {
        sql(
            &url,
            &format!("DROP TRIGGER refuse ON {TEST_SCHEMA}.toolhost_events"),
        )
    }
}

/// The call `c1` of `log` was resolved as recovery resolves a call: one
/// `TOOL_OUTCOME_UNKNOWN` result and a `session/recovered` event naming it.
fn resolved_as_unknown(log: &SessionLog) {
    assert!(log.pending_calls().unwrap().is_empty());
    let events = log.events_for_call("c1").unwrap();
    assert_eq!(
        events.iter().map(|e| e.kind).collect::<Vec<_>>(),
        [
            EventKind::ToolCall,
            EventKind::ToolIntent,
            EventKind::ToolResult
        ]
    );
    assert_eq!(
        events[2].payload["error"]["code"], "TOOL_OUTCOME_UNKNOWN",
        "{events:?}"
    );
    let recovered: Vec<_> = log
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::SessionRecovered)
        .collect();
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!(recovered[0].payload["calls"], serde_json::json!(["c1"]));
    assert_eq!(log.recover().unwrap(), Recovery::default());
}

/// A lazy result whose append fails leaves no call open while the replica goes on:
/// its call is resolved as `TOOL_OUTCOME_UNKNOWN` before the next operation, as the
/// redb engine's recovery after reopening resolves it. (It stayed pending until the
/// replica restarted: no other replica recovers a live replica's calls.)
#[test]
fn a_failed_lazy_result_is_resolved_as_unknown_before_the_next_operation() {
    let Some(url) = pg_url() else { return };
    let db = OwnDatabase::create(&url);
    let (log, _) = open(&db.url, "default", "r", Duration::from_secs(600));
    log.record_intents_after(&[call("c1")], &[intent("c1")])
        .unwrap();
    let lift = refuse_results(&db.url);
    let err = log.append(&[result("c1")], Durability::Lazy).unwrap_err();
    assert!(err.to_string().contains("results refused"), "{err}");
    // While results are refused, the call stays pending, and other events still go in.
    assert_eq!(log.pending_calls().unwrap(), ["c1"]);
    log.append(&[call("c2")], Durability::Lazy).unwrap();
    lift();
    // The next operation (any, here an append) resolves it first.
    log.append(&[call("c3")], Durability::Lazy).unwrap();
    resolved_as_unknown(&log);
    let events = log.events().unwrap();
    let pos = |kind: EventKind, id: &str| {
        events
            .iter()
            .position(|e| e.kind == kind && e.call_id == id)
            .unwrap()
    };
    assert!(pos(EventKind::ToolResult, "c1") < pos(EventKind::ToolCall, "c3"));
}

/// As above, with no operation after the failure: the worker resolves the call at its
/// next lease renewal.
#[test]
fn a_failed_lazy_result_of_an_idle_replica_is_resolved_as_unknown_at_its_renewal() {
    let Some(url) = pg_url() else { return };
    let db = OwnDatabase::create(&url);
    // A short lease: the worker renews it (and resolves) every half second.
    let (log, _) = open(&db.url, "default", "r", Duration::from_millis(1500));
    log.record_intents_after(&[call("c1")], &[intent("c1")])
        .unwrap();
    let lift = refuse_results(&db.url);
    log.append(&[result("c1")], Durability::Lazy).unwrap_err();
    // Served after the worker's tries that the failure and this read start: both
    // failed, and the test leaves the engine alone from now on.
    assert_eq!(log.pending_calls().unwrap(), ["c1"]);
    lift();
    // Watched from outside the engine.
    let pending = format!("SELECT count(*)::text FROM {TEST_SCHEMA}.toolhost_pending");
    wait_until("the call to be resolved", Duration::from_secs(30), || {
        std::thread::sleep(Duration::from_millis(50));
        sql_value(&db.url, &pending).as_deref() == Some("0")
    });
    resolved_as_unknown(&log);
}

/// A PostgreSQL server of this test alone (`scripts/pg-test-server` on a directory and
/// port of its own), stopped on drop.
struct PrivateServer {
    dir: tempfile::TempDir,
    port: u16,
}

impl PrivateServer {
    fn script(&self, action: &str) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/pg-test-server");
        let out = std::process::Command::new(script)
            .arg(action)
            .env("TOOLHOST_PG_DIR", self.dir.path().join("pg"))
            .env("TOOLHOST_PG_PORT", self.port.to_string())
            .output()
            .unwrap();
        assert!(out.status.success(), "pg-test-server {action}: {out:?}");
    }

    fn start() -> PrivateServer {
        let dir = tempfile::tempdir().unwrap();
        // As root the server runs as `postgres`, which must reach its directory.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = PrivateServer { dir, port };
        server.script("start");
        server
    }

    fn url(&self) -> String {
        format!("postgres://toolhost@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.script("stop");
    }
}

#[test]
fn a_database_crash_and_restart_keeps_every_durable_event_and_the_engine_reconnects() {
    // Runs wherever the shared test server runs: the binaries are the same.
    if pg_url().is_none() {
        return;
    }
    let server = PrivateServer::start();
    let url = server.url();
    let (log, _) = open(&url, "default", "r", Duration::from_secs(600));
    log.record_intents_after(&[call("c1")], &[intent("c1")])
        .unwrap();
    log.append(&[result("c1")], Durability::Lazy).unwrap();
    log.record_intents_after(&[call("c2")], &[intent("c2")])
        .unwrap();
    let durable = shape(&log.events().unwrap());
    // The server dies as in a crash (immediate shutdown: no checkpoint) and comes back.
    server.script("restart");
    // The first operation may meet the dead connection: a clear error, nothing written.
    match log.append(&[result("c2")], Durability::Durable) {
        Ok(seqs) => assert_eq!(seqs, [6]),
        Err(e) => {
            assert!(matches!(e, LogError::Storage(_)), "{e:?}");
            assert_eq!(
                log.append(&[result("c2")], Durability::Durable).unwrap(),
                [6]
            );
        }
    }
    let events = log.events().unwrap();
    assert_eq!(shape(&events[..5]), durable);
    assert_eq!(seqs(&events), [1, 2, 3, 4, 5, 6]);
    assert!(log.pending_calls().unwrap().is_empty());
}

/// Events committed lazily and lost in a database crash before any synchronous commit
/// are not claimed durable: a flush after the restart reports their loss (a
/// synchronous commit on the new connection used to succeed, and the flush with it).
/// The flush succeeds exactly when the events survived; with the WAL writer held back
/// (10 s), they do not (in every run so far).
#[test]
fn a_flush_after_a_crash_that_lost_lazy_events_reports_the_loss() {
    lazy_events_lost_in_a_crash_are_reported_by(|log| log.flush());
}

/// As a flush, a durable append after the restart fails when earlier lazy events were
/// lost: it returns only once every event before it is durable. It used to succeed,
/// leaving the loss to the next flush.
#[test]
fn a_durable_append_after_a_crash_that_lost_lazy_events_reports_the_loss() {
    lazy_events_lost_in_a_crash_are_reported_by(|log| {
        log.append(&[call("c2")], Durability::Durable).map(|_| ())
    });
}

/// Commits a lazy result, crashes and restarts the database, then runs `make_durable`
/// (retried once after the dead connection's error): it succeeds exactly when the lazy
/// result survived, and reports the loss otherwise, once.
fn lazy_events_lost_in_a_crash_are_reported_by(
    make_durable: fn(&SessionLog) -> Result<(), LogError>,
) {
    if pg_url().is_none() {
        return;
    }
    let server = PrivateServer::start();
    let url = server.url();
    sql(&url, "ALTER SYSTEM SET wal_writer_delay = '10s'");
    sql(&url, "SELECT pg_reload_conf()");
    let (log, _) = open(&url, "default", "r", Duration::from_secs(600));
    log.record_intents_after(&[call("c1")], &[intent("c1")])
        .unwrap();
    log.append(&[result("c1")], Durability::Lazy).unwrap();
    server.script("restart");
    // The first operation may meet the dead connection; the next reconnects.
    let outcome = match make_durable(&log) {
        Err(LogError::Storage(e)) if !e.contains("were lost") => make_durable(&log),
        other => other,
    };
    let kept = log
        .events()
        .unwrap()
        .iter()
        .any(|e| e.call_id == "c1" && e.kind == EventKind::ToolResult);
    match outcome {
        Ok(()) => assert!(kept, "it succeeded but the lazy result is gone"),
        Err(e) => {
            assert!(!kept, "{e}");
            assert!(e.to_string().contains("were lost"), "{e}");
        }
    }
    if kept {
        eprintln!("the lazy result survived the crash: only the other half was checked");
    }
    // Reported once; the log goes on.
    log.flush().unwrap();
    log.append(&[result("c1")], Durability::Durable).unwrap();
    assert!(log.pending_calls().unwrap().is_empty());
}

/// A loopback TCP proxy in front of the test server whose replies can be swallowed
/// from some moment on (the connection stays open: the client hears nothing), to lose
/// the answer to a commit that the server made.
struct Proxy {
    port: u16,
    swallow: Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    fn start(upstream: std::net::SocketAddr) -> Proxy {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let swallow = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = swallow.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = std::net::TcpStream::connect(upstream) else {
                    return;
                };
                // Requests always go through.
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || std::io::copy(&mut c_in, &mut s_out));
                // Replies go through until `swallow` is set.
                let (mut s_in, mut c_out) = (server, client);
                let flag = flag.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 8192];
                    loop {
                        let n = match s_in.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if !flag.load(Ordering::SeqCst) && c_out.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Proxy { port, swallow }
    }
}

#[test]
fn an_intent_whose_commit_answer_is_lost_is_recovered_as_unknown_never_also_finished() {
    let Some(url) = pg_url() else { return };
    let config: tokio_postgres::Config = url.parse().unwrap();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let proxy = Proxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    let proxied = url.replace(&format!(":{port}/"), &format!(":{}/", proxy.port));
    assert_ne!(proxied, url);
    let name = unique("lost-answer");
    let mut options = pg_options(&name, "r", Duration::from_secs(600));
    options.op_timeout = Duration::from_secs(2);
    let log = SessionLog::from_engine(PgEngine::open(&proxied, &options).unwrap());
    log.append(&[call("c1")], Durability::Durable).unwrap();

    // The server commits the intent; its answer never arrives.
    proxy
        .swallow
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let err = log.record_intents(&[intent("c1")]).unwrap_err();
    assert!(err.to_string().contains("outcome is unknown"), "{err}");
    proxy
        .swallow
        .store(false, std::sync::atomic::Ordering::SeqCst);

    // The host ends the call ABORTED_BEFORE_DISPATCH (the body never ran); the log,
    // through a fresh connection, shows what the server did: the intent is there.
    assert_eq!(log.pending_calls().unwrap(), ["c1"]);
    // Recovery resolves it once; no other result can follow.
    assert_eq!(log.recover().unwrap().recovered, ["c1"]);
    assert_eq!(log.recover().unwrap(), Recovery::default());
    assert_eq!(
        kinds_of(&log, "c1"),
        [
            EventKind::ToolCall,
            EventKind::ToolIntent,
            EventKind::ToolResult
        ]
    );
}
