//! `toolhost run` on a component file that offers several tools: `--tool`
//! picks one; without it the CLI names the choices and exits 2.

use std::process::Command;

fn run(args: &[&str]) -> std::process::Output {
    let state = tempfile::tempdir().unwrap();
    let cache = crate::support::cache_dir();
    Command::new(crate::support::bin())
        .arg("run")
        .args(args)
        .arg("--state")
        .arg(state.path())
        .env("TOOLHOST_CACHE_DIR", cache)
        .output()
        .unwrap()
}

#[test]
fn a_multi_tool_component_needs_a_tool_name() {
    let out = run(&[toolhost::BENCH_GUEST_PATH, "--args", "{}"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("fib, hash, noop, sort") && err.contains("--tool NAME"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn tool_picks_one_tool_of_a_component() {
    let out = run(&[
        toolhost::BENCH_GUEST_PATH,
        "--tool",
        "fib",
        "--args",
        r#"{"n": 10}"#,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tool"], "fib");
    assert_eq!(v["canonical"]["value"], 55);
    // The old spelling still works.
    let out = run(&[
        toolhost::BENCH_GUEST_PATH,
        "--tool-name",
        "noop",
        "--args",
        "{}",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}
