//! Python tools: `examples/python/word_count.py` (mode none) and
//! `examples/python/head.py` (read-only), written with the helper in
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
use toolhost::{CallRequest, ErrorCode, SandboxMode};

/// `target/python-tools/NAME.wasm`, built, and compiled into the shared
/// cache, once per test run.
fn component(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let dir = super::build_with("build-python-tools", &["--install"], "python-tools")?;
        for example in ["word_count", "head"] {
            super::warm_cache(&dir.join(format!("{example}.wasm")))?;
        }
        Ok(dir)
    });
    match built {
        Ok(dir) => dir.join(format!("{name}.wasm")),
        Err(e) => panic!("the Python example tools are not built:\n{e}"),
    }
}

fn word_count() -> Example {
    Example {
        component: component("word_count"),
        tool: "word_count",
        mode: SandboxMode::None,
        files: &[],
        args: json!({"text": "one two three\nfour five\n"}),
        expected: json!({"words": 5, "lines": 2, "chars": 24}),
        invalid: json!({"text": 42}),
        examples: 1,
    }
}

const NOTES: &str = "first\nsecond\nthird\n";

fn head() -> Example {
    Example {
        component: component("head"),
        tool: "head",
        mode: SandboxMode::ReadOnly,
        files: &[("notes.txt", NOTES)],
        args: json!({"path": "notes.txt", "lines": 2}),
        expected: json!({"path": "notes.txt", "lines": ["first", "second"], "truncated": true}),
        invalid: json!({"path": "notes.txt", "lines": 0}),
        examples: 0,
    }
}

#[tokio::test]
async fn python_tools_run_through_the_library_pipeline() {
    super::library_pipeline(&word_count()).await;
    super::library_pipeline(&head()).await;
}

#[test]
fn python_tools_run_through_the_cli() {
    super::cli_pipeline(&word_count());
    super::cli_pipeline(&head());
}

#[test]
fn python_tools_pass_conformance() {
    for ex in [word_count(), head()] {
        let report = super::conformance_passes(&ex);
        assert_eq!(
            report["made_with"], "Python (componentize-py)",
            "{report:#}"
        );
        // `head` declares no examples: the author is told how, in Python.
        let missing = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == format!("examples:{}", ex.tool).as_str());
        match (ex.examples, missing) {
            (0, Some(row)) => assert!(
                row["detail"]
                    .as_str()
                    .unwrap()
                    .contains("`@tool(examples=[{ ... }])`"),
                "{row:#}"
            ),
            (0, None) => panic!("no examples row: {report:#}"),
            (_, row) => assert!(row.is_none(), "{row:?}"),
        }
        // componentize-py imports all of wasi:sockets: reported, not failed.
        let caps = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == format!("capabilities:{}", ex.tool).as_str())
            .unwrap();
        assert_eq!(caps["verdict"], "warn", "{caps:#}");
        assert!(
            caps["detail"].as_str().unwrap().contains("wasi:sockets/"),
            "{caps:#}"
        );
    }
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
    assert_eq!(d.side_effect, toolhost::SideEffect::None);
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

    let ex = head();
    let (_ws, host) = super::host_for(&ex, None).await;
    let d = &host.tools(None)[0].descriptor;
    assert_eq!(d.min_mode, SandboxMode::ReadOnly);
    assert_eq!(d.side_effect, toolhost::SideEffect::Read);
    assert_eq!(
        d.input_schema["properties"]["lines"],
        json!({"type": "integer", "description": "How many lines.", "minimum": 1, "maximum": 1000, "default": 10})
    );
}

/// What the helper adds around a Python body: its content function, its
/// log records, OSError as a tool error code, the sandbox's refusals, and
/// relative paths in the workspace in every mode.
#[tokio::test]
async fn python_tool_reads_the_workspace_only() {
    let ex = head();
    let (ws, host) = super::host_for(&ex, None).await;
    let r = host
        .call(CallRequest::new("head", json!({"path": "notes.txt"})).mode(SandboxMode::ReadOnly))
        .await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.canonical["truncated"], false);
    assert_eq!(
        r.content,
        vec![toolhost::ContentItem::Text {
            text: "first\nsecond\nthird".into()
        }]
    );
    assert_eq!(r.receipt.logs.len(), 1, "{:?}", r.receipt.logs);
    assert_eq!(r.receipt.logs[0].message, "read");

    // A mode narrower than the tool's is refused before the body.
    let r = host
        .call(CallRequest::new("head", json!({"path": "notes.txt"})).mode(SandboxMode::None))
        .await;
    assert_eq!(r.code(), Some(ErrorCode::SandboxUnavailable), "{r:?}");

    // Missing files and paths outside the workspace fail inside the tool.
    for (path, code) in [
        ("missing.txt", "not-found"),
        ("../outside.txt", "permission-denied"),
        ("/etc/passwd", "not-found"),
    ] {
        let r = host
            .call(CallRequest::new("head", json!({"path": path})).mode(SandboxMode::ReadOnly))
            .await;
        assert_eq!(r.code(), Some(ErrorCode::ToolError), "{path}: {r:?}");
        let msg = &r.error.as_ref().unwrap().message;
        assert!(msg.starts_with(code), "{path}: {msg}");
    }

    // In danger-full-access the host root is preopened and PWD names the
    // workspace: the helper starts the body there.
    let r = host
        .call(
            CallRequest::new("head", json!({"path": "notes.txt", "lines": 1}))
                .mode(SandboxMode::DangerFullAccess),
        )
        .await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.canonical["lines"], json!(["first"]));
    drop(ws);
}
