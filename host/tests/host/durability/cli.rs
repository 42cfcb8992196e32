//! The command line under interruption and with unusable state: SIGINT
//! cancels a running call; a state directory that is a file, a
//! `session.redb` that is not a redb database and a log locked by another
//! process fail with a clear message and exit 2, touching nothing.
//!
//! A locked log is an error, not a wait: a second `toolhost` on the same
//! state fails at once with "in use by another toolhost" (the first may be
//! paused on an approval for minutes, and silently blocking an agent is
//! worse than telling it).

use super::support::*;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};
use toolhost::log::EventKind;

#[test]
fn sigint_cancels_a_running_call() {
    let sb = Sandbox::new();
    let mut cmd = sb.command(&["run", "sleep", "--args", r#"{"ms":10000}"#, "--json"]);
    // `during-body` only announces itself: the process goes on into the body.
    cmd.env("TOOLHOST_TEST_PAUSE_AT", "during-body");
    let mut running = Running::spawn(cmd);
    running.wait_marker("during-body", Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(300));
    let pid = running.child.id().to_string();
    let sent = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let ended = running.wait_timeout(Duration::from_secs(8));
    let took = sent.elapsed();
    assert_eq!(ended.status.code(), Some(1), "{ended:?}");
    assert!(took < Duration::from_secs(5), "cancelling took {took:?}");
    let out: serde_json::Value =
        serde_json::from_str(ended.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {ended:?}"));
    assert_eq!(out["status"], "error");
    assert_eq!(out["error"]["code"], "CANCELLED", "{out}");
    // The log holds the intent and the CANCELLED result (flushed before exit).
    let events = read_events(&sb.state());
    let calls = check_log(&events);
    let c = &calls[out["call_id"].as_str().unwrap()];
    assert_eq!(c.fate, Fate::Completed);
    assert_eq!(c.result.as_ref().unwrap()["error"]["code"], "CANCELLED");
}

fn assert_usage_error(ended: &std::process::Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&ended.stderr);
    assert_eq!(ended.status.code(), Some(2), "{ended:?}");
    assert!(ended.status.signal().is_none());
    assert!(
        stderr.contains(needle),
        "expected {needle:?} in stderr: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_state_path_that_is_a_file_is_refused_untouched() {
    let sb = Sandbox::new();
    std::fs::write(sb.state(), b"not a directory").unwrap();
    for args in [
        &["run", "sleep", "--args", r#"{"ms":0}"#][..],
        &["log"],
        &["recover"],
    ] {
        let out = sb.command(args).output().unwrap();
        assert_usage_error(&out, "is not writable");
        assert_usage_error(&out, &sb.state().display().to_string());
    }
    assert_eq!(std::fs::read(sb.state()).unwrap(), b"not a directory");
}

#[test]
fn a_session_file_that_is_not_redb_is_refused_untouched() {
    let sb = Sandbox::new();
    std::fs::create_dir(sb.state()).unwrap();
    let file = sb.state().join("session.redb");
    let small = b"{\"this\": \"is JSON, not redb\"}\n".to_vec();
    let large: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for bytes in [small, large] {
        std::fs::write(&file, &bytes).unwrap();
        for args in [
            &["run", "sleep", "--args", r#"{"ms":0}"#][..],
            &["log", "--json"],
            &["recover"],
        ] {
            let out = sb.command(args).output().unwrap();
            assert_usage_error(&out, "not a toolhost session log");
            assert_eq!(
                std::fs::read(&file).unwrap(),
                bytes,
                "{args:?} changed the file"
            );
        }
    }
}

#[test]
fn a_log_locked_by_another_process_is_refused() {
    let sb = Sandbox::new();
    let mut cmd = sb.command(&["run", "sleep", "--args", r#"{"ms":0}"#, "--json"]);
    cmd.env("TOOLHOST_TEST_PAUSE_AT", "after-intent");
    let mut first = Running::spawn(cmd);
    first.wait_marker("after-intent", Duration::from_secs(120));
    for args in [
        &["run", "sleep", "--args", r#"{"ms":0}"#, "--json"][..],
        &["log"],
        &["recover"],
    ] {
        let started = Instant::now();
        let out = sb.command(args).output().unwrap();
        assert_usage_error(&out, "in use by another toolhost");
        assert!(out.stdout.is_empty(), "{out:?}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "it waited for the lock"
        );
    }
    let ended = first.kill();
    assert_eq!(ended.status.signal(), Some(9));
    // The first process's call is intact: intent-only, then recovered.
    let calls = check_log(&read_events(&sb.state()));
    assert_eq!(pending(&calls).len(), 1, "{calls:?}");
    recover_and_check(&sb.state(), &sb.ws(), Via::Cli);
}

#[test]
fn log_json_prints_one_event_per_line() {
    let sb = Sandbox::new();
    for args in [r#"{"ms":0}"#, r#"{"ms":1}"#] {
        let out = sb
            .command(&["run", "sleep", "--args", args, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let refused = sb
        .command(&["run", "no_such_tool", "--json"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let out = sb.command(&["log", "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?} is not one JSON object"))
        })
        .collect();
    let events = read_events(&sb.state());
    assert_eq!(lines.len(), events.len(), "{text}");
    for (line, e) in lines.iter().zip(&events) {
        assert!(line.is_object());
        assert_eq!(line["seq"], e.seq);
        assert_eq!(line["call_id"], e.call_id.as_str());
        assert_eq!(line["kind"], e.kind.as_str());
        assert_eq!(line["payload"], e.payload);
    }
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == EventKind::ToolIntent)
            .count(),
        2
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == EventKind::ToolResult)
            .count(),
        3
    );
}
