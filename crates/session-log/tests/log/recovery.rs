//! Recovery: calls with a durable intent and no result become TOOL_OUTCOME_UNKNOWN, once.

use serde_json::json;
use toolhost_log::{
    Durability, EventKind, MemStorage, NewEvent, OUTCOME_UNKNOWN_TEXT, Recovery, SESSION_CALL_ID,
    SessionLog,
};

use crate::{call, intent, result, shape};

#[test]
fn intent_only_calls_get_exactly_one_outcome_unknown_result() {
    let mem = MemStorage::new();
    let log = SessionLog::open_with_backend(mem.clone()).unwrap();
    log.append(
        &[call("done"), call("lost1"), call("lost2")],
        Durability::Lazy,
    )
    .unwrap();
    log.record_intents(&[intent("done"), intent("lost1")])
        .unwrap();
    log.append(&[result("done")], Durability::Lazy).unwrap();
    log.record_intents(&[intent("lost2")]).unwrap();
    let before = log.events().unwrap();
    let image = mem.crash();
    drop(log);

    let log = SessionLog::open_with_backend(image.clone()).unwrap();
    assert_eq!(log.events().unwrap(), before);
    let recovery = log.recover().unwrap();
    assert_eq!(
        recovery,
        Recovery {
            recovered: vec!["lost1".into(), "lost2".into()]
        }
    );

    let unknown = json!({
        "status": "error",
        "error": {
            "code": "TOOL_OUTCOME_UNKNOWN",
            "message": "the host stopped before the result of this call was recorded; its outcome is unknown",
        },
        "content": [{ "type": "text", "text": OUTCOME_UNKNOWN_TEXT }],
        "recovered": true,
    });
    let added = shape(&log.events().unwrap()[before.len()..]);
    assert_eq!(
        added,
        vec![
            NewEvent::new("lost1", EventKind::ToolResult, unknown.clone()),
            NewEvent::new("lost2", EventKind::ToolResult, unknown),
            NewEvent::new(
                SESSION_CALL_ID,
                EventKind::SessionRecovered,
                json!({ "calls": ["lost1", "lost2"] })
            ),
        ]
    );
    assert!(OUTCOME_UNKNOWN_TEXT.contains("may or may not have run"));
    assert!(OUTCOME_UNKNOWN_TEXT.contains("Check the external state before retrying"));
    // The completed call is untouched.
    assert_eq!(
        shape(&log.events_for_call("done").unwrap()),
        vec![call("done"), intent("done"), result("done")]
    );
    assert!(log.pending_calls().unwrap().is_empty());

    // Recovery was one durable commit: it survives power loss.
    let after = log.events().unwrap();
    drop(log);
    let log = SessionLog::open_with_backend(image.crash()).unwrap();
    assert_eq!(log.events().unwrap(), after);

    // Idempotent: nothing more, not even a session/recovered event.
    assert_eq!(log.recover().unwrap(), Recovery::default());
    assert_eq!(log.events().unwrap(), after);
}

#[test]
fn recover_on_a_clean_log_writes_nothing() {
    let log = SessionLog::in_memory().unwrap();
    assert_eq!(log.recover().unwrap(), Recovery::default());
    log.append(&[call("a"), intent("a"), result("a")], Durability::Durable)
        .unwrap();
    assert_eq!(log.recover().unwrap(), Recovery::default());
    assert_eq!(log.events().unwrap().len(), 3);
}
