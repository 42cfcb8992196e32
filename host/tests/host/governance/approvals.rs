//! Two-phase approvals through the command line: `toolhost run --approver
//! queue` registers its request and waits; a second process lists and
//! decides it with `toolhost approvals list|decide`.

use super::*;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

fn toolhost(state: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(crate::support::bin());
    c.args(args)
        .arg("--state")
        .arg(state)
        .env("TOOLHOST_CACHE_DIR", cache_dir())
        .env_remove("TOOLHOST_STATE_DIR");
    c
}

/// `toolhost run write_file` asking through the queue, in the background.
fn start_write(ws: &Path, state: &Path, policy: &Path, timeout: &str) -> Child {
    toolhost(
        state,
        &[
            "run",
            "write_file",
            "--json",
            "--approver",
            "queue",
            "--approval-timeout",
            timeout,
            "--args",
            r#"{"path":"out.txt","content":"x"}"#,
        ],
    )
    .arg("--policy")
    .arg(policy)
    .arg("--workspace")
    .arg(ws)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

fn pending(state: &Path) -> Vec<serde_json::Value> {
    let out = toolhost(state, &["approvals", "list", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits (bounded) until one request is pending; returns it.
fn one_pending(state: &Path, child: &mut Child) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(r) = pending(state).into_iter().next() {
            return r;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the call ended without asking"
        );
        assert!(Instant::now() < deadline, "no request became pending");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn decide(state: &Path, id: &str, decision: &str) -> Output {
    toolhost(state, &["approvals", "decide", id, decision])
        .output()
        .unwrap()
}

fn events(state: &Path) -> Vec<serde_json::Value> {
    let out = toolhost(state, &["log", "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn count(events: &[serde_json::Value], kind: &str) -> usize {
    events.iter().filter(|e| e["kind"] == kind).count()
}

fn setup() -> (tempfile::TempDir, tempfile::TempDir, std::path::PathBuf) {
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let policy = state.path().join("ask.toml");
    std::fs::write(&policy, ASK_WRITES).unwrap();
    (ws, state, policy)
}

#[test]
fn a_request_decided_from_a_second_process_runs_the_call_once() {
    let (ws, state, policy) = setup();
    let mut child = start_write(ws.path(), state.path(), &policy, "60");
    let request = one_pending(state.path(), &mut child);
    assert_eq!(request["tool"], "write_file");
    assert_eq!(request["args"]["path"], "out.txt");
    let id = request["approval_id"].as_str().unwrap().to_string();
    // Registered in the log before anyone could see it (read beside the
    // running process), and nothing ran yet.
    let before = events(state.path());
    let asked: Vec<_> = before
        .iter()
        .filter(|e| e["kind"] == "approval/asked")
        .collect();
    assert_eq!(asked.len(), 1, "{before:?}");
    assert_eq!(asked[0]["payload"]["request"]["approval_id"], id.as_str());
    assert!(!ws.path().join("out.txt").exists());

    let out = decide(state.path(), &id, "allow");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // A second decision is refused and names the one that stands.
    let again = decide(state.path(), &id, "reject");
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    let msg = String::from_utf8_lossy(&again.stderr);
    assert!(
        msg.contains("already decided: allowed-once (by operator)"),
        "{msg}"
    );

    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "x"
    );
    let after = events(state.path());
    assert_eq!(count(&after, "tool/intent"), 1, "the body ran once");
    assert_eq!(count(&after, "approval/decided"), 1);
    assert!(pending(state.path()).is_empty());
    // An id that was never asked for is unknown.
    let unknown = decide(state.path(), "call-nope-approval", "allow");
    assert_eq!(unknown.status.code(), Some(1));
}

#[test]
fn a_rejection_from_a_second_process_refuses_the_call() {
    let (ws, state, policy) = setup();
    let mut child = start_write(ws.path(), state.path(), &policy, "60");
    let id = one_pending(state.path(), &mut child)["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(decide(state.path(), &id, "reject").status.code(), Some(0));
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["error"]["code"], "APPROVAL_REJECTED", "{r}");
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[test]
fn a_timeout_ends_the_wait_and_a_late_decision_is_refused() {
    let (ws, state, policy) = setup();
    let child = start_write(ws.path(), state.path(), &policy, "1");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["error"]["code"], "APPROVAL_UNAVAILABLE", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nobody decided"),
        "{r}"
    );
    let asked = events(state.path())
        .into_iter()
        .find(|e| e["kind"] == "approval/asked")
        .unwrap();
    let id = asked["payload"]["request"]["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(pending(state.path()).is_empty());
    let late = decide(state.path(), &id, "allow");
    assert_eq!(late.status.code(), Some(1), "{late:?}");
    assert!(
        String::from_utf8_lossy(&late.stderr).contains("already decided: unavailable (by timeout)"),
        "{late:?}"
    );
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[test]
fn a_request_pending_when_its_process_dies_is_recovered_as_refused() {
    let (ws, state, policy) = setup();
    let mut child = start_write(ws.path(), state.path(), &policy, "60");
    let id = one_pending(state.path(), &mut child)["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    child.kill().unwrap();
    child.wait().unwrap();
    // Still listed: nobody has taken the state directory since.
    assert_eq!(pending(state.path()).len(), 1);
    // The next process that takes it decides the request unavailable.
    std::fs::write(ws.path().join("a.txt"), "hello").unwrap();
    let out = cli(ws.path(), state.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(pending(state.path()).is_empty());
    let late = decide(state.path(), &id, "allow");
    assert_eq!(late.status.code(), Some(1), "{late:?}");
    assert!(
        String::from_utf8_lossy(&late.stderr)
            .contains("already decided: unavailable (by recovered)"),
        "{late:?}"
    );
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
    let all = events(state.path());
    assert_eq!(
        count(&all, "tool/intent"),
        1,
        "only the read_file call ran: {all:?}"
    );
}
