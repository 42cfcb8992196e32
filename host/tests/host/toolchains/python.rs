//! Python tools: `examples/python/word_count.py`, written with the helper in
//! `sdk/python/`, built by `scripts/build-python-tools` with the pinned
//! componentize-py into `target/python-tools/`. CI runs the script before
//! the tests; here it runs again with `--install` and rebuilds only what
//! changed. When it must build and has no componentize-py 0.25.1 (on PATH or
//! in its virtualenv under `target/python-tools/venv`), it installs one into
//! that virtualenv from PyPI, as the MCP client test does; when that fails
//! too, every test here fails with the script's message.

use super::Example;
use serde_json::json;
use std::path::PathBuf;
use std::sync::OnceLock;
use toolhost::SandboxMode;

/// The built `word_count.wasm`, built and compiled into the shared cache
/// once per test run.
fn component() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let path = super::build_with("build-python-tools", &["--install"], "python-tools")?
            .join("word_count.wasm");
        super::warm_cache(&path)?;
        Ok(path)
    });
    match built {
        Ok(path) => path.clone(),
        Err(e) => panic!("the Python example tool is not built:\n{e}"),
    }
}

fn word_count() -> Example {
    Example {
        component: component(),
        tool: "word_count",
        mode: SandboxMode::None,
        args: json!({"text": "one two three\nfour five\n"}),
        expected: json!({"words": 5, "lines": 2, "chars": 24}),
        invalid: json!({"text": 42}),
    }
}

#[tokio::test]
async fn python_tool_runs_through_the_library_pipeline() {
    super::library_pipeline(&word_count()).await;
}

#[test]
fn python_tool_runs_through_the_cli() {
    super::cli_pipeline(&word_count());
}

#[test]
fn python_tool_passes_conformance() {
    let report = super::conformance_passes(&word_count());
    // componentize-py imports all of wasi:sockets: reported, not failed.
    let caps = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "capabilities:word_count")
        .unwrap();
    assert_eq!(caps["verdict"], "warn", "{caps:#}");
    assert!(
        caps["detail"].as_str().unwrap().contains("wasi:sockets/"),
        "{caps:#}"
    );
}

#[tokio::test]
async fn python_descriptor_comes_from_the_type_hints() {
    let ex = word_count();
    let (_ws, host) = super::host_for(&ex, None).await;
    let tools = host.tools(None);
    let d = &tools[0].descriptor;
    assert_eq!(d.name, "word_count");
    assert_eq!(
        d.description,
        "Counts the words, lines and characters of a text."
    );
    assert_eq!(d.min_mode, SandboxMode::None);
    assert!(d.concurrency_safe && d.idempotent);
    let input = &d.input_schema;
    assert_eq!(input["required"], json!(["text"]));
    assert_eq!(input["additionalProperties"], json!(false));
    assert_eq!(
        input["properties"]["text"],
        json!({"type": "string", "description": "The text to count."})
    );
    assert_eq!(input["examples"], json!([{"text": "one two\nthree"}]));
    let output = d.output_schema.as_ref().unwrap();
    assert_eq!(output["required"], json!(["words", "lines", "chars"]));
}
