//! The compile cache: a component compiles once per cache directory, and an
//! entry that was tampered with is recompiled, never trusted.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use toolhost::{Host, Limits, RuntimeOptions};

toolhost_conformance::foreach_cache!(assert_test_exists);

fn options(cache: &Path) -> RuntimeOptions {
    RuntimeOptions {
        cache_dir: Some(cache.to_path_buf()),
        max_concurrent_calls: 4,
        ..RuntimeOptions::default()
    }
}

/// A fresh runtime (new engine, empty in-memory state) over `cache`.
async fn fresh_host(cache: &Path, ws: &Path) -> Host {
    host_with_options(probes::CACHE_ECHO, ws, Limits::default(), options(cache)).await
}

fn stats(host: &Host) -> (u64, u64, u64) {
    let s = host.runtime().cache().stats();
    (
        s.compiles.load(Ordering::Relaxed),
        s.hits.load(Ordering::Relaxed),
        s.corrupt.load(Ordering::Relaxed),
    )
}

fn artifacts(cache: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    v.sort();
    v
}

/// The second load through a fresh runtime does not compile.
#[tokio::test]
async fn cache_echo() {
    let cache = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let first = fresh_host(cache.path(), ws.path()).await;
    assert_eq!(stats(&first), (1, 0, 0), "the first load compiles");
    assert_eq!(artifacts(cache.path()).len(), 1, "and writes one entry");
    drop(first);

    let second = fresh_host(cache.path(), ws.path()).await;
    assert_eq!(
        stats(&second),
        (0, 1, 0),
        "the second load comes from the cache"
    );
    assert_echo_works(&second).await;
}

/// Overwriting bytes of the `.cwasm` (same length) or truncating it makes
/// the entry untrusted: it is counted corrupt, recompiled and replaced, and
/// the tool still works.
#[tokio::test]
async fn cache_corrupt_entry() {
    let cache = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    drop(fresh_host(cache.path(), ws.path()).await);
    let [entry] = artifacts(cache.path()).try_into().unwrap();
    let good = std::fs::read(&entry).unwrap();

    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    for b in &mut flipped[mid..mid + 64] {
        *b ^= 0xff;
    }
    let truncated = good[..good.len() / 2].to_vec();
    for (what, bad) in [("flipped bytes", flipped), ("truncated", truncated)] {
        std::fs::write(&entry, &bad).unwrap();
        let host = fresh_host(cache.path(), ws.path()).await;
        let (compiles, hits, corrupt) = stats(&host);
        assert_eq!(
            (compiles, hits),
            (1, 0),
            "{what}: the entry must be recompiled, not loaded"
        );
        assert!(corrupt >= 1, "{what}: the corruption must be noticed");
        assert_echo_works(&host).await;
        assert_eq!(
            std::fs::read(&entry).unwrap(),
            good,
            "{what}: the entry is replaced with a good one"
        );

        let after = fresh_host(cache.path(), ws.path()).await;
        assert_eq!(
            stats(&after),
            (0, 1, 0),
            "{what}: the repaired entry is used again"
        );
    }
}
