//! The durability suite on both engines: the same assertions on a redb state directory
//! and on a PostgreSQL log (see `engines`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use toolhost_log::{Durability, EventKind, Recovery, SessionLog};

use crate::child::run_child;
use crate::engines::on_each_engine;
use crate::{call, intent, result, seqs, shape};

#[test]
fn every_rule_of_the_engine_interface_holds_on_both_engines() {
    on_each_engine("rules", |b| {
        crate::engine::behaves_as_a_session_log(&b.open(), b.name());
    });
}

#[test]
fn sequence_numbers_continue_across_reopen_on_both_engines() {
    on_each_engine("reopen", |b| {
        let what = b.name();
        {
            let log = b.open();
            assert_eq!(
                log.append(&[call("a"), call("b")], Durability::Durable)
                    .unwrap(),
                [1, 2],
                "{what}"
            );
            assert_eq!(log.append(&[call("c")], Durability::Lazy).unwrap(), [3]);
        }
        let log = b.open();
        assert_eq!(
            log.append(&[call("d")], Durability::Durable).unwrap(),
            [4],
            "{what}"
        );
        let events = log.events().unwrap();
        assert_eq!(seqs(&events), [1, 2, 3, 4], "{what}");
        assert_eq!(
            shape(&events),
            [call("a"), call("b"), call("c"), call("d")],
            "{what}"
        );
    });
}

#[test]
fn a_killed_writer_keeps_its_durable_events_and_its_calls_are_recovered_once_on_both_engines() {
    on_each_engine("killed", |b| {
        let what = b.name();
        let out = run_child("crash-on", Path::new(&b.spec()));
        assert!(out.contains("CHILD: acknowledged"), "{what}: {out}");
        let log = b.open();
        let got = shape(&log.events().unwrap());
        let expected = [call("d1"), intent("d1"), call("lazy"), intent("d2")];
        assert!(
            got.len() >= expected.len() && got[..expected.len()] == expected[..],
            "{what}: {got:?}"
        );
        assert!(got.len() <= expected.len() + 1, "{what}: {got:?}");
        assert_eq!(log.pending_calls().unwrap(), ["d1", "d2"], "{what}");

        let recovery = log.recover().unwrap();
        assert_eq!(recovery.recovered, ["d1", "d2"], "{what}");
        assert_eq!(log.recover().unwrap(), Recovery::default(), "{what}");
        let after = log.events().unwrap();
        drop(log);
        // Recovery was durable, and a second opening recovers nothing more.
        let log = b.open();
        assert_eq!(log.events().unwrap(), after, "{what}");
        assert_eq!(log.recover().unwrap(), Recovery::default(), "{what}");
        for id in ["d1", "d2"] {
            let results = log
                .events_for_call(id)
                .unwrap()
                .into_iter()
                .filter(|e| e.kind == EventKind::ToolResult)
                .count();
            assert_eq!(results, 1, "{what}: {id}");
        }
    });
}

#[test]
fn concurrent_writers_get_one_gapless_total_order_on_both_engines() {
    on_each_engine("concurrent", |b| {
        let what = b.name();
        let log = Arc::new(b.open());
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..25 {
                        let id = format!("t{t}-{i}");
                        log.record_intents_after(&[call(&id)], &[intent(&id)])
                            .unwrap();
                        log.append(&[result(&id)], Durability::Lazy).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        log.flush().unwrap();
        let events = log.events().unwrap();
        assert_eq!(
            seqs(&events),
            (1..=events.len() as u64).collect::<Vec<_>>(),
            "{what}"
        );
        assert_eq!(events.len(), 6 * 25 * 3, "{what}");
        // Each call's events in order, and nothing pending.
        let mut by_call: HashMap<&str, Vec<EventKind>> = HashMap::new();
        for e in &events {
            by_call.entry(&e.call_id).or_default().push(e.kind);
        }
        for (id, kinds) in by_call {
            assert_eq!(
                kinds,
                [
                    EventKind::ToolCall,
                    EventKind::ToolIntent,
                    EventKind::ToolResult
                ],
                "{what}: {id}"
            );
        }
        assert!(log.pending_calls().unwrap().is_empty(), "{what}");
        drop(log);
        let reopened: SessionLog = b.open();
        assert_eq!(reopened.events().unwrap(), events, "{what}");
    });
}
