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

/// A call whose body is stuck in a host system call (reading a FIFO nobody
/// writes) is abandoned at its deadline: the CLI reports `TIMEOUT`, exit 1,
/// and exits, without waiting for the stuck thread (it waited for ever).
#[test]
fn the_cli_exits_after_abandoning_a_stuck_body() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let _pipe = crate::support::fifo(ws.path());
    use crate::durability::support::{Running, command_on};
    let command = command_on(
        state.path(),
        ws.path(),
        &[
            "run",
            "read_file",
            "--mode",
            "read-only",
            "--timeout-ms",
            "3000",
            "--args",
            r#"{"path": "pipe"}"#,
        ],
    );
    // Killed (and the test failed) if it has not ended 30 s on.
    let ended = Running::spawn(command).wait_timeout(std::time::Duration::from_secs(30));
    let err = &ended.stderr;
    assert_eq!(ended.status.code(), Some(1), "{err}");
    assert!(err.contains("error: TIMEOUT: "), "{err}");
}

#[test]
fn a_multi_tool_component_needs_a_tool_name() {
    let out = run(&[env!("TOOLHOST_BENCH_GUEST"), "--args", "{}"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("fib, hash, noop, noop_write, sort") && err.contains("--tool NAME"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn tool_picks_one_tool_of_a_component() {
    let out = run(&[
        env!("TOOLHOST_BENCH_GUEST"),
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
        env!("TOOLHOST_BENCH_GUEST"),
        "--tool-name",
        "noop",
        "--args",
        "{}",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// `--tool` beside a tool name that it contradicts is a usage error, not a
/// call of the other tool (it called `write_file`).
#[test]
fn tool_beside_another_tool_name_is_refused() {
    let ws = tempfile::tempdir().unwrap();
    let out = run(&[
        "read_file",
        "--tool",
        "write_file",
        "--args",
        r#"{"path":"a.txt","content":"x"}"#,
        "--mode",
        "workspace-write",
        "--workspace",
        ws.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--tool write_file names another"), "{err}");
    assert!(!ws.path().join("a.txt").exists(), "write_file ran");
}

/// A command whose stdout is a pipe nobody reads any more (the reader of
/// `toolhost log | head` has exited).
fn with_stdout_closed(args: &[&str], state: &std::path::Path) -> std::process::Output {
    // The read end is closed before the process starts: its first write
    // to stdout fails with EPIPE, whatever the timing.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(crate::support::bin())
        .args(args)
        .arg("--state")
        .arg(state)
        .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn a_closed_stdout_ends_the_cli_quietly_after_the_call_is_recorded() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "hello\n").unwrap();
    let state = tempfile::tempdir().unwrap();
    let workspace = ws.path().to_str().unwrap();
    let run_args = [
        "run",
        "read_file",
        "--args",
        r#"{"path":"a.txt"}"#,
        "--mode",
        "read-only",
        "--workspace",
        workspace,
    ];
    for json in [false, true] {
        let mut args = run_args.to_vec();
        if json {
            args.push("--json");
        }
        let out = with_stdout_closed(&args, state.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "--json {json}: {err}");
        assert!(!err.contains("panicked"), "--json {json}: {err}");
    }
    // `toolhost log` into a closed pipe: the same quiet end.
    let out = with_stdout_closed(&["log", "--workspace", workspace], state.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // Both calls ran and were recorded before anything was printed.
    let log = Command::new(crate::support::bin())
        .args(["log", "--json", "--workspace", workspace, "--state"])
        .arg(state.path())
        .output()
        .unwrap();
    assert!(log.status.success(), "{log:?}");
    let results = String::from_utf8_lossy(&log.stdout)
        .lines()
        .filter(|l| l.contains(r#""kind":"tool/result""#) && l.contains(r#""status":"ok""#))
        .count();
    assert_eq!(results, 2);
}

/// A policy file inside the workspace is refused: a call that may write
/// the workspace could rewrite it, and so choose the grants of every later
/// call (at the next run, restart or reload). By the path as given (a link
/// inside the workspace can be re-pointed), by the file it resolves to, and
/// for the default workspace (the current directory); beside the workspace
/// it is read.
#[test]
fn a_policy_inside_the_workspace_is_refused() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let policy = "version = 1\nmode = \"danger-full-access\"\n";
    std::fs::write(ws.path().join("policy.toml"), policy).unwrap();
    std::fs::write(outside.path().join("policy.toml"), policy).unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("out")).unwrap();
    std::os::unix::fs::symlink(ws.path(), outside.path().join("in")).unwrap();
    std::fs::write(ws.path().join("a.txt"), "A").unwrap();
    let state = tempfile::tempdir().unwrap();
    let call = |cwd: &std::path::Path, args: &[&str]| {
        Command::new(crate::support::bin())
            .current_dir(cwd)
            .args(["run", "read_file", "--args", r#"{"path":"a.txt"}"#])
            .args(args)
            .arg("--state")
            .arg(state.path())
            .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
            .output()
            .unwrap()
    };
    let ws_arg = ws.path().to_str().unwrap();
    for (cwd, args) in [
        (outside.path(), vec!["--workspace", ws_arg, "--policy"]),
        (ws.path(), vec!["--policy"]),
    ] {
        for policy in [
            ws.path().join("policy.toml"),
            ws.path().join("out/policy.toml"),
            outside.path().join("in/policy.toml"),
            std::path::PathBuf::from("../")
                .join(ws.path().file_name().unwrap())
                .join("policy.toml"),
        ] {
            let mut args = args.clone();
            args.push(policy.to_str().unwrap());
            let out = call(cwd, &args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains("inside the workspace"), "{args:?}: {err}");
        }
    }
    let out = call(
        outside.path(),
        &["--workspace", ws_arg, "--policy", "policy.toml"],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "A");
    // A second name of the outside file, inside the workspace: a call
    // writing `ws/linked.toml` would rewrite the policy.
    std::fs::hard_link(
        outside.path().join("policy.toml"),
        ws.path().join("linked.toml"),
    )
    .unwrap();
    let out = call(
        outside.path(),
        &["--workspace", ws_arg, "--policy", "policy.toml"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("has 2 hard links"), "{err}");
}

/// A `--memory-mb` whose bytes do not fit a `usize` is refused, never
/// wrapped to a smaller limit (2^44 MiB shifted by 20 bits was 0 bytes).
#[test]
fn a_memory_limit_past_the_address_space_is_refused() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let out = Command::new(crate::support::bin())
        .current_dir(ws.path())
        .args(["run", "read_file", "--args", r#"{"path":"a.txt"}"#])
        .args(["--memory-mb", "17592186044416", "--state"])
        .arg(state.path())
        .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--memory-mb 17592186044416"), "{err}");
}

/// `toolhost list` makes an empty temporary workspace of its own: where
/// TMPDIR cannot hold one, it says so and how to give one, and with
/// `--workspace` it lists as it would with any other.
#[test]
fn list_says_when_it_cannot_make_its_workspace_and_takes_one() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-tmp");
    let list = |extra: &[&std::ffi::OsStr]| {
        Command::new(crate::support::bin())
            .args(["list", "--json"])
            .args(extra)
            .env("TMPDIR", &missing)
            .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
            .output()
            .unwrap()
    };
    // A configuration error (exit 2), not a call's error result.
    let out = list(&[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("TMPDIR") && err.contains("--workspace DIR"),
        "{err}"
    );
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let out = list(&["--workspace".as_ref(), workspace.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    let tools: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(tools.len(), toolhost::EMBEDDED_TOOLS.len());
}

/// `run`'s exit status, from the binary's own source (the binary has no
/// unit tests: their test binary would link wasmtime once more).
#[path = "../../src/bin/toolhost/status.rs"]
mod status;

/// A result the log could not record never exits 0, whatever it says.
#[test]
fn an_unrecorded_result_exits_3() {
    use status::run_status;
    assert_eq!(run_status(true, true), 0);
    assert_eq!(run_status(true, false), 1);
    assert_eq!(run_status(false, true), 3);
    assert_eq!(run_status(false, false), 3);
}

/// `--approver` takes the kinds `run --help` lists, each asked by its own
/// name (a `command:` approver's names its program), and refuses any other
/// before anything runs (exit 2).
#[test]
fn approver_kinds_are_the_ones_help_lists() {
    let help = Command::new(crate::support::bin())
        .args(["run", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success(), "{help:?}");
    let help = String::from_utf8_lossy(&help.stdout);
    let approver = help
        .split("--approver <KIND>")
        .nth(1)
        .and_then(|rest| rest.split("--approval-timeout").next())
        .unwrap_or_else(|| panic!("no --approver in {help}"));
    let kinds = [
        "none",
        "tty",
        "auto-approve",
        "auto-reject",
        "command:PROGRAM",
        "queue",
    ];
    for kind in kinds {
        assert!(approver.contains(kind), "{kind}: {approver}");
    }

    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let policy = state.path().join("ask.toml");
    std::fs::write(
        &policy,
        "version = 1\nmode = \"workspace-write\"\n[[rules]]\ntool = \"write_file\"\n\
         decision = \"ask\"\nreason = \"writes need a human\"\n",
    )
    .unwrap();
    let explain = |approver: &str| {
        Command::new(crate::support::bin())
            .args(["explain", "write_file", "--json", "--approver", approver])
            .args(["--args", r#"{"path":"a.txt","content":"x"}"#, "--policy"])
            .arg(&policy)
            .arg("--workspace")
            .arg(ws.path())
            .arg("--state")
            .arg(state.path())
            .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
            .output()
            .unwrap()
    };
    for kind in kinds.map(|k| k.replace("PROGRAM", "/bin/true")) {
        let out = explain(&kind);
        assert_eq!(out.status.code(), Some(0), "{kind}: {out:?}");
        let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(e["answer"]["status"], "ask", "{kind}: {e}");
        assert_eq!(e["answer"]["approver"], kind.as_str(), "{kind}: {e}");
    }
    for kind in ["sometimes", "command:", "command:  ", "Queue"] {
        let out = explain(kind);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{kind}: {err}");
        assert!(
            err.contains(&format!("unknown approver {kind:?}")) && err.contains("queue"),
            "{kind}: {err}"
        );
    }
}
