//! Crash recovery: every call whose intent is durable and whose result is not gets a
//! `TOOL_OUTCOME_UNKNOWN` result (DESIGN.md §1).
//!
//! This module owns the wording the model sees for such a call. It must never retry a
//! call or guess its outcome: the tool may or may not have run.

use serde_json::json;
use toolhost_core::ErrorCode;

use crate::engine::LogEngine;
use crate::error::{LogError, from_redb};
use crate::event::{EventKind, NewEvent};
use crate::log::{Durability, SESSION_CALL_ID};
use crate::redb_engine::{RedbLog, insert_events};
use crate::tables::PENDING;

use redb::ReadableTable;

/// What the model is told about a call whose outcome is unknown.
pub const OUTCOME_UNKNOWN_TEXT: &str = "The host stopped after this tool call was recorded \
     and before its result was. The tool may or may not have run, and may have changed \
     external state (files, services) in part or in full. Check the external state before \
     retrying this call; do not assume it failed.";

/// The error message of a recovered result.
const OUTCOME_UNKNOWN_MESSAGE: &str =
    "the host stopped before the result of this call was recorded; its outcome is unknown";

/// What [`crate::SessionLog::recover`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The calls that were given a `TOOL_OUTCOME_UNKNOWN` result, in the order of their
    /// intents. Empty when there was nothing to recover.
    pub recovered: Vec<String>,
}

impl RedbLog {
    /// Resolves every call with a durable `tool/intent` and no `tool/result`: appends one
    /// `tool/result` with `TOOL_OUTCOME_UNKNOWN` for each, then one `session/recovered`
    /// event (call id [`SESSION_CALL_ID`]) listing them, all in one durable commit.
    ///
    /// Idempotent: when nothing is pending it appends nothing.
    ///
    /// Run it right after opening, before any new call: a call whose body is running in
    /// this process is pending too, and would be resolved as unknown.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] or [`LogError::Corrupt`]; nothing is recovered then.
    pub(crate) fn resolve_pending(&self) -> Result<Recovery, LogError> {
        if let Some(wal) = &self.wal {
            return self.recover_wal_mode(wal);
        }
        if self.pending_calls()?.is_empty() {
            return Ok(Recovery::default());
        }
        // Read again inside the write transaction: it is the authority.
        self.write(Durability::Durable, |tx| {
            let mut pending = Vec::new();
            {
                let table = tx.open_table(PENDING).map_err(from_redb)?;
                for entry in table.iter().map_err(from_redb)? {
                    let (call_id, seq) = entry.map_err(from_redb)?;
                    pending.push((seq.value(), call_id.value().to_string()));
                }
            }
            pending.sort();
            let recovered: Vec<String> = pending.into_iter().map(|(_, id)| id).collect();
            if recovered.is_empty() {
                return Ok(Recovery::default());
            }
            insert_events(tx, &recovery_events(&recovered))?;
            Ok(Recovery { recovered })
        })
    }
}

/// The events that resolve `recovered` (pending calls, in the order of their intents): one
/// `TOOL_OUTCOME_UNKNOWN` result per call, then one `session/recovered` event (call id
/// [`SESSION_CALL_ID`]) listing them. Every [`LogEngine`] appends exactly these, so
/// that what the model is told does not depend on the engine.
pub fn recovery_events(recovered: &[String]) -> Vec<NewEvent> {
    let mut events: Vec<NewEvent> = recovered
        .iter()
        .map(|call_id| NewEvent::new(call_id.clone(), EventKind::ToolResult, unknown()))
        .collect();
    events.push(NewEvent::new(
        SESSION_CALL_ID,
        EventKind::SessionRecovered,
        json!({ "calls": recovered }),
    ));
    events
}

/// The result payload of a call whose outcome is unknown.
fn unknown() -> serde_json::Value {
    json!({
        "status": "error",
        "error": {
            "code": ErrorCode::ToolOutcomeUnknown.as_str(),
            "message": OUTCOME_UNKNOWN_MESSAGE,
        },
        "content": [{ "type": "text", "text": OUTCOME_UNKNOWN_TEXT }],
        "recovered": true,
    })
}
