//! The filesystem escape corpus (DESIGN.md §2): adversarial paths, each run
//! under every sandbox mode and through every operation that applies, plus
//! one regression test per published wasmtime/cap-std filesystem advisory
//! that applies to Linux.
//!
//! The corpus is a table of cases ([`cases`]) crossed with the operations
//! that apply to each ([`ops_for`]) and run through the `fs` probe (see
//! `probes/src/shared/fsops.rs`) in a few calls per mode. Every escaping
//! operation must fail in the guest, and afterwards the host's real
//! filesystem is compared byte for byte with a snapshot taken before: the
//! workspace, the `outside/` directory next to it, and the temporary root
//! holding both (so no file can appear anywhere next to them either).
//!
//! Layout of the temporary root (`R`):
//!
//! ```text
//! R/outside/passwd, R/outside/sub/secret.txt, R/outside/empty/
//! R/ws/file.txt, victim.txt, dir/inner.txt, dir/deeper/, deep/d/d/.../d (64 levels)
//! R/ws/dir/up -> ../..              R/ws/link_out -> ../outside
//! R/ws/link_passwd -> R/outside/passwd (absolute)
//! R/ws/link_abs_dir -> R/outside    R/ws/chain1 -> chain2 -> link_out
//! R/ws/link_root -> /               R/ws/link_dotdot -> ..
//! R/ws/link_etc -> /etc             R/ws/dangling_out -> ../outside/dangling_target
//! R/ws/link_slash -> ../outside/    R/ws/indirect -> link_out/
//! R/ws/empty_out -> ../outside/empty   R/ws/loop_a -> loop_b -> loop_a
//! ```
//!
//! The host runs this suite as whatever user runs `cargo test` (often
//! root in CI containers), so cases that name real system files (`/etc`,
//! `/proc`, a link to `/`) are only ever read, never written or removed.

use crate::common::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use toolhost::{Host, Limits, SandboxMode};

toolhost_conformance::foreach_escape!(assert_test_exists);

/// The corpus may grow, never silently shrink.
const MIN_CASES: usize = 60;

/// How deep `ws/deep/d/.../d` goes.
const DEEP: usize = 64;

struct Fixture {
    _tmp: tempfile::TempDir,
    /// The temporary root holding `ws/` and `outside/`.
    root: PathBuf,
    ws: PathBuf,
    outside: PathBuf,
}

fn symlink(target: impl AsRef<Path>, link: impl AsRef<Path>) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let ws = root.join("ws");
        let outside = root.join("outside");
        std::fs::create_dir_all(outside.join("sub")).unwrap();
        std::fs::create_dir_all(outside.join("empty")).unwrap();
        std::fs::write(outside.join("passwd"), "root:x:0:0:outside\n").unwrap();
        std::fs::write(outside.join("sub/secret.txt"), "secret").unwrap();
        std::fs::create_dir_all(ws.join("dir/deeper")).unwrap();
        let mut deep = ws.join("deep");
        for _ in 0..DEEP {
            deep.push("d");
        }
        std::fs::create_dir_all(deep).unwrap();
        std::fs::write(ws.join("file.txt"), "workspace file").unwrap();
        std::fs::write(ws.join("victim.txt"), "victim").unwrap();
        std::fs::write(ws.join("dir/inner.txt"), "inner").unwrap();
        symlink("../..", ws.join("dir/up"));
        symlink("../outside", ws.join("link_out"));
        symlink(outside.join("passwd"), ws.join("link_passwd"));
        symlink(&outside, ws.join("link_abs_dir"));
        symlink("chain2", ws.join("chain1"));
        symlink("link_out", ws.join("chain2"));
        symlink("/", ws.join("link_root"));
        symlink("..", ws.join("link_dotdot"));
        symlink("/etc", ws.join("link_etc"));
        symlink("../outside/dangling_target", ws.join("dangling_out"));
        symlink("../outside/", ws.join("link_slash"));
        symlink("link_out/", ws.join("indirect"));
        symlink("../outside/empty", ws.join("empty_out"));
        symlink("loop_b", ws.join("loop_a"));
        symlink("loop_a", ws.join("loop_b"));
        Fixture {
            _tmp: tmp,
            root,
            ws,
            outside,
        }
    }
}

/// What an escaping path may be used for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// Every operation: read, stat, list, write, create, truncate, append,
    /// mkdir, symlink at it, remove, rename and hard link from and to it,
    /// and a guest symlink to it, followed.
    Plain,
    /// The path's last component is a symlink inside the workspace (no
    /// trailing slash): removing, renaming or hard-linking *the link
    /// itself* is a legitimate workspace change, so only the operations
    /// that follow it apply.
    LeafLink,
    /// The path names real system files (`/etc`, `/proc`, `/`): read-side
    /// operations only, so a broken sandbox cannot damage the machine.
    System,
}

struct Case {
    class: &'static str,
    path: String,
    kind: Kind,
}

/// The escape corpus. Every path must stay unreachable in `none`,
/// `read-only` and `workspace-write`.
fn cases(fx: &Fixture) -> Vec<Case> {
    use Kind::*;
    let out = fx.outside.display().to_string();
    let ws = fx.ws.display().to_string();
    let root_rel = fx.root.display().to_string();
    let root_rel = root_rel.trim_start_matches('/');
    let deep = format!("deep{}", "/d".repeat(DEEP));
    let mut c = Vec::new();
    let mut add = |class, path: String, kind| c.push(Case { class, path, kind });

    // `..` chains.
    add("dotdot", "..".into(), Plain);
    add("dotdot", "../outside/passwd".into(), Plain);
    add("dotdot", "../outside/new.txt".into(), Plain);
    add("dotdot", "../outside".into(), Plain);
    add("dotdot", "../outside/sub/secret.txt".into(), Plain);
    add("dotdot", "./../outside/passwd".into(), Plain);
    add("dotdot", ".././outside/passwd".into(), Plain);
    add("dotdot", "dir/../../outside/passwd".into(), Plain);
    add("dotdot", "dir/deeper/../../../outside/passwd".into(), Plain);
    add("dotdot", "dir/..//../outside/passwd".into(), Plain);
    add("dotdot", "dir/../dir/../../outside/passwd".into(), Plain);
    add("dotdot", "nonexistent/../../outside/passwd".into(), Plain);
    // Out and back in again: still refused, the path left the preopen.
    add("dotdot", "../ws/file.txt".into(), Plain);
    add("dotdot", "../ws/new.txt".into(), Plain);
    add(
        "dotdot",
        format!("{}{root_rel}/outside/passwd", "../".repeat(50)),
        Plain,
    );
    add("dotdot", format!("{}etc/passwd", "../".repeat(50)), System);
    // Absolute paths.
    add("absolute", "/etc/passwd".into(), System);
    add("absolute", "/..".into(), System);
    add("absolute", "/../..".into(), System);
    add("absolute", "//etc".into(), System);
    add("absolute", "//etc/passwd".into(), System);
    add("absolute", "/./etc/passwd".into(), System);
    add("absolute", "/proc/self/environ".into(), System);
    add("absolute", "/proc/self/root/etc/passwd".into(), System);
    add("absolute", "/dev/null".into(), System);
    add("absolute", format!("{out}/passwd"), Plain);
    add("absolute", format!("{out}/new.txt"), Plain);
    add("absolute", format!("{out}/"), Plain);
    // The workspace's own host path means nothing inside the guest.
    add("absolute", format!("{ws}/file.txt"), Plain);
    add("absolute", format!("{ws}/new.txt"), Plain);
    // Through the scratch preopen (`/tmp` in workspace-write).
    add("absolute", "/tmp/../etc/passwd".into(), System);
    add(
        "absolute",
        format!("/tmp/../{root_rel}/outside/passwd"),
        Plain,
    );
    add("absolute", "/tmp/..".into(), System);
    // Symlinks created by the host that leave the workspace.
    add("symlink", "link_out".into(), LeafLink);
    add("symlink", "link_out/passwd".into(), Plain);
    add("symlink", "link_out/new.txt".into(), Plain);
    add("symlink", "link_out/sub".into(), Plain);
    add("symlink", "link_passwd".into(), LeafLink);
    add("symlink", "link_abs_dir/passwd".into(), Plain);
    add("symlink", "link_abs_dir/new.txt".into(), Plain);
    add("symlink", "chain1".into(), LeafLink);
    add("symlink", "chain1/passwd".into(), Plain);
    add("symlink", "chain1/new.txt".into(), Plain);
    add("symlink", "dir/up/outside/passwd".into(), Plain);
    add("symlink", "link_dotdot/outside/passwd".into(), Plain);
    add("symlink", "link_dotdot/ws/file.txt".into(), Plain);
    add("symlink", "dangling_out".into(), LeafLink);
    add("symlink", "empty_out".into(), LeafLink);
    add("symlink", "link_slash/passwd".into(), Plain);
    add("symlink", "indirect/passwd".into(), Plain);
    add("symlink", "loop_a".into(), LeafLink);
    add("symlink", "loop_a/x".into(), Plain);
    add("symlink", "link_root".into(), System);
    add("symlink", "link_root/etc/passwd".into(), System);
    add("symlink", "link_etc/passwd".into(), System);
    // Trailing slashes and dots.
    add("trailing", "link_out/".into(), Plain);
    add("trailing", "link_out/.".into(), Plain);
    add("trailing", "link_out/..".into(), Plain);
    add("trailing", "link_passwd/".into(), Plain);
    add("trailing", "link_passwd/.".into(), Plain);
    add("trailing", "indirect/".into(), Plain);
    add("trailing", "indirect/.".into(), Plain);
    add("trailing", "empty_out/".into(), Plain);
    add("trailing", "dangling_out/".into(), Plain);
    add("trailing", "link_dotdot/".into(), Plain);
    add("trailing", "link_dotdot/.".into(), Plain);
    add("trailing", "../outside/passwd/".into(), Plain);
    add("trailing", "../outside/.".into(), Plain);
    add("trailing", "../".into(), Plain);
    add("trailing", "../.".into(), Plain);
    add("trailing", "dir/../..".into(), Plain);
    add("trailing", "dir/up/".into(), Plain);
    add("trailing", "link_root/.".into(), System);
    // Very long and deeply nested paths (4096+ bytes).
    add(
        "long",
        format!("dir/{}../../outside/passwd", "./".repeat(2100)),
        Plain,
    );
    add("long", format!("{}etc/passwd", "../".repeat(1400)), System);
    add(
        "long",
        format!("{deep}/{}outside/passwd", "../".repeat(DEEP + 2)),
        Plain,
    );
    add("long", format!("link_out/{}x", "x/".repeat(2100)), Plain);
    add("long", format!("../outside/{}", "n".repeat(255)), Plain);
    add("long", format!("../outside/{}", "n".repeat(300)), Plain);
    // Unusual bytes on the way out (NUL cannot be sent: WASI strings
    // exclude it).
    add("bytes", "../outside/passwd\n".into(), Plain);
    add("bytes", "\u{202e}/../../outside/passwd".into(), Plain);
    add("bytes", "dir/\n/../../../outside/passwd".into(), Plain);
    add("bytes", "../outside/\u{1b}[31m".into(), Plain);
    add("bytes", "..\t/../../outside/passwd".into(), Plain);
    c
}

/// What an operation must do.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Expect {
    Fail,
    /// Creating the guest's symlink `gl_<i>` to the case path: either
    /// outcome is fine (wasmtime refuses absolute targets; a relative one
    /// that escapes is harmless by itself).
    LinkCreate,
    /// Following `gl_<i>`: must fail whenever the link was created. When
    /// it was not, `gl_<i>` does not exist and a `write` may create an
    /// ordinary file of that name in the workspace, which is no escape.
    Follow,
}

fn op1(op: &str, path: &str) -> Value {
    json!({ "op": op, "path": path })
}

fn op2(op: &str, from: &str, to: &str) -> Value {
    json!({ "op": op, "from": from, "to": to })
}

fn write(path: &str) -> Value {
    json!({ "op": "write", "path": path, "data": "ESCAPED" })
}

fn guest_symlink(target: &str, link: &str) -> Value {
    json!({ "op": "symlink", "target": target, "link": link })
}

/// The operations that apply to case `i`, each with its expectation and a
/// label for failure messages.
fn ops_for(i: usize, case: &Case) -> Vec<(&'static str, Value, Expect)> {
    use Expect::*;
    let p = case.path.as_str();
    let gl = format!("gl_{i}");
    // Read side: applies to every case.
    let mut ops = vec![
        ("read", op1("read", p), Fail),
        ("metadata", op1("metadata", p), Fail),
        ("read_dir", op1("read_dir", p), Fail),
        ("symlink_create", guest_symlink(p, &gl), LinkCreate),
        ("symlink_follow_read", op1("read", &gl), Follow),
        ("symlink_follow_metadata", op1("metadata", &gl), Follow),
        ("symlink_follow_read_dir", op1("read_dir", &gl), Follow),
    ];
    if case.kind == Kind::System {
        return ops;
    }
    // Write side: follows the path.
    ops.extend([
        ("write", write(p), Fail),
        ("create_new", op1("create_new", p), Fail),
        ("truncate", op1("truncate", p), Fail),
        (
            "append",
            json!({ "op": "append", "path": p, "data": "ESCAPED" }),
            Fail,
        ),
        ("mkdir", op1("mkdir", p), Fail),
        ("symlink_at", guest_symlink("file.txt", p), Fail),
        ("symlink_follow_write", write(&gl), Follow),
        (
            "symlink_follow_mkdir",
            op1("mkdir", &format!("{gl}/d")),
            Follow,
        ),
    ]);
    if case.kind == Kind::LeafLink {
        return ops;
    }
    // The object itself: remove, rename and hard link, from and to it.
    ops.extend([
        ("unlink", op1("remove_file", p), Fail),
        ("rmdir", op1("remove_dir", p), Fail),
        ("rename_src", op2("rename", p, &format!("moved_{i}")), Fail),
        ("rename_dst", op2("rename", "victim.txt", p), Fail),
        ("link_src", op2("link", p, &format!("hl_{i}")), Fail),
        ("link_dst", op2("link", "file.txt", p), Fail),
    ]);
    ops
}

/// Runs `ops` in calls of at most 300 operations and returns every outcome
/// as `(ok, detail)`.
async fn run_all(host: &Host, mode: SandboxMode, ops: &[Value]) -> Vec<(bool, String)> {
    let mut outcomes = Vec::with_capacity(ops.len());
    for chunk in ops.chunks(300) {
        let r = call(host, "fs", json!({ "ops": chunk }), mode).await;
        assert!(r.is_ok(), "the fs probe itself must run in {mode}: {r:?}");
        let results = r.canonical["results"].as_array().unwrap();
        assert_eq!(results.len(), chunk.len());
        outcomes.extend(results.iter().map(|o| {
            (
                o["ok"].as_bool().unwrap(),
                o["detail"].as_str().unwrap().to_string(),
            )
        }));
    }
    outcomes
}

/// Cuts long paths in messages.
fn short(s: &str) -> String {
    if s.len() > 120 {
        format!("{}…({} bytes)", &s[..s.floor_char_boundary(100)], s.len())
    } else {
        s.to_string()
    }
}

/// Controls that prove the probe works in `mode` (so that "every escape
/// failed" cannot come from a probe that fails everything).
fn controls(mode: SandboxMode) -> Vec<(Value, bool, &'static str)> {
    let reads = mode != SandboxMode::None;
    let writes = mode == SandboxMode::WorkspaceWrite;
    vec![
        (op1("read", "file.txt"), reads, "workspace file"),
        (op1("read_link", "link_out"), reads, "../outside"),
        (op1("symlink_metadata", "link_out"), reads, "symlink"),
        (op1("metadata", "dir/inner.txt"), reads, "file 5"),
        (write("ctl.txt"), writes, ""),
        (guest_symlink("file.txt", "ctl_link"), writes, ""),
        (op1("read", "ctl_link"), writes, "workspace file"),
    ]
}

/// The workspace-write changes the corpus may leave behind: the controls,
/// the symlinks the guest created (`gl_<i>`, whose targets must be exactly
/// the case paths) and, where creating that link failed, an ordinary file
/// `gl_<i>` written by the follow-up `write`. Removes them from `after`.
fn strip_allowed_changes(
    fx: &Fixture,
    cases: &[Case],
    linked: &[bool],
    after: &mut BTreeMap<PathBuf, Entry>,
) {
    let ws_rel = fx.ws.strip_prefix(&fx.root).unwrap().to_path_buf();
    assert_eq!(
        after.remove(&ws_rel.join("ctl.txt")),
        Some(Entry::File(b"ESCAPED".to_vec()))
    );
    assert_eq!(
        after.remove(&ws_rel.join("ctl_link")),
        Some(Entry::Symlink("file.txt".into()))
    );
    for (i, case) in cases.iter().enumerate() {
        match after.remove(&ws_rel.join(format!("gl_{i}"))) {
            None => {}
            Some(Entry::File(data)) if !linked[i] && data == b"ESCAPED" => {}
            Some(Entry::Symlink(target)) if linked[i] => assert_eq!(
                target,
                PathBuf::from(&case.path),
                "gl_{i} is not the guest's symlink to {}",
                short(&case.path)
            ),
            Some(other) => panic!("gl_{i} should be the guest's symlink, found {other:?}"),
        }
    }
}

/// Runs the whole corpus in `mode` on the probe at `probe` and checks both
/// what the guest saw and the host's filesystem.
async fn run_corpus(probe: &str, mode: SandboxMode) {
    let fx = Fixture::new();
    let cases = cases(&fx);
    assert!(
        cases.len() >= MIN_CASES,
        "the escape corpus shrank to {} cases (minimum {MIN_CASES})",
        cases.len()
    );
    let before = snapshot(&fx.root);
    let host = host_with(probe, &fx.ws, Limits::default()).await;

    let controls = controls(mode);
    let mut ops: Vec<Value> = controls.iter().map(|(op, _, _)| op.clone()).collect();
    // `/` inside the guest: wasi-libc resolves absolute paths against the
    // preopens, so in read-only and workspace-write `/` may name the
    // workspace itself; it must never name the host root.
    ops.push(op1("read_dir", "."));
    ops.push(op1("read_dir", "/"));
    let first_case_op = ops.len();
    let mut labels = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        for (name, op, expect) in ops_for(i, case) {
            ops.push(op);
            labels.push((i, name, expect));
        }
    }
    let outcomes = run_all(&host, mode, &ops).await;

    let mut wrong = Vec::new();
    for ((op, expect_ok, expect_detail), (ok, detail)) in controls.iter().zip(&outcomes) {
        if ok != expect_ok || (*ok && !expect_detail.is_empty() && detail != expect_detail) {
            wrong.push(format!(
                "control {op}: expected ok={expect_ok} {expect_detail:?}, got ok={ok} {detail:?}"
            ));
        }
    }
    let (dot, slash) = (&outcomes[controls.len()], &outcomes[controls.len() + 1]);
    if slash.0 && (!dot.0 || slash.1 != dot.1) {
        wrong.push(format!(
            "read_dir \"/\" listed something other than the workspace: {:?}",
            short(&slash.1)
        ));
    }
    let mut escaping_ops = 0;
    let mut linked = vec![false; cases.len()];
    for ((i, name, expect), (ok, detail)) in labels.iter().zip(&outcomes[first_case_op..]) {
        let must_fail = match expect {
            Expect::Fail => true,
            Expect::LinkCreate => {
                linked[*i] = *ok;
                false
            }
            Expect::Follow => linked[*i],
        };
        if must_fail {
            escaping_ops += 1;
        }
        if must_fail && *ok {
            let case = &cases[*i];
            wrong.push(format!(
                "case {i} [{}] {:?}: {name} succeeded ({})",
                case.class,
                short(&case.path),
                short(detail)
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "in {mode}, {} of {escaping_ops} escaping operations did not fail:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    eprintln!(
        "escape corpus in {mode}: {} cases, {escaping_ops} escaping operations refused, {} guest symlinks created",
        cases.len(),
        linked.iter().filter(|l| **l).count()
    );

    // The host: nothing changed outside, nothing appeared next to the
    // workspace, and the workspace holds only the allowed changes.
    let mut after = snapshot(&fx.root);
    if mode == SandboxMode::WorkspaceWrite {
        strip_allowed_changes(&fx, &cases, &linked, &mut after);
    }
    assert_eq!(
        snapshot(&fx.outside),
        snapshot_of_outside(&before, &fx),
        "in {mode}, the directory outside the workspace changed"
    );
    if after != before {
        let changed: Vec<_> = before
            .iter()
            .filter(|(k, v)| after.get(*k) != Some(v))
            .map(|(k, _)| format!("changed or removed: {}", k.display()))
            .chain(
                after
                    .keys()
                    .filter(|k| !before.contains_key(*k))
                    .map(|k| format!("appeared: {}", k.display())),
            )
            .collect();
        panic!(
            "in {mode}, the host filesystem changed:\n{}",
            changed.join("\n")
        );
    }
}

/// The part of a root snapshot under `outside/`, keyed like `snapshot(outside)`.
fn snapshot_of_outside(
    root_snap: &BTreeMap<PathBuf, Entry>,
    fx: &Fixture,
) -> BTreeMap<PathBuf, Entry> {
    let rel = fx.outside.strip_prefix(&fx.root).unwrap();
    root_snap
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(rel)
                .ok()
                .filter(|r| !r.as_os_str().is_empty())
                .map(|r| (r.to_path_buf(), v.clone()))
        })
        .collect()
}

#[tokio::test]
async fn escape_none() {
    run_corpus(probes::ESCAPE_NONE, SandboxMode::None).await;
}

#[tokio::test]
async fn escape_read_only() {
    run_corpus(probes::ESCAPE_READ_ONLY, SandboxMode::ReadOnly).await;
}

#[tokio::test]
async fn escape_workspace_write() {
    run_corpus(probes::ESCAPE_WORKSPACE_WRITE, SandboxMode::WorkspaceWrite).await;
}

/// Names with unusual bytes are just names: in `workspace-write` each one
/// lands in the workspace under exactly that name (or is refused), and
/// nothing appears anywhere else.
#[tokio::test]
async fn escape_unusual_names_stay_in_the_workspace() {
    let fx = Fixture::new();
    let before_outside = snapshot(&fx.outside);
    let host = host_with(probes::ESCAPE_WORKSPACE_WRITE, &fx.ws, Limits::default()).await;
    let names: Vec<String> = [
        "new\nline",
        "\u{202e}fdp.exe",
        "back\\slash",
        "..\\..\\outside\\passwd",
        "co:lon",
        "ctrl\u{1}\u{7f}",
        "trailing space ",
        "...",
        ".. ",
        "-rf",
        "*?[]",
        "💥",
        "%2e%2e%2foutside",
    ]
    .into_iter()
    .map(String::from)
    .chain([
        "n".repeat(255),
        // 255 bytes of multi-byte characters (85 × 3).
        "語".repeat(85),
    ])
    .collect();
    let mut ops: Vec<Value> = names.iter().map(|n| write(n)).collect();
    ops.push(write(&"n".repeat(256)));
    let outcomes = run_all(&host, SandboxMode::WorkspaceWrite, &ops).await;
    for (name, (ok, detail)) in names.iter().zip(&outcomes) {
        assert!(ok, "writing {:?} failed: {detail}", short(name));
        assert_eq!(
            std::fs::read(fx.ws.join(name)).unwrap(),
            b"ESCAPED",
            "{:?} did not land in the workspace under its own name",
            short(name)
        );
    }
    let (ok, detail) = &outcomes[names.len()];
    assert!(!ok, "a 256-byte name must be refused: {detail}");
    assert_eq!(snapshot(&fx.outside), before_outside);
    // Nothing appeared next to the workspace.
    let siblings: Vec<_> = std::fs::read_dir(&fx.root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(siblings.len(), 2, "{siblings:?}");
}

/// `danger-full-access` preopens the host root by design, so only one
/// promise is checked: relative paths mean the workspace, not `/`.
#[tokio::test]
async fn escape_danger_full_access() {
    let fx = Fixture::new();
    let host = host_with(probes::ESCAPE_DANGER_FULL_ACCESS, &fx.ws, Limits::default()).await;
    let name = format!("toolhost-escape-{}.txt", std::process::id());
    let outcomes = run_all(
        &host,
        SandboxMode::DangerFullAccess,
        &[
            write(&name),
            op1("mkdir", "rel_dir"),
            write("rel_dir/x.txt"),
            guest_symlink(&name, "rel_link"),
            op1("read", "rel_link"),
            op1("read", "./file.txt"),
        ],
    )
    .await;
    let root_copy = Path::new("/").join(&name);
    let escaped = root_copy.exists();
    if escaped {
        let _ = std::fs::remove_file(&root_copy);
    }
    assert!(!escaped, "a relative path landed in the host root");
    for (ok, detail) in &outcomes {
        assert!(ok, "{detail}");
    }
    assert_eq!(outcomes[4].1, "ESCAPED");
    assert_eq!(outcomes[5].1, "workspace file");
    assert_eq!(std::fs::read(fx.ws.join(&name)).unwrap(), b"ESCAPED");
    assert_eq!(
        std::fs::read(fx.ws.join("rel_dir/x.txt")).unwrap(),
        b"ESCAPED"
    );
    assert_eq!(
        std::fs::read_link(fx.ws.join("rel_link")).unwrap(),
        PathBuf::from(&name)
    );
}

/// Runs `ops` (all of which must fail) in `mode` on a fresh fixture (plus
/// an empty `ws/wsdir/`), and checks the host filesystem did not change.
async fn all_fail_and_nothing_changes(probe: &str, mode: SandboxMode, ops: Vec<Value>) {
    let fx = Fixture::new();
    std::fs::create_dir(fx.ws.join("wsdir")).unwrap();
    let before = snapshot(&fx.root);
    let host = host_with(probe, &fx.ws, Limits::default()).await;
    let outcomes = run_all(&host, mode, &ops).await;
    for (op, (ok, detail)) in ops.iter().zip(outcomes) {
        assert!(!ok, "in {mode}, {op} must fail but succeeded: {detail:?}");
    }
    assert_eq!(
        snapshot(&fx.root),
        before,
        "in {mode}, the host filesystem changed"
    );
}

/// GHSA-vqjp-4c8c-hfgg — "Filesystem sandbox escape when paths or symlinks
/// contain trailing slashes" (wasmtime-wasi; fixed in wasmtime 24.0.13,
/// 36.0.14, 46.0.3 and 47.0.4, released 2026-08-20). A symlink to a
/// directory outside, or a symlink whose target ends in `/`, named with a
/// trailing slash, was followed out of the preopen. This reproduces the
/// layout of the upstream regression tests `trailing_slash_symlink` and
/// `trailing_slash_symlink_more` (`hidden -> ../outside`,
/// `indirect -> hidden/`, `root_link -> /.`), plus guest-made links.
#[tokio::test]
async fn escape_advisory_ghsa_vqjp_4c8c_hfgg() {
    let links = [
        ("../outside", "hidden"),
        ("hidden/", "indirect_h"),
        ("/.", "root_link"),
    ];
    for (probe, mode) in [
        (probes::ESCAPE_WORKSPACE_WRITE, SandboxMode::WorkspaceWrite),
        (probes::ESCAPE_READ_ONLY, SandboxMode::ReadOnly),
    ] {
        let mut ops = Vec::new();
        for p in [
            "hidden",
            "hidden/",
            "indirect",
            "indirect/",
            "root_link/",
            "root_link/.",
        ] {
            ops.push(op1("read_dir", p));
            ops.push(op1("metadata", &format!("{p}/passwd")));
        }
        for p in [
            "hidden/passwd",
            "indirect/passwd",
            "indirect/./passwd",
            "hidden//passwd",
        ] {
            ops.push(op1("read", p));
        }
        for p in ["indirect_h/new.txt", "hidden/new.txt", "indirect_h/passwd"] {
            ops.push(write(p));
        }
        ops.push(op1("mkdir", "indirect_h/d/"));
        ops.push(op1("mkdir", "hidden/d"));
        ops.push(op1("remove_file", "indirect_h/passwd"));
        ops.push(op1("remove_dir", "indirect_h/empty/"));
        // The guest makes its own trailing-slash link, then follows it.
        ops.push(op1("read_dir", "g_slash/"));
        ops.push(op1("read", "g_slash/passwd"));
        ops.push(write("g_slash/new.txt"));
        let fx = Fixture::new();
        for (target, link) in &links {
            symlink(target, fx.ws.join(link));
        }
        let before_outside = snapshot(&fx.outside);
        let host = host_with(probe, &fx.ws, Limits::default()).await;
        // Creating the link may succeed in workspace-write; following it must not.
        run_all(&host, mode, &[guest_symlink("../outside/", "g_slash")]).await;
        let outcomes = run_all(&host, mode, &ops).await;
        for (op, (ok, detail)) in ops.iter().zip(&outcomes) {
            assert!(!ok, "in {mode}, {op} must fail but succeeded: {detail:?}");
        }
        assert_eq!(
            snapshot(&fx.outside),
            before_outside,
            "in {mode}, a trailing-slash path changed the directory outside"
        );
        for (target, link) in &links {
            assert_eq!(
                std::fs::read_link(fx.ws.join(link)).unwrap(),
                PathBuf::from(target)
            );
        }
    }
}

/// GHSA-m9f7-9w4p-gv38 — "Filesystem sandbox escape when renaming symlinks
/// with trailing slashes" (wasmtime-wasi; fixed in wasmtime 36.0.18,
/// released 2026-10-14). `rename("link/", ...)` or `rename(..., "link/")`
/// on a symlink to a directory outside could act on the directory outside.
/// wasmtime-wasi 48.0.8's `rename` re-appends the slash and lets Linux's
/// `renameat` refuse atomically (`ENOTDIR`); this checks that outcome: the
/// rename fails, the directories outside stay where they are, and a
/// workspace directory is never moved over the empty directory outside.
#[tokio::test]
async fn escape_advisory_ghsa_m9f7_9w4p_gv38() {
    let ops = vec![
        op2("rename", "link_out/", "moved"),
        op2("rename", "indirect/", "moved"),
        op2("rename", "empty_out/", "moved"),
        op2("rename", "link_out/", "moved/"),
        op2("rename", "wsdir", "empty_out/"),
        op2("rename", "wsdir/", "empty_out/"),
        op2("rename", "wsdir/", "link_out/"),
        op2("rename", "file.txt", "link_out/"),
        op2("rename", "empty_out/", "empty_out2/"),
        op2("rename", "link_out/sub/", "stolen"),
        op2("rename", "link_out/sub", "stolen"),
    ];
    for (probe, mode) in [
        (probes::ESCAPE_WORKSPACE_WRITE, SandboxMode::WorkspaceWrite),
        (probes::ESCAPE_READ_ONLY, SandboxMode::ReadOnly),
    ] {
        all_fail_and_nothing_changes(probe, mode, ops.clone()).await;
    }
}

/// GHSA-4ch3-9j33-3pmj (RUSTSEC-2026-0188) — "WASI hard links and renames
/// check wasmtime-wasi's FilePerms for destination" (fixed in wasmtime
/// 24.0.11, 36.0.12, 45.0.3 and 46.0.1, released 2026-06-24): a file of a
/// read-only preopen could be hard-linked or renamed into a writable
/// preopen and then overwritten. toolhost never combines a read-only
/// preopen with a writable one (`read-only` has no scratch `/tmp`), so the
/// exact precondition cannot arise; this checks the read-only side of it:
/// no link or rename out of, within or into the read-only workspace works,
/// there is no writable `/tmp` to link into, and the file stays intact.
#[tokio::test]
async fn escape_advisory_ghsa_4ch3_9j33_3pmj() {
    let ops = vec![
        op2("link", "file.txt", "/tmp/file.txt"),
        op2("link", "file.txt", "hardlink.txt"),
        op2("link", "file.txt", "dir/hardlink.txt"),
        op2("rename", "file.txt", "/tmp/file.txt"),
        op2("rename", "file.txt", "renamed.txt"),
        write("/tmp/probe.txt"),
        op1("read_dir", "/tmp"),
        json!({ "op": "append", "path": "hardlink.txt", "data": "ESCAPED" }),
        op1("truncate", "file.txt"),
        json!({ "op": "set_len", "path": "file.txt", "len": 0 }),
    ];
    all_fail_and_nothing_changes(probes::ESCAPE_READ_ONLY, SandboxMode::ReadOnly, ops).await;
}
