//! Compile once: `toolhost precompile DIR` compiles each tool into the
//! compile cache and says so per tool; after it, `list`, `run` and
//! `conformance` of the same tool compile nothing (the cache directory's
//! artifacts are neither added nor replaced: a compile writes a new file,
//! by rename); and what `list` compiled, `precompile` finds cached. Counted
//! from the cache's entries and the command's report, never timed.

use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A tools directory holding the embedded `sleep` tool as `sleep.wasm`.
fn tools_dir(root: &Path) -> PathBuf {
    let dir = root.join("tools");
    std::fs::create_dir_all(&dir).unwrap();
    let (_, bytes) = toolhost::EMBEDDED_TOOLS
        .iter()
        .find(|(n, _)| *n == "sleep")
        .unwrap();
    std::fs::write(dir.join("sleep.wasm"), bytes).unwrap();
    dir
}

/// `toolhost ARGS` with the compile cache in `cache`.
fn toolhost(cache: &Path, args: &[&std::ffi::OsStr]) -> Output {
    Command::new(crate::support::bin())
        .args(args)
        .env("TOOLHOST_CACHE_DIR", cache)
        .env_remove("TOOLHOST_STATE_DIR")
        .output()
        .unwrap()
}

/// `precompile --json PATHS`: its exit status and report.
fn precompile(cache: &Path, paths: &[&Path]) -> (Option<i32>, Vec<Value>) {
    let mut args = vec!["precompile".as_ref(), "--json".as_ref()];
    args.extend(paths.iter().map(|p| p.as_os_str()));
    let out = toolhost(cache, &args);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let rows = report.as_array().cloned().unwrap_or_else(|| {
        panic!(
            "no report: {}",
            String::from_utf8_lossy(&out.stderr).into_owned()
        )
    });
    (out.status.code(), rows)
}

/// The cache's compiled code: the file name of each artifact and its
/// checksum, to its inode. (Descriptor files are left out: `conformance`
/// runs `describe` itself, and writes what it answered.)
fn entries(cache: &Path) -> BTreeMap<String, u64> {
    std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| !e.file_name().to_string_lossy().ends_with(".desc"))
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, e.metadata().unwrap().ino())
        })
        .collect()
}

#[test]
fn precompiled_tools_are_not_compiled_again() {
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("cache");
    let tools = tools_dir(root.path());
    let broken = root.path().join("broken.wasm");
    std::fs::write(&broken, b"not wasm").unwrap();

    let (code, rows) = precompile(&cache, &[&tools, &broken]);
    assert_eq!(code, Some(1), "a source failed: {rows:?}");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["outcome"], "compiled", "{rows:?}");
    assert_eq!(rows[0]["detail"], "sleep", "{rows:?}");
    assert_eq!(rows[1]["outcome"], "failed", "{rows:?}");
    assert!(
        rows[1]["detail"]
            .as_str()
            .unwrap()
            .contains("not a WebAssembly file"),
        "{rows:?}"
    );
    let compiled = entries(&cache);
    let artifacts = compiled.keys().filter(|n| n.ends_with(".cwasm")).count();
    assert_eq!(artifacts, 1, "{compiled:?}");

    // Every other command that loads the tool maps the cached code.
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let component = tools.join("sleep.wasm");
    let list = toolhost(&cache, &["list".as_ref(), tools.as_os_str()]);
    assert!(list.status.success(), "{list:?}");
    let run = toolhost(
        &cache,
        &[
            "run".as_ref(),
            component.as_os_str(),
            "--args".as_ref(),
            r#"{"ms": 1}"#.as_ref(),
            "--workspace".as_ref(),
            ws.path().as_os_str(),
            "--state".as_ref(),
            state.path().as_os_str(),
        ],
    );
    assert!(run.status.success(), "{run:?}");
    let conformance = toolhost(&cache, &["conformance".as_ref(), component.as_os_str()]);
    assert!(conformance.status.success(), "{conformance:?}");
    assert_eq!(
        entries(&cache),
        compiled,
        "a command compiled the tool again"
    );

    // A second precompile finds it cached.
    let (code, rows) = precompile(&cache, &[&tools]);
    assert_eq!(code, Some(0), "{rows:?}");
    assert_eq!(rows[0]["outcome"], "cached", "{rows:?}");
}

/// What `list` compiled, `precompile` (as any later command) finds cached.
#[test]
fn what_list_compiled_is_cached() {
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("cache");
    let tools = tools_dir(root.path());
    let list = toolhost(&cache, &["list".as_ref(), tools.as_os_str()]);
    assert!(list.status.success(), "{list:?}");
    let (code, rows) = precompile(&cache, &[&tools]);
    assert_eq!(code, Some(0), "{rows:?}");
    assert_eq!(rows[0]["outcome"], "cached", "{rows:?}");
}
