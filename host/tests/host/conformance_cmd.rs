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
        assert_eq!(report["made_with"], "Rust (wit-bindgen)", "{report:#}");
        assert_generated_run(&report);
    }
}

/// Each tool of the report ran its body with generated arguments (the
/// row's mode is the call's), and one without examples is told, in Rust,
/// how to declare them.
fn assert_generated_run(report: &serde_json::Value) {
    let checks = report["checks"].as_array().unwrap();
    let row = |name: &str| checks.iter().find(|c| c["check"] == name);
    let tools: Vec<&str> = checks
        .iter()
        .filter_map(|c| c["check"].as_str()?.strip_prefix("schemas:"))
        .collect();
    for tool in tools {
        let generated = row(&format!("generated:{tool}"))
            .unwrap_or_else(|| panic!("no generated:{tool} row: {report:#}"));
        assert_eq!(generated["verdict"], "pass", "{generated:#}");
        assert!(generated["mode"].is_string(), "{generated:#}");
        let detail = generated["detail"].as_str().unwrap();
        assert!(detail.contains("with generated arguments {"), "{detail}");
        let invalid = row(&format!("invalid-args:{tool}")).unwrap();
        assert!(
            invalid["detail"].as_str().unwrap().contains("(generated: "),
            "{invalid:#}"
        );
        let has_examples = checks
            .iter()
            .any(|c| c["check"] == format!("example:{tool}[0]").as_str());
        match row(&format!("examples:{tool}")) {
            Some(missing) if !has_examples => {
                assert_eq!(missing["verdict"], "warn", "{missing:#}");
                let detail = missing["detail"].as_str().unwrap();
                assert!(
                    detail.contains("declares no examples")
                        && detail.contains("#[schemars(example = "),
                    "{detail}"
                );
            }
            None if has_examples => {}
            other => panic!("{tool}: examples row {other:?} with examples: {has_examples}"),
        }
    }
}

/// The body of `read_file` (no examples) ran with generated arguments: the
/// file it was given does not exist in the throwaway workspace, and the
/// tool said so in its own error, which the row quotes.
#[test]
fn a_tool_without_examples_runs_with_generated_arguments() {
    let tool = example_tools()
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "tool_read_file.wasm"))
        .expect("read_file is built");
    let (code, report) = conformance(&tool);
    assert_eq!(code, 0, "{report:#}");
    let checks = report["checks"].as_array().unwrap();
    let generated = checks
        .iter()
        .find(|c| c["check"] == "generated:read_file")
        .unwrap_or_else(|| panic!("{report:#}"));
    let detail = generated["detail"].as_str().unwrap();
    assert!(
        detail.contains(r#"with generated arguments {"path":"a"}"#)
            && detail.contains("refused them with its own error"),
        "{detail}"
    );
    assert_eq!(generated["mode"], "read-only", "{generated:#}");
}

/// The table's summary counts in words that agree with the number.
#[test]
fn the_summary_is_pluralised() {
    let tool = example_tools()
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "tool_sleep.wasm"))
        .expect("sleep is built");
    let out = Command::new(crate::support::bin())
        .arg("conformance")
        .arg(&tool)
        .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    assert_eq!(last, "8 checks: 0 failed, 1 warning", "{text}");
    let core = tempfile::tempdir().unwrap();
    let path = core.path().join("core.wasm");
    std::fs::write(&path, b"\0asm\x01\0\0\0").unwrap();
    let out = Command::new(crate::support::bin())
        .arg("conformance")
        .arg(&path)
        .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("1 check: 1 failed, 0 warnings\n"), "{text}");
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
