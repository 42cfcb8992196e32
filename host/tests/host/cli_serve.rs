//! `toolhost serve --mcp` that cannot start (a flag, a file of its
//! configuration, its tools): the client's `initialize` is
//! answered with a JSON-RPC error that carries the reason, then the server
//! exits 2 (a client that only saw the pipe close could not say why). The
//! reasons themselves say what to do: a tool name offered by several files
//! names every file; a tools directory inside the workspace names the
//! workspace flag.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// A tools directory with the embedded `sleep` tool under each of `names`.
fn tools_dir(root: &Path, names: &[&str]) -> std::path::PathBuf {
    let dir = root.join("tools");
    std::fs::create_dir_all(&dir).unwrap();
    let (_, bytes) = toolhost::EMBEDDED_TOOLS
        .iter()
        .find(|(n, _)| *n == "sleep")
        .unwrap();
    for name in names {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    dir
}

/// Starts `serve --mcp` with `args`, sends `initialize` (stdin stays
/// open), and returns the one line it answers and its exit status.
fn initialize(args: &[&std::ffi::OsStr]) -> (Value, Option<i32>, String) {
    let state = tempfile::tempdir().unwrap();
    let mut child = Command::new(crate::support::bin())
        .args(["serve", "--mcp", "--state"])
        .arg(state.path())
        .args(args)
        .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
        .env_remove("TOOLHOST_STATE_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let request = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": { "name": "cli-serve-test", "version": "0" }
        }
    });
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{request}").unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    let answer = serde_json::from_str(&line).unwrap_or(Value::Null);
    (
        answer,
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The error message of an answer to request 1, which must be an error.
fn error_message(answer: &Value) -> &str {
    assert_eq!(answer["id"], 1, "{answer}");
    assert!(answer.get("result").is_none(), "{answer}");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    answer["error"]["message"].as_str().unwrap()
}

/// Three files offering one tool name: all three are named, with the ways
/// out, in the answer to `initialize` and on stderr; exit 2.
#[test]
fn a_name_clash_answers_initialize_with_every_file() {
    let root = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let tools = tools_dir(root.path(), &["a.wasm", "b.wasm", "c.wasm"]);
    let (answer, code, stderr) = initialize(&[
        "--tools".as_ref(),
        tools.as_os_str(),
        "--tools-only".as_ref(),
        "--workspace".as_ref(),
        ws.path().as_os_str(),
    ]);
    let message = error_message(&answer);
    assert!(message.starts_with("toolhost cannot serve: "), "{message}");
    for needle in [
        "tool name \"sleep\" is offered by each of ",
        "a.wasm, ",
        "b.wasm and ",
        "c.wasm",
        "rename the tool in all but one",
        "remove the others from the tools directory",
    ] {
        assert!(message.contains(needle), "{needle:?} in {message}");
    }
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("c.wasm"), "{stderr}");
}

/// A copy of an embedded tool beside the embedded ones: both sources are
/// named, and `--tools-only` is suggested.
#[test]
fn a_clash_with_an_embedded_tool_suggests_tools_only() {
    let root = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let tools = tools_dir(root.path(), &["my_sleep.wasm"]);
    let (answer, code, _) = initialize(&[
        "--tools".as_ref(),
        tools.as_os_str(),
        "--workspace".as_ref(),
        ws.path().as_os_str(),
    ]);
    let message = error_message(&answer);
    for needle in [
        "offered by both embedded:sleep and ",
        "my_sleep.wasm",
        "serve --tools-only",
    ] {
        assert!(message.contains(needle), "{needle:?} in {message}");
    }
    assert_eq!(code, Some(2));
}

/// A tools directory inside the workspace (the default workspace is the
/// current directory): refused, and the answer says why and which flag
/// moves the workspace.
#[test]
fn a_tools_directory_in_the_workspace_names_the_workspace_flag() {
    let ws = tempfile::tempdir().unwrap();
    let tools = tools_dir(ws.path(), &["sleepy.wasm"]);
    let (answer, code, _) = initialize(&[
        "--tools".as_ref(),
        tools.as_os_str(),
        "--tools-only".as_ref(),
        "--workspace".as_ref(),
        ws.path().as_os_str(),
    ]);
    let message = error_message(&answer);
    for needle in [
        "is inside the workspace",
        "could rewrite the tools this server reloads",
        "the current directory without it",
        "pass --workspace",
    ] {
        assert!(message.contains(needle), "{needle:?} in {message}");
    }
    assert_eq!(code, Some(2));
}

/// A configuration error found before any tool loads (an unknown
/// `--approver`) is answered the same way.
#[test]
fn a_configuration_error_answers_initialize() {
    let ws = tempfile::tempdir().unwrap();
    let (answer, code, _) = initialize(&[
        "--approver".as_ref(),
        "nobody".as_ref(),
        "--workspace".as_ref(),
        ws.path().as_os_str(),
    ]);
    let message = error_message(&answer);
    assert!(message.contains("unknown approver \"nobody\""), "{message}");
    assert_eq!(code, Some(2));
}

/// A flag the command line does not know is refused before anything else
/// runs; a stdio client still hears why, not only "Connection closed".
#[test]
fn an_unknown_flag_answers_initialize() {
    let (answer, code, stderr) = initialize(&["--no-such-flag".as_ref()]);
    let message = error_message(&answer);
    assert!(message.contains("--no-such-flag"), "{message}");
    assert!(stderr.contains("--no-such-flag"), "{stderr}");
    assert_eq!(code, Some(2));
}
