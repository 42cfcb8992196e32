//! Tools written in languages other than Rust, built from source by their
//! language's own toolchain (one module per language, each with a build
//! script under `scripts/`), then checked the same way: loaded and called
//! through the whole pipeline by the library (`Host::call`) and by
//! `toolhost run --json` (an ok result; schema-invalid arguments refused
//! `INVALID_ARGS` before the body; a policy deny honoured), and passed by
//! `toolhost conformance`.
//!
//! A language's tests never skip: when its component cannot be built (the
//! toolchain cannot be found or installed), they fail with the build
//! script's message, which says how to install it.
//!
//! A language slots in as one more module here: its examples under
//! `examples/LANG/`, a script `scripts/build-LANG-tools` that builds them
//! into `target/LANG-tools/` (run by `.ci/run` before the tests), and an
//! [`Example`] per tool handed to [`library_pipeline`], [`cli_pipeline`]
//! and [`conformance_passes`]. The benchmark's section 9
//! (`language_examples` in `host/benches/pipeline.rs`) takes one entry per
//! language.

mod js;
mod python;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use toolhost::log::EventKind;
use toolhost::policy::Policy;
use toolhost::{CallRequest, CallResult, ErrorCode, Host, HostBuilder, SandboxMode};

/// One example tool of one language, and how to call it.
pub struct Example {
    /// The built component.
    pub component: PathBuf,
    /// The tool's name.
    pub tool: &'static str,
    /// The mode its calls run in.
    pub mode: SandboxMode,
    /// Files (path, text) the workspace holds for its calls.
    pub files: &'static [(&'static str, &'static str)],
    /// Arguments its schema accepts.
    pub args: Value,
    /// The canonical result of `args`.
    pub expected: Value,
    /// Arguments its schema refuses.
    pub invalid: Value,
    /// How many examples its input schema declares (conformance runs each).
    pub examples: usize,
}

/// A fresh workspace holding `ex.files`.
pub fn workspace_for(ex: &Example) -> tempfile::TempDir {
    let ws = crate::support::tempdir();
    for (path, text) in ex.files {
        std::fs::write(ws.path().join(path), text).unwrap();
    }
    ws
}

/// The workspace root (the parent of the `host` crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// Runs `scripts/SCRIPT ARGS... target/OUT` (which builds a language's
/// examples into `target/OUT`, rebuilding only what changed) and returns
/// `target/OUT`, or the script's own words when it fails.
pub fn build_with(script: &str, args: &[&str], out: &str) -> Result<PathBuf, String> {
    let root = repo_root();
    let script_path = root.join("scripts").join(script);
    let out_dir = root.join("target").join(out);
    let output = Command::new(&script_path)
        .args(args)
        .arg(&out_dir)
        .current_dir(&root)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script_path.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} failed ({}):\n{}{}",
            script_path.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(out_dir)
}

/// Compiles `component` into the tests' shared cache once, before the tests
/// that use it run at the same time (each would compile it otherwise).
pub fn warm_cache(component: &Path) -> Result<(), String> {
    let out = Command::new(crate::support::bin())
        .args(["list", "--json"])
        .arg(component)
        .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
        .output()
        .map_err(|e| format!("cannot run toolhost list: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "toolhost list {} failed ({}): {}",
            component.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A policy that denies `tool`, with the reason `reason`.
fn deny_policy(tool: &str, reason: &str) -> String {
    format!(
        "version = 1\n\n[[rules]]\ntool = \"{tool}\"\ndecision = \"deny\"\nreason = \"{reason}\"\n"
    )
}

const DENY_REASON: &str = "this tool is off in this session";

async fn host_for(ex: &Example, policy: Option<&str>) -> (tempfile::TempDir, Host) {
    let ws = workspace_for(ex);
    let mut b = HostBuilder::new();
    b.tool_file(&ex.component)
        .workspace(ws.path())
        .runtime_options(crate::support::runtime_options_with_pool(4));
    if let Some(p) = policy {
        b.policy(Policy::from_toml(p, "test-policy.toml").unwrap());
    }
    let host = b.build().await.unwrap();
    (ws, host)
}

fn event_kinds(host: &Host, r: &CallResult) -> Vec<EventKind> {
    host.log()
        .events_for_call(&r.call_id)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

/// Refused with `code` before the body: no sandbox, no intent in the log.
fn assert_refused_before_the_body(host: &Host, r: &CallResult, code: ErrorCode) {
    assert_eq!(r.code(), Some(code), "{r:?}");
    assert_eq!(r.canonical, Value::Null, "{r:?}");
    assert_eq!(r.receipt.mode, None, "the body was sandboxed: {r:?}");
    let kinds = event_kinds(host, r);
    assert!(
        !kinds.contains(&EventKind::ToolIntent),
        "a refused call has an intent: {kinds:?}"
    );
}

/// Through `Host::call`: the descriptor as the helper wrote it, an ok call
/// logged with its intent, invalid arguments and a policy deny refused
/// before the body.
pub async fn library_pipeline(ex: &Example) {
    let (_ws, host) = host_for(ex, None).await;
    let tools = host.tools(None);
    let d = &tools
        .iter()
        .find(|t| t.descriptor.name == ex.tool)
        .unwrap_or_else(|| {
            panic!(
                "{} offers no {}: {tools:?}",
                ex.component.display(),
                ex.tool
            )
        })
        .descriptor;
    assert!(!d.description.is_empty());
    assert!(d.output_schema.is_some(), "no output schema: {d:?}");

    let r = host
        .call(CallRequest::new(ex.tool, ex.args.clone()).mode(ex.mode))
        .await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.canonical, ex.expected, "{r:?}");
    assert!(!r.content.is_empty(), "no content for the model: {r:?}");
    assert_eq!(r.receipt.mode, Some(ex.mode));
    let kinds = event_kinds(&host, &r);
    assert!(kinds.contains(&EventKind::ToolIntent), "{kinds:?}");

    let r = host
        .call(CallRequest::new(ex.tool, ex.invalid.clone()).mode(ex.mode))
        .await;
    assert_refused_before_the_body(&host, &r, ErrorCode::InvalidArgs);

    let (_ws, host) = host_for(ex, Some(&deny_policy(ex.tool, DENY_REASON))).await;
    let r = host
        .call(CallRequest::new(ex.tool, ex.args.clone()).mode(ex.mode))
        .await;
    assert_refused_before_the_body(&host, &r, ErrorCode::PolicyDenied);
    assert!(
        r.error.as_ref().unwrap().message.contains(DENY_REASON),
        "{r:?}"
    );
}

/// `toolhost run COMPONENT --args ARGS --mode MODE --json [extra]`: exit
/// status and the one JSON object it prints.
fn cli_run(ex: &Example, args: &Value, extra: &[&std::ffi::OsStr]) -> (i32, Value) {
    let state = crate::support::tempdir();
    let ws = workspace_for(ex);
    let out = Command::new(crate::support::bin())
        .arg("run")
        .arg(&ex.component)
        .args([
            "--args",
            &args.to_string(),
            "--mode",
            ex.mode.as_str(),
            "--json",
        ])
        .arg("--workspace")
        .arg(ws.path())
        .arg("--state")
        .arg(state.path())
        .args(extra)
        .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

/// Through `toolhost run --json`: ok (exit 0), invalid arguments (exit 1,
/// `INVALID_ARGS`, never sandboxed) and a denying `--policy` (exit 1,
/// `POLICY_DENIED`).
pub fn cli_pipeline(ex: &Example) {
    let (code, v) = cli_run(ex, &ex.args, &[]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["status"], "ok", "{v:#}");
    assert_eq!(v["tool"], ex.tool);
    assert_eq!(v["canonical"], ex.expected, "{v:#}");
    assert_eq!(v["receipt"]["mode"], ex.mode.as_str(), "{v:#}");

    let (code, v) = cli_run(ex, &ex.invalid, &[]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["error"]["code"], "INVALID_ARGS", "{v:#}");
    assert_eq!(v["receipt"]["mode"], Value::Null, "{v:#}");

    let dir = crate::support::tempdir();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, deny_policy(ex.tool, DENY_REASON)).unwrap();
    let (code, v) = cli_run(ex, &ex.args, &["--policy".as_ref(), policy.as_os_str()]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["error"]["code"], "POLICY_DENIED", "{v:#}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains(DENY_REASON),
        "{v:#}"
    );
    assert_eq!(v["receipt"]["mode"], Value::Null, "{v:#}");
}

/// `toolhost conformance COMPONENT --json` exits 0 with no failed row, has
/// run the invalid-arguments check, each of the tool's examples and the
/// body with generated arguments, and reports the component's imports.
/// Returns the report.
pub fn conformance_passes(ex: &Example) -> Value {
    let out = Command::new(crate::support::bin())
        .args(["conformance", "--json"])
        .arg(&ex.component)
        .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(json!(null));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{report:#}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let checks = report["checks"].as_array().unwrap();
    assert!(checks.iter().all(|c| c["verdict"] != "fail"), "{report:#}");
    let row = |name: String| {
        checks
            .iter()
            .find(|c| c["check"] == name.as_str())
            .unwrap_or_else(|| panic!("no {name} row: {report:#}"))
    };
    assert_eq!(row(format!("invalid-args:{}", ex.tool))["verdict"], "pass");
    for i in 0..ex.examples {
        assert_eq!(row(format!("example:{}[{i}]", ex.tool))["verdict"], "pass");
    }
    row(format!("capabilities:{}", ex.tool));
    // The body also ran with arguments generated from the input schema.
    let generated = row(format!("generated:{}", ex.tool));
    assert!(
        generated["detail"]
            .as_str()
            .unwrap()
            .contains("with generated arguments {"),
        "{generated:#}"
    );
    report
}
