//! Behaviour tests of the session log: one integration-test binary.
//!
//! Some tests re-run this binary as a child process (to hold a lock in another process,
//! or to die without closing the log); see `child`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on a set-up error"
)]

mod both;
mod child;
mod compressed;
mod crash;
mod engine;
mod engines;
mod faults;
mod fsync;
mod open_errors;
mod pg;
mod pg_approvals;
mod read_only;
mod recovery;
mod replicas;
mod roundtrip;
mod sharing;
mod wal_mode;

use serde_json::json;
use toolhost_log::{Event, EventKind, NewEvent};

/// A `tool/call` event.
pub fn call(id: &str) -> NewEvent {
    NewEvent::new(
        id,
        EventKind::ToolCall,
        json!({ "tool": "read_file", "args": { "path": id } }),
    )
}

/// A `tool/intent` event.
pub fn intent(id: &str) -> NewEvent {
    NewEvent::new(
        id,
        EventKind::ToolIntent,
        json!({ "tool": "write_file", "mode": "workspace-write" }),
    )
}

/// A `tool/result` event.
pub fn result(id: &str) -> NewEvent {
    NewEvent::new(
        id,
        EventKind::ToolResult,
        json!({ "status": "ok", "content": [{ "type": "text", "text": format!("done {id}") }] }),
    )
}

/// A `tool/result` event of about 9 KB whose text appears twice (in the canonical
/// result and in the content), as a `read_file` result's does.
pub fn large_result(id: &str) -> NewEvent {
    let text: String = (0..120)
        .map(|i| format!("{id}: line {i} of a file, \"quoted\"\n"))
        .collect();
    NewEvent::new(
        id,
        EventKind::ToolResult,
        json!({
            "canonical": { "bytes": text.len(), "content": text },
            "content": [{ "type": "text", "text": text }],
        }),
    )
}

/// `len` characters that do not compress (hex digits of a xorshift sequence): a large
/// event that keeps its size in the WAL and the database.
pub fn incompressible(len: usize) -> String {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut s = String::with_capacity(len + 16);
    while s.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!("{x:016x}"));
    }
    s.truncate(len);
    s
}

/// The format version recorded in the state directory `dir`'s database.
pub fn stored_format_version(dir: &std::path::Path) -> u64 {
    let db = redb::Database::create(dir.join("session.redb")).unwrap();
    let read = redb::ReadableDatabase::begin_read(&db).unwrap();
    read.open_table(redb::TableDefinition::<&str, u64>::new("meta"))
        .unwrap()
        .get("format_version")
        .unwrap()
        .unwrap()
        .value()
}

/// The (call id, kind, payload) of events, to compare with what was appended.
pub fn shape(events: &[Event]) -> Vec<NewEvent> {
    events
        .iter()
        .map(|e| NewEvent::new(e.call_id.clone(), e.kind, e.payload.clone()))
        .collect()
}

/// The sequence numbers of events.
pub fn seqs(events: &[Event]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

/// The kinds of the events of `call_id` in `log`, in order.
pub fn kinds_of(log: &toolhost_log::SessionLog, call_id: &str) -> Vec<EventKind> {
    log.events_for_call(call_id)
        .unwrap()
        .iter()
        .map(|e| e.kind)
        .collect()
}
