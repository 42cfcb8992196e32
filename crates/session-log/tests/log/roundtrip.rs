//! Append/read round trips, sequence numbers, the call-id index, pending calls.

use std::sync::Arc;

use serde_json::json;
use toolhost_log::{Durability, EventKind, LogError, NewEvent, SessionLog};

use crate::{call, intent, result, seqs, shape};

#[test]
fn append_then_read_returns_the_same_events_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let log = SessionLog::open(dir.path()).unwrap();
    let batch = vec![call("c1"), intent("c1"), result("c1")];
    let assigned = log.append(&batch, Durability::Durable).unwrap();
    assert_eq!(assigned, vec![1, 2, 3]);
    let events = log.events().unwrap();
    assert_eq!(shape(&events), batch);
    assert_eq!(seqs(&events), assigned);
    assert!(events.iter().all(|e| e.at_unix_ms > 1_600_000_000_000));
    assert!(dir.path().join("session.redb").is_file());
}

#[test]
fn open_creates_missing_state_directories() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("a/b/.toolhost");
    let log = SessionLog::open(&state).unwrap();
    log.append(&[call("c1")], Durability::Durable).unwrap();
    assert!(state.join("session.redb").is_file());
}

#[test]
fn sequence_numbers_keep_increasing_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = SessionLog::open(dir.path()).unwrap();
        assert_eq!(
            log.append(&[call("a"), call("b")], Durability::Durable)
                .unwrap(),
            vec![1, 2]
        );
    }
    {
        let log = SessionLog::open(dir.path()).unwrap();
        assert_eq!(log.append(&[call("c")], Durability::Lazy).unwrap(), vec![3]);
        assert_eq!(
            log.append(&[call("d")], Durability::Durable).unwrap(),
            vec![4]
        );
    }
    let log = SessionLog::open(dir.path()).unwrap();
    let events = log.events().unwrap();
    assert_eq!(seqs(&events), vec![1, 2, 3, 4]);
    assert_eq!(
        shape(&events),
        vec![call("a"), call("b"), call("c"), call("d")]
    );
    assert_eq!(
        log.append(&[call("e")], Durability::Durable).unwrap(),
        vec![5]
    );
}

#[test]
fn events_for_call_returns_only_that_call_in_order() {
    let log = SessionLog::in_memory().unwrap();
    log.append(&[call("x"), call("y"), intent("x")], Durability::Lazy)
        .unwrap();
    log.append(&[intent("y"), result("x")], Durability::Durable)
        .unwrap();
    let x = log.events_for_call("x").unwrap();
    assert_eq!(seqs(&x), vec![1, 3, 5]);
    assert_eq!(shape(&x), vec![call("x"), intent("x"), result("x")]);
    assert_eq!(seqs(&log.events_for_call("y").unwrap()), vec![2, 4]);
    assert!(log.events_for_call("nobody").unwrap().is_empty());
    // A call id that is a prefix of another must not match it.
    log.append(&[call("x1")], Durability::Lazy).unwrap();
    assert_eq!(log.events_for_call("x").unwrap().len(), 3);
}

#[test]
fn pending_calls_are_intents_without_results_in_intent_order() {
    let log = SessionLog::in_memory().unwrap();
    assert!(log.pending_calls().unwrap().is_empty());
    log.record_intents(&[intent("b"), intent("a"), intent("c")])
        .unwrap();
    log.append(&[call("d")], Durability::Lazy).unwrap();
    assert_eq!(log.pending_calls().unwrap(), vec!["b", "a", "c"]);
    log.append(&[result("a")], Durability::Lazy).unwrap();
    assert_eq!(log.pending_calls().unwrap(), vec!["b", "c"]);
    // A result without an intent (a refusal) is not an error and pends nothing.
    log.append(&[result("d")], Durability::Lazy).unwrap();
    assert_eq!(log.pending_calls().unwrap(), vec!["b", "c"]);
}

#[test]
fn record_intents_refuses_other_kinds_and_writes_nothing() {
    let log = SessionLog::in_memory().unwrap();
    let err = log.record_intents(&[intent("a"), call("b")]).unwrap_err();
    assert!(matches!(err, LogError::Invalid(_)), "{err}");
    assert!(log.events().unwrap().is_empty());
}

#[test]
fn event_kinds_have_stable_names() {
    let names = [
        (EventKind::ToolCall, "tool/call"),
        (EventKind::ApprovalAsked, "approval/asked"),
        (EventKind::ApprovalDecided, "approval/decided"),
        (EventKind::ToolIntent, "tool/intent"),
        (EventKind::ToolResult, "tool/result"),
        (EventKind::SessionRecovered, "session/recovered"),
    ];
    assert_eq!(names.len(), EventKind::ALL.len());
    for (kind, name) in names {
        assert_eq!(kind.as_str(), name);
        assert_eq!(kind.to_string(), name);
        assert_eq!(name.parse::<EventKind>(), Ok(kind));
        assert_eq!(serde_json::to_value(kind).unwrap(), json!(name));
        assert_eq!(
            serde_json::from_value::<EventKind>(json!(name)).unwrap(),
            kind
        );
    }
    assert!("tool/calls".parse::<EventKind>().is_err());
}

#[test]
fn appends_from_many_threads_get_unique_gapless_sequence_numbers() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SessionLog>();

    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SessionLog::open(dir.path()).unwrap());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..10 {
                    let id = format!("t{t}-{i}");
                    let durability = if i % 2 == 0 {
                        Durability::Lazy
                    } else {
                        Durability::Durable
                    };
                    mine.extend(
                        log.append(
                            &[NewEvent::new(id, EventKind::ToolCall, json!(i))],
                            durability,
                        )
                        .unwrap(),
                    );
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (1..=80).collect::<Vec<u64>>());
    assert_eq!(log.events().unwrap().len(), 80);
}
