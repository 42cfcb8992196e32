//! Faults of the database under a `toolhost serve --http` replica (issue: scale-out,
//! faults): each leaves the log consistent and the server refusing clearly while it
//! lasts and serving again once it clears.
//!
//! - the database full (a trigger raising SQLSTATE 53100 `disk_full`, the error
//!   PostgreSQL raises when it cannot extend a file) and read-only
//!   (`default_transaction_read_only`, SQLSTATE 25006): calls end
//!   `ABORTED_BEFORE_DISPATCH` naming the SQLSTATE, their bodies never run;
//! - the replica's connection dropped before an intent commit (the call is aborted or,
//!   if the engine saw the cut first and reconnected, runs), and after it, while the
//!   body runs (the call finishes or is recovered as unknown, never both);
//! - the database crashed and restarted while calls run: calls in flight fail or
//!   finish, later ones are served, every durable intent keeps exactly one result.

use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

use super::replica::{Cluster, Replica, WAIT, call, code_of, cut_connections, sql, unique};

/// A database of the test's own on the test server (so that making it read-only
/// touches no other test), dropped at the end.
struct OwnDatabase {
    admin: String,
    name: String,
    url: String,
}

impl OwnDatabase {
    fn create(admin: &str) -> OwnDatabase {
        let name = unique("faults").replace('-', "_");
        sql(admin, &format!("CREATE DATABASE {name}"));
        let url = match admin.rsplit_once('/') {
            Some((base, _)) => format!("{base}/{name}"),
            None => panic!("a URL without a database: {admin}"),
        };
        OwnDatabase {
            admin: admin.to_string(),
            name,
            url,
        }
    }
}

impl Drop for OwnDatabase {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| {
            sql(
                &self.admin,
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            )
        });
    }
}

/// A policy that lets every call run in workspace-write without asking anyone.
fn allow_policy(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("allow.toml");
    std::fs::write(&path, "version = 1\nmode = \"workspace-write\"\n").unwrap();
    path
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `write_file` of `path` through `r`; its answer.
fn write(rt: &tokio::runtime::Runtime, r: &mut Replica, id: u64, path: &str) -> Value {
    let addr = r.wait_listening();
    rt.block_on(call(
        addr,
        id,
        "write_file",
        json!({"path": path, "content": "x"}),
    ))
    .unwrap_or_else(|e| panic!("no answer for {path}: {e}\n{}", r.stderr()))
}

fn text_of(answer: &Value) -> String {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Every intent has exactly one result, and sequence numbers are gapless. (An intent
/// whose commit answer was lost may carry `ABORTED_BEFORE_DISPATCH`: its body never
/// ran; the tests check that through the workspace.)
fn check_log(events: &[Value]) {
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    let mut calls: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for e in events {
        calls
            .entry(e["call_id"].as_str().unwrap())
            .or_default()
            .push(e["kind"].as_str().unwrap());
    }
    for (id, kinds) in calls {
        if kinds.contains(&"tool/intent") {
            let results = kinds.iter().filter(|k| **k == "tool/result").count();
            assert_eq!(results, 1, "{id}: {kinds:?}");
        }
    }
}

/// Calls `write_file` of fresh paths until one succeeds (at most `tries`); every
/// answer before it must be a refusal before dispatch whose file was not written.
fn write_until_served(
    rt: &tokio::runtime::Runtime,
    r: &mut Replica,
    ws: &Path,
    id: &mut u64,
    what: &str,
) {
    for _ in 0..5 {
        *id += 1;
        let path = format!("{what}-{id}.txt");
        let answer = write(rt, r, *id, &path);
        if answer["result"]["isError"] == false {
            assert!(ws.join(&path).exists());
            return;
        }
        assert_eq!(
            code_of(&answer),
            "ABORTED_BEFORE_DISPATCH",
            "{what}: {answer}"
        );
        assert!(!ws.join(&path).exists(), "{what}: aborted but written");
    }
    panic!("{what}: the replica did not serve again:\n{}", r.stderr());
}

#[test]
fn a_full_or_read_only_database_refuses_calls_clearly_and_serving_resumes() {
    let Some(admin) = super::replica::pg_url() else {
        return;
    };
    let db = OwnDatabase::create(&admin);
    let dir = crate::support::tempdir();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let cluster = Cluster {
        url: db.url.clone(),
        log: "default".into(),
        ws: ws.clone(),
        lease_ms: 2000,
        args: vec![
            "--policy".into(),
            allow_policy(dir.path()).display().to_string(),
        ],
    };
    let replica_id = unique("faults-r");
    let mut r = Replica::start(&cluster, &replica_id);
    let rt = rt();
    let mut id = 0;
    write_until_served(&rt, &mut r, &ws, &mut id, "healthy");

    // Full: inserting an event fails as when PostgreSQL cannot extend a file.
    sql(
        &db.url,
        "CREATE FUNCTION public.toolhost_test_full() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' \
         USING ERRCODE = 'disk_full'; END $$; \
         CREATE TRIGGER toolhost_test_full BEFORE INSERT ON toolhost.toolhost_events \
         FOR EACH STATEMENT EXECUTE FUNCTION public.toolhost_test_full()",
    );
    for _ in 0..2 {
        id += 1;
        let path = format!("full-{id}.txt");
        let answer = write(&rt, &mut r, id, &path);
        assert_eq!(code_of(&answer), "ABORTED_BEFORE_DISPATCH", "{answer}");
        let text = text_of(&answer);
        assert!(
            text.contains("out of disk space") && text.contains("SQLSTATE 53100"),
            "{text}"
        );
        assert!(!ws.join(&path).exists());
    }
    sql(
        &db.url,
        "DROP TRIGGER toolhost_test_full ON toolhost.toolhost_events",
    );
    write_until_served(&rt, &mut r, &ws, &mut id, "after-full");

    // Read-only: a new connection of the replica gets the setting.
    sql(
        &admin,
        &format!(
            "ALTER DATABASE {} SET default_transaction_read_only = on",
            db.name
        ),
    );
    cut_connections(&admin, &replica_id);
    let mut refused_read_only = 0;
    for _ in 0..4 {
        id += 1;
        let path = format!("ro-{id}.txt");
        let answer = write(&rt, &mut r, id, &path);
        assert_eq!(code_of(&answer), "ABORTED_BEFORE_DISPATCH", "{answer}");
        assert!(!ws.join(&path).exists());
        // The first call after the cut may meet the closed connection instead.
        let text = text_of(&answer);
        if text.contains("read-only") && text.contains("SQLSTATE 25006") {
            refused_read_only += 1;
        } else {
            // Closed under the engine, or terminated by the administrator as it spoke.
            assert!(
                text.contains("connection to PostgreSQL was lost")
                    || text.contains("SQLSTATE 57P01"),
                "{text}"
            );
        }
    }
    assert!(refused_read_only >= 3, "{refused_read_only}");
    sql(
        &admin,
        &format!(
            "ALTER DATABASE {} SET default_transaction_read_only = off",
            db.name
        ),
    );
    cut_connections(&admin, &replica_id);
    write_until_served(&rt, &mut r, &ws, &mut id, "after-read-only");

    // The connection dropped before the intent commit: aborted, or served on a new
    // connection; served again in any case.
    for _ in 0..3 {
        cut_connections(&admin, &replica_id);
        write_until_served(&rt, &mut r, &ws, &mut id, "after-cut");
    }

    r.kill();
    check_log(&cluster.recover_all());
}

#[test]
fn a_connection_dropped_while_the_body_runs_finishes_or_is_unknown_never_both() {
    let Some(admin) = super::replica::pg_url() else {
        return;
    };
    let dir = crate::support::tempdir();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let cluster = Cluster {
        url: admin.clone(),
        log: unique("cut-body"),
        ws,
        lease_ms: 1000,
        args: Vec::new(),
    };
    let replica_id = unique("cut-body-r");
    let mut r = {
        // The body announces itself (and carries on) through the crash point.
        let policy = allow_policy(dir.path());
        let mut c = cluster.command(
            &replica_id,
            &[
                "serve",
                "--http",
                "127.0.0.1:0",
                "--policy",
                policy.to_str().unwrap(),
            ],
        );
        c.env("TOOLHOST_TEST_PAUSE_AT", "during-body");
        Replica::spawn(c, &replica_id)
    };
    let addr = r.wait_listening();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let answer = rt.spawn(call(addr, 1, "sleep", json!({"ms": 1500})));
    let deadline = Instant::now() + WAIT;
    while !r.stderr().contains("toolhost-paused:during-body") {
        assert!(Instant::now() < deadline, "the body never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The intent is durable and the body runs: cut the replica off the database.
    assert!(cut_connections(&admin, &replica_id) >= 1);
    let answer = rt.block_on(answer).unwrap();
    // The client's answer says what the body did; the log resolves the call once.
    r.kill();
    let events = cluster.recover_all();
    check_log(&events);
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool/result")
        .collect();
    assert_eq!(results.len(), 1, "{events:?}");
    let code = &results[0]["payload"]["error"]["code"];
    assert!(
        code.is_null() || code == "TOOL_OUTCOME_UNKNOWN",
        "{:?}",
        results[0]
    );
    if let Ok(a) = answer {
        assert_eq!(a["result"]["isError"], false, "{a}");
    }
    eprintln!(
        "cut while the body ran: the call {}",
        if code.is_null() {
            "finished"
        } else {
            "was recovered as unknown"
        }
    );
}

/// A PostgreSQL server of this test alone (`scripts/pg-test-server` on a directory and
/// port of its own, so that restarting it disturbs no other test), stopped on drop.
struct PrivateServer {
    dir: tempfile::TempDir,
    port: u16,
}

impl PrivateServer {
    fn script(&self, action: &str) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/pg-test-server");
        let out = std::process::Command::new(script)
            .arg(action)
            .env("TOOLHOST_PG_DIR", self.dir.path().join("pg"))
            .env("TOOLHOST_PG_PORT", self.port.to_string())
            .output()
            .unwrap();
        assert!(out.status.success(), "pg-test-server {action}: {out:?}");
    }

    fn start() -> PrivateServer {
        let dir = crate::support::tempdir();
        // As root the server runs as `postgres`, which must reach its directory.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = PrivateServer { dir, port };
        server.script("start");
        server
    }

    fn url(&self) -> String {
        format!("postgres://toolhost@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.script("stop");
    }
}

#[test]
fn a_database_restarted_while_calls_run_keeps_the_log_consistent_and_serving_resumes() {
    // Runs wherever the shared test server runs: the binaries are the same.
    if super::replica::pg_url().is_none() {
        return;
    }
    let server = PrivateServer::start();
    let dir = crate::support::tempdir();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let cluster = Cluster {
        url: server.url(),
        log: "default".into(),
        ws: ws.clone(),
        lease_ms: 2000,
        args: vec![
            "--policy".into(),
            allow_policy(dir.path()).display().to_string(),
        ],
    };
    let mut r = Replica::start(&cluster, "restart-r");
    let addr = r.wait_listening();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ok_after = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let restarted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    use std::sync::atomic::Ordering;
    let clients: Vec<_> = (0..3u64)
        .map(|c| {
            let (stop, ok_after, restarted) = (stop.clone(), ok_after.clone(), restarted.clone());
            rt.spawn(async move {
                let mut seen = Vec::new();
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let path = format!("c{c}-{n}.txt");
                    let after = restarted.load(Ordering::SeqCst);
                    let answer = call(
                        addr,
                        c * 1_000_000 + n,
                        "write_file",
                        json!({"path": path, "content": "x"}),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("{path}: no answer: {e}"));
                    if after && answer["result"]["isError"] == false {
                        ok_after.fetch_add(1, Ordering::SeqCst);
                    }
                    seen.push((path, answer));
                }
                seen
            })
        })
        .collect();
    let deadline = Instant::now() + WAIT;
    while std::fs::read_dir(&ws).unwrap().count() < 6 {
        assert!(Instant::now() < deadline, "no calls before the restart");
        std::thread::sleep(Duration::from_millis(5));
    }
    // As in a crash: immediate shutdown, no checkpoint; then up again.
    server.script("restart");
    restarted.store(true, Ordering::SeqCst);
    while ok_after.load(Ordering::SeqCst) < 6 {
        assert!(
            Instant::now() < deadline,
            "the replica did not serve again after the restart:\n{}",
            r.stderr()
        );
        assert!(!r.exited(), "the replica exited:\n{}", r.stderr());
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::SeqCst);
    let mut refused = 0;
    for c in clients {
        for (path, answer) in rt.block_on(c).unwrap() {
            if answer["result"]["isError"] == false {
                assert!(ws.join(&path).exists(), "{path}");
            } else {
                assert_eq!(code_of(&answer), "ABORTED_BEFORE_DISPATCH", "{answer}");
                assert!(!ws.join(&path).exists(), "{path}: aborted but written");
                refused += 1;
            }
        }
    }
    r.kill();
    let events = cluster.recover_all();
    check_log(&events);
    // Every file written has its durable intent.
    let with_intent: std::collections::HashSet<String> = events
        .iter()
        .filter(|e| e["kind"] == "tool/intent")
        .filter_map(|e| e["payload"]["args"]["path"].as_str().map(str::to_string))
        .collect();
    for entry in std::fs::read_dir(&ws).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            with_intent.contains(&name),
            "{name} without a durable intent"
        );
    }
    eprintln!("database restart: {refused} calls refused while it was down");
}
