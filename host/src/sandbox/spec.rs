//! What one call is granted (DESIGN.md §2): its sandbox mode, the host
//! directory shown as its workspace, and the limits it runs under.
//!
//! Plain data, decided by the pipeline before a body runs. This module
//! enforces nothing and touches no file: the runtime turns a
//! [`SandboxSpec`] into a WASI context (preopens per mode, in
//! `runtime::wasi`, the one place with ambient authority) and a store that
//! holds every limit (`runtime::store`).

use crate::egress::NetworkGrant;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toolhost_core::SandboxMode;

/// Where the workspace appears inside the guest: the current directory, so
/// that relative paths in arguments resolve against it.
pub const GUEST_WORKSPACE: &str = ".";
/// Where the per-call scratch directory appears in `workspace-write`.
pub const GUEST_SCRATCH: &str = "/tmp";

/// Checks a guest path (a mount point, a manifest's workspace or preopen):
/// absolute without `.`/`..` components or NUL (or `.` when `dot` is
/// allowed).
pub(crate) fn check_guest_path(p: &str, dot: bool) -> Result<(), String> {
    if dot && p == "." {
        return Ok(());
    }
    if !p.starts_with('/') {
        return Err(format!("{p:?} is not an absolute guest path"));
    }
    if p.contains('\0') || p.split('/').any(|c| c == "." || c == "..") {
        return Err(format!("{p:?} has `.` or `..` components or a NUL"));
    }
    // One spelling per directory: `/a//b` and `/a/` would name `/a/b` and
    // `/a` past the checks that compare mount points.
    if p != "/" && p.split('/').skip(1).any(str::is_empty) {
        return Err(format!("{p:?} has an empty component or a trailing `/`"));
    }
    Ok(())
}

/// The limits every call runs under. Defaults are conservative; the docs of
/// each field give them. Each ends a call that exceeds it with its own code
/// (`TIMEOUT`, `OUT_OF_FUEL`, `MEMORY_LIMIT`, `OUTPUT_TOO_LARGE`).
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Wall-clock deadline, enforced by epoch interruption and while the
    /// guest waits in a host call. Default 30 s.
    pub deadline: Duration,
    /// Fuel budget; `None` runs unmetered. Only honoured by a runtime built
    /// with fuel metering enabled. Default `None`.
    pub fuel: Option<u64>,
    /// Most linear memory a call may hold, all its memories together, in
    /// bytes. Default 256 MiB.
    pub max_memory: usize,
    /// Largest table, in elements. Default 100 000.
    pub max_table_elements: usize,
    /// Most core instances a call may create; the call may also create at
    /// most twice as many linear memories and four times as many tables.
    /// Default 32.
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
    /// What the call may reach on the network (nothing by default; no mode
    /// implies any).
    pub network: NetworkGrant,
}

/// Whether `mode` preopens a directory the guest may write (the workspace in
/// `workspace-write` with its scratch directory, the host root in
/// `danger-full-access`). Mirrors the preopens `runtime::wasi` builds per mode.
pub fn writable_preopens(mode: SandboxMode) -> bool {
    // No wildcard: a new mode must decide here.
    match mode {
        SandboxMode::None | SandboxMode::ReadOnly => false,
        SandboxMode::WorkspaceWrite | SandboxMode::DangerFullAccess => true,
    }
}

/// Whether a call must have its intent durable before its body runs,
/// decided from what the call is *granted* (its enforced mode, its network
/// grants, whether a preopen is writable), never from what the tool
/// declares about itself.
///
/// A call in mode `none` or `read-only`, with no network grant and no
/// writable preopen, cannot change anything outside the host, whatever its
/// body does: its intent is committed lazily and becomes durable with the
/// next durable commit or flush. A crash may then lose it, and nothing
/// happened that recovery would need to report. Every other call (any write
/// or network grant) keeps the durable checkpoint of DESIGN.md §1: its
/// intent is synced before its body starts, and a crash before its result
/// leaves it `TOOL_OUTCOME_UNKNOWN` on recovery.
pub fn needs_durable_intent(
    mode: SandboxMode,
    network_grants: &[String],
    writable_preopens: bool,
) -> bool {
    let mode_has_effects = match mode {
        SandboxMode::None | SandboxMode::ReadOnly => false,
        SandboxMode::WorkspaceWrite | SandboxMode::DangerFullAccess => true,
    };
    mode_has_effects || writable_preopens || !network_grants.is_empty()
}

/// What a command program (`toolhost exec`) is given besides its mode and
/// limits: the only arguments, environment and standard input it sees, and
/// where the workspace appears inside it. Nothing comes from the host
/// process: what is not listed here is empty.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// The arguments; the first is the program name the guest sees.
    pub args: Vec<String>,
    /// The environment, in this order (in `danger-full-access`, `PWD` is
    /// added, naming the workspace, unless listed here).
    pub env: Vec<(String, String)>,
    /// Standard input (the whole of it; empty by default).
    pub stdin: Vec<u8>,
    /// Where the workspace is mounted in modes `read-only` and
    /// `workspace-write`: [`GUEST_WORKSPACE`] (`.`, the current directory)
    /// by default, or a path such as `/` or `/data`. See
    /// [`CommandSpec::check`].
    pub mount: String,
    /// Captures stdout and stderr into bounded buffers (a program-backed
    /// tool) instead of passing them through to the host's (`toolhost
    /// exec`).
    pub capture: bool,
    /// Host directories shown read-only at guest paths, in every mode (a
    /// program-backed tool's runtime files, such as an interpreter's
    /// standard library).
    pub read_only_dirs: Vec<(PathBuf, String)>,
}

impl Default for CommandSpec {
    fn default() -> Self {
        CommandSpec {
            args: Vec::new(),
            env: Vec::new(),
            stdin: Vec::new(),
            mount: GUEST_WORKSPACE.to_string(),
            capture: false,
            read_only_dirs: Vec::new(),
        }
    }
}

impl CommandSpec {
    /// Checks the mount point against `mode`: it must be `.` or an absolute
    /// guest path without `.` or `..` components; a mode without a
    /// workspace (`none`) or with the whole host at `/`
    /// (`danger-full-access`) takes none but `.`; in `workspace-write` it
    /// must not be [`GUEST_SCRATCH`], where the scratch directory is.
    pub fn check(&self, mode: SandboxMode) -> Result<(), SandboxError> {
        let bad = |why: &str| {
            Err(SandboxError::Mount {
                mount: self.mount.clone(),
                detail: why.to_string(),
            })
        };
        let mount = self.mount.as_str();
        if mount == GUEST_WORKSPACE {
            return Ok(());
        }
        // An absolute guest path with one spelling, as a manifest's: `//tmp`
        // would otherwise pass for another path than `/tmp`.
        if let Err(why) = check_guest_path(mount, false) {
            return bad(&format!(
                "a mount point is `.` or an absolute guest path such as `/` or `/data`: {why}"
            ));
        }
        match mode {
            SandboxMode::None => bad(
                "mode none mounts nothing; give --mode read-only (or wider) to mount the workspace",
            ),
            SandboxMode::DangerFullAccess => {
                bad("danger-full-access mounts the host root at `/`, not the workspace")
            }
            SandboxMode::WorkspaceWrite if mount == GUEST_SCRATCH => {
                bad("in workspace-write the per-call scratch directory is mounted at /tmp")
            }
            _ => Ok(()),
        }
    }
}

/// Errors that make a sandbox impossible to enforce.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The workspace does not exist or is not a directory.
    #[error("workspace {0} does not exist or is not a directory")]
    NoWorkspace(PathBuf),
    /// A command program's mount point cannot be used (see
    /// [`CommandSpec::check`]).
    #[error("cannot mount the workspace at {mount:?}: {detail}")]
    Mount {
        /// The mount point asked for.
        mount: String,
        /// Why it cannot be used.
        detail: String,
    },
    /// A preopen could not be opened.
    #[error("cannot preopen {path}: {detail}")]
    Preopen {
        /// The host path.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
}

/// Where a file the host reads (a policy, a tool's manifest or program)
/// is one that calls could rewrite: `path`, or a name on the way to it,
/// inside `workspace`. Looked at name by name, each from its parent
/// directory resolved (a link inside the workspace can be re-pointed,
/// whatever it names today), and by the file `path` resolves to.
pub fn inside_workspace(path: &Path, workspace: &Path) -> Option<PathBuf> {
    let workspace = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    passes_through(path, &workspace).or_else(|| resolved_inside(path, &workspace))
}

/// The first name on the way to `path` that is in `workspace` (canonical),
/// each looked up from its parent directory resolved, itself not followed:
/// a link inside the workspace, which a call could re-point, is found
/// whatever it names today and however the path spells the workspace.
fn passes_through(path: &Path, workspace: &Path) -> Option<PathBuf> {
    let abs = match std::env::current_dir() {
        Ok(cwd) => cwd.join(path),
        Err(_) => path.to_path_buf(),
    };
    let mut walked = PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::ParentDir => {
                walked.pop();
                continue;
            }
            std::path::Component::CurDir => continue,
            other => walked.push(other),
        }
        let (Some(parent), Some(name)) = (walked.parent(), walked.file_name()) else {
            continue;
        };
        let here = parent
            .canonicalize()
            .unwrap_or_else(|_| parent.to_path_buf())
            .join(name);
        if here.starts_with(workspace) {
            return Some(here);
        }
    }
    None
}

/// `dir` (made absolute, symlinks of its longest existing prefix resolved)
/// when it is `workspace` (canonical) or inside it.
pub(crate) fn resolved_inside(dir: &Path, workspace: &Path) -> Option<PathBuf> {
    let abs = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|c| c.join(dir))
            .unwrap_or_else(|_| dir.to_path_buf())
    };
    // Resolve the longest existing prefix, so a state dir that does not
    // exist yet is still compared through symlinks.
    let mut existing = abs.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.parent(), existing.file_name()) {
            (Some(p), Some(n)) => {
                rest.push(n.to_os_string());
                existing = p;
            }
            _ => break,
        }
    }
    let mut resolved = existing
        .canonicalize()
        .unwrap_or_else(|_| existing.to_path_buf());
    for n in rest.into_iter().rev() {
        resolved.push(n);
    }
    resolved.starts_with(workspace).then_some(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_follows_every_kind_of_grant() {
        let network = ["https://example.com".to_string()];
        for mode in [SandboxMode::None, SandboxMode::ReadOnly] {
            assert!(!writable_preopens(mode), "{mode}");
            assert!(!needs_durable_intent(mode, &[], false), "{mode}");
            assert!(needs_durable_intent(mode, &network, false), "{mode}");
            assert!(needs_durable_intent(mode, &[], true), "{mode}");
        }
        for mode in [SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess] {
            assert!(writable_preopens(mode), "{mode}");
            assert!(needs_durable_intent(mode, &[], false), "{mode}");
        }
    }
}
