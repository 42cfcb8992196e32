//! Code mode after a crash: the process is killed while an inner call (made
//! by the `python` tool's code through the host) has a durable intent and
//! no result; recovery ends it and its outer call `TOOL_OUTCOME_UNKNOWN`,
//! exactly once each, on redb and on PostgreSQL. Needs
//! `TOOLHOST_PYTHON_TOOL_DIR` (see `governance::code_mode`), and for
//! PostgreSQL `TOOLHOST_TEST_PG_URL` (`scripts/pg-test-server start`);
//! without them the tests do nothing, except under CI.

use super::support::*;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

/// The code: an inner call with an effect outside the host (a write).
const CODE: &str = "from host import tools\ntools.write_file(path='b.txt', content='x')";

/// Runs `cmd` (a `toolhost run python` on some state) to the inner
/// call's durable intent, and kills it there.
fn kill_at_the_inner_intent(mut cmd: std::process::Command, tool: &Path, policy: &Path) {
    cmd.arg("--tools").arg(tool).arg("--policy").arg(policy);
    cmd.env("TOOLHOST_TEST_PAUSE_AT", "after-inner-intent");
    let mut running = Running::spawn(cmd);
    running.wait_marker("after-inner-intent", Duration::from_secs(300));
    let ended = running.kill();
    assert_eq!(ended.status.signal(), Some(9), "{ended:?}");
    assert!(ended.stdout.is_empty(), "{ended:?}");
}

#[test]
fn on_postgres_a_kill_during_an_inner_call_leaves_both_calls_unknown_once() {
    let Some(python) = crate::support::python_tool_dir() else {
        return;
    };
    let url = match std::env::var("TOOLHOST_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "TOOLHOST_TEST_PG_URL is unset under CI"
            );
            return;
        }
    };
    let sb = Sandbox::new();
    let tool = exclusive_python(&python, sb.dir.path());
    let policy = sb.state().with_file_name("policy.toml");
    std::fs::write(&policy, "version = 1\nmode = \"workspace-write\"\n").unwrap();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let log = format!("code-mode-{}-{nanos}", std::process::id());
    let on_pg = |args: &[&str]| {
        let mut c = command_on(Path::new(&url), &sb.ws(), args);
        c.env("TOOLHOST_PG_LOG", &log)
            .env("TOOLHOST_PG_LEASE_MS", "300");
        c
    };
    let args = serde_json::json!({ "code": CODE }).to_string();
    kill_at_the_inner_intent(
        on_pg(&["run", "python", "--args", &args, "--json"]),
        &tool,
        &policy,
    );
    // Once the killed run's lease ran out, both calls are recovered, once.
    let recovered = recover_after_lease(on_pg);
    assert_eq!(recovered.lines().count(), 2, "{recovered}");
    assert!(!sb.ws().join("b.txt").exists());
}

#[test]
fn a_kill_during_an_inner_call_leaves_both_calls_unknown_once() {
    let Some(dir) = crate::support::python_tool_dir() else {
        return;
    };
    let sb = Sandbox::new();
    let dir = exclusive_python(&dir, sb.dir.path());
    // workspace-write: every call's intent is durable.
    let policy = sb.state().with_file_name("policy.toml");
    std::fs::write(&policy, "version = 1\nmode = \"workspace-write\"\n").unwrap();
    // The interpreter holds the gate alone here, so it lends its pass to
    // write_file, which runs alone; the write's intent is durable.
    let args = serde_json::json!({ "code": CODE }).to_string();
    let cmd = sb.command(&["run", "python", "--args", &args, "--json"]);
    kill_at_the_inner_intent(cmd, &dir, &policy);

    let events = read_events(&sb.state());
    let calls = check_log(&events);
    let pending = pending(&calls);
    assert_eq!(pending.len(), 2, "the outer and the inner call: {calls:?}");
    let tools: Vec<_> = pending
        .iter()
        .map(|id| calls[id].tool.clone().unwrap_or_default())
        .collect();
    assert_eq!(tools, ["python", "write_file"]);
    assert!(!sb.ws().join("b.txt").exists());
    // The inner call names its parent.
    let inner_call = events
        .iter()
        .find(|e| e.call_id == pending[1] && e.kind == toolhost::log::EventKind::ToolCall)
        .unwrap();
    assert_eq!(inner_call.payload["parent"], pending[0].as_str());
    recover_and_check(&sb.state(), &sb.ws(), Via::Cli);
}

/// A copy of the interpreter tool in `into` whose manifest says it is not
/// concurrency-safe: its calls hold the gate alone.
fn exclusive_python(dir: &std::path::Path, into: &std::path::Path) -> std::path::PathBuf {
    let copy = into.join("python-tool");
    std::fs::create_dir_all(copy.join("lib")).unwrap();
    std::fs::copy(
        dir.join("python-snapshot.wasm"),
        copy.join("python-snapshot.wasm"),
    )
    .unwrap();
    for entry in std::fs::read_dir(dir.join("lib")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.join("lib").join(entry.file_name())).unwrap();
    }
    let manifest = std::fs::read_to_string(dir.join("python.tool.toml")).unwrap();
    let manifest = manifest.replace("concurrency_safe = true", "concurrency_safe = false");
    assert!(manifest.contains("concurrency_safe = false"));
    std::fs::write(copy.join("python.tool.toml"), manifest).unwrap();
    copy
}
