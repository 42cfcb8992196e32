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
