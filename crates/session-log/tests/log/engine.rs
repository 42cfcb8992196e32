//! The `LogEngine` interface: one set of assertions, run on every engine of this crate
//! (in memory, redb without and with its intent WAL, the files of a state directory) and
//! on an engine defined here, outside the crate, through `SessionLog::from_engine`.

use std::sync::{Arc, Mutex};

use serde_json::json;
use toolhost_log::{
    Durability, Event, EventKind, LogEngine, LogError, MemStorage, NewEvent, Recovery,
    SESSION_CALL_ID, SessionLog, recovery_events,
};

use crate::{call, intent, kinds_of, result, seqs, shape};

/// What every engine must do, seen through `SessionLog`.
pub fn behaves_as_a_session_log(log: &SessionLog, what: &str) {
    assert!(log.events().unwrap().is_empty(), "{what}");
    assert!(log.pending_calls().unwrap().is_empty(), "{what}");
    assert_eq!(log.recover().unwrap(), Recovery::default(), "{what}");
    assert!(log.events().unwrap().is_empty(), "{what}: recovery wrote");

    assert_eq!(
        log.append(&[call("a")], Durability::Lazy).unwrap(),
        [1],
        "{what}"
    );
    assert_eq!(
        log.record_intents_after(&[call("b")], &[intent("a"), intent("b")])
            .unwrap(),
        [2, 3, 4],
        "{what}"
    );
    assert_eq!(
        log.pending_calls().unwrap(),
        ["a", "b"],
        "{what}: pending, in intent order"
    );
    assert_eq!(
        shape(&log.events_for_call("a").unwrap()),
        [call("a"), intent("a")],
        "{what}"
    );
    assert_eq!(
        log.append(&[result("a")], Durability::Lazy).unwrap(),
        [5],
        "{what}"
    );
    log.flush().unwrap();
    assert_eq!(log.pending_calls().unwrap(), ["b"], "{what}");

    // Checked by the handle, whatever the engine: nothing is written.
    let err = log.record_intents(&[call("x")]).unwrap_err();
    assert!(matches!(err, LogError::Invalid(_)), "{what}: {err:?}");
    let err = log
        .record_intents_after(&[call("y")], &[result("y")])
        .unwrap_err();
    assert!(matches!(err, LogError::Invalid(_)), "{what}: {err:?}");

    let events = log.events().unwrap();
    assert_eq!(seqs(&events), [1, 2, 3, 4, 5], "{what}");
    assert_eq!(
        shape(&events),
        [call("a"), call("b"), intent("a"), intent("b"), result("a")],
        "{what}"
    );
    assert!(events.iter().all(|e| e.at_unix_ms > 0), "{what}");

    // Recovery: exactly the shared recovery events, once.
    let recovery = log.recover().unwrap();
    assert_eq!(recovery.recovered, ["b"], "{what}");
    let added: Vec<Event> = log.events().unwrap().split_off(5);
    assert_eq!(shape(&added), recovery_events(&["b".to_string()]), "{what}");
    assert_eq!(seqs(&added), [6, 7], "{what}");
    assert_eq!(added[1].call_id, SESSION_CALL_ID, "{what}");
    assert_eq!(added[1].kind, EventKind::SessionRecovered, "{what}");
    assert_eq!(added[1].payload, json!({ "calls": ["b"] }), "{what}");
    assert!(log.pending_calls().unwrap().is_empty(), "{what}");
    assert_eq!(log.recover().unwrap(), Recovery::default(), "{what}");
    assert_eq!(log.events().unwrap().len(), 7, "{what}");
}

#[test]
fn every_engine_of_this_crate_keeps_the_same_rules() {
    behaves_as_a_session_log(&SessionLog::in_memory().unwrap(), "in memory");
    behaves_as_a_session_log(
        &SessionLog::open_with_backend(MemStorage::new()).unwrap(),
        "redb without a WAL",
    );
    behaves_as_a_session_log(
        &SessionLog::open_with_journal(MemStorage::new(), MemStorage::new()).unwrap(),
        "redb with its intent WAL",
    );
    let dir = tempfile::tempdir().unwrap();
    behaves_as_a_session_log(&SessionLog::open(dir.path()).unwrap(), "a state directory");
}

/// An engine of another crate: it stores through an in-memory log and records which
/// operations reached it.
#[derive(Debug)]
struct Recording {
    inner: SessionLog,
    seen: Arc<Mutex<Vec<&'static str>>>,
}

impl Recording {
    fn saw(&self, op: &'static str) {
        self.seen.lock().unwrap().push(op);
    }
}

impl LogEngine for Recording {
    fn append(&self, events: &[NewEvent], durability: Durability) -> Result<Vec<u64>, LogError> {
        self.saw(match durability {
            Durability::Durable => "append durable",
            Durability::Lazy => "append lazy",
        });
        self.inner.append(events, durability)
    }

    fn append_intents_after(
        &self,
        before: &[NewEvent],
        intents: &[NewEvent],
    ) -> Result<Vec<u64>, LogError> {
        self.saw("append_intents_after");
        self.inner.record_intents_after(before, intents)
    }

    fn flush(&self) -> Result<(), LogError> {
        self.saw("flush");
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
        self.saw("recover");
        self.inner.recover()
    }
}

#[test]
fn only_the_in_memory_log_says_its_durable_commits_do_not_block() {
    // The host runs a durable commit in place only when this is false; a
    // storage engine that said so would hold up an executor's thread.
    assert!(!SessionLog::in_memory().unwrap().durable_commit_blocks());
    let dir = tempfile::tempdir().unwrap();
    for (log, what) in [
        (
            SessionLog::open_with_backend(MemStorage::new()).unwrap(),
            "redb without a WAL",
        ),
        (
            SessionLog::open_with_journal(MemStorage::new(), MemStorage::new()).unwrap(),
            "redb with its intent WAL",
        ),
        (SessionLog::open(dir.path()).unwrap(), "a state directory"),
    ] {
        assert!(log.durable_commit_blocks(), "{what}");
    }
}

#[test]
fn an_engine_from_outside_the_crate_plugs_in_through_from_engine() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = SessionLog::from_engine(Recording {
        inner: SessionLog::in_memory().unwrap(),
        seen: seen.clone(),
    });
    behaves_as_a_session_log(&log, "an engine of another crate");
    // Every write went to the engine, through the operation that says what it is; the
    // refused batches never reached it.
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "recover",
            "append lazy",
            "append_intents_after",
            "append lazy",
            "flush",
            "recover",
            "recover",
        ]
    );
    // The handle is shareable whatever the engine.
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SessionLog>();
}

/// A result event of `id` carrying `n` bytes of output.
fn big_result(id: &str, n: usize) -> NewEvent {
    NewEvent::new(
        id,
        EventKind::ToolResult,
        json!({ "status": "ok", "canonical": { "body": "x".repeat(n) } }),
    )
}

/// The in-memory log keeps about its byte budget: the oldest finished calls are
/// forgotten whole, a pending call never is (recovery still resolves it), the last
/// call appended can always be read back, and sequence numbers keep increasing.
#[test]
fn the_in_memory_log_forgets_the_oldest_finished_calls_past_its_budget() {
    let log = SessionLog::in_memory_with_budget(16 << 10).unwrap();
    // A recovery's session event: the session's, forgettable like a finished call.
    log.record_intents_after(&[call("early")], &[intent("early")])
        .unwrap();
    assert_eq!(log.recover().unwrap().recovered, ["early"]);
    // A call that never finishes: older than every finished one below.
    log.record_intents_after(&[call("stuck")], &[intent("stuck")])
        .unwrap();
    // A call asked about and not yet decided: no intent, not finished either.
    let asked = |id: &str| NewEvent::new(id, EventKind::ApprovalAsked, json!({"tool": "t"}));
    let decided = |id: &str| NewEvent::new(id, EventKind::ApprovalDecided, json!({"d": "allow"}));
    log.append(&[call("waiting"), asked("waiting")], Durability::Lazy)
        .unwrap();
    let mut last_seq = 0;
    for i in 0..200 {
        let id = format!("c{i}");
        let seqs = log
            .record_intents_after(&[call(&id)], &[intent(&id)])
            .unwrap();
        assert!(seqs[0] > last_seq, "sequence numbers keep increasing");
        let seq = log
            .append(&[big_result(&id, 1000)], Durability::Lazy)
            .unwrap();
        last_seq = seq[0];
        // The call just finished is always there, whole.
        assert_eq!(
            kinds_of(&log, &id),
            [
                EventKind::ToolCall,
                EventKind::ToolIntent,
                EventKind::ToolResult
            ],
            "{id}"
        );
    }
    let events = log.events().unwrap();
    let kept_calls: std::collections::BTreeSet<&str> =
        events.iter().map(|e| e.call_id.as_str()).collect();
    // About 1.1 KiB per call against 16 KiB: far fewer than the 201 appended.
    assert!(
        kept_calls.len() < 20,
        "{} calls kept: {kept_calls:?}",
        kept_calls.len()
    );
    assert!(
        log.events_for_call("c0").unwrap().is_empty(),
        "the oldest went"
    );
    assert!(
        kept_calls.contains("c199") && kept_calls.contains("c198"),
        "{kept_calls:?}"
    );
    // Forgotten whole: a kept finished call has all three of its events.
    for id in kept_calls
        .iter()
        .filter(|id| !["stuck", "waiting"].contains(*id))
    {
        assert_eq!(log.events_for_call(id).unwrap().len(), 3, "{id}");
    }
    // In sequence order, strictly increasing.
    assert!(seqs(&events).windows(2).all(|w| w[0] < w[1]));
    // The early recovery is forgotten, its session event with it.
    assert!(log.events_for_call("early").unwrap().is_empty());
    assert!(
        !events.iter().any(|e| e.kind == EventKind::SessionRecovered),
        "{kept_calls:?}"
    );
    // The call waiting for its approval kept its events together, and when it goes
    // on, its record is whole.
    log.append(&[decided("waiting")], Durability::Lazy).unwrap();
    log.record_intents_after(&[], &[intent("waiting")]).unwrap();
    log.append(&[result("waiting")], Durability::Lazy).unwrap();
    assert_eq!(
        kinds_of(&log, "waiting"),
        [
            EventKind::ToolCall,
            EventKind::ApprovalAsked,
            EventKind::ApprovalDecided,
            EventKind::ToolIntent,
            EventKind::ToolResult
        ]
    );
    // The pending call outlived every finished one and recovers as before.
    assert_eq!(
        shape(&log.events_for_call("stuck").unwrap()),
        [call("stuck"), intent("stuck")]
    );
    assert_eq!(log.pending_calls().unwrap(), ["stuck"]);
    assert_eq!(log.recover().unwrap().recovered, ["stuck"]);
    assert!(log.pending_calls().unwrap().is_empty());
}

/// The default in-memory log is bounded too: 100 results of 1 MiB each (100 MiB
/// appended) leave fewer than 100 calls kept.
#[test]
fn the_default_in_memory_log_does_not_keep_every_result() {
    let log = SessionLog::in_memory().unwrap();
    for i in 0..100 {
        let id = format!("c{i}");
        log.append(&[call(&id), big_result(&id, 1 << 20)], Durability::Lazy)
            .unwrap();
    }
    let events = log.events().unwrap();
    let kept = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .count();
    assert!((1..100).contains(&kept), "{kept} of 100 results kept");
    assert_eq!(
        log.events_for_call("c99").unwrap().len(),
        2,
        "the newest call is kept"
    );
}
