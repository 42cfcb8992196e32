//! Tools that break their contract at call time, and a slow but honest
//! `describe`. Each lie ends with its own code, and an honest call on the
//! same host works afterwards.

use crate::common::*;
use serde_json::json;
use std::time::Instant;
use toolhost::runtime::DESCRIBE_DEADLINE;
use toolhost::{ErrorCode, Host, Limits, SandboxMode};

toolhost_conformance::foreach_contract!(assert_test_exists);

async fn assert_honest_works(host: &Host) {
    let r = call(host, "honest", json!({}), SandboxMode::None).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.canonical, json!({"n": 1}));
    assert_eq!(r.meta, json!({"ui": "ok"}));
}

/// A failed output validation says where and which rule failed without
/// quoting the output: a quote, cut, could carry part of a secret past the
/// redaction of the whole; and what the tool wrote reaches the model only
/// through its content, under the policy's text rules.
#[tokio::test]
async fn contract_liar_invalid_output_is_not_quoted() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(probes::CONTRACT_LIAR, ws.path(), Limits::default()).await;
    let r = call(&host, "wrong_type", json!({}), SandboxMode::None).await;
    assert_eq!(r.code(), Some(ErrorCode::OutputInvalid), "{r:?}");
    let message = &r.error.as_ref().unwrap().message;
    assert!(!message.contains("one"), "{message}");
    assert!(
        message.contains("at /n: ") && message.contains("/properties/n/type"),
        "{message}"
    );
}

/// Each lying tool ends with its code and message; nothing of the bad
/// output reaches `canonical` or `meta`.
#[tokio::test]
async fn contract_liar() {
    let ws = tempfile::tempdir().unwrap();
    let host = host_with(probes::CONTRACT_LIAR, ws.path(), Limits::default()).await;
    assert_honest_works(&host).await;
    for (tool, code, parts) in [
        (
            "wrong_type",
            ErrorCode::OutputInvalid,
            &["does not match its output schema"][..],
        ),
        (
            "extra_field",
            ErrorCode::OutputInvalid,
            &["does not match its output schema"][..],
        ),
        (
            "not_json",
            ErrorCode::OutputInvalid,
            &["canonical output is not JSON"][..],
        ),
        (
            "meta_not_json",
            ErrorCode::OutputInvalid,
            &["meta is not JSON"][..],
        ),
        (
            "tool_error",
            ErrorCode::ToolError,
            &["not-found", "no such widget: 42"][..],
        ),
    ] {
        let r = call(&host, tool, json!({}), SandboxMode::None).await;
        assert_eq!(r.code(), Some(code), "{tool}: {r:?}");
        let message = &r.error.as_ref().unwrap().message;
        for p in parts {
            assert!(
                message.contains(p),
                "{tool}: the message should say {p:?}: {message}"
            );
        }
        assert_eq!(r.canonical, serde_json::Value::Null, "{tool}");
        assert_eq!(r.meta, serde_json::Value::Null, "{tool}");
        assert_honest_works(&host).await;
    }
}

/// A `describe` that takes 1.5 s, well inside DESCRIBE_DEADLINE, loads. A
/// second load from the same compile cache takes the descriptors from the
/// cache and does not wait for `describe` again.
#[tokio::test]
async fn contract_slow_describe() {
    let ws = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let options = || toolhost::RuntimeOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..suite_options()
    };
    let load = || {
        host_with_options(
            probes::CONTRACT_SLOW_DESCRIBE,
            ws.path(),
            Limits::default(),
            options(),
        )
    };
    let started = Instant::now();
    let host = load().await;
    let took = started.elapsed();
    assert!(
        took.as_millis() >= 1400,
        "describe sleeps 1.5 s, but the load took {took:?}: was describe run?"
    );
    assert!(took < DESCRIBE_DEADLINE, "the load took {took:?}");
    assert_echo_works(&host).await;
    let started = Instant::now();
    let again = load().await;
    let took = started.elapsed();
    assert!(
        took.as_millis() < 1400,
        "the second load took {took:?}: the cached descriptors were not used"
    );
    assert_echo_works(&again).await;
}

/// `toolhost conformance` gives an untrusted tool no grant it asks for: the
/// probe's `grab_root` declares `danger-full-access` and its example writes
/// to an absolute host path. Its examples are not run (a warning row says
/// why); `write_outside` runs in `workspace-write` on a throwaway workspace
/// and its row names that mode. Nothing appears on the host.
#[tokio::test]
async fn contract_wide_examples() {
    let target = std::path::Path::new("/tmp/toolhost-conformance-wide-examples");
    let _ = std::fs::remove_dir_all(target);
    let runtime = std::sync::Arc::new(toolhost::Runtime::new(suite_options()).unwrap());
    let bytes = std::fs::read(probes::CONTRACT_WIDE_EXAMPLES).unwrap();
    let report = toolhost::conformance::check_component(runtime, "wide", &bytes).await;
    assert!(
        !target.exists(),
        "a checked tool wrote to the host: {:?}\n{report:#?}",
        std::fs::read_dir(target).map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
    );
    let row = |name: &str| {
        report
            .checks
            .iter()
            .find(|c| c.check == name)
            .unwrap_or_else(|| panic!("no row {name}: {report:#?}"))
    };
    let skipped = row("examples:grab_root");
    assert_eq!(skipped.verdict, toolhost::conformance::Verdict::Warn);
    assert!(
        skipped
            .detail
            .contains("examples not run: needs danger-full-access"),
        "{skipped:?}"
    );
    assert!(
        !report
            .checks
            .iter()
            .any(|c| c.check.starts_with("example:grab_root")),
        "{report:#?}"
    );
    let ran = row("example:write_outside[0]");
    assert_eq!(ran.verdict, toolhost::conformance::Verdict::Pass, "{ran:?}");
    assert_eq!(ran.mode, Some(SandboxMode::WorkspaceWrite));
    assert!(ran.detail.contains("ran in workspace-write"), "{ran:?}");
    // No row ran anything wider than workspace-write.
    assert!(
        report
            .checks
            .iter()
            .filter_map(|c| c.mode)
            .all(|m| m <= toolhost::conformance::WIDEST_CHECK_MODE),
        "{report:#?}"
    );
}

/// A tool whose example reaches for the network but that does not declare
/// side effect `external` fails conformance: no policy grants it network, so
/// the example can never run (it passed with a warning telling the author to
/// grant the host in a policy, which could not help). Nothing connects.
#[tokio::test]
async fn contract_undeclared_network() {
    let runtime = std::sync::Arc::new(toolhost::Runtime::new(suite_options()).unwrap());
    let bytes = std::fs::read(probes::CONTRACT_UNDECLARED_NETWORK).unwrap();
    let report = toolhost::conformance::check_component(runtime, "fetch", &bytes).await;
    let row = report
        .checks
        .iter()
        .find(|c| c.check == "example:fetch[0]")
        .unwrap_or_else(|| panic!("no example row: {report:#?}"));
    assert_eq!(row.verdict, toolhost::conformance::Verdict::Fail, "{row:?}");
    assert!(
        row.detail.contains("GET https://example.com:443")
            && row.detail.contains("only tools that declare `external`"),
        "{row:?}"
    );
    assert!(!report.passed(), "{report:#?}");
}

/// Conformance runs the body even when the schema declares no examples:
/// with an argument object generated from the input schema. `panic`
/// (empty arguments, no examples) traps on it, and fails conformance; its
/// author is told how to declare examples with the Rust guest SDK.
#[tokio::test]
async fn a_body_that_traps_on_generated_arguments_fails_conformance() {
    let runtime = std::sync::Arc::new(toolhost::Runtime::new(suite_options()).unwrap());
    let bytes = std::fs::read(probes::RUNTIME_PANIC).unwrap();
    let report = toolhost::conformance::check_component(runtime, "panic", &bytes).await;
    let row = |name: &str| {
        report
            .checks
            .iter()
            .find(|c| c.check == name)
            .unwrap_or_else(|| panic!("no row {name}: {report:#?}"))
    };
    let missing = row("examples:panic");
    assert_eq!(missing.verdict, toolhost::conformance::Verdict::Warn);
    assert!(
        missing.detail.contains("#[schemars(example = "),
        "{missing:?}"
    );
    let generated = row("generated:panic");
    assert_eq!(
        generated.verdict,
        toolhost::conformance::Verdict::Fail,
        "{generated:?}"
    );
    assert!(
        generated.detail.contains("with generated arguments {}")
            && generated.detail.contains("TRAP"),
        "{generated:?}"
    );
    assert_eq!(generated.mode, Some(SandboxMode::None));
    assert!(!report.passed(), "{report:#?}");
}
