//! Sandbox modes (DESIGN.md §2): what each mode lets a tool reach on the
//! host's filesystem. Every probe is the same `fs` tool (see
//! `probes/src/shared/fsops.rs`); the tests send operations, check what
//! the guest saw, and then check the host's real filesystem.
//!
//! Layout of every test: a temporary root with `ws/` (the workspace) and,
//! next to it, `outside/` holding a `passwd` file the tools must never
//! reach except in `danger-full-access`. The workspace holds symlinks that
//! point outside (`link_out -> ../outside`, `link_passwd -> /abs/outside/passwd`).

use crate::common::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use toolhost::{CallResult, ErrorCode, Host, Limits, SandboxMode};

toolhost_conformance::foreach_mode!(assert_test_exists);

const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n";

struct Fixture {
    _root: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        let outside = root.path().join("outside");
        std::fs::create_dir_all(ws.join("sub/empty")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(ws.join("a.txt"), "alpha").unwrap();
        std::fs::write(ws.join("sub/b.txt"), "beta").unwrap();
        std::fs::write(ws.join("sub/gone.txt"), "to be removed").unwrap();
        std::fs::write(outside.join("passwd"), PASSWD).unwrap();
        std::os::unix::fs::symlink("../outside", ws.join("link_out")).unwrap();
        std::os::unix::fs::symlink(outside.join("passwd"), ws.join("link_passwd")).unwrap();
        let ws = ws.canonicalize().unwrap();
        let outside = outside.canonicalize().unwrap();
        Fixture {
            _root: root,
            ws,
            outside,
        }
    }

    /// The host path of the file outside, as the absolute path a tool would try.
    fn passwd(&self) -> String {
        self.outside.join("passwd").display().to_string()
    }

    fn outside_path(&self, name: &str) -> String {
        self.outside.join(name).display().to_string()
    }
}

/// Runs `ops` and asserts each one succeeded or failed as expected.
/// Returns the details (what was read, or the error).
async fn run_ops(host: &Host, mode: SandboxMode, ops: &[(Value, bool)]) -> Vec<String> {
    let list: Vec<Value> = ops.iter().map(|(op, _)| op.clone()).collect();
    let r = call(host, "fs", json!({ "ops": list }), mode).await;
    assert!(r.is_ok(), "the fs probe itself must run in {mode}: {r:?}");
    let results = r.canonical["results"].as_array().unwrap();
    assert_eq!(results.len(), ops.len());
    let mut details = Vec::new();
    for ((op, expect_ok), got) in ops.iter().zip(results) {
        let ok = got["ok"].as_bool().unwrap();
        let detail = got["detail"].as_str().unwrap().to_string();
        assert_eq!(
            ok,
            *expect_ok,
            "in {mode}, {op} should {}, but: {detail:?}",
            if *expect_ok { "succeed" } else { "fail" }
        );
        details.push(detail);
    }
    details
}

fn op(op: &str, path: &str) -> Value {
    json!({ "op": op, "path": path })
}

fn write(path: &str, data: &str) -> Value {
    json!({ "op": "write", "path": path, "data": data })
}

fn rename(from: &str, to: &str) -> Value {
    json!({ "op": "rename", "from": from, "to": to })
}

#[tokio::test]
async fn mode_none() {
    let fx = Fixture::new();
    let (ws_before, out_before) = (snapshot(&fx.ws), snapshot(&fx.outside));
    let host = host_with(probes::MODE_NONE, &fx.ws, Limits::default()).await;
    let passwd = fx.passwd();
    // No filesystem at all: not the workspace, not the root, not by any path.
    run_ops(
        &host,
        SandboxMode::None,
        &[
            (op("read_dir", "."), false),
            (op("read_dir", "/"), false),
            (op("read_dir", ""), false),
            (op("read", "a.txt"), false),
            (op("read", "./a.txt"), false),
            (op("read", "sub/b.txt"), false),
            (op("read", &passwd), false),
            (op("read", "/etc/passwd"), false),
            (write("new.txt", "x"), false),
            (write("/tmp/x", "x"), false),
            (write(&fx.outside_path("new.txt"), "x"), false),
            (op("mkdir", "d"), false),
            (op("remove_file", "a.txt"), false),
        ],
    )
    .await;
    assert_eq!(
        snapshot(&fx.ws),
        ws_before,
        "mode none changed the workspace"
    );
    assert_eq!(
        snapshot(&fx.outside),
        out_before,
        "mode none changed a file outside the workspace"
    );
}

#[tokio::test]
async fn mode_read_only() {
    let fx = Fixture::new();
    let (ws_before, out_before) = (snapshot(&fx.ws), snapshot(&fx.outside));
    let host = host_with(probes::MODE_READ_ONLY, &fx.ws, Limits::default()).await;
    let passwd = fx.passwd();
    let details = run_ops(
        &host,
        SandboxMode::ReadOnly,
        &[
            // Reads work, relative to the workspace.
            (op("read", "a.txt"), true),
            (op("read", "sub/b.txt"), true),
            (op("read_dir", "."), true),
            // Every kind of write fails.
            (write("a.txt", "changed"), false),
            (write("new.txt", "x"), false),
            (json!({"op": "append", "path": "a.txt", "data": "+"}), false),
            (op("create_new", "new2.txt"), false),
            (op("mkdir", "newdir"), false),
            (op("remove_file", "a.txt"), false),
            (op("remove_file", "link_passwd"), false),
            (op("remove_dir", "sub/empty"), false),
            (rename("a.txt", "renamed.txt"), false),
            (op("truncate", "a.txt"), false),
            (json!({"op": "set_len", "path": "a.txt", "len": 0}), false),
            (
                json!({"op": "set_len", "path": "sub/b.txt", "len": 100}),
                false,
            ),
            // No scratch directory in this mode.
            (write("/tmp/x", "x"), false),
            // Nothing outside the workspace is readable, by any route.
            (op("read", "link_passwd"), false),
            (op("read", "link_out/passwd"), false),
            (op("read", "../outside/passwd"), false),
            (op("read", &passwd), false),
        ],
    )
    .await;
    assert_eq!(details[0], "alpha");
    assert_eq!(details[1], "beta");
    assert_eq!(details[2], "a.txt,link_out,link_passwd,sub");
    assert_eq!(
        snapshot(&fx.ws),
        ws_before,
        "read-only changed the workspace"
    );
    assert_eq!(
        snapshot(&fx.outside),
        out_before,
        "read-only changed a file outside the workspace"
    );
}

/// The cap on what a tool hands the host at once (its result, one host
/// call's arguments) does not limit what it writes: a 40 MiB buffer, more
/// than twice the cap, goes to a file through one `write`.
#[tokio::test]
async fn a_tool_writes_a_buffer_larger_than_its_transfer_cap() {
    let fx = Fixture::new();
    let host = host_with(probes::MODE_WORKSPACE_WRITE, &fx.ws, Limits::default()).await;
    let details = run_ops(
        &host,
        SandboxMode::WorkspaceWrite,
        &[
            (
                json!({"op": "write_big", "path": "big.bin", "mib": 40}),
                true,
            ),
            (op("metadata", "big.bin"), true),
        ],
    )
    .await;
    assert_eq!(details[1], format!("file {}", 40 << 20), "{details:?}");
}

#[tokio::test]
async fn mode_workspace_write() {
    let fx = Fixture::new();
    let out_before = snapshot(&fx.outside);
    let host = host_with(probes::MODE_WORKSPACE_WRITE, &fx.ws, Limits::default()).await;

    // The tool needs workspace-write: a narrower call is refused before it runs.
    let ws_before = snapshot(&fx.ws);
    let refused = call(
        &host,
        "fs",
        json!({"ops": [write("new.txt", "x")]}),
        SandboxMode::ReadOnly,
    )
    .await;
    assert_eq!(
        refused.code(),
        Some(ErrorCode::SandboxUnavailable),
        "{refused:?}"
    );
    assert_eq!(snapshot(&fx.ws), ws_before);

    let passwd = fx.passwd();
    let details = run_ops(
        &host,
        SandboxMode::WorkspaceWrite,
        &[
            // Inside the workspace everything works.
            (write("new.txt", "hello"), true),
            (op("mkdir", "newdir"), true),
            (write("newdir/n.txt", "nested"), true),
            (rename("a.txt", "renamed.txt"), true),
            (
                json!({"op": "append", "path": "sub/b.txt", "data": "+"}),
                true,
            ),
            (op("remove_file", "sub/gone.txt"), true),
            (op("remove_dir", "sub/empty"), true),
            // Nothing outside: not through `..`, ...
            (write("../outside/escape.txt", "x"), false),
            (write("../outside/passwd", "pwned"), false),
            (op("mkdir", "../outside/d"), false),
            (rename("renamed.txt", "../outside/moved.txt"), false),
            (op("remove_file", "../outside/passwd"), false),
            // ... not by absolute path, ...
            (write(&passwd, "pwned"), false),
            (write(&fx.outside_path("new.txt"), "x"), false),
            (op("truncate", &passwd), false),
            // ... not through a symlink that points outside.
            (write("link_passwd", "pwned"), false),
            (op("truncate", "link_passwd"), false),
            (
                json!({"op": "append", "path": "link_passwd", "data": "pwned"}),
                false,
            ),
            (write("link_out/passwd", "pwned"), false),
            (write("link_out/new.txt", "x"), false),
            (op("remove_file", "link_out/passwd"), false),
            (op("read", "link_passwd"), false),
            // The per-call scratch directory is writable.
            (write("/tmp/scratch.txt", "scratch"), true),
            (op("read", "/tmp/scratch.txt"), true),
            (op("read_dir", "/tmp"), true),
            // Removing the link itself is a workspace change; its target stays.
            (op("remove_file", "link_passwd"), true),
        ],
    )
    .await;
    assert_eq!(details[23], "scratch");
    assert_eq!(details[24], "scratch.txt");

    // The host's workspace holds exactly the changes made inside it.
    let ws = &fx.ws;
    assert_eq!(
        std::fs::read_to_string(ws.join("new.txt")).unwrap(),
        "hello"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("newdir/n.txt")).unwrap(),
        "nested"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("renamed.txt")).unwrap(),
        "alpha"
    );
    assert!(!ws.join("a.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("sub/b.txt")).unwrap(),
        "beta+"
    );
    assert!(!ws.join("sub/gone.txt").exists());
    assert!(!ws.join("sub/empty").exists());
    assert!(std::fs::symlink_metadata(ws.join("link_passwd")).is_err());
    assert_eq!(
        std::fs::read_link(ws.join("link_out")).unwrap(),
        Path::new("../outside")
    );
    // Scratch files never land in the workspace.
    assert!(!ws.join("tmp").exists() && !ws.join("scratch.txt").exists());
    // And nothing outside changed: no new file, `passwd` intact.
    assert_eq!(
        snapshot(&fx.outside),
        out_before,
        "workspace-write changed a file outside the workspace"
    );
    assert_eq!(
        std::fs::read_to_string(fx.outside.join("passwd")).unwrap(),
        PASSWD
    );
}

/// The scratch directory of the call whose `/tmp` holds `marker`, if any:
/// in a runtime's home (`toolhost-scratch-*` under `TMPDIR`).
fn find_scratch(marker: &str) -> Option<PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .ok()?
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("toolhost-scratch-")
        })
        .filter_map(|home| std::fs::read_dir(home.path()).ok())
        .flat_map(|calls| calls.flatten().map(|e| e.path()))
        .find(|p| p.join(marker).is_file())
}

/// Runs a call that writes `marker` into its scratch `/tmp`, waits for
/// `release` in the workspace, then runs `then`. While it waits, finds the
/// scratch directory on the host; if `release_it`, lets the call go on.
/// Returns the result and the scratch directory seen during the call.
async fn scratch_call(
    host: &Host,
    ws: &Path,
    marker: &str,
    release_it: bool,
    then: &[Value],
) -> (CallResult, PathBuf) {
    let mut ops = vec![
        write(&format!("/tmp/{marker}"), "scratch"),
        op("wait_for", "release"),
    ];
    ops.extend_from_slice(then);
    let ops = json!({ "ops": ops });
    let watch = async {
        for _ in 0..2000 {
            if let Some(dir) = find_scratch(marker) {
                if release_it {
                    std::fs::write(ws.join("release"), "").unwrap();
                }
                return Some(dir);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    };
    let (r, dir) = tokio::join!(call(host, "fs", ops, SandboxMode::WorkspaceWrite), watch);
    let dir = dir.unwrap_or_else(|| {
        panic!("the scratch directory holding {marker} was never seen; result: {r:?}")
    });
    (r, dir)
}

/// The scratch directory exists on the host during the call and is gone
/// after it, whether the call ends normally or by its deadline.
#[tokio::test]
async fn mode_workspace_write_scratch_is_removed() {
    let fx = Fixture::new();
    let marker = format!(
        "marker-{}-{}",
        std::process::id(),
        fx.ws
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
    );

    let host = host_with(probes::MODE_WORKSPACE_WRITE, &fx.ws, Limits::default()).await;
    let (r, dir) = scratch_call(&host, &fx.ws, &marker, true, &[]).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join(&marker)).ok(),
        None,
        "the scratch file outlived the call"
    );
    assert!(
        !dir.exists(),
        "the scratch directory {} outlived the call",
        dir.display()
    );
    std::fs::remove_file(fx.ws.join("release")).unwrap();

    let limits = Limits {
        deadline: Duration::from_millis(1500),
        ..Limits::default()
    };
    let host = host_with(probes::MODE_WORKSPACE_WRITE, &fx.ws, limits).await;
    let (r, dir) = scratch_call(&host, &fx.ws, &marker, false, &[]).await;
    assert_eq!(r.code(), Some(ErrorCode::Timeout), "{r:?}");
    assert!(
        !dir.exists(),
        "the scratch directory {} outlived a call that timed out",
        dir.display()
    );
}

/// Every call starts with an empty `/tmp`, whatever earlier calls of the
/// same host did with theirs: left files behind, or wrote and removed them
/// (an untouched scratch directory may be kept for a later call; one a call
/// changed never is).
#[tokio::test]
async fn mode_workspace_write_scratch_starts_empty_after_earlier_calls() {
    let fx = Fixture::new();
    let host = host_with(probes::MODE_WORKSPACE_WRITE, &fx.ws, Limits::default()).await;
    let mode = SandboxMode::WorkspaceWrite;
    let empty = || (op("read_dir", "/tmp"), true);
    // Untouched (only listed): kept.
    assert_eq!(run_ops(&host, mode, &[empty()]).await, [""]);
    // Files and a directory left behind.
    let left = [
        empty(),
        (write("/tmp/left.txt", "secret"), true),
        (op("mkdir", "/tmp/d"), true),
        (op("read_dir", "/tmp"), true),
    ];
    let details = run_ops(&host, mode, &left).await;
    assert_eq!(
        (details[0].as_str(), details[3].as_str()),
        ("", "d,left.txt")
    );
    // Written and removed again: empty when the call ends, but changed, so
    // the directory is removed with its call, not kept.
    let marker = format!("undone-{}", std::process::id());
    let then = [
        op("remove_file", &format!("/tmp/{marker}")),
        op("read_dir", "/tmp"),
    ];
    let (r, dir) = scratch_call(&host, &fx.ws, &marker, true, &then).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.canonical["results"][3]["detail"], "", "{r:?}");
    assert!(
        !dir.exists(),
        "a scratch directory written to and emptied again outlived its call: {}",
        dir.display()
    );
    std::fs::remove_file(fx.ws.join("release")).unwrap();
    for _ in 0..3 {
        assert_eq!(run_ops(&host, mode, &[empty()]).await, [""]);
    }
}

#[tokio::test]
async fn mode_danger_full_access() {
    let fx = Fixture::new();
    let host = host_with(probes::MODE_DANGER_FULL_ACCESS, &fx.ws, Limits::default()).await;
    let new_outside = fx.outside_path("new.txt");
    let details = run_ops(
        &host,
        SandboxMode::DangerFullAccess,
        &[
            (write(&new_outside, "full access"), true),
            (op("read", &fx.passwd()), true),
            (write("rel.txt", "relative"), true),
        ],
    )
    .await;
    assert_eq!(details[1], PASSWD);
    assert_eq!(
        std::fs::read_to_string(&new_outside).unwrap(),
        "full access"
    );
    // Relative paths still mean the workspace, not the host root.
    assert_eq!(
        std::fs::read_to_string(fx.ws.join("rel.txt")).unwrap(),
        "relative"
    );
}
