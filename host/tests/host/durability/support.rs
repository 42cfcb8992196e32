//! Shared helpers: running the `toolhost` binary, reading and checking a
//! session log after a crash, and building hosts around the embedded tools.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use toolhost::log::{Event, EventKind, SessionLog};
use toolhost::{Host, HostBuilder, RuntimeOptions};

pub use crate::support::{bin, cache_dir, drop_when, logged, until};

/// Runtime options for library hosts: the shared cache.
pub fn runtime_options() -> RuntimeOptions {
    crate::support::runtime_options_with_pool(16)
}

/// A builder with the embedded tools, `workspace` and the shared cache.
pub fn builder(workspace: &Path) -> HostBuilder {
    crate::support::builder_with(workspace, runtime_options())
}

/// A temporary directory holding a workspace (`ws/`) and a state directory
/// (`state/`, outside the workspace, created by the host).
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        Sandbox { dir }
    }

    pub fn ws(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// `toolhost ARGS --state STATE --workspace WS`, with the shared cache
    /// and no crash point.
    pub fn command(&self, args: &[&str]) -> Command {
        command_on(&self.state(), &self.ws(), args)
    }

    /// Writes a batch file (outside the workspace) and returns its path.
    pub fn batch_file(&self, calls: &serde_json::Value) -> PathBuf {
        let path = self.dir.path().join("batch.json");
        std::fs::write(&path, calls.to_string()).unwrap();
        path
    }
}

/// `toolhost ARGS --state STATE --workspace WS`.
pub fn command_on(state: &Path, ws: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(bin());
    c.args(args)
        .arg("--state")
        .arg(state)
        .arg("--workspace")
        .arg(ws)
        .env("TOOLHOST_CACHE_DIR", cache_dir())
        .env_remove("TOOLHOST_TEST_PAUSE_AT")
        .env_remove("TOOLHOST_STATE_DIR")
        .env_remove("TOOLHOST_LOG")
        .stdin(Stdio::null());
    c
}

/// A running `toolhost` whose stdout and stderr are collected by threads.
pub struct Running {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    stderr_seen: String,
    stdout: Option<std::thread::JoinHandle<String>>,
    stderr: Option<std::thread::JoinHandle<()>>,
}

/// How a `toolhost` process ended.
#[derive(Debug)]
pub struct Ended {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Running {
    pub fn spawn(mut cmd: Command) -> Running {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("toolhost starts");
        let mut out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        let stdout = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let stderr = std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            lines,
            stderr_seen: String::new(),
            stdout: Some(stdout),
            stderr: Some(stderr),
        }
    }

    /// Waits until the process writes `toolhost-paused:<point>` on stderr.
    /// Panics (with what it wrote) if it exits first or takes longer than
    /// `timeout`.
    pub fn wait_marker(&mut self, point: &str, timeout: Duration) {
        let marker = format!("toolhost-paused:{point}");
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(100)))
            {
                Ok(line) => {
                    let found = line == marker;
                    self.stderr_seen.push_str(&line);
                    self.stderr_seen.push('\n');
                    if found {
                        return;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if Instant::now() >= end {
                        let _ = self.child.kill();
                        panic!(
                            "no {marker} within {timeout:?}; stderr so far:\n{}",
                            self.stderr_seen
                        );
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().ok();
                    panic!(
                        "toolhost ended ({status:?}) before {marker}; stderr:\n{}",
                        self.stderr_seen
                    );
                }
            }
        }
    }

    /// SIGKILLs the process (if it still runs) and collects what it wrote.
    pub fn kill(mut self) -> Ended {
        let _ = self.child.kill();
        self.collect()
    }

    /// Waits up to `timeout` for the process to end on its own; kills it
    /// and panics if it does not.
    pub fn wait_timeout(mut self, timeout: Duration) -> Ended {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if self.child.try_wait().unwrap().is_some() {
                return self.collect();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let ended = self.kill();
        panic!("toolhost did not end within {timeout:?}: {ended:?}");
    }

    fn collect(&mut self) -> Ended {
        let status = self.child.wait().unwrap();
        let stdout = self
            .stdout
            .take()
            .map(|h| h.join().unwrap())
            .unwrap_or_default();
        if let Some(h) = self.stderr.take() {
            h.join().unwrap();
        }
        let mut stderr = std::mem::take(&mut self.stderr_seen);
        while let Ok(line) = self.lines.try_recv() {
            stderr.push_str(&line);
            stderr.push('\n');
        }
        Ended {
            status,
            stdout,
            stderr,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Never leave a paused process behind when a test fails.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where a call got to, as the log records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Refused before dispatch: a result (an error) and no intent.
    Refused,
    /// The intent is durable, the result is not.
    IntentOnly,
    /// Intent and result.
    Completed,
}

/// What the log holds about one call.
#[derive(Debug, Clone)]
pub struct CallLog {
    pub fate: Fate,
    pub tool: Option<String>,
    pub args: Option<serde_json::Value>,
    pub intent_seq: Option<u64>,
    pub result: Option<serde_json::Value>,
}

/// Reads every event of the log in `state` (the log must open).
pub fn read_events(state: &Path) -> Vec<Event> {
    let log = SessionLog::open(state).unwrap_or_else(|e| panic!("the state does not reopen: {e}"));
    log.events().unwrap()
}

/// Checks the invariants every log must keep, whatever the crash, and
/// returns the fate of each call that has an intent or a result (a call with
/// only a lazily logged `tool/call` is absent: it never reached the
/// checkpoint). Invariants: sequence numbers 1..n; per call at most one
/// intent and at most one result, the result after the intent; a result
/// without an intent is an error that never ran (a refusal); every
/// `session/recovered` names calls that have an unknown-outcome result.
pub fn check_log(events: &[Event]) -> BTreeMap<String, CallLog> {
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "sequence numbers are not gapless"
    );
    let mut intents: BTreeMap<String, Vec<&Event>> = BTreeMap::new();
    let mut results: BTreeMap<String, Vec<&Event>> = BTreeMap::new();
    for e in events {
        match e.kind {
            EventKind::ToolIntent => intents.entry(e.call_id.clone()).or_default().push(e),
            EventKind::ToolResult => results.entry(e.call_id.clone()).or_default().push(e),
            _ => {}
        }
    }
    let mut calls = BTreeMap::new();
    let ids: std::collections::BTreeSet<_> =
        intents.keys().chain(results.keys()).cloned().collect();
    for id in ids {
        let i = intents.get(&id).map(Vec::as_slice).unwrap_or_default();
        let r = results.get(&id).map(Vec::as_slice).unwrap_or_default();
        assert!(i.len() <= 1, "call {id} has {} intents", i.len());
        assert!(r.len() <= 1, "call {id} has {} results: {r:?}", r.len());
        let fate = match (i.first(), r.first()) {
            (Some(i), Some(r)) => {
                assert!(i.seq < r.seq, "call {id}: result before intent");
                Fate::Completed
            }
            (Some(_), None) => Fate::IntentOnly,
            (None, Some(r)) => {
                assert_eq!(
                    r.payload["status"], "error",
                    "call {id} has an ok result without an intent: {r:?}"
                );
                let code = r.payload["error"]["code"].as_str().unwrap_or_default();
                assert_ne!(
                    code, "TOOL_OUTCOME_UNKNOWN",
                    "call {id}: recovered without an intent"
                );
                Fate::Refused
            }
            (None, None) => unreachable!(),
        };
        calls.insert(
            id,
            CallLog {
                fate,
                tool: i
                    .first()
                    .and_then(|e| e.payload["tool"].as_str().map(String::from)),
                args: i.first().map(|e| e.payload["args"].clone()),
                intent_seq: i.first().map(|e| e.seq),
                result: r.first().map(|e| e.payload.clone()),
            },
        );
    }
    for e in events
        .iter()
        .filter(|e| e.kind == EventKind::SessionRecovered)
    {
        for id in e.payload["calls"].as_array().unwrap() {
            let c = &calls[id.as_str().unwrap()];
            assert_eq!(
                c.result.as_ref().unwrap()["error"]["code"],
                "TOOL_OUTCOME_UNKNOWN",
                "{e:?}"
            );
        }
    }
    calls
}

/// The calls whose intent is durable and whose result is not, in intent order.
pub fn pending(calls: &BTreeMap<String, CallLog>) -> Vec<String> {
    let mut p: Vec<_> = calls
        .iter()
        .filter(|(_, c)| c.fate == Fate::IntentOnly)
        .map(|(id, c)| (c.intent_seq, id.clone()))
        .collect();
    p.sort();
    p.into_iter().map(|(_, id)| id).collect()
}

/// How recovery is run after a crash.
#[derive(Debug, Clone, Copy)]
pub enum Via {
    /// `toolhost recover --state DIR`.
    Cli,
    /// `SessionLog::open` + `recover`.
    Library,
    /// `Host::build` with the state directory (recovery on open).
    HostBuild,
}

/// Recovers the log in `state` and checks that exactly the intent-only calls
/// got one `TOOL_OUTCOME_UNKNOWN` result each, that nothing else changed, and
/// that a second recovery adds nothing.
pub fn recover_and_check(state: &Path, ws: &Path, via: Via) {
    let before = read_events(state);
    let calls = check_log(&before);
    let expected = pending(&calls);
    match via {
        Via::Cli => {
            let out = command_on(state, ws, &["recover"]).output().unwrap();
            assert!(out.status.success(), "{out:?}");
            let text = String::from_utf8_lossy(&out.stdout);
            if expected.is_empty() {
                assert_eq!(text.trim(), "nothing to recover");
            } else {
                let got: Vec<_> = text
                    .lines()
                    .map(|l| l.trim_end_matches(": TOOL_OUTCOME_UNKNOWN").to_string())
                    .collect();
                assert_eq!(got, expected, "{text}");
            }
        }
        Via::Library => {
            let log = SessionLog::open(state).unwrap();
            assert_eq!(log.recover().unwrap().recovered, expected);
        }
        Via::HostBuild => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let host: Host = rt
                .block_on(
                    HostBuilder::new()
                        .workspace(ws)
                        .runtime_options(runtime_options())
                        .state_dir(state)
                        .build(),
                )
                .unwrap();
            drop(host);
        }
    }
    let after = read_events(state);
    assert_eq!(
        after[..before.len()],
        before[..],
        "recovery changed existing events"
    );
    let added = &after[before.len()..];
    if expected.is_empty() {
        assert!(
            added.is_empty(),
            "recovery wrote {added:?} with nothing pending"
        );
    } else {
        assert_eq!(added.len(), expected.len() + 1, "{added:?}");
        for (e, id) in added.iter().zip(&expected) {
            assert_eq!((&e.call_id, e.kind), (id, EventKind::ToolResult));
            assert_eq!(e.payload["error"]["code"], "TOOL_OUTCOME_UNKNOWN");
        }
        assert_eq!(added.last().unwrap().kind, EventKind::SessionRecovered);
    }
    let calls = check_log(&after);
    assert!(pending(&calls).is_empty());
    // Idempotent: a second recovery writes nothing (by the CLI, except
    // after a library recovery, where the library is checked, more cheaply).
    if let Via::Library = via {
        let log = SessionLog::open(state).unwrap();
        assert!(log.recover().unwrap().recovered.is_empty());
    } else {
        let out = command_on(state, ws, &["recover"]).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "nothing to recover"
        );
    }
    assert_eq!(read_events(state), after);
}

/// A tiny deterministic generator (xorshift64*).
pub struct XorShift(pub u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs `recover` (made by `on_pg`) until it recovers something, for at most
/// 60 s: a killed run's lease must run out first (until then `recover` leaves
/// its calls alone, as it would a live replica's); what it printed. Then
/// checks a second `recover` finds nothing: a call is recovered once.
pub fn recover_after_lease(on_pg: impl Fn(&[&str]) -> Command) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let recovered = loop {
        let out = on_pg(&["recover"]).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if stdout.contains("TOOL_OUTCOME_UNKNOWN") {
            break stdout;
        }
        assert!(stdout.contains("nothing to recover"), "{stdout}");
        assert!(
            Instant::now() < deadline,
            "the killed run's calls were never recovered"
        );
    };
    let out = on_pg(&["recover"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "nothing to recover"
    );
    recovered
}
