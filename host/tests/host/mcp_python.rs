//! End-to-end tests of `toolhost serve --mcp` with the official Python MCP
//! SDK, an MCP client that is not ours.
//!
//! This test creates a virtualenv at `<CARGO_TARGET_TMPDIR>/mcp-venv` (once;
//! `host/tests/mcp/requirements.txt` pins every package, `mcp==2.3.0` among
//! them), then runs `python -m pytest host/tests/mcp -q` against the
//! `toolhost` binary of this build. It fails if pytest fails, printing its
//! output. Set `TOOLHOST_SKIP_MCP_PYTHON=1` to skip it where PyPI cannot be
//! reached.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed ({})\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// The virtualenv with the pinned client; rebuilt when the pins change.
fn venv(tmp: &Path, requirements: &Path) -> PathBuf {
    let venv = tmp.join("mcp-venv");
    let python = venv.join("bin/python");
    let stamp = venv.join("requirements.installed");
    let wanted = std::fs::read_to_string(requirements).unwrap();
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return python;
    }
    let _ = std::fs::remove_dir_all(&venv);
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
        ])
        .arg(requirements));
    std::fs::write(&stamp, wanted).unwrap();
    python
}

#[test]
fn python_sdk_drives_the_mcp_server() {
    if std::env::var_os("TOOLHOST_SKIP_MCP_PYTHON").is_some() {
        eprintln!("skipped: TOOLHOST_SKIP_MCP_PYTHON is set");
        return;
    }
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp");
    let python = venv(&tmp, &tests.join("requirements.txt"));

    // The example tools as files (the hot-reload tests copy them into a
    // tools directory), written from the bytes this build embeds.
    let components = tmp.join("mcp-components");
    std::fs::create_dir_all(&components).unwrap();
    for (name, bytes) in toolhost::EMBEDDED_TOOLS {
        std::fs::write(components.join(format!("tool_{name}.wasm")), bytes).unwrap();
    }
    let cache = tmp.join("mcp-compile-cache");
    let pytest_tmp = tmp.join("mcp-pytest");
    let _ = std::fs::remove_dir_all(&pytest_tmp);

    let started = Instant::now();
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp"])
        .arg(&pytest_tmp)
        .arg(&tests)
        .env("TOOLHOST_BIN", env!("CARGO_BIN_EXE_toolhost"))
        .env("TOOLHOST_CACHE_DIR", &cache)
        .env("TOOLHOST_TOOL_COMPONENTS", &components)
        .env_remove("TOOLHOST_STATE_DIR")
        .output()
        .expect("cannot run pytest");
    let report = format!(
        "--- pytest stdout\n{}\n--- pytest stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{report}");
    eprintln!("python e2e took {:.1}s", started.elapsed().as_secs_f64());
    assert!(
        out.status.success(),
        "pytest failed ({})\n{report}",
        out.status
    );
}
