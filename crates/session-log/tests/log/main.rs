//! Behaviour tests of the session log: one integration-test binary.
//!
//! Some tests re-run this binary as a child process (to hold a lock in another process,
//! or to die without closing the log); see `child`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod both;
mod child;
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
