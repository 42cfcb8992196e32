//! The command line on a PostgreSQL log (`--state postgres://…`): a `run` killed
//! in its body leaves a durable intent; `toolhost recover`, another process,
//! resolves it as `TOOL_OUTCOME_UNKNOWN` exactly once, only after the killed
//! run's lease has expired; `toolhost log` reads the result.
//!
//! Needs `TOOLHOST_TEST_PG_URL` (`scripts/pg-test-server start`); without it
//! the test fails under CI and is skipped with a loud notice otherwise.

use super::support::*;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

fn pg_url() -> Option<String> {
    match std::env::var("TOOLHOST_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("TOOLHOST_TEST_PG_URL is unset under CI: .ci/run must start PostgreSQL")
        }
        _ => {
            eprintln!(
                "\n*** TOOLHOST_TEST_PG_URL is unset: the PostgreSQL state is NOT tested ***\n"
            );
            None
        }
    }
}

#[test]
fn a_run_killed_in_its_body_is_recovered_once_by_toolhost_recover() {
    let Some(url) = pg_url() else { return };
    let sb = Sandbox::new();
    let log = format!(
        "cli-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let on_pg = |args: &[&str]| {
        let mut c = command_on(Path::new(&url), &sb.ws(), args);
        c.env("TOOLHOST_PG_LOG", &log)
            .env("TOOLHOST_PG_LEASE_MS", "300");
        c
    };
    let mut cmd = on_pg(&["run", "sleep", "--args", r#"{"ms":60000}"#, "--json"]);
    cmd.env("TOOLHOST_TEST_PAUSE_AT", "during-body");
    let mut running = Running::spawn(cmd);
    running.wait_marker("during-body", Duration::from_secs(120));
    running.kill();

    // The killed run's lease must run out first: until then `recover` leaves its
    // call alone (it could be a live replica).
    let recovered = recover_after_lease(on_pg);
    assert_eq!(recovered.lines().count(), 1, "{recovered}");

    let out = on_pg(&["log", "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "tool/call",
            "tool/intent",
            "tool/result",
            "session/recovered"
        ],
        "{events:?}"
    );
    assert_eq!(
        events[2]["payload"]["error"]["code"],
        "TOOL_OUTCOME_UNKNOWN"
    );
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
}

/// `toolhost recover` never takes over the identity of a live replica (a shell
/// that exports a server's `TOOLHOST_REPLICA_ID`): it refuses, naming the lease,
/// and the replica is not fenced.
#[test]
fn recover_refuses_the_identity_of_a_live_replica() {
    use toolhost::log::{Durability, EventKind, NewEvent, PgEngine, PgOptions, SessionLog};
    let Some(url) = pg_url() else { return };
    let sb = Sandbox::new();
    let log = format!("live-{}", std::process::id());
    let replica = format!("server-{}", std::process::id());
    let live = SessionLog::from_engine(
        PgEngine::open(
            &url,
            &PgOptions {
                log: log.clone(),
                replica: replica.clone(),
                lease: Duration::from_secs(600),
                ..PgOptions::default()
            },
        )
        .unwrap(),
    );
    let out = command_on(Path::new(&url), &sb.ws(), &["recover"])
        .env("TOOLHOST_PG_LOG", &log)
        .env("TOOLHOST_REPLICA_ID", &replica)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("holds a lease until"), "{err}");
    // Not fenced: it still writes.
    let event = NewEvent::new("c1", EventKind::ToolCall, serde_json::json!({}));
    live.append(&[event], Durability::Durable).unwrap();
}
