//! Durable calls per second on the session log: redb (a state directory) beside
//! PostgreSQL with 1, 2 and 4 replicas, for 1, 8 and 32 concurrent clients.
//!
//! One "call" is what the pipeline writes for a call that runs: its `tool/call` and
//! `tool/intent` in one durable commit, then its `tool/result` lazily. Replicas are
//! engines with identities of their own, each with its connection and worker, as separate
//! processes would be to the database. Clients are spread over the replicas. The
//! replicas share one log (one session, one total order), or each has its own (sessions
//! partitioned across replicas).
//!
//! Run: `scripts/bench-log` (starts the test server) or, with `TOOLHOST_TEST_PG_URL`
//! set, `cargo bench -p toolhost-log --bench durable_appends --features postgres`.
//! `BENCH_SECS` sets the seconds per configuration (default 3).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on a set-up error"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolhost_log::{Durability, EventKind, NewEvent, PgEngine, PgOptions, SessionLog};

struct Run {
    calls: u64,
    secs: f64,
    latencies_us: Vec<u64>,
    /// Commits and synchronous commits during the run (PostgreSQL).
    commits: Option<(u64, u64)>,
}

fn call_events(id: &str) -> (NewEvent, NewEvent, NewEvent) {
    (
        NewEvent::new(
            id,
            EventKind::ToolCall,
            json!({ "tool": "read_file", "args": { "path": id } }),
        ),
        NewEvent::new(
            id,
            EventKind::ToolIntent,
            json!({ "tool": "read_file", "mode": "read-only" }),
        ),
        NewEvent::new(
            id,
            EventKind::ToolResult,
            json!({ "status": "ok", "content": [{ "type": "text", "text": "done" }] }),
        ),
    )
}

/// Runs `clients` threads against `logs` (client i uses log i % len) for `secs`.
fn drive(logs: &[Arc<SessionLog>], clients: usize, secs: f64) -> (u64, f64, Vec<u64>) {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let log = logs[c % logs.len()].clone();
            std::thread::spawn(move || {
                let mut lat = Vec::new();
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let id = format!("c{c}-{i}");
                    let (call, intent, result) = call_events(&id);
                    let t = Instant::now();
                    log.record_intents_after(&[call], &[intent]).unwrap();
                    lat.push(t.elapsed().as_micros() as u64);
                    log.append(&[result], Durability::Lazy).unwrap();
                    i += 1;
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in threads {
        all.extend(t.join().unwrap());
    }
    (all.len() as u64, start.elapsed().as_secs_f64(), all)
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn report(engine: &str, replicas: usize, clients: usize, mut run: Run) {
    run.latencies_us.sort_unstable();
    let per_s = run.calls as f64 / run.secs;
    let per_call = |c: u64| c as f64 / run.calls.max(1) as f64;
    let commits = run.commits.map_or("- | -".to_string(), |(all, durable)| {
        format!("{:.2} | {:.2}", per_call(all), per_call(durable))
    });
    println!(
        "| {engine} | {replicas} | {clients} | {per_s:.0} | {:.2} | {:.2} | {commits} |",
        pct(&run.latencies_us, 0.5),
        pct(&run.latencies_us, 0.99),
    );
}

fn main() {
    let secs: f64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    println!(
        "| engine | replicas | clients | durable calls/s | p50 ms | p99 ms | commits/call | synchronous commits/call |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for clients in [1, 8, 32] {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(SessionLog::open(dir.path()).unwrap());
        let (calls, secs, latencies_us) = drive(&[log], clients, secs);
        report(
            "redb",
            1,
            clients,
            Run {
                calls,
                secs,
                latencies_us,
                commits: None,
            },
        );
    }
    let Ok(url) = std::env::var("TOOLHOST_TEST_PG_URL") else {
        println!("(TOOLHOST_TEST_PG_URL unset: PostgreSQL not measured)");
        return;
    };
    let stamp = std::process::id();
    // One shared log (one session: a total order, one row lock), then one log per
    // replica (sessions partitioned: no lock shared between replicas).
    let configs = [
        (1, 1, false),
        (1, 8, false),
        (1, 32, false),
        (2, 1, false),
        (2, 8, false),
        (2, 32, false),
        (4, 1, false),
        (4, 8, false),
        (4, 32, false),
        (2, 32, true),
        (4, 32, true),
    ];
    for (replicas, clients, partitioned) in configs {
        {
            let name = format!("bench-{stamp}-{replicas}-{clients}-{partitioned}");
            let mut stats = Vec::new();
            let logs: Vec<Arc<SessionLog>> = (0..replicas)
                .map(|r| {
                    let engine = PgEngine::open(
                        &url,
                        &PgOptions {
                            log: if partitioned {
                                format!("{name}-{r}")
                            } else {
                                name.clone()
                            },
                            schema: "toolhost_bench".to_string(),
                            replica: format!("bench-{r}"),
                            ..PgOptions::default()
                        },
                    )
                    .unwrap();
                    stats.push(engine.stats_handle());
                    Arc::new(SessionLog::from_engine(engine))
                })
                .collect();
            let count = |stats: &[toolhost_log::PgStatsHandle]| {
                stats.iter().fold((0, 0), |(a, d), s| {
                    let now = s.get();
                    (a + now.commits, d + now.durable_commits)
                })
            };
            let before = count(&stats);
            let (calls, secs, latencies_us) = drive(&logs, clients, secs);
            let after = count(&stats);
            report(
                if partitioned {
                    "postgres, a log per replica"
                } else {
                    "postgres, one shared log"
                },
                replicas,
                clients,
                Run {
                    calls,
                    secs,
                    latencies_us,
                    commits: Some((after.0 - before.0, after.1 - before.1)),
                },
            );
        }
    }
}
