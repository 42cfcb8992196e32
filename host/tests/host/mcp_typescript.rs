//! End-to-end tests of `toolhost serve` (stdio and Streamable HTTP, both
//! protocol revisions) with the official TypeScript MCP SDK, an MCP client
//! that is not ours.
//!
//! This test installs `host/tests/mcp-ts/package-lock.json`
//! (`@modelcontextprotocol/client` 2.4.0) with `npm ci` into
//! `<CARGO_TARGET_TMPDIR>/mcp-ts` (once per lock file), copies the test
//! script beside it and runs `node --test` against the `toolhost` binary of
//! this build. It fails if a test fails, printing node's report. Set
//! `TOOLHOST_SKIP_MCP_TS=1` to skip it where npm cannot be reached.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({})\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The directory with the pinned SDK installed; reinstalled when the lock
/// file changes.
fn installed(tmp: &Path, sources: &Path) -> PathBuf {
    let dir = tmp.join("mcp-ts");
    let lock = std::fs::read_to_string(sources.join("package-lock.json")).unwrap();
    let stamp = dir.join("lock.installed");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(lock.as_str()) {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["package.json", "package-lock.json"] {
            std::fs::copy(sources.join(f), dir.join(f)).unwrap();
        }
        run(Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir));
        std::fs::write(&stamp, &lock).unwrap();
    }
    dir
}

#[test]
fn typescript_sdk_drives_the_mcp_server() {
    if std::env::var_os("TOOLHOST_SKIP_MCP_TS").is_some() {
        eprintln!("skipped: TOOLHOST_SKIP_MCP_TS is set");
        return;
    }
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-ts");
    let dir = installed(&tmp, &sources);
    // Beside its node_modules, so that node resolves the SDK.
    std::fs::copy(sources.join("sdk.test.mjs"), dir.join("sdk.test.mjs")).unwrap();

    let started = Instant::now();
    let out = Command::new("node")
        .args(["--test", "--test-concurrency=1", "sdk.test.mjs"])
        .current_dir(&dir)
        .env("TOOLHOST_BIN", env!("CARGO_BIN_EXE_toolhost"))
        .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
        .env_remove("TOOLHOST_STATE_DIR")
        .output()
        .expect("cannot run node");
    let report = format!(
        "--- node stdout\n{}\n--- node stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "TypeScript SDK e2e took {:.1}s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "node --test failed ({})\n{report}",
        out.status
    );
    // Every test ran: a script that defined none would also exit 0.
    let passed = String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        l.strip_prefix("# pass ")
            .and_then(|n| n.trim().parse::<u32>().ok())
    });
    assert!(
        passed.is_some_and(|n| n >= 7),
        "too few tests passed\n{report}"
    );
}
