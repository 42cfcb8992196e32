//! The WAL mode (what `SessionLog::open` uses): a durable append is one intent WAL
//! record and one fdatasync; the database takes the events at checkpoints, and reads
//! write nothing.
//! Checked for fsync counts, for power loss at every point of the WAL's writes, for
//! faults, and for a WAL that does not belong to its database.

use toolhost_log::{
    CountingStorage, Durability, EventKind, FailingStorage, LogError, MemStorage, NewEvent, Op,
    SessionLog, SyncCounter,
};

use crate::{call, intent, result, seqs, shape};

fn open(db: &MemStorage, wal: &MemStorage) -> SessionLog {
    SessionLog::open_with_journal(db.clone(), wal.clone()).unwrap()
}

/// A WAL-mode log over two counted in-memory storages.
fn counted() -> (SessionLog, SyncCounter, SyncCounter, MemStorage, MemStorage) {
    let (db, wal) = (MemStorage::new(), MemStorage::new());
    let db_storage = CountingStorage::new(db.clone());
    let wal_storage = CountingStorage::new(wal.clone());
    let (dbc, walc) = (db_storage.counter(), wal_storage.counter());
    let log = SessionLog::open_with_journal(db_storage, wal_storage).unwrap();
    (log, dbc, walc, db, wal)
}

fn syncs(db: &SyncCounter, wal: &SyncCounter) -> (u64, u64) {
    (db.fsyncs(), wal.fsyncs())
}

/// A call's events, as the pipeline writes them: call + intent durable, result lazy.
fn one_call(log: &SessionLog, id: &str) {
    log.record_intents_after(&[call(id)], &[intent(id)])
        .unwrap();
    log.append(&[result(id)], Durability::Lazy).unwrap();
}

#[test]
fn a_durable_append_is_one_wal_fsync_and_no_database_fsync() {
    let (log, dbc, walc, _, _) = counted();
    let before = syncs(&dbc, &walc);
    log.append(&[call("c1"), intent("c1")], Durability::Durable)
        .unwrap();
    assert_eq!(syncs(&dbc, &walc), (before.0, before.1 + 1));
    // A lazy append syncs nothing; reading it costs no sync either, and no write.
    log.append(&[result("c1")], Durability::Lazy).unwrap();
    let writes = (dbc.writes(), walc.writes());
    assert_eq!(shape(&log.events().unwrap()).len(), 3);
    assert_eq!(log.events_for_call("c1").unwrap().len(), 3);
    assert!(log.pending_calls().unwrap().is_empty());
    assert_eq!((dbc.writes(), walc.writes()), writes, "a read wrote");
    assert_eq!(syncs(&dbc, &walc), (before.0, before.1 + 1));
    // Flush makes the lazy event durable with one WAL record.
    log.flush().unwrap();
    assert_eq!(syncs(&dbc, &walc), (before.0, before.1 + 2));
    log.flush().unwrap();
    assert_eq!(
        syncs(&dbc, &walc),
        (before.0, before.1 + 2),
        "nothing to flush"
    );
    // A group commit of 16 intents: one fsync.
    let intents: Vec<_> = (0..16).map(|i| intent(&format!("g{i}"))).collect();
    log.record_intents(&intents).unwrap();
    assert_eq!(syncs(&dbc, &walc), (before.0, before.1 + 3));
}

#[test]
fn over_thousands_of_calls_checkpoints_add_under_one_percent_of_fsyncs() {
    let (log, dbc, walc, _, _) = counted();
    let before = syncs(&dbc, &walc);
    let n = 3000u64;
    for i in 0..n {
        let id = format!("c{i}");
        // The intent (before the body): exactly one fsync, the WAL's,
        // whatever the checkpoints do.
        let at = syncs(&dbc, &walc);
        log.record_intents_after(&[call(&id)], &[intent(&id)])
            .unwrap();
        assert_eq!(syncs(&dbc, &walc), (at.0, at.1 + 1), "intent of call {i}");
        // The result: no fsync, except a checkpoint's database commit.
        let at = syncs(&dbc, &walc);
        log.append(&[result(&id)], Durability::Lazy).unwrap();
        assert_eq!(walc.fsyncs(), at.1, "result of call {i}");
    }
    let (db_syncs, wal_syncs) = (dbc.fsyncs() - before.0, walc.fsyncs() - before.1);
    eprintln!("{n} calls: {wal_syncs} WAL fsyncs, {db_syncs} database fsyncs (checkpoints)");
    assert_eq!(wal_syncs, n);
    assert!(db_syncs >= 1, "the WAL never checkpointed");
    assert!(db_syncs * 100 <= n, "{db_syncs} checkpoint fsyncs");
    let events = log.events().unwrap();
    assert_eq!(events.len() as u64, 3 * n);
    assert_eq!(seqs(&events), (1..=3 * n).collect::<Vec<_>>());
    assert!(log.pending_calls().unwrap().is_empty());
}

#[test]
fn power_loss_keeps_every_durable_event_and_the_lazy_ones_a_durable_append_carried() {
    let (db, wal) = (MemStorage::new(), MemStorage::new());
    let log = open(&db, &wal);
    one_call(&log, "a"); // a's result is lazy...
    log.record_intents_after(&[call("b")], &[intent("b")])
        .unwrap(); // ...and rides b's durable record.
    log.append(&[result("b")], Durability::Lazy).unwrap(); // never carried
    let expected = vec![call("a"), intent("a"), result("a"), call("b"), intent("b")];
    // Nothing of it is in the database durably: only the WAL holds it.
    assert!(
        SessionLog::open_with_backend(db.crash())
            .unwrap()
            .events()
            .unwrap()
            .is_empty()
    );
    let reopened = open(&db.crash(), &wal.crash());
    assert_eq!(shape(&reopened.events().unwrap()), expected);
    assert_eq!(reopened.pending_calls().unwrap(), vec!["b".to_string()]);
    let recovery = reopened.recover().unwrap();
    assert_eq!(recovery.recovered, vec!["b".to_string()]);
    let events = reopened.events().unwrap();
    assert_eq!(seqs(&events), (1..=events.len() as u64).collect::<Vec<_>>());
    let unknown = &events[5];
    assert_eq!(unknown.kind, EventKind::ToolResult);
    assert_eq!(
        unknown.payload["error"]["code"],
        serde_json::json!("TOOL_OUTCOME_UNKNOWN")
    );
    drop(log);
}

#[test]
fn a_crash_at_any_point_of_an_unfinished_wal_record_keeps_a_consistent_log() {
    // The database at its durable image and every prefix of the WAL's unsynced
    // writes (a device that wrote back part of them): the acknowledged events are all
    // there, plus the unacknowledged record whole or not at all.
    let (db, wal) = (MemStorage::new(), MemStorage::new());
    let log = open(&db, &wal);
    one_call(&log, "a");
    std::mem::forget(log); // a crash: no closing checkpoint
    let (db, wal) = (db.crash(), wal.crash());
    let failing = FailingStorage::healthy(wal.clone(), &[Op::SyncData]);
    let faults = failing.handle();
    let log = SessionLog::open_with_journal(db.clone(), failing).unwrap();
    let acked = vec![call("a"), intent("a")];
    assert_eq!(
        shape(&log.events().unwrap()),
        acked,
        "a's lazy result was never carried"
    );
    faults.fail_from_now();
    log.record_intents_after(&[call("b")], &[intent("b")])
        .unwrap_err();
    let pending = wal.unsynced_changes();
    assert!(pending > 0);
    let mut whole = acked.clone();
    whole.extend([call("b"), intent("b")]);
    let mut saw_whole = false;
    for kept in 0..=pending {
        let reopened = open(&db.crash(), &wal.crash_keeping(kept).unwrap());
        let got = shape(&reopened.events().unwrap());
        assert!(
            got == acked || got == whole,
            "kept {kept} of {pending}: {got:?}"
        );
        saw_whole |= got == whole;
    }
    assert!(
        saw_whole,
        "keeping every write must bring the whole record back"
    );
}

#[test]
fn a_wal_fault_at_every_point_fails_the_append_or_makes_it_durable() {
    let before = vec![call("c1"), intent("c1")];
    let new = intent("c2");
    for kinds in [&Op::ALL[..], &[Op::Write], &[Op::SyncData], &[Op::SetLen]] {
        let mut succeeded_at = None;
        for k in 0..200 {
            let (db, wal) = (MemStorage::new(), MemStorage::new());
            {
                let log = open(&db, &wal);
                log.append(&before, Durability::Durable).unwrap();
                std::mem::forget(log); // a crash: no closing checkpoint
            }
            let (db, wal) = (db.crash(), wal.crash());
            let failing = FailingStorage::new(wal.clone(), k, kinds);
            let what = format!("faults {kinds:?} after {k} ops");
            let acked = match SessionLog::open_with_journal(db.clone(), failing) {
                Err(e) => {
                    assert!(matches!(e, LogError::Storage(_)), "{what}: {e}");
                    false
                }
                Ok(log) => {
                    let ok = log
                        .append(std::slice::from_ref(&new), Durability::Durable)
                        .is_ok();
                    if !ok {
                        // Broken until reopened.
                        assert!(log.append(&[call("c3")], Durability::Lazy).is_err());
                        assert!(log.events().is_err());
                    }
                    std::mem::forget(log);
                    ok
                }
            };
            let reopened = open(&db.crash(), &wal.crash());
            let got = shape(&reopened.events().unwrap());
            let mut with_new = before.clone();
            with_new.push(new.clone());
            if acked {
                assert_eq!(got, with_new, "{what}");
                succeeded_at = Some(k);
                break;
            }
            assert!(got == before || got == with_new, "{what}: {got:?}");
        }
        let k = succeeded_at.expect("the append never succeeded");
        eprintln!("WAL faults on {kinds:?}: first success after {k} healthy ops");
    }
}

#[test]
fn closing_checkpoints_the_database_and_empties_the_wal() {
    let (db, wal) = (MemStorage::new(), MemStorage::new());
    let log = open(&db, &wal);
    one_call(&log, "a");
    drop(log);
    // The database alone, as it survives power loss, has every event.
    let alone = SessionLog::open_with_backend(db.crash()).unwrap();
    assert_eq!(
        shape(&alone.events().unwrap()),
        vec![call("a"), intent("a"), result("a")]
    );
    // And the WAL's round is empty: reopening with it adds nothing.
    let reopened = open(&db.crash(), &wal.crash());
    assert_eq!(reopened.events().unwrap().len(), 3);
    reopened.append(&[call("z")], Durability::Durable).unwrap();
    assert_eq!(reopened.events().unwrap().last().map(|e| e.seq), Some(4));
}

#[test]
fn readers_see_lazy_and_durable_events_at_once() {
    let (db, wal) = (MemStorage::new(), MemStorage::new());
    let log = open(&db, &wal);
    log.record_intents_after(&[call("a")], &[intent("a")])
        .unwrap();
    assert_eq!(log.pending_calls().unwrap(), vec!["a".to_string()]);
    assert_eq!(log.events_for_call("a").unwrap().len(), 2);
    log.append(&[result("a")], Durability::Lazy).unwrap();
    assert!(log.pending_calls().unwrap().is_empty());
    assert_eq!(
        shape(&log.events_for_call("a").unwrap()),
        vec![call("a"), intent("a"), result("a")]
    );
}

#[test]
fn a_wal_that_does_not_continue_its_database_is_refused_and_left_alone() {
    let (db, wal) = (MemStorage::new(), MemStorage::new());
    let log = open(&db, &wal);
    for i in 0..5 {
        one_call(&log, &format!("c{i}"));
    }
    std::mem::forget(log); // a crash: the WAL holds every event, the database none
    // Without its first record the WAL starts at event 3, after a database that
    // ends at 0: a gap, so the WAL is not this database's.
    let trimmed = trim_first_record(&wal.crash().current_bytes());
    let trimmed_wal = MemStorage::from_bytes(trimmed.clone());
    let err = SessionLog::open_with_journal(db.crash(), trimmed_wal.clone()).unwrap_err();
    assert!(matches!(err, LogError::Corrupt(_)), "{err:?}");
    assert!(
        err.to_string().contains("WAL belongs to another log"),
        "{err}"
    );
    assert_eq!(trimmed_wal.current_bytes(), trimmed, "the WAL was modified");
    // The untrimmed WAL replays in full.
    let reopened = open(&db.crash(), &wal.crash());
    assert_eq!(
        reopened.events().unwrap().len(),
        14,
        "the last result was never carried"
    );
}

/// The WAL bytes without their first record (header: magic, length, CRC).
fn trim_first_record(bytes: &[u8]) -> Vec<u8> {
    let len = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    bytes[12 + len..].to_vec()
}

/// A device that wrote back out of order leaves a torn record with an
/// intact one behind it. Opening replays what comes before the torn record
/// and must leave nothing of the rest, durably: the lost events' numbers
/// are handed out again, so the intact record behind would read as the
/// continuation of a new record that happened to end where it starts, and
/// its events (an intent never acknowledged) would come back as phantoms.
#[test]
fn opening_clears_intact_records_behind_a_torn_one_durably() {
    let (db, wal) = (MemStorage::new(), MemStorage::new());
    let log = open(&db, &wal);
    for id in ["a", "b", "c"] {
        log.record_intents_after(&[call(id)], &[intent(id)])
            .unwrap();
    }
    std::mem::forget(log); // a crash: three records in the WAL, none in the database
    let mut bytes = wal.crash().current_bytes();
    let record_len =
        |at: usize| 12 + u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
    let second = record_len(0);
    let third = second + record_len(second);
    let end = third + record_len(third);
    // The second record torn (one byte of its payload lost), the third whole.
    bytes[second + 20] ^= 0xff;
    let torn = MemStorage::from_bytes(bytes);
    let reopened = open(&db.crash(), &torn);
    assert_eq!(
        shape(&reopened.events().unwrap()),
        vec![call("a"), intent("a")]
    );
    std::mem::forget(reopened);
    // What a crash right after opening leaves: nothing but zeros, the
    // intact third record included.
    let after = torn.crash().current_bytes();
    assert!(after.len() >= end);
    assert!(
        after[..end].iter().all(|&b| b == 0),
        "records survive the open: {:?}",
        &after[third..third + 16]
    );
}

#[test]
fn a_wal_whose_events_differ_from_the_database_is_refused_and_left_alone() {
    // Two acknowledged events in the WAL only; then the database alone is written
    // by something else (a replaced or rewritten session.redb): event 1 differs.
    let (db, wal) = (MemStorage::new(), MemStorage::new());
    let log = open(&db, &wal);
    log.append(&[call("d1"), call("d2")], Durability::Durable)
        .unwrap();
    std::mem::forget(log);
    let (db, wal) = (db.crash(), wal.crash());
    {
        let other = SessionLog::open_with_backend(db.clone()).unwrap();
        other.append(&[call("other")], Durability::Durable).unwrap();
    }
    let wal_bytes = wal.current_bytes();
    let err = SessionLog::open_with_journal(db.crash(), wal.clone()).unwrap_err();
    assert!(matches!(err, LogError::Corrupt(_)), "{err:?}");
    assert!(err.to_string().contains("differs"), "{err}");
    assert_eq!(wal.current_bytes(), wal_bytes, "the WAL was modified");
}

#[test]
fn a_database_at_the_end_of_the_sequence_space_refuses_appends_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    drop(SessionLog::open(dir.path()).unwrap());
    {
        let db = redb::Database::create(dir.path().join("session.redb")).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut events = tx
                .open_table(redb::TableDefinition::<u64, &[u8]>::new("events"))
                .unwrap();
            let bytes = br#"{"call_id":"x","kind":"tool/call","at_unix_ms":0,"payload":{}}"#;
            events.insert(u64::MAX - 1, &bytes[..]).unwrap();
        }
        tx.commit().unwrap();
    }
    let log = SessionLog::open(dir.path()).unwrap();
    for durability in [Durability::Durable, Durability::Lazy] {
        let err = log.append(&[call("a"), call("b")], durability).unwrap_err();
        assert!(matches!(err, LogError::Corrupt(_)), "{err:?}");
    }
    assert_eq!(log.events().unwrap().len(), 1);
}

/// Lazily appended events count toward the checkpoint by their size, not only by
/// their number: large lazy results reach the database at a checkpoint instead of
/// piling up in memory until the next durable append writes them all as one WAL record
/// (about 680 calls with 4 MiB results held 2.7 GiB, and over 4 GiB the record was
/// refused).
#[test]
fn large_lazy_events_are_checkpointed_by_size_not_carried_by_the_next_durable_append() {
    let (log, dbc, walc, db, wal) = counted();
    let big = crate::incompressible(200 << 10);
    let checkpoints = dbc.fsyncs();
    // 1.6 MiB of lazy results: over the checkpoint size (768 KiB), far under its count.
    for i in 0..8 {
        let id = format!("r{i}");
        let e = NewEvent::new(
            &id,
            EventKind::ToolResult,
            serde_json::json!({ "text": big }),
        );
        log.append(&[e], Durability::Lazy).unwrap();
    }
    assert!(dbc.fsyncs() > checkpoints, "no checkpoint ran");
    let before = walc.bytes_written();
    log.record_intents(&[intent("next")]).unwrap();
    let written = walc.bytes_written() - before;
    assert!(
        written < 768 << 10,
        "the durable append wrote {written} bytes of lazy events to the WAL"
    );
    // Every event survives a power loss after the durable append.
    let crashed = open(&db.crash(), &wal.crash());
    assert_eq!(crashed.events().unwrap().len(), 9);
}

#[test]
fn a_wal_grown_by_a_large_record_shrinks_back_at_the_next_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let wal = dir.path().join("session.wal");
    // 2.5 MiB: under the size at which a durable append checkpoints (3 MiB), over the
    // size the file is cut back from (2 MiB).
    let big = crate::incompressible(5 << 19);
    {
        let log = SessionLog::open(dir.path()).unwrap();
        assert_eq!(std::fs::metadata(&wal).unwrap().len(), 1 << 20);
        log.append(
            &[NewEvent::new(
                "big",
                EventKind::ToolCall,
                serde_json::json!({ "big": big }),
            )],
            Durability::Durable,
        )
        .unwrap();
        assert_eq!(std::fs::metadata(&wal).unwrap().len(), 3 << 20);
    }
    assert_eq!(std::fs::metadata(&wal).unwrap().len(), 1 << 20);
    let log = SessionLog::open(dir.path()).unwrap();
    let events = log.events().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].payload["big"].as_str().map(str::len),
        Some(5 << 19)
    );
}

/// Group commit: 8 threads whose durable appends arrive together share the fsyncs. The
/// WAL's syncs are held until all 8 records are written, so they meet whatever the
/// scheduling: the sync running when they arrive, one for the rest, and at most one
/// more for the last record if its ticket was not yet published when that sync started
/// (a record is written, then its ticket published, under one lock: only one can be in
/// between). Each append returns only once its events survive power loss.
#[test]
fn concurrent_durable_appends_share_fsyncs_and_each_is_durable_on_return() {
    use std::sync::Arc;
    use std::time::Duration;
    use toolhost_log::GatedStorage;

    const THREADS: u64 = 8;
    let (db, wal) = (MemStorage::new(), MemStorage::new());
    let counted = CountingStorage::new(wal.clone());
    let walc = counted.counter();
    let gated = GatedStorage::new(counted);
    let gate = gated.gate();
    let log = Arc::new(SessionLog::open_with_journal(db.clone(), gated).unwrap());
    let before = walc.fsyncs();
    gate.hold_syncs_until_writes(THREADS, Duration::from_secs(60));
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let id = format!("c{i}");
                log.record_intents_after(&[call(&id)], &[intent(&id)])
                    .unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let fsyncs = walc.fsyncs() - before;
    eprintln!("{THREADS} concurrent durable appends: {fsyncs} WAL fsyncs");
    assert!(
        (1..=3).contains(&fsyncs),
        "{fsyncs} fsyncs for {THREADS} appends that arrived together"
    );
    // Every append returned durable: power loss now keeps all 16 events.
    let (db_after, wal_after) = (db.crash(), wal.crash());
    drop(log);
    let reopened = open(&db_after, &wal_after);
    let events = reopened.events().unwrap();
    assert_eq!(events.len(), 2 * THREADS as usize, "{:?}", shape(&events));
    assert_eq!(reopened.pending_calls().unwrap().len(), THREADS as usize);
}

/// A failed shared sync fails every append it was to cover (none returns as durable),
/// and the log then refuses appends until it is reopened.
#[test]
fn a_failed_group_sync_fails_every_append_it_covers() {
    use std::sync::Arc;
    use std::time::Duration;
    use toolhost_log::GatedStorage;

    const THREADS: u64 = 8;
    let (db, wal) = (MemStorage::new(), MemStorage::new());
    let failing = FailingStorage::healthy(wal.clone(), &[Op::SyncData]);
    let fault = failing.handle();
    let gated = GatedStorage::new(failing);
    let gate = gated.gate();
    let log = Arc::new(SessionLog::open_with_journal(db.clone(), gated).unwrap());
    gate.hold_syncs_until_writes(THREADS, Duration::from_secs(60));
    fault.fail_from_now();
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let id = format!("c{i}");
                log.record_intents_after(&[call(&id)], &[intent(&id)])
            })
        })
        .collect();
    for t in threads {
        let r = t.join().unwrap();
        assert!(matches!(r, Err(LogError::Storage(_))), "{r:?}");
    }
    let r = log.append(&[result("c0")], Durability::Lazy);
    assert!(matches!(r, Err(LogError::Storage(_))), "{r:?}");
}

#[test]
fn appends_and_reads_go_on_while_a_checkpoint_commits_and_nothing_is_lost_or_doubled() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    use toolhost_log::GatedStorage;

    let (db, wal) = (MemStorage::new(), MemStorage::new());
    let db_storage = GatedStorage::new(db.clone());
    let gate = db_storage.gate();
    let log = Arc::new(SessionLog::open_with_journal(db_storage, wal.clone()).unwrap());
    // An intent big enough that the WAL passes the checkpoint threshold (768 KiB): the
    // next lazy append checkpoints.
    let big = NewEvent::new(
        "a",
        EventKind::ToolIntent,
        serde_json::json!({ "tool": "write_file", "big": crate::incompressible(800 * 1024) }),
    );
    log.record_intents_after(&[call("a")], std::slice::from_ref(&big))
        .unwrap();
    // The checkpoint's commit syncs the database: hold it there (at most 10 s, so
    // that a log whose appends wait for it fails below instead of hanging).
    gate.hold_syncs_until_writes(u64::MAX, Duration::from_secs(10));
    let done = Arc::new(AtomicBool::new(false));
    let checkpointer = {
        let (log, done) = (log.clone(), done.clone());
        std::thread::spawn(move || {
            log.append(&[result("a")], Durability::Lazy).unwrap();
            done.store(true, Ordering::SeqCst);
        })
    };
    assert!(
        gate.wait_for_a_held_sync(Duration::from_secs(10)),
        "the lazy append did not start a checkpoint"
    );
    // A reader arrives while the commit is held (redb makes it wait for the commit)...
    let reader = {
        let log = log.clone();
        std::thread::spawn(move || log.events().unwrap())
    };
    // ...and another call's durable and lazy appends go on all the same.
    one_call(&log, "b");
    assert!(
        !done.load(Ordering::SeqCst),
        "the appends waited for the checkpoint's commit"
    );
    let expected = vec![
        call("a"),
        big.clone(),
        result("a"),
        call("b"),
        intent("b"),
        result("b"),
    ];
    // Power lost while the commit is held: every durable event is in the WAL (b's
    // record carried a's lazy result; b's own result was never made durable).
    let crashed = open(&db.crash(), &wal.crash());
    assert_eq!(shape(&crashed.events().unwrap()), expected[..5].to_vec());
    drop(crashed);

    gate.open();
    checkpointer.join().unwrap();
    // The reader saw each event once, whether it read before the checkpoint took the
    // events out of memory or after.
    let read = reader.join().unwrap();
    assert_eq!(shape(&read), expected);
    assert_eq!(seqs(&read), (1..=6).collect::<Vec<u64>>());
    let after = log.events().unwrap();
    assert_eq!(shape(&after), expected);
    assert_eq!(
        shape(&log.events_for_call("a").unwrap()),
        expected[..3].to_vec()
    );
    assert!(log.pending_calls().unwrap().is_empty());
    // The checkpoint's second phase committed b's events and emptied the WAL: they are
    // all in the database.
    let db_only = SessionLog::open_with_backend(db.crash()).unwrap();
    assert_eq!(shape(&db_only.events().unwrap()), expected);
    let crashed = open(&db.crash(), &wal.crash());
    assert_eq!(shape(&crashed.events().unwrap()), expected);
}

/// A storage whose syncs, once armed, wait until the test releases them,
/// and say when one has started. A wait is bounded (10 s), so that a
/// broken test fails instead of hanging.
#[derive(Clone)]
pub(crate) struct GatedStorage {
    inner: MemStorage,
    gate: std::sync::Arc<Gate>,
}

#[derive(Default)]
pub(crate) struct Gate {
    /// (armed, a sync is waiting, released)
    state: std::sync::Mutex<(bool, bool, bool)>,
    changed: std::sync::Condvar,
}

impl Gate {
    pub(crate) fn arm(&self) {
        self.state.lock().unwrap().0 = true;
    }

    /// Waits until a sync is held at the gate.
    pub(crate) fn wait_held(&self) {
        let state = self.state.lock().unwrap();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, std::time::Duration::from_secs(10), |s| !s.1)
            .unwrap();
        assert!(state.1, "no sync reached the gate");
    }

    pub(crate) fn release(&self) {
        self.state.lock().unwrap().2 = true;
        self.changed.notify_all();
    }

    pub(crate) fn released(&self) -> bool {
        self.state.lock().unwrap().2
    }
}

impl GatedStorage {
    pub(crate) fn new(inner: MemStorage) -> (GatedStorage, std::sync::Arc<Gate>) {
        let gate = std::sync::Arc::new(Gate::default());
        (
            GatedStorage {
                inner,
                gate: gate.clone(),
            },
            gate,
        )
    }
}

impl toolhost_log::Storage for GatedStorage {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.inner.read(offset, out)
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.inner.write(offset, data)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        let mut state = self.gate.state.lock().unwrap();
        if state.0 && !state.2 {
            state.1 = true;
            self.gate.changed.notify_all();
            let (_state, _) = self
                .gate
                .changed
                .wait_timeout_while(state, std::time::Duration::from_secs(10), |s| !s.2)
                .unwrap();
        }
        self.inner.sync_data()
    }
}

/// `flush` returns only once every earlier lazy append is durable, also
/// when a concurrent durable append already carried them and is still in
/// its sync: the host relies on it before it tells anyone of an approval
/// request. Checked for the WAL mode and for redb alone.
pub(crate) fn flush_waits_for_a_sync_in_flight(log: SessionLog, gate: std::sync::Arc<Gate>) {
    waits_for_a_sync_in_flight(log, gate, |log| log.flush());
}

/// `make_durable` (a flush, or a durable append of nothing) returns only once every
/// earlier lazy append is durable, also when a concurrent durable append already
/// carried them and is still in its sync.
fn waits_for_a_sync_in_flight(
    log: SessionLog,
    gate: std::sync::Arc<Gate>,
    make_durable: fn(&SessionLog) -> Result<(), LogError>,
) {
    let log = std::sync::Arc::new(log);
    log.append(&[result("lazy")], Durability::Lazy).unwrap();
    gate.arm();
    let durable = {
        let log = log.clone();
        std::thread::spawn(move || {
            log.record_intents_after(&[call("d")], &[intent("d")])
                .unwrap();
        })
    };
    gate.wait_held();
    let (done, flushed) = std::sync::mpsc::channel();
    let flusher = {
        let (log, gate) = (log.clone(), gate.clone());
        std::thread::spawn(move || {
            make_durable(&log).unwrap();
            done.send(gate.released()).unwrap();
        })
    };
    // A flush that returns while the sync is held has broken its promise;
    // one that waits is let go after a while (only a broken flush can be
    // seen returning early, so this cannot fail a correct one).
    let early = flushed.recv_timeout(std::time::Duration::from_millis(500));
    gate.release();
    assert_ne!(early, Ok(false), "it returned before the sync finished");
    durable.join().unwrap();
    flusher.join().unwrap();
}

/// A durable append of no events makes every earlier event durable, as any durable
/// append does: it used to return at once when this thread had nothing unsynced,
/// while another thread's record (carrying the lazy events) was written and not yet
/// synced.
#[test]
fn an_empty_durable_append_waits_for_a_wal_sync_in_flight_that_carries_earlier_events() {
    let (wal, gate) = GatedStorage::new(MemStorage::new());
    let log = SessionLog::open_with_journal(MemStorage::new(), wal).unwrap();
    waits_for_a_sync_in_flight(log, gate, |log| {
        assert_eq!(log.append(&[], Durability::Durable)?, Vec::<u64>::new());
        Ok(())
    });
}

#[test]
fn flush_waits_for_a_wal_sync_in_flight_that_carries_its_events() {
    let (wal, gate) = GatedStorage::new(MemStorage::new());
    let log = SessionLog::open_with_journal(MemStorage::new(), wal).unwrap();
    flush_waits_for_a_sync_in_flight(log, gate);
}

#[test]
fn flush_waits_for_a_database_commit_in_flight_that_carries_its_events() {
    let (db, gate) = GatedStorage::new(MemStorage::new());
    let log = SessionLog::open_with_backend(db).unwrap();
    flush_waits_for_a_sync_in_flight(log, gate);
}
