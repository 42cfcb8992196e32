//! Loading bad input: every malformed or hostile component makes
//! `HostBuilder::build` fail with a clear `HostError` (never a panic, never
//! a hang), and the message says what is wrong.

use crate::common::*;
use std::time::{Duration, Instant};
use toolhost::runtime::DESCRIBE_DEADLINE;
use toolhost::{HostError, LoadError};

toolhost_conformance::foreach_load!(assert_test_exists);

fn assert_mentions(e: &HostError, parts: &[&str]) {
    let text = e.to_string();
    for p in parts {
        assert!(text.contains(p), "the error should mention {p:?}: {text}");
    }
}

/// Writes `bytes` to a file and returns the error loading it gives.
async fn load_bytes_error(bytes: &[u8]) -> (HostError, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tool.wasm");
    std::fs::write(&path, bytes).unwrap();
    let path = path.display().to_string();
    (build_error(&path).await, path)
}

#[tokio::test]
async fn load_not_wasm() {
    let (e, path) = load_bytes_error(b"#!/bin/sh\necho I am not wasm\n").await;
    assert!(matches!(e, HostError::Load(LoadError::NotWasm(_))), "{e:?}");
    assert_mentions(&e, &[&path, "is not a WebAssembly file"]);
}

#[tokio::test]
async fn load_empty_file() {
    let (e, _) = load_bytes_error(b"").await;
    assert!(matches!(e, HostError::Load(LoadError::NotWasm(_))), "{e:?}");
}

#[tokio::test]
async fn load_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.wasm").display().to_string();
    let e = build_error(&path).await;
    assert!(
        matches!(e, HostError::Load(LoadError::Read { .. })),
        "{e:?}"
    );
    assert_mentions(&e, &["cannot read", &path]);
}

/// A component file larger than the host reads (a sparse file: no disk
/// used), a device and a named pipe are refused before they are read: a
/// device would never end, a pipe would wait for a writer, a large file
/// would be held in memory whole.
#[tokio::test]
async fn load_too_large_or_not_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.wasm");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(toolhost::runtime::MAX_WASM_FILE_BYTES + 1)
        .unwrap();
    drop(f);
    // A named pipe: opening it for reading would wait for a writer.
    let fifo = dir.path().join("pipe.wasm");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for (path, why) in [
        (big.display().to_string(), "larger than"),
        ("/dev/zero".to_string(), "not a regular file"),
        (fifo.display().to_string(), "not a regular file"),
    ] {
        // Bounded: a pipe opened the blocking way would wait here for good.
        let e = tokio::time::timeout(Duration::from_secs(60), build_error(&path))
            .await
            .unwrap_or_else(|_| panic!("{path}: still reading after 60 s"));
        assert!(
            matches!(e, HostError::Load(LoadError::Read { .. })),
            "{e:?}"
        );
        assert_mentions(&e, &["cannot read", &path, why]);
    }
}

#[tokio::test]
async fn load_core_module() {
    let (e, _) = load_bytes_error(b"\0asm\x01\0\0\0").await;
    assert!(
        matches!(e, HostError::Load(LoadError::CoreModule(_))),
        "{e:?}"
    );
    assert_mentions(
        &e,
        &["core WebAssembly module, not a component", "wasm32-wasip2"],
    );
}

/// A component header followed by garbage.
#[tokio::test]
async fn load_invalid_component() {
    let (e, _) = load_bytes_error(b"\0asm\x0d\0\x01\0\xff\xff\xff\xff garbage").await;
    assert!(
        matches!(e, HostError::Load(LoadError::Invalid { .. })),
        "{e:?}"
    );
    assert_mentions(&e, &["is not a valid component"]);
}

/// A component that uses the component model's async ABI (an `async` lift,
/// as WASI 0.3 components have), which this runtime is built without:
/// refused at load, naming it.
#[tokio::test]
async fn load_async_abi_component() {
    let bytes = wat::parse_str(
        r#"(component
            (core module $m
                (func (export "f") (result i32) i32.const 0)
                (func (export "cb") (param i32 i32 i32) (result i32) i32.const 0))
            (core instance $i (instantiate $m))
            (type $t (func async))
            (func (export "f") (type $t) (canon lift (core func $i "f") async (callback (core func $i "cb")))))"#,
    )
    .unwrap();
    let (e, path) = load_bytes_error(&bytes).await;
    assert!(
        matches!(e, HostError::Load(LoadError::Unsupported { .. })),
        "{e:?}"
    );
    assert_mentions(&e, &[&path, "async ABI", "does not support"]);
}

/// A WASI command that exports no tool interface.
#[tokio::test]
async fn load_no_exports() {
    let e = build_error(probes::LOAD_NO_EXPORTS).await;
    assert!(
        matches!(e, HostError::Load(LoadError::WrongWorld { .. })),
        "{e:?}"
    );
    // It says what the component is instead, and where the contract and
    // the guide of the language that made it are.
    assert_mentions(
        &e,
        &[
            "does not implement the toolhost:tool/tool-provider world",
            "It exports wasi:cli/run@",
            "(a WASI command program: run it with `toolhost exec`",
            "It was made with Rust (wit-bindgen).",
            "`toolhost wit DIR` writes that WIT",
            "docs/reference/wit.md",
            "docs/guides/tool-rust.md",
        ],
    );
}

#[tokio::test]
async fn load_no_tools() {
    let e = build_error(probes::LOAD_NO_TOOLS).await;
    assert!(
        matches!(e, HostError::Load(LoadError::Describe { .. })),
        "{e:?}"
    );
    assert_mentions(&e, &["describe failed", "offers no tools"]);
}

#[tokio::test]
async fn load_describe_traps() {
    let e = build_error(probes::LOAD_DESCRIBE_TRAPS).await;
    assert!(
        matches!(e, HostError::Load(LoadError::Describe { .. })),
        "{e:?}"
    );
    assert_mentions(
        &e,
        &["describe failed", "TRAP", "describe panicked on purpose"],
    );
}

/// `describe` that never returns is stopped at DESCRIBE_DEADLINE: the
/// build fails instead of hanging.
#[tokio::test]
async fn load_slow_describe() {
    let started = Instant::now();
    let e = build_error(probes::LOAD_SLOW_DESCRIBE).await;
    let took = started.elapsed();
    assert!(
        matches!(e, HostError::Load(LoadError::Describe { .. })),
        "{e:?}"
    );
    assert_mentions(&e, &["describe failed", "TIMEOUT"]);
    assert!(
        took < DESCRIBE_DEADLINE + Duration::from_secs(5),
        "the load took {took:?}"
    );
}

#[tokio::test]
async fn load_duplicate_names() {
    let e = build_error(probes::LOAD_DUPLICATE_NAMES).await;
    assert!(matches!(e, HostError::Descriptor(_)), "{e:?}");
    assert_mentions(&e, &["\"echo\" twice"]);
}

#[tokio::test]
async fn load_invalid_name() {
    let e = build_error(probes::LOAD_INVALID_NAME).await;
    assert!(
        matches!(e, HostError::Load(LoadError::Describe { .. })),
        "{e:?}"
    );
    assert_mentions(&e, &["\"rm -rf /\"", "is not valid"]);
}

#[tokio::test]
async fn load_invalid_schema() {
    let e = build_error(probes::LOAD_INVALID_SCHEMA).await;
    assert!(matches!(e, HostError::Descriptor(_)), "{e:?}");
    assert_mentions(&e, &["bad_schema", "invalid input schema"]);
}

#[tokio::test]
async fn load_non_object_schema() {
    let e = build_error(probes::LOAD_NON_OBJECT_SCHEMA).await;
    assert!(
        matches!(e, HostError::Load(LoadError::Describe { .. })),
        "{e:?}"
    );
    assert_mentions(&e, &["string_args", "must describe an object"]);
}

#[tokio::test]
async fn load_schema_not_json() {
    let e = build_error(probes::LOAD_SCHEMA_NOT_JSON).await;
    assert!(
        matches!(e, HostError::Load(LoadError::Describe { .. })),
        "{e:?}"
    );
    assert_mentions(&e, &["bad_schema", "input schema is not JSON"]);
}

/// Nothing is half-applied: a good component next to a bad one does not
/// give a host with only the good one.
#[tokio::test]
async fn load_one_bad_component_fails_the_build() {
    let ws = tempfile::tempdir().unwrap();
    let mut b = builder(
        probes::CACHE_ECHO,
        ws.path(),
        toolhost::Limits::default(),
        suite_options(),
    );
    b.tool_file(probes::LOAD_DESCRIBE_TRAPS);
    let e = b
        .build()
        .await
        .expect_err("one bad component fails the whole build");
    assert_mentions(&e, &["describe failed"]);
}

/// A tool built against `toolhost:tool@0.1.0` loads in a host of 0.1.1 and
/// runs, its `host@0.1.0` imports linked to the 0.1.1 definitions.
#[tokio::test]
async fn load_wit_0_1_0() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(
        probes::LOAD_WIT_0_1_0,
        ws.path(),
        toolhost::Limits::default(),
    )
    .await;
    let tool = host.tools(None);
    let [tool] = tool.as_slice() else {
        panic!("one tool expected");
    };
    assert!(
        tool.imports()
            .iter()
            .any(|i| i == "toolhost:tool/host@0.1.0"),
        "built against 0.1.0: {:?}",
        tool.imports()
    );
    let r = host
        .call(
            toolhost::CallRequest::new("legacy_echo", serde_json::json!({"text": "hi"}))
                .mode(toolhost::SandboxMode::None),
        )
        .await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(
        r.content,
        vec![toolhost::ContentItem::text(r#"echo {"text":"hi"}"#)]
    );
    assert_eq!(r.receipt.logs.len(), 1);
    assert_eq!(r.receipt.progress_reports, 1);
}
