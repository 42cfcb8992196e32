//! Child-process probes: this test binary re-runs itself with a test filter and an
//! environment variable naming what the child should do. Without the variable the probe
//! tests do nothing and pass.

use std::path::Path;
use std::process::Command;

use toolhost_log::{Durability, LogError, SessionLog};

use crate::{call, intent};

const ACTION: &str = "TOOLHOST_LOG_CHILD_ACTION";
const DIR: &str = "TOOLHOST_LOG_CHILD_DIR";

/// Runs the probe `action` on `dir` in a child process; returns its stdout.
pub fn run_child(action: &str, dir: &Path) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["child::probe", "--exact", "--nocapture", "--test-threads=1"])
        .env(ACTION, action)
        .env(DIR, dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() || action == "crash",
        "child {action} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn probe() {
    let (Ok(action), Ok(dir)) = (std::env::var(ACTION), std::env::var(DIR)) else {
        return;
    };
    let dir = Path::new(&dir);
    match action.as_str() {
        "open" => match SessionLog::open(dir) {
            Err(LogError::Locked { .. }) => println!("CHILD: locked"),
            Err(e) => println!("CHILD: error {e}"),
            Ok(_) => println!("CHILD: opened"),
        },
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
        other => panic!("unknown child action {other}"),
    }
}
