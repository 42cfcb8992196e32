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
    let s = host.runtime().cache_stats();
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

fn descriptor_stats(host: &Host) -> (u64, u64) {
    let s = host.runtime().cache_stats();
    (
        s.descriptor_hits.load(Ordering::Relaxed),
        s.corrupt.load(Ordering::Relaxed),
    )
}

fn descriptors_of(host: &Host) -> Vec<toolhost::Descriptor> {
    host.tools(None)
        .into_iter()
        .map(|t| t.descriptor.clone())
        .collect()
}

fn descriptor_file(cache: &Path) -> PathBuf {
    let [entry] = artifacts(cache).try_into().unwrap();
    entry.with_extension("desc")
}

/// A load from the cache takes the tool descriptors from the cache too
/// (`describe` does not run), and they are exactly what `describe` said.
#[tokio::test]
async fn cached_descriptors_replace_describe() {
    let cache = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let first = fresh_host(cache.path(), ws.path()).await;
    assert_eq!(descriptor_stats(&first), (0, 0), "the first load describes");
    assert!(descriptor_file(cache.path()).exists());
    let described = descriptors_of(&first);
    drop(first);
    let second = fresh_host(cache.path(), ws.path()).await;
    assert_eq!(
        descriptor_stats(&second),
        (1, 0),
        "the second load does not"
    );
    assert_eq!(descriptors_of(&second), described);
    assert_echo_works(&second).await;
}

/// A descriptor file that is damaged, or whose checksum matches but whose
/// content is not a valid descriptor list, is never trusted: `describe`
/// runs again and the file is replaced.
#[tokio::test]
async fn cache_corrupt_descriptors() {
    let cache = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let described = descriptors_of(&fresh_host(cache.path(), ws.path()).await);
    let file = descriptor_file(cache.path());
    let good = std::fs::read_to_string(&file).unwrap();
    let summed = |json: &str| format!("crc32:{:08x}\n{json}", crc32fast::hash(json.as_bytes()));
    let (sum_line, json) = good.split_once('\n').unwrap();
    let bad_name = json.replacen("\"echo\"", "\"1echo\"", 1);
    assert_ne!(bad_name, json);
    let bad_schema = {
        let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
        v[0]["input_schema"] = serde_json::json!("not a schema");
        v.to_string()
    };
    for (what, bad) in [
        ("flipped byte", good.replacen("echo", "ecHo", 1)),
        ("truncated", good[..good.len() / 2].to_string()),
        ("no checksum line", json.to_string()),
        ("wrong checksum", format!("{sum_line}0\n{json}")),
        ("checksummed empty list", summed("[]")),
        ("checksummed invalid name", summed(&bad_name)),
        ("checksummed invalid schema", summed(&bad_schema)),
        ("checksummed garbage", summed("{\"not\": \"a list\"}")),
    ] {
        std::fs::write(&file, &bad).unwrap();
        let host = fresh_host(cache.path(), ws.path()).await;
        let (hits, corrupt) = descriptor_stats(&host);
        assert_eq!(hits, 0, "{what}: the descriptors must not be trusted");
        assert!(corrupt >= 1, "{what}: the damage must be noticed");
        assert_eq!(descriptors_of(&host), described, "{what}");
        assert_echo_works(&host).await;
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            good,
            "{what}: the file is replaced with a good one"
        );
        let after = fresh_host(cache.path(), ws.path()).await;
        assert_eq!(descriptor_stats(&after), (1, 0), "{what}: used again");
    }
}
