//! [`Recorder`]: the pipeline's view of the session log: which events a call writes,
//! with which durability. The only durable (fsynced) write on a call's
//! critical path is the intent of a call granted an effect outside the host
//! (the checkpoint decides: `sandbox::needs_durable_intent`); everything else
//! rides on the next durable commit.
//!
//! A call's `tool/call` record costs no commit of its own: it is held here
//! and written in the same commit as the call's next event (its approval
//! request, its intent, or its refusal), so its place in the sequence is
//! unchanged: it always comes first.

use crate::result::CallResult;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use toolhost_log::{Durability, EventKind, NewEvent, SessionLog};

/// A shared handle to the session log.
#[derive(Clone)]
pub struct Recorder {
    log: Arc<SessionLog>,
    /// `tool/call` events not yet written, by call id.
    held: Arc<Mutex<HashMap<String, NewEvent>>>,
    /// Who waits for a call's first write, by call id (see
    /// [`Recorder::on_first_write`]).
    first_write: Arc<Mutex<HashMap<String, tokio::sync::oneshot::Sender<()>>>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Recorder")
    }
}

impl Recorder {
    /// Wraps an open log.
    pub fn new(log: Arc<SessionLog>) -> Self {
        Recorder {
            log,
            held: Arc::default(),
            first_write: Arc::default(),
        }
    }

    /// Resolves once `call_id`'s first events (its `tool/call` record and
    /// the event written with it) are appended, durably or lazily; dropped
    /// without resolving if the write fails. Register before the call runs.
    #[cfg_attr(
        not(feature = "mcp"),
        allow(
            dead_code,
            reason = "only the MCP server waits for a call's first write"
        )
    )]
    pub(crate) fn on_first_write(&self, call_id: &str) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Ok(mut w) = self.first_write.lock() {
            w.insert(call_id.to_string(), tx);
        }
        rx
    }

    /// Drops the waiter of `call_id`, if it is still there (its wait ended).
    #[cfg_attr(
        not(feature = "mcp"),
        allow(
            dead_code,
            reason = "only the MCP server waits for a call's first write"
        )
    )]
    pub(crate) fn forget_first_write(&self, call_id: &str) {
        if let Ok(mut w) = self.first_write.lock() {
            w.remove(call_id);
        }
    }

    /// Tells the waiters of these calls that their events were written.
    fn written_ids<'a>(&self, ids: impl IntoIterator<Item = &'a str>) {
        let Ok(mut w) = self.first_write.lock() else {
            return;
        };
        if w.is_empty() {
            return;
        }
        for id in ids {
            if let Some(tx) = w.remove(id) {
                let _ = tx.send(());
            }
        }
    }

    /// The log.
    pub fn log(&self) -> &Arc<SessionLog> {
        &self.log
    }

    /// Records a call's `tool/call` event, to be written with its next event.
    pub(crate) fn call(&self, call_id: &str, payload: serde_json::Value) {
        if let Ok(mut held) = self.held.lock() {
            held.insert(
                call_id.to_string(),
                NewEvent::new(call_id, EventKind::ToolCall, payload),
            );
        }
    }

    /// The held events of `ids`, removed from the hold.
    fn take(&self, ids: &[&str]) -> Vec<NewEvent> {
        match self.held.lock() {
            Ok(mut held) => ids.iter().filter_map(|id| held.remove(*id)).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Puts events back after a failed write, so the refusal carries them.
    fn restore(&self, events: Vec<NewEvent>) {
        if let Ok(mut held) = self.held.lock() {
            for e in events {
                held.insert(e.call_id.clone(), e);
            }
        }
    }

    /// Writes an event of `call_id` (and its held `tool/call`) in one lazy
    /// commit. If the write fails, a held `tool/call` is held again, so that
    /// the call's next event (its refusal) still carries it; not after its
    /// `tool/result`, the call's last event, after which nothing would take
    /// it.
    pub(crate) fn lazy(
        &self,
        call_id: &str,
        kind: EventKind,
        payload: serde_json::Value,
    ) -> Result<(), String> {
        let mut events = self.take(&[call_id]);
        let held_again = match kind {
            EventKind::ToolResult => Vec::new(),
            _ => events.clone(),
        };
        events.push(NewEvent::new(call_id, kind, payload));
        // Every event here is of this call (its held `tool/call`, then this
        // one); the log takes them without copying their payloads.
        match self.log.append_owned(events, Durability::Lazy) {
            Ok(_) => {
                self.written_ids([call_id]);
                Ok(())
            }
            Err(e) => {
                self.restore(held_again);
                Err(e.to_string())
            }
        }
    }

    /// Whether a durable commit of the log blocks (see
    /// [`SessionLog::durable_commit_blocks`]).
    pub(crate) fn durable_commit_blocks(&self) -> bool {
        self.log.durable_commit_blocks()
    }

    /// Commits the intents of one or more calls (and their held `tool/call`
    /// events) in one commit: durable (synced before it returns) or lazy
    /// (riding on the next durable commit), as the checkpoint decided.
    pub(crate) fn intents(
        &self,
        intents: Vec<(String, serde_json::Value)>,
        durability: Durability,
    ) -> Result<(), String> {
        let ids: Vec<String> = intents.iter().map(|(id, _)| id.clone()).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let calls = self.take(&ids);
        let events = intents
            .into_iter()
            .map(|(id, p)| NewEvent::new(id, EventKind::ToolIntent, p));
        // The held `tool/call` events stay here (a failed write holds them
        // again): a lazy commit copies them, a durable one lends them to the
        // engine. The intents are the log's.
        let written = match durability {
            Durability::Durable => self
                .log
                .record_intents_after(&calls, &events.collect::<Vec<_>>()),
            Durability::Lazy => self.log.append_owned(
                calls.iter().cloned().chain(events).collect(),
                Durability::Lazy,
            ),
        };
        match written {
            Ok(_) => {
                self.written_ids(ids);
                Ok(())
            }
            Err(e) => {
                self.restore(calls);
                Err(e.to_string())
            }
        }
    }

    /// Writes a call's `tool/result` event: the result, and as `audit` its
    /// after-call record (duration, principal, scope).
    pub(crate) fn result(
        &self,
        result: &CallResult,
        audit: serde_json::Value,
    ) -> Result<(), String> {
        let mut payload = serde_json::to_value(result).unwrap_or(serde_json::Value::Null);
        if let Some(o) = payload.as_object_mut() {
            o.insert("audit".into(), audit);
        }
        self.lazy(&result.call_id, EventKind::ToolResult, payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use toolhost_log::{Event, LogEngine, LogError, Recovery};

    /// An in-memory log whose next append fails once `fail` is set.
    #[derive(Debug)]
    struct FailsOnce {
        inner: SessionLog,
        fail: Arc<AtomicBool>,
    }

    impl LogEngine for FailsOnce {
        fn append(&self, events: &[NewEvent], d: Durability) -> Result<Vec<u64>, LogError> {
            if self.fail.swap(false, Ordering::SeqCst) {
                return Err(LogError::Storage("injected".into()));
            }
            self.inner.append(events, d)
        }
        fn flush(&self) -> Result<(), LogError> {
            self.inner.flush()
        }
        fn events(&self) -> Result<Vec<Event>, LogError> {
            self.inner.events()
        }
        fn events_for_call(&self, call_id: &str) -> Result<Vec<Event>, LogError> {
            self.inner.events_for_call(call_id)
        }
        fn pending_calls(&self) -> Result<Vec<String>, LogError> {
            self.inner.pending_calls()
        }
        fn recover(&self) -> Result<Recovery, LogError> {
            self.inner.recover()
        }
    }

    /// A failed write of a call's event (its approval request) keeps its
    /// `tool/call` held: the refusal written next carries it, first.
    #[test]
    fn a_failed_write_keeps_the_call_record_for_the_next_one() {
        let fail = Arc::new(AtomicBool::new(false));
        let log = Arc::new(SessionLog::from_engine(FailsOnce {
            inner: SessionLog::in_memory().unwrap_or_else(|e| panic!("{e}")),
            fail: fail.clone(),
        }));
        let recorder = Recorder::new(log.clone());
        recorder.call("c", serde_json::json!({"tool": "t"}));
        fail.store(true, Ordering::SeqCst);
        let asked = recorder.lazy("c", EventKind::ApprovalAsked, serde_json::json!({}));
        assert!(asked.is_err());
        let refused = recorder.lazy("c", EventKind::ToolResult, serde_json::json!({}));
        assert!(refused.is_ok(), "{refused:?}");
        let kinds: Vec<EventKind> = log
            .events_for_call("c")
            .unwrap_or_else(|e| panic!("{e}"))
            .iter()
            .map(|e| e.kind)
            .collect();
        assert_eq!(kinds, [EventKind::ToolCall, EventKind::ToolResult]);
        // Nothing stays held after the call's last event, written or not.
        recorder.call("d", serde_json::json!({"tool": "t"}));
        fail.store(true, Ordering::SeqCst);
        assert!(
            recorder
                .lazy("d", EventKind::ToolResult, serde_json::json!({}))
                .is_err()
        );
        match recorder.held.lock() {
            Ok(held) => assert!(held.is_empty(), "{:?}", held.keys()),
            Err(_) => panic!("poisoned"),
        }
    }
}
