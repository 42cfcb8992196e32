//! The toolhost benchmark: every cost of a governed call, and the
//! alternatives users would otherwise pick, measured in one run.
//!
//! Run: `cargo bench -p toolhost --bench pipeline --features bench-internals` (add `-- --json` for one
//! JSON object; `-- --quick` for fewer iterations; `-- --languages-only` for
//! section 9 alone). Figures are medians and
//! percentiles of many iterations, reported with their targets; nothing here
//! asserts a timing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark fails loudly and prints its report"
)]

use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost::log::{CountingStorage, FileStorage, SessionLog, SyncCounter};
use toolhost::{CallRequest, Host, HostBuilder, Limits, Runtime, RuntimeOptions, SandboxMode};

/// Components compiled by `rt` so far.
fn compiles(rt: &Runtime) -> u64 {
    rt.cache_stats()
        .compiles
        .load(std::sync::atomic::Ordering::Relaxed)
}

struct Stats {
    p50: f64,
    p99: f64,
    mean: f64,
    n: usize,
}

fn stats(mut us: Vec<f64>) -> Stats {
    us.sort_by(|a, b| a.total_cmp(b));
    let n = us.len();
    let pct = |p: f64| us[((n as f64 - 1.0) * p).round() as usize];
    Stats {
        p50: pct(0.5),
        p99: pct(0.99),
        mean: us.iter().sum::<f64>() / n as f64,
        n,
    }
}

fn js(s: &Stats) -> Value {
    json!({ "p50_us": round(s.p50), "p99_us": round(s.p99), "mean_us": round(s.mean), "n": s.n })
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

struct Ctx {
    quick: bool,
    cache: tempfile::TempDir,
    workspace: tempfile::TempDir,
}

impl Ctx {
    /// A fresh compile cache and a workspace holding `file4k.txt` (4 KiB).
    fn new(quick: bool) -> Ctx {
        let cache = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let text: String = "toolhost benchmark line of text.\n".repeat(4096 / 32);
        std::fs::write(workspace.path().join("file4k.txt"), &text[..4096]).unwrap();
        Ctx {
            quick,
            cache,
            workspace,
        }
    }

    fn iters(&self, full: usize) -> usize {
        if self.quick {
            (full / 10).max(20)
        } else {
            full
        }
    }

    fn options(&self) -> RuntimeOptions {
        RuntimeOptions {
            cache_dir: Some(self.cache.path().to_path_buf()),
            max_concurrent_calls: 64,
            ..RuntimeOptions::default()
        }
    }

    async fn host(&self, runtime: Arc<Runtime>, log: Option<Arc<SessionLog>>) -> Host {
        let mut b = HostBuilder::new();
        b.runtime(runtime)
            .embedded_tools()
            .tool_file(env!("TOOLHOST_BENCH_GUEST"))
            .workspace(self.workspace.path());
        if let Some(log) = log {
            b.session_log(log);
        }
        b.build().await.unwrap()
    }
}

fn noop() -> CallRequest {
    CallRequest::new("noop", json!({})).mode(SandboxMode::None)
}

/// The no-op tool that declares writes, granted a writable workspace: its
/// intent is durable (a read-only call's is not, see
/// `toolhost::runtime::needs_durable_intent`).
fn noop_write_grant() -> CallRequest {
    CallRequest::new("noop_write", json!({})).mode(SandboxMode::WorkspaceWrite)
}

fn read4k() -> CallRequest {
    CallRequest::new("read_file", json!({"path": "file4k.txt"})).mode(SandboxMode::ReadOnly)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--memory-child") {
        println!("{}", memory_child().await);
        return;
    }
    let as_json = args.iter().any(|a| a == "--json");
    let quick = args.iter().any(|a| a == "--quick");
    if args.iter().any(|a| a == "--network-only") {
        println!("{}", network(quick).await);
        return;
    }
    if args.iter().any(|a| a == "--file-access-only") {
        println!("{}", file_access(&Ctx::new(quick)).await);
        return;
    }
    if args.iter().any(|a| a == "--languages-only") {
        println!("{}", languages(&Ctx::new(quick)).await);
        return;
    }
    let ctx = Ctx::new(quick);

    let mut report = serde_json::Map::new();
    report.insert("machine".into(), machine());

    let runtime = Arc::new(Runtime::new(ctx.options()).unwrap());
    let host = ctx.host(runtime.clone(), None).await;

    // 1. Instantiation of a pre-compiled tool.
    let noop_component = host
        .tools(None)
        .into_iter()
        .find(|t| t.descriptor.name == "noop")
        .unwrap()
        .component()
        .unwrap()
        .clone();
    let mut samples = Vec::new();
    for i in 0..ctx.iters(5000) + 200 {
        let t = Instant::now();
        runtime.bench_instantiate(&noop_component).await.unwrap();
        if i >= 200 {
            samples.push(us(t.elapsed()));
        }
    }
    let inst = stats(samples);
    report.insert(
        "instantiate".into(),
        json!({ "stats": js(&inst), "target_p50_us": 15.0, "met": inst.p50 <= 15.0 }),
    );

    // 2. A warm governed call through the whole pipeline, non-durable log.
    let warm = timed_calls(&host, noop, ctx.iters(5000)).await;
    report.insert(
        "governed_call_in_memory_log".into(),
        json!({ "tool": "noop", "stats": js(&warm), "target_p50_us": 100.0, "target_p99_us": 250.0,
                "met": warm.p50 <= 100.0 && warm.p99 <= 250.0 }),
    );

    // 2b. Where the warm call's time goes: the body alone (fresh store,
    //     instantiate, invoke) and one session-log append of each kind.
    let mut body = Vec::new();
    for i in 0..ctx.iters(3000) + 100 {
        let t = Instant::now();
        let (outcome, _) = runtime.bench_invoke(&noop_component, "noop", "{}").await;
        if i >= 100 {
            body.push(us(t.elapsed()));
        }
        assert!(matches!(outcome, toolhost::runtime::BodyOutcome::Ok { .. }));
    }
    let body = stats(body);
    let file_dir = tempfile::tempdir().unwrap();
    let file_log = SessionLog::open(file_dir.path()).unwrap();
    let mut durable_file = Vec::new();
    for _ in 0..ctx.iters(1000) {
        let e = vec![toolhost::log::NewEvent::new(
            "call-x",
            toolhost::log::EventKind::ToolIntent,
            json!({"tool": "noop", "args": {}, "mode": "none"}),
        )];
        let t = Instant::now();
        file_log.record_intents(&e).unwrap();
        durable_file.push(us(t.elapsed()));
    }
    let durable_file = stats(durable_file);
    let mut lazy_file = Vec::new();
    for _ in 0..ctx.iters(1000) {
        let e = vec![toolhost::log::NewEvent::new(
            "call-x",
            toolhost::log::EventKind::ToolResult,
            json!({"status": "ok", "canonical": {"value": 0}}),
        )];
        let t = Instant::now();
        file_log
            .append(&e, toolhost::log::Durability::Lazy)
            .unwrap();
        lazy_file.push(us(t.elapsed()));
    }
    let lazy_file = stats(lazy_file);
    let mem_log = SessionLog::in_memory().unwrap();
    let event = || {
        vec![toolhost::log::NewEvent::new(
            "call-x",
            toolhost::log::EventKind::ToolCall,
            json!({"tool": "noop", "args": {}, "mode": "none"}),
        )]
    };
    let mut lazy = Vec::new();
    let mut durable_mem = Vec::new();
    for _ in 0..ctx.iters(3000) {
        let t = Instant::now();
        mem_log
            .append(&event(), toolhost::log::Durability::Lazy)
            .unwrap();
        lazy.push(us(t.elapsed()));
        let t = Instant::now();
        mem_log
            .append(&event(), toolhost::log::Durability::Durable)
            .unwrap();
        durable_mem.push(us(t.elapsed()));
    }
    report.insert(
        "breakdown".into(),
        json!({ "body_only": js(&body), "log_append_lazy_in_memory": js(&stats(lazy)),
                "log_append_commit_in_memory": js(&stats(durable_mem)),
                "log_intent_commit_durable_file": js(&durable_file),
                "log_result_commit_lazy_file": js(&lazy_file),
                "pipeline_minus_body_p50_us": round(warm.p50 - body.p50) }),
    );

    // 3. A durable call (a write grant: a read-only call's intent is lazy):
    //    fdatasyncs per call and latency against a raw write + fdatasync of
    //    the same size, in the same run.
    let state = tempfile::tempdir().unwrap();
    // The log as `SessionLog::open` builds it (database + intent journal), with both
    // files' fsyncs counted.
    let storage =
        CountingStorage::new(FileStorage::open(&state.path().join("session.redb")).unwrap());
    let journal =
        CountingStorage::new(FileStorage::open(&state.path().join("session.wal")).unwrap());
    let counter = Counters(storage.counter(), journal.counter());
    let log = Arc::new(SessionLog::open_with_journal(storage, journal).unwrap());
    let durable_host = Arc::new(ctx.host(runtime.clone(), Some(log.clone())).await);
    let n = ctx.iters(1000);
    let bytes0 = counter.1.bytes_written();
    for _ in 0..50 {
        durable_host.call(noop_write_grant()).await;
    }
    // What one call writes to the journal: its record (the call, the intent
    // and the previous call's result). The raw writes below write as much.
    let record = ((counter.1.bytes_written() - bytes0) / 50) as usize;
    // Paired: each durable call is followed by one raw write + fdatasync of
    // each kind, so that all three see the same disk at the same time.
    let mut append = RawAppend::new(state.path(), record);
    let mut overwrite = RawOverwrite::new(state.path(), record, n + warm_ups(n));
    let (f0, g0, j0) = (counter.fsyncs(), counter.grows(), counter.1.fsyncs());
    let (mut durable, mut raw, mut raw_overwrite) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n + warm_ups(n) {
        let t = Instant::now();
        let r = durable_host.call(noop_write_grant()).await;
        let took = us(t.elapsed());
        assert!(r.is_ok(), "{r:?}");
        let (a, o) = (append.once(), overwrite.once());
        if i >= warm_ups(n) {
            durable.push(took);
            raw.push(a);
            raw_overwrite.push(o);
        }
    }
    let (f1, g1, j1) = (counter.fsyncs(), counter.grows(), counter.1.fsyncs());
    let (durable, raw, raw_overwrite) = (stats(durable), stats(raw), stats(raw_overwrite));
    let calls = (n + warm_ups(n)) as u64;
    let fsyncs_per_call = (f1 - f0) as f64 / calls as f64;
    let grows = g1 - g0;
    // The intent's fsyncs (the journal's: exactly one per call), and the
    // database's, which only checkpoints cause (after a body, amortised).
    let journal_fsyncs = j1 - j0;
    let checkpoint_fsyncs = (f1 - f0) - journal_fsyncs;
    let over = durable.p50 - raw.p50;
    let over_overwrite = durable.p50 - raw_overwrite.p50;
    report.insert(
        "durable_call".into(),
        json!({ "tool": "noop_write (workspace-write)", "stats": js(&durable), "fsyncs_per_call": (fsyncs_per_call * 1000.0).round() / 1000.0,
                "intent_fsyncs": journal_fsyncs, "checkpoint_fsyncs": checkpoint_fsyncs,
                "file_growths": grows, "record_bytes": record,
                "raw_write_fdatasync": js(&raw), "p50_over_raw_us": round(over),
                "raw_overwrite_preallocated_fdatasync": js(&raw_overwrite),
                "p50_over_raw_overwrite_us": round(over_overwrite), "target_over_raw_us": 100.0,
                "calls_counted": calls,
                "met": over <= 100.0 && over_overwrite <= 100.0 && journal_fsyncs == calls }),
    );

    // 3b. Group commit: 8 durable calls at once, from 8 tasks. fsyncs per
    //     call (target <= 0.5) and the time of a round of 8.
    let rounds = ctx.iters(200);
    let (f0, j0) = (counter.fsyncs(), counter.1.fsyncs());
    let mut round_us = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let host = durable_host.clone();
                tokio::spawn(async move { host.call(noop_write_grant()).await })
            })
            .collect();
        for task in tasks {
            let r = task.await.unwrap();
            assert!(r.is_ok(), "{r:?}");
        }
        round_us.push(us(t.elapsed()));
    }
    let calls = (rounds * 8) as f64;
    let per_call = (counter.1.fsyncs() - j0) as f64 / calls;
    let all_per_call = (counter.fsyncs() - f0) as f64 / calls;
    let rounds8 = stats(round_us);
    report.insert(
        "concurrent_durable8".into(),
        json!({ "tool": "noop_write (workspace-write)", "round_of_8": js(&rounds8),
                "calls_per_s": round(8.0 / (rounds8.p50 / 1e6)),
                "intent_fsyncs_per_call": (per_call * 1000.0).round() / 1000.0,
                "all_fsyncs_per_call": (all_per_call * 1000.0).round() / 1000.0,
                "target_fsyncs_per_call": 0.5, "met": all_per_call <= 0.5 }),
    );

    // 4. A batch of 16 concurrency-safe read-only calls: fsyncs and
    //    throughput against 16 sequential calls (read-only: their intents
    //    are lazy, so neither syncs).
    let rounds = ctx.iters(100);
    let mut batch_us = Vec::new();
    let mut seq_us = Vec::new();
    let mut batch_fsyncs = Vec::new();
    for _ in 0..rounds {
        let f = counter.fsyncs();
        let t = Instant::now();
        let results = durable_host
            .call_batch((0..16).map(|_| read4k()).collect())
            .await;
        batch_us.push(us(t.elapsed()));
        batch_fsyncs.push(counter.fsyncs() - f);
        assert!(
            results.iter().all(|r| r.is_ok()),
            "{:?}",
            results.iter().find(|r| !r.is_ok())
        );
        let t = Instant::now();
        for _ in 0..16 {
            assert!(durable_host.call(read4k()).await.is_ok());
        }
        seq_us.push(us(t.elapsed()));
    }
    let b = stats(batch_us);
    let s = stats(seq_us);
    let max_fsyncs = batch_fsyncs.iter().copied().max().unwrap_or(0);
    batch_fsyncs.sort_unstable();
    report.insert(
        "batch16".into(),
        json!({ "tool": "read_file (4 KiB)", "batch": js(&b), "sequential": js(&s),
                "fsyncs_per_batch_median": batch_fsyncs[batch_fsyncs.len() / 2], "fsyncs_per_batch_max": max_fsyncs,
                "throughput_ratio": round(s.p50 / b.p50 * 100.0) / 100.0, "target_fsyncs": 2, "met": max_fsyncs <= 2 }),
    );

    // 5. Loading 10 tools from the compile cache vs compiling them.
    let tools: Vec<(String, Vec<u8>)> = toolhost::EMBEDDED_TOOLS
        .iter()
        .map(|(n, b)| (n.to_string(), b.to_vec()))
        .cycle()
        .take(10)
        .collect();
    let cold = load_all(&tools, None).await;
    let warm_dir = tempfile::tempdir().unwrap();
    load_all(&tools, Some(warm_dir.path())).await; // fill the cache
    // Each from a fresh runtime, the median of several rounds: one after the
    // other, and all at once as `HostBuilder::build` loads them.
    let mut sequential = Vec::new();
    let mut concurrent = Vec::new();
    let mut compiles_when_cached = 0;
    let fresh_runtime = || {
        Arc::new(
            Runtime::new(RuntimeOptions {
                cache_dir: Some(warm_dir.path().to_path_buf()),
                ..RuntimeOptions::default()
            })
            .unwrap(),
        )
    };
    for _ in 0..if ctx.quick { 3 } else { 7 } {
        let rt = fresh_runtime();
        let t = Instant::now();
        for (name, bytes) in &tools {
            rt.bench_load(name, bytes).await.unwrap();
        }
        sequential.push(t.elapsed().as_secs_f64() * 1e3 / 10.0);
        let rt2 = fresh_runtime();
        let t = Instant::now();
        let tasks: Vec<_> = tools
            .iter()
            .cloned()
            .map(|(name, bytes)| {
                let rt = rt2.clone();
                tokio::spawn(async move { rt.bench_load(&name, &bytes).await.map(|_| ()) })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        concurrent.push(t.elapsed().as_secs_f64() * 1e3 / 10.0);
        compiles_when_cached += compiles(&rt) + compiles(&rt2);
    }
    let cached = stats(sequential).p50;
    let cached_concurrent = stats(concurrent).p50;
    let calls_compiles = {
        let before = compiles(&runtime);
        for _ in 0..100 {
            host.call(noop()).await;
        }
        compiles(&runtime) - before
    };
    report.insert(
        "load10".into(),
        json!({ "compile_ms_per_tool": round(cold.as_secs_f64() * 1e3 / 10.0),
                "cached_ms_per_tool": (cached * 100.0).round() / 100.0, "cached_concurrent_ms_per_tool": (cached_concurrent * 100.0).round() / 100.0,
                "compiles_when_cached": compiles_when_cached, "compiles_on_call_path_per_100_calls": calls_compiles,
                "speedup": round(cold.as_secs_f64() * 1e3 / 10.0 / cached), "target_ms_per_tool": 1.0,
                "met": cached <= 1.0 && calls_compiles == 0 }),
    );

    // 6. Epoch-only and fuel+epoch overhead against an unmetered run.
    let workloads = [("fib", 27u64), ("hash", 20_000_000), ("sort", 400_000)];
    let mut overhead = serde_json::Map::new();
    let unmetered = metered_host(&ctx, false, true).await;
    let epoch = metered_host(&ctx, false, false).await;
    let fuel = metered_host(&ctx, true, false).await;
    for (tool, n) in workloads {
        let req = move || CallRequest::new(tool, json!({ "n": n })).mode(SandboxMode::None);
        let k = ctx.iters(30).min(30);
        let u = timed_calls(&unmetered, req, k).await;
        let e = timed_calls(&epoch, req, k).await;
        let f = timed_calls(&fuel, req, k).await;
        overhead.insert(
            tool.into(),
            json!({ "n": n, "unmetered_ms": round(u.p50 / 1e3), "epoch_ms": round(e.p50 / 1e3), "fuel_epoch_ms": round(f.p50 / 1e3),
                    "epoch_overhead_pct": round((e.p50 / u.p50 - 1.0) * 100.0), "fuel_overhead_pct": round((f.p50 / u.p50 - 1.0) * 100.0) }),
        );
    }
    report.insert("metering".into(), Value::Object(overhead));

    // 7. Memory: resident memory with 10 tools loaded and idle, and per
    //    concurrent call. Measured in a child process of its own, so that
    //    the runtimes of the other sections are not counted.
    drop(durable_host);
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .arg("--memory-child")
        .env("TOOLHOST_BENCH_CACHE", ctx.cache.path())
        .env("TOOLHOST_BENCH_WS", ctx.workspace.path())
        .output()
        .unwrap();
    assert!(
        child.status.success(),
        "{}",
        String::from_utf8_lossy(&child.stderr)
    );
    let memory: Value = serde_json::from_slice(&child.stdout).unwrap();
    report.insert("memory".into(), memory);

    // 8. The alternatives, on the same work: read a 4 KiB file and return it.
    let th = timed_calls(&host, read4k, ctx.iters(2000)).await;
    let file = ctx.workspace.path().join("file4k.txt");
    let cat = spawn_stats(ctx.iters(500), || {
        let mut c = std::process::Command::new("/bin/cat");
        c.arg(&file);
        c
    });
    let bwrap_path = which("bwrap");
    let bwrap = bwrap_path.as_ref().map(|bw| {
        spawn_stats(ctx.iters(500), || {
            let mut c = std::process::Command::new(bw);
            c.args([
                "--ro-bind",
                "/usr",
                "/usr",
                "--ro-bind",
                "/lib",
                "/lib",
                "--ro-bind",
                "/lib64",
                "/lib64",
                "--ro-bind",
                "/bin",
                "/bin",
            ])
            .arg("--ro-bind")
            .arg(ctx.workspace.path())
            .arg("/work")
            .args([
                "--unshare-all",
                "--die-with-parent",
                "/bin/cat",
                "/work/file4k.txt",
            ]);
            c
        })
    });
    report.insert(
        "alternatives".into(),
        json!({ "toolhost_read_file": js(&th), "spawn_cat": js(&cat), "spawn_bwrap_cat": bwrap.as_ref().map(js),
                "cat_over_toolhost": round(cat.p50 / th.p50 * 100.0) / 100.0,
                "bwrap_over_toolhost": bwrap.as_ref().map(|b| round(b.p50 / th.p50 * 100.0) / 100.0),
                "bwrap_available": bwrap.is_some() }),
    );

    // 9. Tools written in other languages, built by their toolchains,
    //    beside a Rust tool: load (compile, and from the cache),
    //    instantiation, the body alone and a warm governed call. In a
    //    process of its own (`--languages-only`, which also runs it alone),
    //    so that the runtimes and threads of the sections above are not in it.
    report.insert(
        "languages".into(),
        section_in_child("--languages-only", ctx.quick),
    );

    // 10. Network egress: a governed GET of 4 KiB from a loopback server
    //     through `http_fetch`, against the same request by a native Rust
    //     client, and the cost of the decision and address check alone.
    //     In a process of its own (`--network-only`) like section 9.
    report.insert(
        "network".into(),
        section_in_child("--network-only", ctx.quick),
    );

    let report = Value::Object(report);
    if as_json {
        println!("{report}");
    } else {
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
    }
}

/// Runs this benchmark again as a child process with `flag` (one section
/// alone, without the runtimes and threads of the others) and returns the
/// JSON it prints.
fn section_in_child(flag: &str, quick: bool) -> Value {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child.arg(flag);
    if quick {
        child.arg("--quick");
    }
    let child = child.output().unwrap();
    assert!(
        child.status.success(),
        "{flag}: {}",
        String::from_utf8_lossy(&child.stderr)
    );
    serde_json::from_slice(&child.stdout).unwrap()
}

/// A loopback HTTP/1.1 server for section 10: answers every request with
/// 200 and a 4 KiB body, one connection per request (`connection: close`),
/// a thread per connection. Returns its port.
fn loopback_4k_server() -> u16 {
    use std::io::{BufRead, BufReader};
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let body = "x".repeat(4096);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let body = body.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line == "\r\n" {
                        break;
                    }
                    line.clear();
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(body.as_bytes());
            });
        }
    });
    port
}

/// The same GET by a plain Rust client: connect, send, read to the end.
fn native_get(port: u16) -> usize {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .write_all(b"GET /4k HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut response = Vec::with_capacity(8192);
    stream.read_to_end(&mut response).unwrap();
    response.len()
}

/// The same GET by hyper's HTTP/1 client on the calling task: the stack
/// the host's own client is built on (tokio connect, handshake, the
/// connection driven by a task of its own, the body collected).
async fn native_hyper_get(port: u16) -> usize {
    use http_body_util::BodyExt;
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    let conn = tokio::spawn(conn);
    let req = hyper::Request::get("/4k")
        .header("host", format!("127.0.0.1:{port}"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let _ = conn.await;
    body.len()
}

/// Section 10.
async fn network(quick: bool) -> Value {
    use toolhost::policy::egress::{Grant, NetworkPolicy, Request, StaticResolver, connect_plan};
    let port = loopback_4k_server();
    let n = if quick { 100 } else { 1000 };
    // Governed: http_fetch with an explicit grant of the loopback server.
    let workspace = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let policy = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"http://127.0.0.1:{port}\"]\n"
    );
    let mut b = HostBuilder::new();
    b.runtime_options(RuntimeOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeOptions::default()
    })
    .embedded_tools()
    .workspace(workspace.path())
    .policy(toolhost::policy::Policy::from_toml(&policy, "bench.toml").unwrap());
    let host = Arc::new(b.build().await.unwrap());
    let url = format!("http://127.0.0.1:{port}/4k");
    let main_thread = network_gets(&host, port, n).await;
    // The same three from inside a runtime task, which is where the MCP
    // server makes its calls (the loops above run on the main thread, in
    // the runtime's block_on).
    let in_task = {
        let host = host.clone();
        tokio::spawn(async move { network_gets(&host, port, n).await.to_json() })
            .await
            .unwrap()
    };

    // The decision and address check alone (no lookup: an IP literal, and
    // a name through an in-memory resolver).
    let grant_policy = NetworkPolicy::from_grants(vec![
        Grant::parse(&format!("http://127.0.0.1:{port}")).unwrap(),
    ]);
    let by_ip = Request::from_url(&url, Some("GET")).unwrap();
    let named = NetworkPolicy::from_grants(vec![Grant::parse("https://api.example.com").unwrap()]);
    let by_name = Request::from_url("https://api.example.com/v1", Some("GET")).unwrap();
    let resolver = StaticResolver::new().with(
        "api.example.com",
        &[
            "93.184.215.14".parse().unwrap(),
            "2606:2800:21f:cb07:6820:80da:af6b:8b2c".parse().unwrap(),
        ],
    );
    let rounds = if quick { 20_000 } else { 200_000 };
    let t = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(connect_plan(&by_ip, &grant_policy, &resolver).unwrap());
    }
    let check_ip_ns = t.elapsed().as_nanos() as f64 / rounds as f64;
    let t = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(connect_plan(&by_name, &named, &resolver).unwrap());
    }
    let check_name_ns = t.elapsed().as_nanos() as f64 / rounds as f64;
    let mut out = main_thread.to_json();
    out["governed_over_native_p50"] =
        json!(round(main_thread.governed.p50 / main_thread.native.p50 * 100.0) / 100.0);
    out["target"] = json!("governed <= native + 150 us at p50");
    out["from_a_task"] = in_task;
    out["decision_and_address_check_ns"] =
        json!({ "ip_literal": round(check_ip_ns), "name_two_addresses": round(check_name_ns) });
    out["iterations"] = json!(n);
    out
}

/// Section 10's three timings, measured where the calling future runs.
struct NetworkGets {
    /// A blocking Rust client on a blocking-pool thread.
    native: Stats,
    /// hyper's client on the calling task.
    native_hyper: Stats,
    /// `http_fetch` through the whole pipeline, the server granted.
    governed: Stats,
    /// The same call to 127.0.0.2, which the policy does not grant:
    /// everything but the exchange, which never starts.
    refused: Stats,
}

impl NetworkGets {
    fn to_json(&self) -> Value {
        json!({
            "governed_http_fetch_get_4k": js(&self.governed),
            "native_rust_get_4k": js(&self.native),
            "native_hyper_get_4k": js(&self.native_hyper),
            "governed_minus_native_hyper_p50_us": round(self.governed.p50 - self.native_hyper.p50),
            "governed_refused_before_connecting": js(&self.refused),
            "governed_minus_native_p50_us": round(self.governed.p50 - self.native.p50),
        })
    }
}

/// `n` native GETs, `n` governed ones through `host` (whose policy grants
/// `http://127.0.0.1:PORT`) and `n` refused ones, each after its warm-up.
async fn network_gets(host: &Host, port: u16, n: usize) -> NetworkGets {
    let fetch = |ip: &str| {
        let url = format!("http://{ip}:{port}/4k");
        move || {
            CallRequest::new("http_fetch", json!({"url": url, "max_body_bytes": 8192}))
                .mode(SandboxMode::None)
        }
    };
    let native_get_timed = || async move {
        let t = Instant::now();
        let got = tokio::task::spawn_blocking(move || native_get(port))
            .await
            .unwrap();
        assert!(got > 4096);
        us(t.elapsed())
    };
    for _ in 0..warm_ups(n) {
        native_get_timed().await;
    }
    let mut native = Vec::with_capacity(n);
    for _ in 0..n {
        native.push(native_get_timed().await);
    }

    for _ in 0..warm_ups(n) {
        assert_eq!(native_hyper_get(port).await, 4096);
    }
    let mut native_hyper = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        assert_eq!(native_hyper_get(port).await, 4096);
        native_hyper.push(us(t.elapsed()));
    }

    let granted = fetch("127.0.0.1");
    let governed = timed_calls(host, &granted, n).await;
    let r = host.call(granted()).await;
    assert_eq!(r.canonical["body"].as_str().map(str::len), Some(4096));

    let refused_req = fetch("127.0.0.2");
    let r = host.call(refused_req()).await;
    assert!(
        !r.receipt.network.is_empty() && r.receipt.network.iter().all(|e| e.status.is_none()),
        "{r:?}"
    );
    let mut refused = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        std::hint::black_box(host.call(refused_req()).await);
        refused.push(us(t.elapsed()));
    }
    NetworkGets {
        native: stats(native),
        native_hyper: stats(native_hyper),
        governed,
        refused: stats(refused),
    }
}

/// One example tool per language for section 9.
struct LanguageExample {
    language: &'static str,
    /// How the component is built.
    built_by: &'static str,
    path: PathBuf,
    tool: &'static str,
    args: Value,
}

/// The Rust bench guest's `noop` (the call with the least work), and each
/// other language's example tool where its build script has built it.
/// Another language's example slots in as one more entry.
fn language_examples() -> Vec<LanguageExample> {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
    vec![
        LanguageExample {
            language: "rust",
            built_by: "cargo (host/build.rs)",
            path: PathBuf::from(env!("TOOLHOST_BENCH_GUEST")),
            tool: "noop",
            args: json!({}),
        },
        LanguageExample {
            language: "python",
            built_by: "scripts/build-python-tools (componentize-py)",
            path: target.join("python-tools/word_count.wasm"),
            tool: "word_count",
            args: json!({"text": "one two three\nfour five\n"}),
        },
        LanguageExample {
            language: "javascript",
            built_by: "scripts/build-js-tools (componentize-js)",
            path: target.join("js-tools/word_stats.wasm"),
            tool: "word_stats",
            args: json!({"text": "one two three\nfour five\n"}),
        },
    ]
}

/// Section 9. A language whose component is not built is reported as
/// missing, with the command that builds it.
async fn languages(ctx: &Ctx) -> Value {
    let mut out = serde_json::Map::new();
    for ex in language_examples() {
        let Ok(bytes) = std::fs::read(&ex.path) else {
            out.insert(
                ex.language.into(),
                json!({ "missing": ex.path.display().to_string(), "build_with": ex.built_by }),
            );
            continue;
        };
        out.insert(ex.language.into(), language(ctx, &ex, &bytes).await);
    }
    Value::Object(out)
}

async fn language(ctx: &Ctx, ex: &LanguageExample, bytes: &[u8]) -> Value {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    // Compile: a fresh runtime without a disk cache, each round.
    let mut compile = Vec::new();
    for _ in 0..if ctx.quick { 1 } else { 3 } {
        let rt = Runtime::new(RuntimeOptions {
            cache_dir: None,
            ..RuntimeOptions::default()
        })
        .unwrap();
        let t = Instant::now();
        rt.bench_load(ex.tool, bytes).await.unwrap();
        compile.push(ms(t.elapsed()));
    }
    // From the cache: a fresh runtime over a filled cache, each round.
    let cache = tempfile::tempdir().unwrap();
    let options = RuntimeOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeOptions::default()
    };
    Runtime::new(options.clone())
        .unwrap()
        .bench_load(ex.tool, bytes)
        .await
        .unwrap();
    let mut cached = Vec::new();
    let mut compiles_when_cached = 0;
    for _ in 0..if ctx.quick { 5 } else { 15 } {
        let rt = Runtime::new(options.clone()).unwrap();
        let t = Instant::now();
        rt.bench_load(ex.tool, bytes).await.unwrap();
        cached.push(ms(t.elapsed()));
        compiles_when_cached += compiles(&rt);
    }
    // Calls: a host with this component alone, the in-memory log.
    let rt = Arc::new(Runtime::new(options).unwrap());
    let mut b = HostBuilder::new();
    b.runtime(rt.clone())
        .tool_file(&ex.path)
        .workspace(ctx.workspace.path());
    let host = b.build().await.unwrap();
    let component = host
        .tools(None)
        .into_iter()
        .find(|t| t.descriptor.name == ex.tool)
        .unwrap()
        .component()
        .unwrap()
        .clone();
    let n = ctx.iters(1000);
    let mut inst = Vec::new();
    for i in 0..n + warm_ups(n) {
        let t = Instant::now();
        rt.bench_instantiate(&component).await.unwrap();
        if i >= warm_ups(n) {
            inst.push(us(t.elapsed()));
        }
    }
    let args = ex.args.to_string();
    let mut body = Vec::new();
    for i in 0..n + warm_ups(n) {
        let t = Instant::now();
        let (outcome, _) = rt.bench_invoke(&component, ex.tool, &args).await;
        if i >= warm_ups(n) {
            body.push(us(t.elapsed()));
        }
        assert!(matches!(outcome, toolhost::runtime::BodyOutcome::Ok { .. }));
    }
    let req = || CallRequest::new(ex.tool, ex.args.clone()).mode(SandboxMode::None);
    let call = timed_calls(&host, req, n).await;
    let receipt = host.call(req()).await.receipt;
    json!({ "tool": ex.tool, "built_by": ex.built_by, "component_bytes": bytes.len(),
            "compile_ms": round(stats(compile).p50), "cached_load_ms": (stats(cached).p50 * 100.0).round() / 100.0,
            "compiles_when_cached": compiles_when_cached,
            "instantiate": js(&stats(inst)), "body_only": js(&stats(body)), "governed_call_in_memory_log": js(&call),
            "call_peak_memory_bytes": receipt.peak_memory_bytes })
}

/// Section 7, in a process of its own: resident memory before anything is
/// loaded, with ten components loaded and idle, and at the peak of 32
/// concurrent calls (with and without file system access).
async fn memory_child() -> Value {
    let cache = PathBuf::from(std::env::var_os("TOOLHOST_BENCH_CACHE").unwrap());
    let ws = PathBuf::from(std::env::var_os("TOOLHOST_BENCH_WS").unwrap());
    let start = rss_bytes();
    let rt = Arc::new(
        Runtime::new(RuntimeOptions {
            cache_dir: Some(cache),
            max_concurrent_calls: 64,
            ..RuntimeOptions::default()
        })
        .unwrap(),
    );
    // Ten loaded components: the host's five example tools, and the same
    // five loaded again under other names (each its own component).
    let mut b = HostBuilder::new();
    b.runtime(rt.clone()).workspace(&ws).embedded_tools();
    let host = b.build().await.unwrap();
    let mut more = Vec::new();
    for (name, bytes) in toolhost::EMBEDDED_TOOLS {
        more.push(
            rt.bench_load(&format!("again:{name}"), bytes)
                .await
                .unwrap(),
        );
    }
    // One call of each kind first, so that one-time set-up is not counted
    // per call.
    for mode in [SandboxMode::None, SandboxMode::ReadOnly] {
        let r = host
            .call(CallRequest::new("sleep", json!({"ms": 1})).mode(mode))
            .await;
        assert!(r.is_ok(), "{r:?}");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let idle = rss_bytes();
    let mut per_call = serde_json::Map::new();
    for (label, mode) in [
        ("none", SandboxMode::None),
        ("read_only", SandboxMode::ReadOnly),
    ] {
        let base = rss_bytes();
        let sampler = tokio::spawn(async {
            let mut peak = 0;
            for _ in 0..40 {
                peak = peak.max(rss_bytes());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            peak
        });
        let calls: Vec<_> = (0..32)
            .map(|_| CallRequest::new("sleep", json!({"ms": 300})).mode(mode))
            .collect();
        let results = host.call_batch(calls).await;
        assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
        let peak = sampler.await.unwrap();
        per_call.insert(
            label.into(),
            json!({ "rss_peak_32_concurrent_calls_mib": mib(peak),
                    "per_concurrent_call_kib": peak.saturating_sub(base) / 32 / 1024 }),
        );
    }
    json!({ "loaded_components": 5 + more.len(), "rss_process_start_mib": mib(start),
            "rss_10_tools_loaded_idle_mib": mib(idle), "host_idle_over_start_mib": mib(idle - start),
            "concurrent_calls": per_call })
}

/// The fsyncs and file growths of the database and the journal together.
struct Counters(SyncCounter, SyncCounter);

impl Counters {
    fn fsyncs(&self) -> u64 {
        self.0.fsyncs() + self.1.fsyncs()
    }

    fn grows(&self) -> u64 {
        self.0.grows() + self.1.grows()
    }
}

fn mib(b: u64) -> f64 {
    round(b as f64 / (1 << 20) as f64)
}

/// How many untimed calls [`timed_calls`] makes before its `n` timed ones.
fn warm_ups(n: usize) -> usize {
    (n / 10).clamp(3, 200)
}

/// What file access costs a call: the no-op tool without a file system,
/// the same tool granted a read-only workspace (the body's own thread and
/// the preopen, no file operation), granted a writable one (and a scratch
/// directory per call), and `read_file` of 4 KiB. In-memory log: no fsync.
async fn file_access(ctx: &Ctx) -> Value {
    let runtime = Arc::new(Runtime::new(ctx.options()).unwrap());
    let host = ctx.host(runtime, None).await;
    let noop_ro = || CallRequest::new("noop", json!({})).mode(SandboxMode::ReadOnly);
    let n = ctx.iters(3000);
    let none = timed_calls(&host, noop, n).await;
    let ro = timed_calls(&host, noop_ro, n).await;
    let write = timed_calls(&host, noop_write_grant, n).await;
    let read = timed_calls(&host, read4k, n).await;
    json!({
        "noop_none": js(&none),
        "noop_read_only": js(&ro),
        "noop_workspace_write": js(&write),
        "read_file_4k": js(&read),
        "read_file_over_noop": round(read.p50 / none.p50 * 100.0) / 100.0,
    })
}

async fn timed_calls(host: &Host, req: impl Fn() -> CallRequest, n: usize) -> Stats {
    for _ in 0..warm_ups(n) {
        let r = host.call(req()).await;
        assert!(r.is_ok(), "{r:?}");
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = host.call(req()).await;
        samples.push(us(t.elapsed()));
        assert!(r.is_ok(), "{r:?}");
    }
    stats(samples)
}

async fn metered_host(ctx: &Ctx, fuel: bool, unmetered: bool) -> Host {
    let rt = Arc::new(
        Runtime::new(RuntimeOptions {
            fuel,
            unmetered_for_benchmarks: unmetered,
            ..ctx.options()
        })
        .unwrap(),
    );
    let mut b = HostBuilder::new();
    b.runtime(rt)
        .tool_file(env!("TOOLHOST_BENCH_GUEST"))
        .workspace(ctx.workspace.path())
        .limits(Limits {
            deadline: Duration::from_secs(120),
            fuel: if fuel { Some(u64::MAX / 2) } else { None },
            ..Limits::default()
        });
    b.build().await.unwrap()
}

async fn load_all(tools: &[(String, Vec<u8>)], cache: Option<&Path>) -> Duration {
    let rt = Runtime::new(RuntimeOptions {
        cache_dir: cache.map(Path::to_path_buf),
        ..RuntimeOptions::default()
    })
    .unwrap();
    let t = Instant::now();
    for (name, bytes) in tools {
        rt.bench_load(name, bytes).await.unwrap();
    }
    t.elapsed()
}

/// A raw append of `size` bytes + `fdatasync` (the file grows each time).
struct RawAppend {
    file: std::fs::File,
    buf: Vec<u8>,
}

impl RawAppend {
    fn new(dir: &Path, size: usize) -> Self {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("raw.bin"))
            .unwrap();
        RawAppend {
            file,
            buf: vec![b'x'; size],
        }
    }

    /// One write + fdatasync; its time in microseconds.
    fn once(&mut self) -> f64 {
        let t = Instant::now();
        self.file.write_all(&self.buf).unwrap();
        self.file.sync_data().unwrap();
        us(t.elapsed())
    }
}

/// A raw write of `size` bytes + `fdatasync` into a file that was
/// zero-filled and synced beforehand (no size change to journal): the
/// cheapest way to make the same bytes durable, and what the intent journal
/// does.
struct RawOverwrite {
    file: std::fs::File,
    buf: Vec<u8>,
    at: u64,
}

impl RawOverwrite {
    fn new(dir: &Path, size: usize, n: usize) -> Self {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(dir.join("raw-prealloc.bin"))
            .unwrap();
        file.write_all_at(&vec![0u8; size * n], 0).unwrap();
        file.sync_all().unwrap();
        RawOverwrite {
            file,
            buf: vec![b'x'; size],
            at: 0,
        }
    }

    /// One write + fdatasync; its time in microseconds.
    fn once(&mut self) -> f64 {
        use std::os::unix::fs::FileExt;
        let t = Instant::now();
        self.file.write_all_at(&self.buf, self.at).unwrap();
        self.file.sync_data().unwrap();
        self.at += self.buf.len() as u64;
        us(t.elapsed())
    }
}

fn spawn_stats(n: usize, cmd: impl Fn() -> std::process::Command) -> Stats {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let out = cmd().output().unwrap();
        samples.push(us(t.elapsed()));
        assert!(
            out.status.success() && out.stdout.len() == 4096,
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    stats(samples)
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        .unwrap_or_default();
    json!({ "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0), "cpu": cpu, "os": std::env::consts::OS })
}
