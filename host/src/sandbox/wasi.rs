//! The WASI context of one call: what a guest can reach, per sandbox mode.
//!
//! This module is the only place that decides which host directories a guest
//! sees and with which permissions, and the only one with ambient authority
//! (it opens host directories by path, in [`build_wasi`]; the scratch
//! directories it preopens are made and removed by `runtime::scratch`,
//! under `TMPDIR` only). Everything else a
//! tool could reach through WASI (env, args, stdin, sockets, name lookup) is
//! empty or refused here; a command program (`toolhost exec`) gets exactly
//! the args, env and stdin its [`CommandSpec`] lists, nothing from the host
//! process. It sets no limit: the store module gives it the bounded
//! stdout/stderr buffers (or their caps) and holds every limit.

use crate::egress::call::CallNet;
use crate::sandbox::output::{CapturedOutput, HostStream, PassthroughOutput};
use crate::sandbox::scratch::{Scratch, ScratchPool};
use crate::sandbox::spec::{
    CommandSpec, GUEST_SCRATCH, GUEST_WORKSPACE, SandboxError, SandboxSpec,
};
use std::path::Path;
use std::sync::Arc;
use toolhost_core::SandboxMode;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

/// What building a WASI context produced besides the context.
pub(crate) struct Built {
    /// The context (usable by components and preview 1 modules alike).
    pub wasi: WasiP1Ctx,
    /// The call's scratch directory (kept or removed when dropped).
    pub scratch: Option<Scratch>,
    /// A command program's stdout and stderr.
    pub passthrough: Option<[PassthroughOutput; 2]>,
}

/// Builds the WASI context of one call: preopens for `spec.mode`, stdout and
/// stderr into the given bounded buffers, no env, args or stdin; sockets
/// decided by `net` (the call's network grant).
/// `command` (for `toolhost exec` only) passes its args, env and stdin,
/// mounts the workspace at its mount point, and passes stdout and stderr
/// through to the host's, up to `spec.limits.max_stdio` bytes each.
/// `blocking`: file operations block the current thread (only for a body
/// on a thread of its own). The scratch directory of `workspace-write`
/// comes from `scratch_pool`.
///
/// # Ambient Authority
///
/// Opens host directories by path (the workspace, the scratch directory and,
/// in `danger-full-access`, `/`). This is the one place that does.
pub(crate) fn build_wasi(
    spec: &SandboxSpec,
    (stdout, stderr): (&CapturedOutput, &CapturedOutput),
    command: Option<&CommandSpec>,
    blocking: bool,
    net: &Arc<CallNet>,
    scratch_pool: &Arc<ScratchPool>,
) -> Result<Built, SandboxError> {
    let mut b = WasiCtxBuilder::new();
    // File operations block the current thread instead of going through
    // tokio's blocking pool: only for a body on a thread of its own.
    b.allow_blocking_current_thread(blocking);
    let mut passthrough = None;
    let mut mount = GUEST_WORKSPACE;
    match command {
        // Tools: output is captured and bounded, never inherited; no args.
        None => {
            b.stdout(stdout.clone()).stderr(stderr.clone());
        }
        // `toolhost exec`: the user runs a command program and sees its
        // output; it gets what the user listed, nothing inherited.
        Some(command) => {
            command.check(spec.mode)?;
            mount = &command.mount;
            b.args(&command.args)
                .envs(&command.env)
                .stdin(MemoryInputPipe::new(command.stdin.clone()));
            if command.capture {
                // A program-backed tool: its output is its result, kept
                // in the call's bounded buffers.
                b.stdout(stdout.clone()).stderr(stderr.clone());
            } else {
                let cap = spec.limits.max_stdio;
                let out = PassthroughOutput::new(HostStream::Stdout, cap);
                let err = PassthroughOutput::new(HostStream::Stderr, cap);
                b.stdout(out.clone()).stderr(err.clone());
                passthrough = Some([out, err]);
            }
        }
    }
    // Network: only what the call's grant names. A guest may create a
    // socket object, but every address it tries to bind, connect, send to
    // or receive from is decided by the check below against the grant's
    // `tcp://` and `udp://` entries (refusals are recorded for the
    // receipt). Name lookup is refused outright: it has no address to
    // check, and a lookup is itself traffic (the linker's
    // `resolve-addresses` is the host's, which answers `access-denied` and
    // records it: `runtime::link::refuse_name_lookups`; this is the second
    // wall).
    b.allow_tcp(true)
        .allow_udp(true)
        .allow_ip_name_lookup(false);
    let net = net.clone();
    b.socket_addr_check(move |addr, addr_use| {
        let allowed = net.check_socket(addr, addr_use);
        Box::pin(async move { allowed })
    });

    let mut scratch = None;
    if spec.mode != SandboxMode::None {
        check_workspace(&spec.workspace)?;
    }
    match spec.mode {
        SandboxMode::None => {}
        SandboxMode::ReadOnly => {
            preopen(&mut b, &spec.workspace, mount, FsPerms::ReadOnly)?;
        }
        SandboxMode::WorkspaceWrite => {
            preopen(&mut b, &spec.workspace, mount, FsPerms::ReadWrite)?;
            scratch_pool
                .check_outside(&spec.workspace)
                .map_err(|detail| SandboxError::Preopen {
                    path: std::env::temp_dir(),
                    detail,
                })?;
            let dir = scratch_pool.take().map_err(|e| SandboxError::Preopen {
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
            b.initial_cwd(cwd);
            if !command.is_some_and(|c| c.env.iter().any(|(k, _)| k == "PWD")) {
                b.env("PWD", cwd);
            }
            preopen(&mut b, Path::new("/"), "/", FsPerms::ReadWrite)?;
        }
    }
    // A program-backed tool's own read-only directories, in every mode.
    for (host, guest) in command.iter().flat_map(|c| &c.read_only_dirs) {
        preopen(&mut b, host, guest, FsPerms::ReadOnly)?;
    }
    Ok(Built {
        wasi: b.build_p1(),
        scratch,
        passthrough,
    })
}

/// Fails unless `workspace` is an existing directory.
fn check_workspace(workspace: &Path) -> Result<(), SandboxError> {
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
