//! Sandbox modes (DESIGN.md §2) mapped onto what wasmtime enforces.
//!
//! This module is the only place that decides what a guest can reach: which
//! host directories are preopened and with which permissions, which limits a
//! call runs under. Everything else (env, args, stdin, sockets) is empty or
//! denied for tools. The ambient-authority calls (opening host directories by
//! path) are confined to [`build_wasi`].

use crate::output::CapturedOutput;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolhost_core::SandboxMode;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder};

/// Where the workspace appears inside the guest: the current directory, so
/// that relative paths in arguments resolve against it.
pub const GUEST_WORKSPACE: &str = ".";
/// Where the per-call scratch directory appears in `workspace-write`.
pub const GUEST_SCRATCH: &str = "/tmp";

/// The limits every call runs under. Defaults are conservative; the docs of
/// each field give them.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Wall-clock deadline, enforced by epoch interruption and while the
    /// guest waits in a host call. Default 30 s.
    pub deadline: Duration,
    /// Fuel budget; `None` runs unmetered. Only honoured by a runtime built
    /// with fuel metering enabled. Default `None`.
    pub fuel: Option<u64>,
    /// Largest linear memory, in bytes. Default 256 MiB.
    pub max_memory: usize,
    /// Largest table, in elements. Default 100 000.
    pub max_table_elements: usize,
    /// Most instances (core and component) a call may create. Default 32.
    pub max_instances: usize,
    /// Largest result (canonical + content + meta), in bytes. Default 4 MiB.
    pub max_output: usize,
    /// Bytes of stdout and of stderr kept per call. Default 64 KiB each.
    pub max_stdio: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(30),
            fuel: None,
            max_memory: 256 << 20,
            max_table_elements: 100_000,
            max_instances: 32,
            max_output: 4 << 20,
            max_stdio: 64 << 10,
        }
    }
}

/// The capabilities of one call.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// The mode the call runs in.
    pub mode: SandboxMode,
    /// The host directory shown to the guest as its workspace.
    pub workspace: PathBuf,
    /// Limits.
    pub limits: Limits,
}

/// What building a sandbox produced besides the WASI context.
pub(crate) struct Built {
    pub wasi: WasiCtx,
    pub stdout: CapturedOutput,
    pub stderr: CapturedOutput,
    /// The per-call scratch directory, removed when dropped.
    pub scratch: Option<tempfile::TempDir>,
    /// Capability attempts the host refused and could observe.
    pub denied: Arc<Mutex<Vec<String>>>,
}

/// Errors that make a sandbox impossible to enforce.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The workspace does not exist or is not a directory.
    #[error("workspace {0} does not exist or is not a directory")]
    NoWorkspace(PathBuf),
    /// A preopen could not be opened.
    #[error("cannot preopen {path}: {detail}")]
    Preopen {
        /// The host path.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
}

/// Builds the WASI context of one call: preopens for `spec.mode`, bounded
/// stdout/stderr, no env, args, stdin or network. `command` (for `toolhost
/// exec` only) passes args and inherits stdout/stderr instead.
///
/// # Ambient Authority
///
/// Opens host directories by path (the workspace, the scratch directory and,
/// in `danger-full-access`, `/`). This is the one place that does.
pub(crate) fn build_wasi(
    spec: &SandboxSpec,
    command: Option<&[String]>,
    blocking: bool,
) -> Result<Built, SandboxError> {
    let stdout = CapturedOutput::new(spec.limits.max_stdio);
    let stderr = CapturedOutput::new(spec.limits.max_stdio);
    let denied: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut b = WasiCtxBuilder::new();
    // File operations block the current thread instead of going through
    // tokio's blocking pool: only for a body on a thread of its own.
    b.allow_blocking_current_thread(blocking);
    match command {
        // Tools: output is captured and bounded, never inherited; no args.
        None => {
            b.stdout(stdout.clone()).stderr(stderr.clone());
        }
        // `toolhost exec`: the user runs a command program and sees its
        // output; still no env and no stdin.
        Some(args) => {
            b.inherit_stdout().inherit_stderr().args(args);
        }
    }
    // Network: off. A guest may create a socket object, but every address
    // it tries to bind, connect or send to is refused by the check below,
    // which records the attempt for the receipt. Name lookup is refused
    // outright (it has no address to check).
    b.allow_tcp(true)
        .allow_udp(true)
        .allow_ip_name_lookup(false);
    let seen = denied.clone();
    b.socket_addr_check(move |addr, addr_use| {
        if let Ok(mut d) = seen.lock() {
            d.push(format!("network: {addr_use:?} {addr}"));
        }
        Box::pin(async { false })
    });

    let mut scratch = None;
    if spec.mode != SandboxMode::None {
        check_workspace(&spec.workspace)?;
    }
    match spec.mode {
        SandboxMode::None => {}
        SandboxMode::ReadOnly => {
            preopen(&mut b, &spec.workspace, GUEST_WORKSPACE, FsPerms::ReadOnly)?;
        }
        SandboxMode::WorkspaceWrite => {
            preopen(&mut b, &spec.workspace, GUEST_WORKSPACE, FsPerms::ReadWrite)?;
            let dir = tempfile::Builder::new()
                .prefix("toolhost-scratch-")
                .tempdir()
                .map_err(|e| SandboxError::Preopen {
                    path: std::env::temp_dir(),
                    detail: e.to_string(),
                })?;
            preopen(&mut b, dir.path(), GUEST_SCRATCH, FsPerms::ReadWrite)?;
            scratch = Some(dir);
        }
        SandboxMode::DangerFullAccess => {
            // The host root is the guest's root; the guest starts in the
            // workspace, so relative paths still mean the workspace. The
            // guest's libc ignores WASI `initial-cwd`, so the one variable
            // any mode sets is `PWD`, which the guest SDK enters.
            let Some(cwd) = spec.workspace.to_str() else {
                return Err(SandboxError::Preopen {
                    path: spec.workspace.clone(),
                    detail: "the workspace path is not UTF-8, so it cannot be the guest's working directory".into(),
                });
            };
            b.initial_cwd(cwd).env("PWD", cwd);
            preopen(&mut b, Path::new("/"), "/", FsPerms::ReadWrite)?;
        }
    }
    Ok(Built {
        wasi: b.build(),
        stdout,
        stderr,
        scratch,
        denied,
    })
}

/// Fails unless `workspace` is an existing directory.
pub(crate) fn check_workspace(workspace: &Path) -> Result<(), SandboxError> {
    if workspace.is_dir() {
        Ok(())
    } else {
        Err(SandboxError::NoWorkspace(workspace.to_path_buf()))
    }
}

fn preopen(
    b: &mut WasiCtxBuilder,
    host: &Path,
    guest: &str,
    perms: FsPerms,
) -> Result<(), SandboxError> {
    b.preopened_dir(host, guest, perms)
        .map(|_| ())
        .map_err(|e| SandboxError::Preopen {
            path: host.to_path_buf(),
            detail: e.to_string(),
        })
}
