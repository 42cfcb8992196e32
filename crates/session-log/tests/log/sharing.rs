//! One state directory, several processes: a second writer waits a bounded time and
//! then names the holder; a writer that was killed leaves a stale holder file that does
//! not stop the next one.

use std::path::Path;
use std::time::{Duration, Instant};

use toolhost_log::{Durability, LogError, SessionLog};

use crate::call;
use crate::child::{Held, run_child, run_child_waiting};

/// The holder file of a state directory.
fn holder_file(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("holder")).unwrap()).unwrap()
}

#[test]
fn a_second_writer_waits_then_fails_naming_the_holders_pid() {
    let dir = tempfile::tempdir().unwrap();
    let held = Held::start("hold", dir.path(), "CHILD: holding");
    let pid = held.child.id();
    assert_eq!(holder_file(dir.path())["pid"], pid);

    let wait = Duration::from_millis(400);
    let started = Instant::now();
    let err = SessionLog::open_with_wait(dir.path(), wait).unwrap_err();
    let took = started.elapsed();
    assert!(took >= wait, "gave up after {took:?}, before its wait");
    let LogError::Locked {
        holder: Some(holder),
        waited,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(holder.pid, pid);
    assert!(!holder.exited);
    assert!(holder.program.contains("child::probe"), "{holder:?}");
    assert!(*waited >= wait, "{waited:?}");
    let text = err.to_string();
    assert!(text.contains(&format!("held by pid {pid} (")), "{text}");
    assert!(text.contains(", since 20"), "{text}");
    assert!(text.contains("; gave up after waiting "), "{text}");

    // Another process is told the same.
    let out = run_child_waiting("open", dir.path(), wait);
    assert!(out.contains("CHILD: locked after"), "{out}");
    assert!(out.contains(&format!("held by pid {pid} (")), "{out}");

    held.release();
    assert!(
        !dir.path().join("holder").exists(),
        "a closed writer leaves its holder file"
    );
    SessionLog::open_with_wait(dir.path(), Duration::ZERO).unwrap();
}

#[test]
fn a_waiting_writer_opens_once_the_holder_closes() {
    let dir = tempfile::tempdir().unwrap();
    let held = Held::start("hold", dir.path(), "CHILD: holding");
    let path = dir.path().to_path_buf();
    let waiter = std::thread::spawn(move || {
        let log = SessionLog::open_with_wait(&path, Duration::from_secs(60))?;
        log.append(&[call("after")], Durability::Durable)?;
        log.events()
    });
    held.release();
    let events = waiter.join().unwrap().unwrap();
    // The holder's events, then ours.
    assert_eq!(
        events.last().map(|e| (e.seq, e.call_id.as_str())),
        Some((7, "after"))
    );
}

#[test]
fn a_killed_writers_stale_holder_file_does_not_stop_the_next_writer() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_child("crash", dir.path());
    assert!(out.contains("CHILD: acknowledged"), "{out}");
    let stale = holder_file(dir.path());
    assert_ne!(stale["pid"], std::process::id());
    let log = SessionLog::open_with_wait(dir.path(), Duration::ZERO).unwrap();
    assert_eq!(holder_file(dir.path())["pid"], std::process::id());
    drop(log);
    assert!(!dir.path().join("holder").exists());
}
