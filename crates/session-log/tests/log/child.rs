//! Child-process probes: this test binary re-runs itself with a test filter and an
//! environment variable naming what the child should do. Without the variable the probe
//! tests do nothing and pass.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use toolhost_log::{Durability, LogError, SessionLog};

use crate::engines::Backend;
use crate::{call, intent, large_result, result};

const ACTION: &str = "TOOLHOST_LOG_CHILD_ACTION";
const DIR: &str = "TOOLHOST_LOG_CHILD_DIR";

/// How long the `open` probe waits for the state (milliseconds; 0 if unset).
const WAIT_MS: &str = "TOOLHOST_LOG_CHILD_WAIT_MS";

pub fn probe_command(action: &str, dir: &Path) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child::probe", "--exact", "--nocapture", "--test-threads=1"])
        .env(ACTION, action)
        .env(DIR, dir);
    cmd
}

/// Runs the probe `action` on `dir` in a child process; returns its stdout.
pub fn run_child(action: &str, dir: &Path) -> String {
    run_child_waiting(action, dir, Duration::ZERO)
}

/// [`run_child`], where an `open` waits up to `wait` for the state.
pub fn run_child_waiting(action: &str, dir: &Path, wait: Duration) -> String {
    let out = probe_command(action, dir)
        .env(WAIT_MS, wait.as_millis().to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() || action.starts_with("crash") || action == "pg-die",
        "child {action} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A child process running a probe that goes on until its stdin is closed.
pub struct Held {
    pub child: Child,
    lines: std::io::Lines<BufReader<ChildStdout>>,
}

impl Held {
    /// Starts the probe `action` on `dir` and waits (bounded by the probe itself, which
    /// fails rather than hangs) until it prints a line containing `ready`.
    pub fn start(action: &str, dir: &Path, ready: &str) -> Held {
        let mut child = probe_command(action, dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut held = Held { child, lines };
        held.wait_for(ready);
        held
    }

    /// Reads the probe's output until a line contains `needle`.
    pub fn wait_for(&mut self, needle: &str) {
        for line in self.lines.by_ref() {
            let line = line.unwrap();
            if line.contains(needle) {
                return;
            }
            assert!(!line.contains("panicked"), "the child failed: {line}");
        }
        panic!("the child ended without printing {needle:?}");
    }

    /// Closes the probe's stdin (it closes its log) and waits for it to exit.
    pub fn release(mut self) {
        drop(self.child.stdin.take());
        self.wait_for("CHILD: closed");
        assert!(self.child.wait().unwrap().success());
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

#[test]
fn probe() {
    let (Ok(action), Ok(dir)) = (std::env::var(ACTION), std::env::var(DIR)) else {
        return;
    };
    let dir = Path::new(&dir);
    match action.as_str() {
        "open" => {
            let wait = std::env::var(WAIT_MS).map_or(Duration::ZERO, |ms| {
                Duration::from_millis(ms.parse().unwrap())
            });
            let started = Instant::now();
            match SessionLog::open_with_wait(dir, wait) {
                Err(e @ LogError::Locked { .. }) => println!(
                    "CHILD: locked after {} ms: {e}",
                    started.elapsed().as_millis()
                ),
                Err(e) => println!("CHILD: error {e}"),
                Ok(_) => println!("CHILD: opened"),
            }
        }
        "hold" => {
            // A writer that stays open until its stdin closes: durable intents, one of
            // them only in the intent WAL, and a lazy event that no durable append
            // carried.
            let log = SessionLog::open(dir).unwrap();
            log.record_intents_after(&[call("h1")], &[intent("h1")])
                .unwrap();
            log.append(&[result("h1")], Durability::Lazy).unwrap();
            log.record_intents_after(&[call("h2")], &[intent("h2")])
                .unwrap();
            log.append(&[call("lazy")], Durability::Lazy).unwrap();
            println!("CHILD: holding");
            let mut rest = String::new();
            let _ = std::io::stdin().read_to_string(&mut rest);
            drop(log);
            println!("CHILD: closed");
        }
        "crash" => {
            let log = SessionLog::open(dir).unwrap();
            log.append(&[call("d1"), intent("d1")], Durability::Durable)
                .unwrap();
            log.append(&[call("lazy")], Durability::Lazy).unwrap();
            log.append(&[intent("d2")], Durability::Durable).unwrap();
            log.append(&[call("lazy2")], Durability::Lazy).unwrap();
            println!("CHILD: acknowledged");
            // Die without closing the log: no destructor, no flush.
            std::process::exit(3);
        }
        "crash-large" => {
            // Large (compressed) events, durable in the WAL only, then death.
            let log = SessionLog::open(dir).unwrap();
            log.append(&[call("big1"), large_result("big1")], Durability::Durable)
                .unwrap();
            log.append(&[large_result("big2")], Durability::Durable)
                .unwrap();
            println!("CHILD: acknowledged");
            std::process::exit(3);
        }
        "crash-on" => {
            // "crash" on any engine: DIR holds a `Backend::spec`.
            let log = Backend::from_spec(&dir.to_string_lossy()).open();
            log.append(&[call("d1"), intent("d1")], Durability::Durable)
                .unwrap();
            log.append(&[call("lazy")], Durability::Lazy).unwrap();
            log.append(&[intent("d2")], Durability::Durable).unwrap();
            log.append(&[call("lazy2")], Durability::Lazy).unwrap();
            println!("CHILD: acknowledged");
            std::process::exit(3);
        }
        "pg-die" => {
            // A PostgreSQL replica `dying` with a short lease that is killed holding two
            // intents. DIR holds `LOG:URL`.
            let spec = dir.to_string_lossy();
            let (name, url) = spec.split_once(':').unwrap();
            let engine = toolhost_log::PgEngine::open(
                url,
                &crate::engines::pg_options(name, "dying", Duration::from_millis(300)),
            )
            .unwrap();
            let log = SessionLog::from_engine(engine);
            log.record_intents_after(&[call("c1"), call("c2")], &[intent("c1"), intent("c2")])
                .unwrap();
            println!("CHILD: acknowledged");
            std::process::exit(3);
        }
        "pg-replica" => crate::replicas::replica_child(&dir.to_string_lossy()),
        other => panic!("unknown child action {other}"),
    }
}
