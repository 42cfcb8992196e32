//! Builds crates of this workspace for a WASI target (`wasm32-wasip2` by
//! default, or `wasm32-wasip1`) from a build script.
//!
//! The host embeds the example tools and the test suite embeds its probes
//! and test programs; each builds them with the same toolchain into its own
//! target directory (so the outer build's lock is never contended) and gets
//! back the paths of the resulting components (or, for `wasm32-wasip1`,
//! core modules).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The wasm target every tool and probe is built for.
pub const TARGET: &str = "wasm32-wasip2";

/// The WASI preview 1 target (core modules), for test programs of
/// `toolhost exec`.
pub const TARGET_P1: &str = "wasm32-wasip1";

/// One built component.
#[derive(Debug, Clone)]
pub struct Built {
    /// The artifact's name (crate or binary name, `-` replaced by `_`).
    pub name: String,
    /// Absolute path of the `.wasm` component.
    pub path: PathBuf,
}

/// The workspace root, from a build script's `CARGO_MANIFEST_DIR`.
pub fn workspace_root() -> PathBuf {
    let manifest =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into()));
    let mut dir = manifest.as_path();
    while let Some(parent) = dir.parent() {
        if parent.join("Cargo.lock").exists() || parent.join("rust-toolchain.toml").exists() {
            return parent.to_path_buf();
        }
        dir = parent;
    }
    manifest
}

/// Fails the build with one line that says what to run when [`TARGET`] is
/// not installed.
pub fn require_target() {
    require(TARGET);
}

/// Fails the build with one line that says what to run when `target` is not
/// installed.
pub fn require(target: &str) {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(&rustc)
        .args(["--print", "target-libdir", "--target", target])
        .output();
    let installed = match out {
        Ok(o) if o.status.success() => {
            let dir = String::from_utf8_lossy(&o.stdout).trim().to_string();
            Path::new(&dir).is_dir()
        }
        _ => false,
    };
    if !installed {
        fail(&format!(
            "the {target} target is not installed: run `rustup target add {target}` (or `rustup toolchain install` in the checkout)"
        ));
    }
}

fn fail(msg: &str) -> ! {
    println!("cargo::error={msg}");
    eprintln!("error: {msg}");
    std::process::exit(1);
}

/// Builds `packages` (cargo package names) for [`TARGET`] in release mode
/// into `target/<subdir>` of the workspace and returns the components the
/// build produced, in name order. Emits `rerun-if-changed` for `watch`.
pub fn build(packages: &[&str], subdir: &str, watch: &[&str]) -> Vec<Built> {
    build_for(TARGET, packages, subdir, watch)
}

/// As [`build`], optimised as the tools users run are shipped: the whole
/// program in one codegen unit with link-time optimisation (smaller
/// components, which instantiate and run faster; slower to build, so only
/// for the embedded example tools and what the benchmarks measure).
pub fn build_shipped(packages: &[&str], subdir: &str, watch: &[&str]) -> Vec<Built> {
    build_with(TARGET, packages, subdir, watch, true)
}

/// As [`build`], for `target` ([`TARGET`] or [`TARGET_P1`]): what it
/// returns are components for `wasm32-wasip2` and core modules for
/// `wasm32-wasip1`. Several targets may share one `subdir`: each builds
/// under `target/<subdir>/<target>`.
pub fn build_for(target: &str, packages: &[&str], subdir: &str, watch: &[&str]) -> Vec<Built> {
    build_with(target, packages, subdir, watch, false)
}

fn build_with(
    target: &str,
    packages: &[&str],
    subdir: &str,
    watch: &[&str],
    shipped: bool,
) -> Vec<Built> {
    require(target);
    let root = workspace_root();
    for w in watch {
        println!("cargo::rerun-if-changed={}", root.join(w).display());
    }
    let target_dir = root.join("target").join(subdir);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .arg("build")
        .arg("--release")
        .arg("--target")
        .arg(target)
        .arg("--target-dir")
        .arg(&target_dir)
        .arg("--message-format=short");
    if shipped {
        cmd.env("CARGO_PROFILE_RELEASE_LTO", "true")
            .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1");
    }
    for p in packages {
        cmd.arg("-p").arg(p);
    }
    // The outer build's flags (coverage, sanitizers, lints) are for the host
    // target; they must not leak into the wasm build.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        cmd.env_remove(var);
    }
    let status = match cmd.status() {
        Ok(s) => s,
        Err(e) => fail(&format!("could not run cargo to build for {target}: {e}")),
    };
    if !status.success() {
        fail(&format!(
            "building {} for {target} failed (see the output above)",
            packages.join(", ")
        ));
    }
    let out_dir = target_dir.join(target).join("release");
    let mut built = Vec::new();
    let entries = match std::fs::read_dir(&out_dir) {
        Ok(e) => e,
        Err(e) => fail(&format!("cannot read {}: {e}", out_dir.display())),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "wasm") {
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().replace('-', "_"))
                .unwrap_or_default();
            built.push(Built { name, path });
        }
    }
    built.sort_by(|a, b| a.name.cmp(&b.name));
    built
}
