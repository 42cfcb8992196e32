//! `SessionLog::open_read_only`: reading a state directory while a writer has it open
//! (in another process or in this one), without ever changing a file.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::SystemTime;

use toolhost_log::{Durability, LogError, SessionLog};

use crate::child::{Held, run_child};
use crate::{call, intent, result, seqs, shape};

/// Every file of a state directory: its bytes and modification time.
fn files(dir: &Path) -> BTreeMap<String, (Vec<u8>, SystemTime)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            let bytes = std::fs::read(e.path()).unwrap();
            (name, (bytes, e.metadata().unwrap().modified().unwrap()))
        })
        .collect()
}

/// The events the database file holds by itself (without the intent WAL).
fn events_in_database_alone(dir: &Path) -> u64 {
    let db = redb::Builder::new()
        .set_concurrency_mode(redb::ConcurrencyMode::SingleWriter)
        .open_read_only(dir.join("session.redb"))
        .unwrap();
    let read = redb::ReadableDatabase::begin_read(&db).unwrap();
    let events = read
        .open_table(redb::TableDefinition::<u64, &[u8]>::new("events"))
        .unwrap();
    redb::ReadableTableMetadata::len(&events).unwrap()
}

/// The `hold` probe's events that are durable (its last lazy event is not).
fn held_durable() -> Vec<toolhost_log::NewEvent> {
    vec![
        call("h1"),
        intent("h1"),
        result("h1"),
        call("h2"),
        intent("h2"),
    ]
}

/// Reads everything a reader can, and checks that writing is refused.
fn read_all_and_try_to_write(reader: &SessionLog) -> Vec<toolhost_log::Event> {
    let events = reader.events().unwrap();
    let _ = reader.pending_calls().unwrap();
    let _ = reader.events_for_call("h1").unwrap();
    for err in [
        reader
            .append(&[call("x")], Durability::Durable)
            .unwrap_err(),
        reader.append(&[call("x")], Durability::Lazy).unwrap_err(),
        reader.record_intents(&[intent("x")]).unwrap_err(),
        reader.recover().unwrap_err(),
    ] {
        assert!(matches!(err, LogError::ReadOnly { .. }), "{err:?}");
        assert!(err.to_string().contains("opened read-only"), "{err}");
    }
    reader.flush().unwrap();
    events
}

#[test]
fn a_reader_beside_a_writer_in_another_process_sees_every_durable_intent() {
    let dir = tempfile::tempdir().unwrap();
    let held = Held::start("hold", dir.path(), "CHILD: holding");
    // The writer's events are in its intent WAL only: the database has none yet.
    assert_eq!(events_in_database_alone(dir.path()), 0);

    let reader = SessionLog::open_read_only(dir.path()).unwrap();
    let events = read_all_and_try_to_write(&reader);
    assert_eq!(
        shape(&events),
        held_durable(),
        "the lazy event is not durable"
    );
    assert_eq!(seqs(&events), [1, 2, 3, 4, 5]);
    assert_eq!(reader.pending_calls().unwrap(), ["h2"]);
    assert_eq!(
        shape(&reader.events_for_call("h2").unwrap()),
        [call("h2"), intent("h2")]
    );

    // Once the writer has closed (a checkpoint into the database), the same reader sees
    // the lazy event too: every read is a new snapshot.
    held.release();
    let mut all = held_durable();
    all.push(call("lazy"));
    assert_eq!(shape(&reader.events().unwrap()), all);
    assert_eq!(events_in_database_alone(dir.path()), 6);
    assert_eq!(reader.pending_calls().unwrap(), ["h2"]);
}

#[test]
fn a_reader_beside_a_writer_in_the_same_process_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let writer = SessionLog::open(dir.path()).unwrap();
    let reader = SessionLog::open_read_only(dir.path()).unwrap();
    assert!(reader.events().unwrap().is_empty());

    writer
        .record_intents_after(&[call("a")], &[intent("a")])
        .unwrap();
    assert_eq!(shape(&reader.events().unwrap()), [call("a"), intent("a")]);
    assert_eq!(reader.pending_calls().unwrap(), ["a"]);

    // A lazy event is invisible until it is durable, then visible.
    writer.append(&[result("a")], Durability::Lazy).unwrap();
    assert_eq!(reader.events().unwrap().len(), 2);
    assert_eq!(reader.pending_calls().unwrap(), ["a"]);
    writer.flush().unwrap();
    assert_eq!(
        shape(&reader.events().unwrap()),
        [call("a"), intent("a"), result("a")]
    );
    assert!(reader.pending_calls().unwrap().is_empty());

    // Recovery by the writer is durable at once, and visible.
    writer.record_intents(&[intent("lost")]).unwrap();
    assert_eq!(writer.recover().unwrap().recovered, ["lost"]);
    assert_eq!(reader.events().unwrap(), writer.events().unwrap());

    // A reader does not hold the state: the writer closes and another opens.
    drop(writer);
    let again = SessionLog::open_with_wait(dir.path(), std::time::Duration::ZERO).unwrap();
    again.append(&[call("b")], Durability::Durable).unwrap();
    assert_eq!(reader.events().unwrap(), again.events().unwrap());
}

#[test]
fn a_reader_never_modifies_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let held = Held::start("hold", dir.path(), "CHILD: holding");
    let before = files(dir.path());
    assert!(before.contains_key("holder"), "{:?}", before.keys());
    {
        let reader = SessionLog::open_read_only(dir.path()).unwrap();
        read_all_and_try_to_write(&reader);
    }
    assert!(
        files(dir.path()) == before,
        "a reader beside a writer changed a file"
    );
    held.release();

    // After the writer, too.
    let before = files(dir.path());
    {
        let reader = SessionLog::open_read_only(dir.path()).unwrap();
        assert_eq!(read_all_and_try_to_write(&reader).len(), 6);
    }
    assert!(files(dir.path()) == before, "a reader changed a file");

    // A state directory that does not exist reads as empty and is not created.
    let missing = dir.path().join("nothing-here");
    let reader = SessionLog::open_read_only(&missing).unwrap();
    assert!(reader.events().unwrap().is_empty());
    assert!(!missing.exists());
}

#[test]
fn a_reader_opened_before_the_log_exists_follows_it_once_a_writer_creates_it() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let reader = SessionLog::open_read_only(&state).unwrap();
    assert!(reader.events().unwrap().is_empty());
    let writer = SessionLog::open(&state).unwrap();
    writer
        .record_intents_after(&[call("a")], &[intent("a")])
        .unwrap();
    assert_eq!(reader.pending_calls().unwrap(), ["a"]);
    writer.append(&[result("a")], Durability::Lazy).unwrap();
    drop(writer); // a checkpoint, and the WAL starts a new round
    assert_eq!(
        shape(&reader.events().unwrap()),
        [call("a"), intent("a"), result("a")]
    );
}

#[test]
fn a_torn_last_wal_record_is_ignored_by_the_reader() {
    let dir = tempfile::tempdir().unwrap();
    let wal = dir.path().join("session.wal");
    let writer = SessionLog::open(dir.path()).unwrap();
    writer
        .append(&[call("a"), intent("a")], Durability::Durable)
        .unwrap();
    writer
        .append(&[call("b"), intent("b")], Durability::Durable)
        .unwrap();
    let reader = SessionLog::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.events().unwrap().len(), 4);

    // The two records: magic, payload length, CRC, payload.
    let bytes = std::fs::read(&wal).unwrap();
    let record_len =
        |at: usize| 12 + u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
    let second = record_len(0);
    let end = second + record_len(second);
    assert_eq!(&bytes[second..second + 4], b"THW1");

    // A third record being written: only part of it has reached the file.
    let mut partial = bytes.clone();
    let half = (end - second) / 2;
    partial.copy_within(second..second + half, end);
    std::fs::write(&wal, &partial).unwrap();
    assert_eq!(
        shape(&reader.events().unwrap()),
        [call("a"), intent("a"), call("b"), intent("b")]
    );

    // The last record torn: the reader stops before it, without an error.
    for cut in [end - 1, second + 12 + 3, second + 5] {
        let mut torn = bytes.clone();
        torn[cut..end].fill(0);
        std::fs::write(&wal, &torn).unwrap();
        assert_eq!(
            shape(&reader.events().unwrap()),
            [call("a"), intent("a")],
            "torn at {cut}"
        );
        assert_eq!(reader.pending_calls().unwrap(), ["a"], "torn at {cut}");
    }
    std::fs::write(&wal, &bytes).unwrap();
    assert_eq!(reader.events().unwrap().len(), 4);
    drop(writer);
}

#[test]
fn concurrent_reads_see_a_gapless_prefix_holding_every_acknowledged_event() {
    // The writer runs calls (intent durable, result lazy) through several checkpoints
    // while a reader reads: each read must be events 1..n in order, n at least the
    // last acknowledged durable append, whatever checkpoint ran in between.
    let dir = tempfile::tempdir().unwrap();
    let writer = SessionLog::open(dir.path()).unwrap();
    let reader = SessionLog::open_read_only(dir.path()).unwrap();
    let acked = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let calls = 3_000u64;
    let writing = {
        let (acked, done) = (acked.clone(), done.clone());
        std::thread::spawn(move || {
            for i in 0..calls {
                let id = format!("c{i}");
                let seqs = writer
                    .record_intents_after(&[call(&id)], &[intent(&id)])
                    .unwrap();
                acked.store(seqs[1], Ordering::SeqCst);
                writer.append(&[result(&id)], Durability::Lazy).unwrap();
            }
            done.store(true, Ordering::SeqCst);
            writer
        })
    };
    let mut reads = 0u64;
    let checked = |final_read: bool| {
        let at_least = acked.load(Ordering::SeqCst);
        let events = reader.events().unwrap();
        let n = events.len() as u64;
        assert!(
            n >= at_least,
            "read {n} events, {at_least} were acknowledged"
        );
        assert_eq!(seqs(&events), (1..=n).collect::<Vec<_>>());
        for e in &events {
            let call_no = (e.seq - 1) / 3;
            assert_eq!(e.call_id, format!("c{call_no}"), "event {}", e.seq);
        }
        if final_read {
            assert_eq!(n, 3 * calls);
        }
    };
    while !done.load(Ordering::SeqCst) {
        checked(false);
        reads += 1;
    }
    let writer = writing.join().unwrap();
    assert!(
        events_in_database_alone(dir.path()) > 0,
        "no checkpoint ran while the reader read"
    );
    writer.flush().unwrap();
    checked(true);
    eprintln!("{reads} reads beside {calls} calls");
    assert!(reads > 1, "the reader never read while the writer wrote");
}

#[test]
fn a_log_whose_writer_was_killed_needs_a_writer_before_it_can_be_read() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_child("crash", dir.path());
    assert!(out.contains("CHILD: acknowledged"), "{out}");
    let before = files(dir.path());
    let err = SessionLog::open_read_only(dir.path()).unwrap_err();
    assert!(matches!(err, LogError::NeedsRepair { .. }), "{err:?}");
    assert!(err.to_string().contains("toolhost recover"), "{err}");
    assert!(
        files(dir.path()) == before,
        "a refused reader changed a file"
    );
    // A writer's open repairs it (and resolves nothing); then it reads.
    drop(SessionLog::open(dir.path()).unwrap());
    let reader = SessionLog::open_read_only(dir.path()).unwrap();
    assert_eq!(
        shape(&reader.events().unwrap())[..4],
        [call("d1"), intent("d1"), call("lazy"), intent("d2")]
    );
    assert_eq!(reader.pending_calls().unwrap(), ["d1", "d2"]);
}
