//! `toolhost conformance`: every example tool passes; a component that is
//! not a tool, or lies, fails with exit status 1 and says why.

use std::path::PathBuf;
use std::process::Command;

fn example_tools() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/wasm-tools/wasm32-wasip2/release");
    let mut tools: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the build script built the example tools")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("tool_")
                && p.extension().is_some_and(|x| x == "wasm")
        })
        .collect();
    tools.sort();
    tools
}

fn conformance(path: &std::path::Path) -> (i32, serde_json::Value) {
    let cache = crate::support::cache_dir();
    let out = Command::new(crate::support::bin())
        .args(["conformance", "--json"])
        .arg(path)
        .env("TOOLHOST_CACHE_DIR", cache)
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), report)
}

#[test]
fn every_example_tool_passes() {
    let tools = example_tools();
    assert_eq!(tools.len(), 6, "{tools:?}");
    for t in tools {
        let (code, report) = conformance(&t);
        assert_eq!(code, 0, "{}: {report:#}", t.display());
        let checks = report["checks"].as_array().unwrap();
        let names: Vec<&str> = checks
            .iter()
            .map(|c| c["check"].as_str().unwrap())
            .collect();
        for prefix in [
            "world",
            "describe",
            "names",
            "schemas:",
            "capabilities:",
            "invalid-args:",
        ] {
            assert!(
                names.iter().any(|n| n.starts_with(prefix)),
                "{} lacks {prefix}: {names:?}",
                t.display()
            );
        }
        assert!(checks.iter().all(|c| c["verdict"] != "fail"), "{report:#}");
    }
}

#[test]
fn a_core_module_fails_the_world_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("core.wasm");
    std::fs::write(&path, b"\0asm\x01\0\0\0").unwrap();
    let (code, report) = conformance(&path);
    assert_eq!(code, 1, "{report:#}");
    let first = &report["checks"][0];
    assert_eq!(first["verdict"], "fail");
    assert!(
        first["detail"]
            .as_str()
            .unwrap()
            .contains("core WebAssembly module"),
        "{report:#}"
    );
}

#[test]
fn a_file_that_is_not_wasm_fails() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("text.wasm");
    std::fs::write(&path, b"hello").unwrap();
    let (code, report) = conformance(&path);
    assert_eq!(code, 1);
    assert!(
        report["checks"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("not a WebAssembly file"),
        "{report:#}"
    );
}

/// `http_fetch` passes, and the report names the destination its example
/// asks for (conformance grants no network: the attempt is refused inside
/// the guest and never connects).
#[test]
fn conformance_reports_the_hosts_a_tool_asks_for() {
    let tool = example_tools()
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "tool_http_fetch.wasm"))
        .expect("http_fetch is built");
    let (code, report) = conformance(&tool);
    assert_eq!(code, 0, "{report:#}");
    let checks = report["checks"].as_array().unwrap();
    let row = |name: &str| {
        checks
            .iter()
            .find(|c| c["check"] == name)
            .unwrap_or_else(|| panic!("no {name} row: {report:#}"))
    };
    let network = row("network:http_fetch");
    assert_eq!(network["verdict"], "warn", "{network}");
    assert!(
        network["detail"]
            .as_str()
            .unwrap()
            .contains("GET https://example.com:443"),
        "{network}"
    );
    let example = row("example:http_fetch[0]");
    assert_eq!(example["verdict"], "warn", "{example}");
    assert!(
        example["detail"]
            .as_str()
            .unwrap()
            .contains("needs GET https://example.com:443"),
        "{example}"
    );
}
