//! Durability and concurrency of batches: exclusive tools never overlap,
//! concurrency-safe ones do, results are committed in call order whatever
//! order bodies finish in, and a cancelled body really stops.

use crate::common::*;
use std::time::{Duration, Instant};
use toolhost::log::EventKind;
use toolhost::{CallRequest, ErrorCode, Interrupt, Limits, SandboxMode};

toolhost_conformance::foreach_durability!(assert_test_exists);

fn request(tool: &str, args: serde_json::Value, mode: SandboxMode) -> CallRequest {
    CallRequest::new(tool, args).mode(mode)
}

/// The call ids of the `tool/result` events, in log order.
fn result_order(host: &toolhost::Host) -> Vec<String> {
    host.log()
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .map(|e| e.call_id)
        .collect()
}

/// Six calls of a tool that is not concurrency-safe never overlap; the same
/// detector declared concurrency-safe does see the overlap.
#[tokio::test]
async fn durability_overlap() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(probes::DURABILITY_OVERLAP, ws.path(), Limits::default()).await;
    let calls = (0..6)
        .map(|_| {
            request(
                "overlap",
                serde_json::json!({}),
                SandboxMode::WorkspaceWrite,
            )
        })
        .collect();
    let results = host.call_batch(calls).await;
    assert_eq!(results.len(), 6);
    for r in &results {
        assert!(
            r.is_ok(),
            "an exclusive tool overlapped another call: {r:?}"
        );
    }
    assert!(!ws.path().join("overlap.marker").exists());

    // The control: declared concurrency-safe, the bodies overlap and the
    // detector says so (proving it can fail).
    let calls = (0..6)
        .map(|_| {
            request(
                "overlap_unsafe",
                serde_json::json!({}),
                SandboxMode::WorkspaceWrite,
            )
        })
        .collect();
    let results = host.call_batch(calls).await;
    let overlaps = results
        .iter()
        .filter(|r| {
            r.code() == Some(ErrorCode::ToolError)
                && r.error
                    .as_ref()
                    .unwrap()
                    .message
                    .contains("overlap detected")
        })
        .count();
    assert!(
        overlaps >= 1,
        "concurrency-safe bodies did not overlap: {results:?}"
    );
    assert!(results.iter().any(|r| r.is_ok()), "{results:?}");

    // Exclusive calls between concurrency-safe ones still run alone.
    std::fs::remove_file(ws.path().join("overlap.marker")).ok();
    let mixed = vec![
        request(
            "overlap",
            serde_json::json!({}),
            SandboxMode::WorkspaceWrite,
        ),
        request(
            "overlap",
            serde_json::json!({}),
            SandboxMode::WorkspaceWrite,
        ),
        request(
            "overlap_unsafe",
            serde_json::json!({}),
            SandboxMode::WorkspaceWrite,
        ),
        request(
            "overlap",
            serde_json::json!({}),
            SandboxMode::WorkspaceWrite,
        ),
    ];
    let results = host.call_batch(mixed).await;
    for r in &results {
        assert!(r.is_ok(), "{r:?}");
    }
}

/// Slow and fast concurrency-safe calls overlap, and their results are
/// committed in call order, not finishing order.
#[tokio::test]
async fn durability_slowfast() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(probes::DURABILITY_SLOWFAST, ws.path(), Limits::default()).await;
    // Warm up (instantiation paths, caches) so that wall time measures bodies.
    assert!(
        host.call(request(
            "delay",
            serde_json::json!({"ms": 0, "tag": "warm"}),
            SandboxMode::None
        ))
        .await
        .is_ok()
    );
    let sleeps = [300u64, 10, 150, 0];
    let calls: Vec<_> = sleeps
        .iter()
        .enumerate()
        .map(|(i, ms)| {
            request(
                "delay",
                serde_json::json!({"ms": ms, "tag": format!("t{i}")}),
                SandboxMode::None,
            )
        })
        .collect();
    let before = result_order(&host).len();
    let started = Instant::now();
    let results = host.call_batch(calls).await;
    let wall = started.elapsed();
    let tags: Vec<_> = results
        .iter()
        .map(|r| r.canonical["tag"].as_str().unwrap_or("?").to_string())
        .collect();
    assert_eq!(tags, ["t0", "t1", "t2", "t3"], "{results:?}");
    let ids: Vec<_> = results.iter().map(|r| r.call_id.clone()).collect();
    assert_eq!(
        result_order(&host)[before..],
        ids[..],
        "results were not committed in call order"
    );
    // Each tool/result payload is the result of the call it names.
    for e in host
        .log()
        .events()
        .unwrap()
        .iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .skip(before)
    {
        let r = results.iter().find(|r| r.call_id == e.call_id).unwrap();
        assert_eq!(e.payload["canonical"]["tag"], r.canonical["tag"]);
    }
    // Behaviour, not performance: run one after another they need 460 ms;
    // overlapped, about 300 ms. A wide margin below the sum.
    let sum: u64 = sleeps.iter().sum();
    assert!(
        wall < Duration::from_millis(sum - 40),
        "the bodies did not overlap: {wall:?} for sleeps summing to {sum} ms"
    );
}

/// A cancelled body really stops: the ticker's file stops growing, the call
/// ends CANCELLED quickly, and the log says so.
#[tokio::test]
async fn durability_ticker() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(probes::DURABILITY_TICKER, ws.path(), Limits::default()).await;
    let interrupt = Interrupt::default();
    let req = request(
        "ticker",
        serde_json::json!({"file": "ticks.txt"}),
        SandboxMode::WorkspaceWrite,
    )
    .interrupt(interrupt.clone());
    let started = Instant::now();
    let (r, ()) = tokio::join!(host.call(req), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        interrupt.cancel();
    });
    let took = started.elapsed();
    assert_eq!(r.code(), Some(ErrorCode::Cancelled), "{r:?}");
    assert!(took < Duration::from_secs(5), "cancellation took {took:?}");
    let ticks = ws.path().join("ticks.txt");
    let len = std::fs::metadata(&ticks).map(|m| m.len()).unwrap_or(0);
    assert!(len > 0, "the ticker never ran, so the test proves nothing");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        std::fs::metadata(&ticks).unwrap().len(),
        len,
        "the body kept running after the call was reported cancelled"
    );
    let events = host.log().events_for_call(&r.call_id).unwrap();
    assert!(events.iter().any(|e| e.kind == EventKind::ToolIntent));
    let results: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .collect();
    assert_eq!(results.len(), 1, "{events:?}");
    assert_eq!(results[0].payload["error"]["code"], "CANCELLED");

    // The same inside a batch: both tickers end CANCELLED, neither is lost.
    let interrupt = Interrupt::default();
    let calls = ["a.txt", "b.txt"]
        .iter()
        .map(|f| {
            request(
                "ticker",
                serde_json::json!({"file": f}),
                SandboxMode::WorkspaceWrite,
            )
            .interrupt(interrupt.clone())
        })
        .collect();
    let (results, ()) = tokio::join!(host.call_batch(calls), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        interrupt.cancel();
    });
    assert_eq!(results.len(), 2);
    for r in &results {
        assert_eq!(r.code(), Some(ErrorCode::Cancelled), "{r:?}");
        let logged = host.log().events_for_call(&r.call_id).unwrap();
        assert_eq!(
            logged
                .iter()
                .filter(|e| e.kind == EventKind::ToolResult)
                .count(),
            1,
            "{logged:?}"
        );
    }
    // The first ticker is exclusive, so the second never started.
    assert!(ws.path().join("a.txt").exists());
    assert!(
        !ws.path().join("b.txt").exists(),
        "an exclusive call started while another ran"
    );
}

/// The overlap errors among `results` ("overlap detected" from the probe).
fn overlaps(results: &[toolhost::CallResult]) -> usize {
    results
        .iter()
        .filter(|r| {
            r.error
                .as_ref()
                .is_some_and(|e| e.message.contains("overlap detected"))
        })
        .count()
}

/// Runs `n` calls of `tool` as concurrent `Host::call`s (not a batch).
async fn concurrent_calls(
    host: &std::sync::Arc<toolhost::Host>,
    tool: &str,
    n: usize,
) -> Vec<toolhost::CallResult> {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let host = host.clone();
        let tool = tool.to_string();
        tasks.spawn(async move {
            host.call(request(
                &tool,
                serde_json::json!({}),
                SandboxMode::WorkspaceWrite,
            ))
            .await
        });
    }
    let mut results = Vec::new();
    while let Some(r) = tasks.join_next().await {
        results.push(r.unwrap());
    }
    results
}

/// Exclusivity is the host's, not the batch's: concurrent `Host::call`s of a
/// tool that is not concurrency-safe never overlap, while the same detector
/// declared concurrency-safe does overlap under the same load (so the count
/// of zero means something).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_library_calls_of_an_exclusive_tool_never_overlap() {
    let ws = tempfile::tempdir().unwrap();
    let host = std::sync::Arc::new(
        host_with(probes::DURABILITY_OVERLAP, ws.path(), Limits::default()).await,
    );
    let results = concurrent_calls(&host, "overlap", 6).await;
    assert_eq!(results.len(), 6);
    assert_eq!(overlaps(&results), 0, "{results:?}");
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");

    let control = concurrent_calls(&host, "overlap_unsafe", 6).await;
    assert!(
        overlaps(&control) >= 1,
        "concurrency-safe bodies did not overlap, so the detector proves nothing: {control:?}"
    );
}

/// A minimal MCP client over the server's stdio: requests go out without
/// waiting, responses are matched by id.
struct McpClient {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
}

impl McpClient {
    fn start(args: &[&std::ffi::OsStr]) -> McpClient {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new(toolhost_bin())
            .arg("serve")
            .arg("--mcp")
            .args(args)
            .env("TOOLHOST_CACHE_DIR", cache_dir())
            .env_remove("TOOLHOST_STATE_DIR")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut c = McpClient {
            child,
            stdin,
            lines,
        };
        c.send(&serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "exclusivity-test", "version": "0"}}}));
        c.responses(&[0]);
        c.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        c
    }

    fn send(&mut self, v: &serde_json::Value) {
        use std::io::Write as _;
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{v}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// The responses to `ids`, in the order of `ids`; notifications skipped.
    fn responses(&mut self, ids: &[i64]) -> Vec<serde_json::Value> {
        let mut got = std::collections::BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while got.len() < ids.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no response for {ids:?} ({e}); got {got:?}"));
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if let Some(id) = v.get("id").and_then(serde_json::Value::as_i64)
                && ids.contains(&id)
            {
                got.insert(id, v);
            }
        }
        ids.iter().map(|id| got.remove(id).unwrap()).collect()
    }

    /// Sends one `tools/call` of `tool` per id, all before reading any answer.
    fn call_all(&mut self, tool: &str, ids: &[i64]) -> Vec<serde_json::Value> {
        for id in ids {
            self.send(
                &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": tool, "arguments": {}}}),
            );
        }
        self.responses(ids)
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Exclusivity holds across MCP requests too: four `tools/call`s of a tool
/// that is not concurrency-safe, sent at once, never overlap; four of the
/// concurrency-safe control do (the server really runs requests at once).
#[test]
fn concurrent_mcp_calls_of_an_exclusive_tool_never_overlap() {
    let tools = tempfile::tempdir().unwrap();
    std::fs::copy(
        probes::DURABILITY_OVERLAP,
        tools.path().join("overlap.wasm"),
    )
    .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut client = McpClient::start(&[
        "--tools".as_ref(),
        tools.path().as_os_str(),
        "--tools-only".as_ref(),
        "--workspace".as_ref(),
        ws.path().as_os_str(),
        "--mode".as_ref(),
        "workspace-write".as_ref(),
        "--state".as_ref(),
        state.path().as_os_str(),
    ]);
    let text = |r: &serde_json::Value| {
        r.pointer("/result/content/0/text")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let exclusive = client.call_all("overlap", &[1, 2, 3, 4]);
    for r in &exclusive {
        assert!(r.get("result").is_some(), "{r}");
        assert_ne!(
            r.pointer("/result/isError"),
            Some(&serde_json::json!(true)),
            "an exclusive tool overlapped another call: {}",
            text(r)
        );
    }
    let control = client.call_all("overlap_unsafe", &[5, 6, 7, 8]);
    let overlapped = control
        .iter()
        .filter(|r| text(r).contains("overlap detected"))
        .count();
    assert!(
        overlapped >= 1,
        "concurrency-safe calls did not overlap over MCP, so the test proves nothing: {control:?}"
    );
}

/// A host built as the successor of another (a hot reload) shares its
/// exclusivity gate: calls still running on the old host and calls on the
/// new one never overlap either.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_successor_host_shares_exclusivity_with_its_predecessor() {
    let ws = tempfile::tempdir().unwrap();
    let old = std::sync::Arc::new(
        host_with(probes::DURABILITY_OVERLAP, ws.path(), Limits::default()).await,
    );
    let mut b = builder(
        probes::DURABILITY_OVERLAP,
        ws.path(),
        Limits::default(),
        suite_options(),
    );
    b.successor_of(&old);
    let new = std::sync::Arc::new(b.build().await.unwrap());
    assert!(old.log().is_same_log(&new.log()));
    let (on_old, on_new) = tokio::join!(
        concurrent_calls(&old, "overlap", 3),
        concurrent_calls(&new, "overlap", 3)
    );
    let all: Vec<_> = on_old.into_iter().chain(on_new).collect();
    assert_eq!(overlaps(&all), 0, "{all:?}");
    assert!(all.iter().all(|r| r.is_ok()), "{all:?}");
}
