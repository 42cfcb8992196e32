//! The orchestrator's view of the session log: which events a call writes,
//! with which durability. The only durable (fsynced) write on a call's
//! critical path is the intent; everything else rides on the next durable
//! commit.

use crate::result::CallResult;
use std::sync::Arc;
use toolhost_log::{Durability, EventKind, NewEvent, SessionLog};

/// A shared handle to the session log.
#[derive(Clone)]
pub struct Journal {
    log: Arc<SessionLog>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Journal")
    }
}

impl Journal {
    /// Wraps an open log.
    pub fn new(log: Arc<SessionLog>) -> Self {
        Journal { log }
    }

    /// The log.
    pub fn log(&self) -> &Arc<SessionLog> {
        &self.log
    }

    pub(crate) fn lazy(
        &self,
        call_id: &str,
        kind: EventKind,
        payload: serde_json::Value,
    ) -> Result<(), String> {
        self.log
            .append(&[NewEvent::new(call_id, kind, payload)], Durability::Lazy)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Commits the intents of one or more calls in one durable commit.
    pub(crate) fn intents(&self, intents: &[(String, serde_json::Value)]) -> Result<(), String> {
        let events: Vec<NewEvent> = intents
            .iter()
            .map(|(id, p)| NewEvent::new(id.clone(), EventKind::ToolIntent, p.clone()))
            .collect();
        self.log
            .record_intents(&events)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    pub(crate) fn result(&self, result: &CallResult) -> Result<(), String> {
        let payload = serde_json::to_value(result).unwrap_or(serde_json::Value::Null);
        self.lazy(&result.call_id, EventKind::ToolResult, payload)
    }
}
