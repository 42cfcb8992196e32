//! Large events are stored LZ4-compressed (format 3): they read back the same from
//! memory, the intent WAL and the database, in this process and in a reader beside the
//! writer, after a crash too; logs of older formats, whose large events are JSON, still
//! read.

use std::path::Path;

use toolhost_log::{Durability, FORMAT_VERSION, NewEvent, SessionLog};

use crate::child::run_child;
use crate::{call, large_result, shape};

const EVENTS: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("events");
const META: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");

/// The stored bytes of every event in the database file, by sequence number.
fn stored_values(dir: &Path) -> Vec<(u64, Vec<u8>)> {
    let db = redb::Database::create(dir.join("session.redb")).unwrap();
    let read = redb::ReadableDatabase::begin_read(&db).unwrap();
    let table = read.open_table(EVENTS).unwrap();
    redb::ReadableTable::iter(&table)
        .unwrap()
        .map(|e| {
            let (k, v) = e.unwrap();
            (k.value(), v.value().to_vec())
        })
        .collect()
}

/// Asserts that the database stores each large result compressed, in less than half
/// its JSON, and each small event as JSON.
fn assert_large_ones_compressed(dir: &Path, expected: &[NewEvent]) {
    let values = stored_values(dir);
    assert_eq!(values.len(), expected.len());
    for ((seq, bytes), event) in values.iter().zip(expected) {
        let json = serde_json::to_vec(&event.payload).unwrap();
        if json.len() > 4096 {
            assert_eq!(bytes[0], 0x01, "event {seq} is not compressed");
            assert!(
                bytes.len() * 2 < json.len(),
                "event {seq}: {} bytes stored for {} bytes of payload",
                bytes.len(),
                json.len()
            );
        } else {
            assert_eq!(bytes[0], b'{', "small event {seq} is not JSON");
        }
    }
}

#[test]
fn large_events_read_back_the_same_from_memory_the_wal_and_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let expected = vec![
        call("a"),
        large_result("a"),
        large_result("b"),
        call("c"),
        large_result("c"),
    ];
    {
        let writer = SessionLog::open(dir.path()).unwrap();
        let reader = SessionLog::open_read_only(dir.path()).unwrap();
        // Durable: in the WAL; lazy: in memory only (the reader does not see those).
        writer.append(&expected[..2], Durability::Durable).unwrap();
        writer.append(&expected[2..3], Durability::Lazy).unwrap();
        assert_eq!(shape(&writer.events().unwrap()), expected[..3]);
        assert_eq!(shape(&reader.events().unwrap()), expected[..2]);
        // The lazy one goes into the WAL with the next durable append.
        writer.append(&expected[3..], Durability::Durable).unwrap();
        assert_eq!(shape(&reader.events().unwrap()), expected);
        assert_eq!(shape(&writer.events_for_call("c").unwrap()), expected[3..]);
        // Dropping the writer checkpoints everything into the database.
    }
    assert_large_ones_compressed(dir.path(), &expected);
    // A reader (`toolhost log`) reads them from the database, and so does a writer.
    let reader = SessionLog::open_read_only(dir.path()).unwrap();
    assert_eq!(shape(&reader.events().unwrap()), expected);
    drop(reader);
    let again = SessionLog::open(dir.path()).unwrap();
    assert_eq!(shape(&again.events().unwrap()), expected);
    assert_eq!(shape(&again.events_for_call("a").unwrap()), expected[..2]);
}

#[test]
fn large_events_acknowledged_before_a_crash_are_replayed_from_the_wal() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_child("crash-large", dir.path());
    assert!(out.contains("CHILD: acknowledged"), "{out}");
    let expected = vec![call("big1"), large_result("big1"), large_result("big2")];
    {
        let log = SessionLog::open(dir.path()).unwrap();
        assert_eq!(shape(&log.events().unwrap()), expected);
    }
    assert_large_ones_compressed(dir.path(), &expected);
}

#[test]
fn a_format_2_log_whose_large_events_are_json_is_read_and_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    drop(SessionLog::open(dir.path()).unwrap());
    let old = large_result("old");
    {
        // What format 2 wrote: every event as its JSON, however large.
        let db = redb::Database::create(dir.path().join("session.redb")).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(META)
            .unwrap()
            .insert("format_version", 2)
            .unwrap();
        let json = serde_json::to_vec(&serde_json::json!({
            "call_id": old.call_id,
            "kind": old.kind,
            "at_unix_ms": 1,
            "payload": old.payload,
        }))
        .unwrap();
        assert!(json.len() > 4096);
        tx.open_table(EVENTS)
            .unwrap()
            .insert(1, json.as_slice())
            .unwrap();
        tx.commit().unwrap();
    }
    let log = SessionLog::open(dir.path()).unwrap();
    assert_eq!(shape(&log.events().unwrap()), std::slice::from_ref(&old));
    let new = large_result("new");
    log.append(std::slice::from_ref(&new), Durability::Durable)
        .unwrap();
    drop(log);
    let values = stored_values(dir.path());
    assert_eq!(values[0].1[0], b'{', "the old event was rewritten");
    assert_eq!(values[1].1[0], 0x01, "the new event is not compressed");
    assert_eq!(crate::stored_format_version(dir.path()), FORMAT_VERSION);
    let log = SessionLog::open(dir.path()).unwrap();
    assert_eq!(shape(&log.events().unwrap()), [old, new]);
}
