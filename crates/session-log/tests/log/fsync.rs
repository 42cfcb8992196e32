//! How many fdatasyncs each operation costs (DESIGN.md §5: one per call on the critical
//! path). Counted with `CountingStorage` over a real file and over `MemStorage`.

use toolhost_log::{CountingStorage, Durability, FileStorage, MemStorage, SessionLog, SyncCounter};

use crate::{call, intent, result, shape};

fn file_log(dir: &std::path::Path) -> (SessionLog, SyncCounter) {
    let storage = CountingStorage::new(FileStorage::open(&dir.join("session.redb")).unwrap());
    let counter = storage.counter();
    (SessionLog::open_with_backend(storage).unwrap(), counter)
}

/// Runs `f` and returns how many fsyncs it cost.
fn fsyncs_of(counter: &SyncCounter, f: impl FnOnce()) -> u64 {
    fsyncs_and_grows_of(counter, f).0
}

/// Runs `f` and returns how many fsyncs it cost and how many times it grew the file.
fn fsyncs_and_grows_of(counter: &SyncCounter, f: impl FnOnce()) -> (u64, u64) {
    let (syncs, grows) = (counter.fsyncs(), counter.grows());
    f();
    (counter.fsyncs() - syncs, counter.grows() - grows)
}

#[test]
fn one_durable_append_of_one_event_is_one_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let (log, counter) = file_log(dir.path());
    let n = fsyncs_of(&counter, || {
        log.append(&[intent("c1")], Durability::Durable).unwrap();
    });
    eprintln!("durable append of 1 event on a fresh file: {n} fsync(s)");
    assert_eq!(n, 1);
    // Later appends: one fsync each, plus one when the commit had to grow the file
    // (redb makes the new length durable before a header can name it).
    let mut growing = 0;
    for i in 0..200 {
        let id = format!("c{i}");
        let (n, grows) = fsyncs_and_grows_of(&counter, || {
            log.append(&[intent(&id)], Durability::Durable).unwrap();
        });
        assert_eq!(n, 1 + grows, "append {i}");
        growing += u64::from(grows > 0);
    }
    eprintln!("200 more durable appends: {growing} of them grew the file (2 fsyncs), the rest 1");
    assert!(growing <= 10, "{growing}");
}

#[test]
fn a_group_commit_of_16_intents_is_one_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let (log, counter) = file_log(dir.path());
    let intents: Vec<_> = (0..16).map(|i| intent(&format!("c{i}"))).collect();
    let n = fsyncs_of(&counter, || {
        assert_eq!(log.record_intents(&intents).unwrap().len(), 16);
    });
    eprintln!("record_intents of 16: {n} fsync(s)");
    assert_eq!(n, 1);
    assert_eq!(log.pending_calls().unwrap().len(), 16);
}

#[test]
fn lazy_appends_cost_no_fsync_and_ride_on_the_next_durable_commit() {
    let mem = MemStorage::new();
    let storage = CountingStorage::new(mem.clone());
    let counter = storage.counter();
    let log = SessionLog::open_with_backend(storage).unwrap();
    let mut expected = vec![intent("c1")];
    log.append(&expected, Durability::Durable).unwrap();

    let lazy: Vec<_> = (0..10)
        .flat_map(|i| [result(&format!("r{i}")), call(&format!("n{i}"))])
        .collect();
    let (n, grows) = fsyncs_and_grows_of(&counter, || {
        for e in &lazy {
            log.append(std::slice::from_ref(e), Durability::Lazy)
                .unwrap();
        }
    });
    eprintln!("20 lazy appends: {n} fsync(s), {grows} file growth(s)");
    // A lazy commit never syncs its data; only growing the file syncs the new length.
    assert_eq!(n, grows);
    let (n, grows) = fsyncs_and_grows_of(&counter, || {
        log.append(&[call("one-more-lazy")], Durability::Lazy)
            .unwrap();
    });
    assert_eq!((n, grows), (0, 0));
    expected.extend(lazy);
    expected.push(call("one-more-lazy"));
    // Not durable yet: power loss now keeps only the durable intent.
    let crashed = SessionLog::open_with_backend(mem.crash()).unwrap();
    assert_eq!(shape(&crashed.events().unwrap()), vec![intent("c1")]);
    drop(crashed);

    expected.push(intent("c2"));
    let (n, grows) = fsyncs_and_grows_of(&counter, || {
        log.append(&[intent("c2")], Durability::Durable).unwrap();
    });
    eprintln!("durable append after 21 lazy ones: {n} fsync(s), {grows} growth(s)");
    assert_eq!(n, 1 + grows);
    // Power loss after the durable commit keeps everything before it.
    let crashed = SessionLog::open_with_backend(mem.crash()).unwrap();
    assert_eq!(shape(&crashed.events().unwrap()), expected);
}

#[test]
fn flush_makes_lazy_appends_durable_with_one_fsync_and_is_free_when_idle() {
    let mem = MemStorage::new();
    let storage = CountingStorage::new(mem.clone());
    let counter = storage.counter();
    let log = SessionLog::open_with_backend(storage).unwrap();
    assert_eq!(fsyncs_of(&counter, || log.flush().unwrap()), 0);
    log.append(&[call("a"), result("a")], Durability::Lazy)
        .unwrap();
    assert_eq!(fsyncs_of(&counter, || log.flush().unwrap()), 1);
    assert_eq!(fsyncs_of(&counter, || log.flush().unwrap()), 0);
    let crashed = SessionLog::open_with_backend(mem.crash()).unwrap();
    assert_eq!(
        shape(&crashed.events().unwrap()),
        vec![call("a"), result("a")]
    );
    // A durable append also clears what flush would do.
    log.append(&[call("b")], Durability::Lazy).unwrap();
    log.append(&[call("c")], Durability::Durable).unwrap();
    assert_eq!(fsyncs_of(&counter, || log.flush().unwrap()), 0);
}

#[test]
fn fsyncs_over_a_long_session_stay_at_one_per_durable_commit_plus_growth() {
    // A call on the critical path: intent durable, result lazy. Over many calls the file
    // grows, and redb syncs the new length once per growth step; report the total.
    let dir = tempfile::tempdir().unwrap();
    let (log, counter) = file_log(dir.path());
    let calls = 500;
    let n = fsyncs_of(&counter, || {
        for i in 0..calls {
            let id = format!("call-{i:04}");
            log.append(&[call(&id)], Durability::Lazy).unwrap();
            log.record_intents(&[intent(&id)]).unwrap();
            log.append(&[result(&id)], Durability::Lazy).unwrap();
        }
    });
    eprintln!("{calls} calls (call lazy, intent durable, result lazy): {n} fsyncs");
    assert!(n >= calls, "{n}");
    assert!(
        n <= calls + calls / 10,
        "{n} fsyncs for {calls} durable commits"
    );
}
