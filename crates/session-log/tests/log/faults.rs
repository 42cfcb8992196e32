//! Fault injection: a storage that fails after k write-path operations, for every k until
//! the append succeeds. A durable append either fails or is durable; it never panics; and
//! the storage always reopens to a valid log holding every acknowledged event.

use toolhost_log::{Durability, FailingStorage, MemStorage, NewEvent, Op, SessionLog};

use crate::{call, intent, seqs, shape};

/// A storage holding a cleanly closed log with `events`, all durable.
fn prepared(events: &[NewEvent]) -> MemStorage {
    let mem = MemStorage::new();
    let log = SessionLog::open_with_backend(mem.clone()).unwrap();
    log.append(events, Durability::Durable).unwrap();
    drop(log);
    mem.process_exit()
}

/// Reopens `image` with a healthy backend and checks that it holds `acked`, plus at most
/// `maybe` (an append whose error left its outcome unknown), with gapless sequence numbers.
fn check_image(image: MemStorage, acked: &[NewEvent], maybe: Option<&NewEvent>, what: &str) {
    let log = SessionLog::open_with_backend(image)
        .unwrap_or_else(|e| panic!("{what}: the log does not reopen: {e}"));
    let events = log.events().unwrap();
    let got = shape(&events);
    let mut with_maybe = acked.to_vec();
    with_maybe.extend(maybe.cloned());
    assert!(
        got == acked || got == with_maybe,
        "{what}: expected {acked:?} (maybe plus {maybe:?}), got {got:?}"
    );
    assert_eq!(
        seqs(&events),
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "{what}"
    );
    // The reopened log is writable and continues the sequence.
    let next = log.append(&[call("after")], Durability::Durable).unwrap();
    assert_eq!(next, vec![events.len() as u64 + 1], "{what}");
}

fn durable_append_under_faults(kinds: &[Op]) -> u64 {
    let before = vec![call("c1"), intent("c1")];
    let new = intent("c2");
    for k in 0..1_000 {
        let mem = prepared(&before);
        let storage = FailingStorage::new(mem.clone(), k, kinds);
        let what = format!("faults {kinds:?} after {k} ops");
        let acked = match SessionLog::open_with_backend(storage) {
            Err(_) => {
                // Opening failed: nothing new may appear.
                check_image(
                    mem.crash(),
                    &before,
                    None,
                    &format!("{what}, open failed, power loss"),
                );
                check_image(
                    mem.process_exit(),
                    &before,
                    None,
                    &format!("{what}, open failed, exit"),
                );
                continue;
            }
            Ok(log) => {
                let outcome = log.append(std::slice::from_ref(&new), Durability::Durable);
                let acked = outcome.is_ok();
                // Power loss right now, before the log is closed.
                let mut expected = before.clone();
                if acked {
                    expected.push(new.clone());
                }
                // An append that returned an error may still have reached the storage.
                let maybe = (!acked).then_some(&new);
                check_image(
                    mem.crash(),
                    &expected,
                    maybe,
                    &format!("{what}, power loss"),
                );
                drop(log); // Closing may fail too; it must not panic.
                check_image(
                    mem.process_exit(),
                    &expected,
                    maybe,
                    &format!("{what}, after close"),
                );
                acked
            }
        };
        if acked {
            return k;
        }
    }
    panic!("the append never succeeded");
}

#[test]
fn durable_append_fails_or_is_durable_for_every_fault_point() {
    for kinds in [&Op::ALL[..], &[Op::Write], &[Op::SyncData], &[Op::SetLen]] {
        let k = durable_append_under_faults(kinds);
        eprintln!("faults on {kinds:?}: the append first succeeded with {k} healthy ops");
    }
}

#[test]
fn a_failed_write_poisons_the_log_until_reopened() {
    let mem = prepared(&[call("c1")]);
    let storage = FailingStorage::healthy(mem.clone(), &[Op::SyncData]);
    let faults = storage.handle();
    let log = SessionLog::open_with_backend(storage).unwrap();
    faults.fail_from_now();
    let err = log
        .append(&[intent("c2")], Durability::Durable)
        .unwrap_err();
    assert!(err.to_string().contains("injected fault"), "{err}");
    // Later operations refuse rather than pretend.
    assert!(log.append(&[intent("c3")], Durability::Durable).is_err());
    drop(log);
    let log = SessionLog::open_with_backend(mem.crash()).unwrap();
    assert_eq!(shape(&log.events().unwrap()), vec![call("c1")]);
}

#[test]
fn a_torn_durable_commit_reopens_at_a_consistent_state() {
    // From the durable commit on, every sync fails, so its writes stay unsynced; a crash
    // may then have written back any prefix of them (including the lazy commits' pages,
    // which redb writes out with it).
    let acked = vec![call("c1"), intent("c1")];
    let mem = prepared(&acked);
    let storage = FailingStorage::healthy(mem.clone(), &[Op::SyncData]);
    let faults = storage.handle();
    let log = SessionLog::open_with_backend(storage).unwrap();
    eprintln!(
        "opening a cleanly closed log: {} write-path ops",
        faults.succeeded()
    );
    let lazy = vec![call("l1"), call("l2")];
    for e in &lazy {
        log.append(std::slice::from_ref(e), Durability::Lazy)
            .unwrap();
    }
    faults.fail_from_now();
    assert!(log.append(&[intent("d")], Durability::Durable).is_err());
    let changes = mem.unsynced_changes();
    assert!(changes > 0);
    let mut all = acked.clone();
    all.extend(lazy);
    all.push(intent("d"));
    for kept in 0..=changes {
        let image = mem.crash_keeping(kept).unwrap();
        let reopened = SessionLog::open_with_backend(image)
            .unwrap_or_else(|e| panic!("prefix {kept}/{changes}: {e}"));
        let got = shape(&reopened.events().unwrap());
        // Consistent means: the acknowledged events, then a prefix of the rest.
        assert!(
            got.len() >= acked.len() && got[..] == all[..got.len()],
            "prefix {kept}: {got:?}"
        );
    }
    // A device may also reorder write-back: lose any one change and keep the others.
    for lost in 0..changes {
        let image = mem.crash_keeping_if(|i| i != lost).unwrap();
        let reopened = SessionLog::open_with_backend(image)
            .unwrap_or_else(|e| panic!("all but change {lost}: {e}"));
        let got = shape(&reopened.events().unwrap());
        assert!(
            got.len() >= acked.len() && got[..] == all[..got.len()],
            "lost {lost}: {got:?}"
        );
    }
    eprintln!("torn commit: {changes} unsynced changes, every prefix and every one-loss reopens");
}
