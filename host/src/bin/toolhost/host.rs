//! A [`Host`] from the flags the hosting subcommands share (`run`, `serve`,
//! `explain`): the workspace, the state directory or PostgreSQL log, the
//! policy, the approver and the tools directories.

use crate::args::{HostArgs, StateArgs};
use crate::pg::{open_postgres, pg_options, postgres_url};
use anyhow::{Context, Result, anyhow, bail};
use std::path::{Path, PathBuf};
use std::time::Duration;
use toolhost::{
    ApprovalOutcome, Approver, CommandApprover, FixedApprover, Host, HostBuilder, Limits,
    NoApprover, RuntimeOptions, TtyApprover,
};

fn workspace_of(state: &StateArgs) -> Result<PathBuf> {
    let ws = match &state.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    if !ws.is_dir() {
        bail!(
            "workspace {} does not exist or is not a directory",
            ws.display()
        );
    }
    ws.canonicalize()
        .with_context(|| format!("cannot resolve workspace {}", ws.display()))
}

/// The state directory: `--state`, else `$TOOLHOST_STATE_DIR`, else one per
/// workspace under the user's state directory.
pub(crate) fn state_dir_of(state: &StateArgs) -> Result<PathBuf> {
    if let Some(s) = &state.state {
        return Ok(s.clone());
    }
    if let Some(s) = std::env::var_os("TOOLHOST_STATE_DIR") {
        return Ok(PathBuf::from(s));
    }
    let base = match std::env::var_os("XDG_STATE_HOME") {
        Some(x) => PathBuf::from(x).join("toolhost"),
        None => match std::env::var_os("HOME") {
            Some(h) => PathBuf::from(h).join(".local/state/toolhost"),
            None => bail!("no --state given and neither XDG_STATE_HOME nor HOME is set"),
        },
    };
    let ws = workspace_of(state)?;
    let digest = <sha2::Sha256 as sha2::Digest>::digest(ws.as_os_str().as_encoded_bytes());
    let name = ws
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into());
    Ok(base
        .join("workspaces")
        .join(format!("{name}-{}", hex::encode(&digest[..6]))))
}

/// A host over one component file (`component`), or the embedded tools and
/// `--tools`, as the flags say.
pub(crate) async fn build_host(h: &HostArgs, component: Option<&str>) -> Result<Host> {
    build_host_with(h, component, true, false, |_| {}).await
}

/// `build_host`, optionally without the embedded tools, with a last say
/// over the builder (the MCP server installs its approver and shares the
/// runtime and log across reloads: `log_given`, and then no PostgreSQL log is
/// opened here, since a second registration under this replica's identity
/// would fence the log in use and recover its calls in flight).
pub(crate) async fn build_host_with(
    h: &HostArgs,
    component: Option<&str>,
    embedded: bool,
    log_given: bool,
    customize: impl FnOnce(&mut HostBuilder),
) -> Result<Host> {
    let mut b = HostBuilder::new();
    let workspace = workspace_of(&h.state)?;
    b.workspace(&workspace);
    match component {
        Some(path) => {
            b.tool_file(path);
        }
        None => {
            if embedded {
                b.embedded_tools();
            }
            if let Some(dir) = &h.tools {
                add_tools_dir(&mut b, dir)?;
            }
        }
    }
    if let Some(policy) = &h.policy {
        refuse_inside_workspace(policy, &workspace)?;
    }
    b.policy(load_policy(h.policy.as_deref())?);
    b.approver(approver_of(h)?);
    b.limits(Limits {
        deadline: Duration::from_millis(h.timeout_ms),
        fuel: h.fuel,
        max_memory: mebibytes(h.memory_mb)?,
        ..Limits::default()
    });
    b.runtime_options(runtime_options(h));
    session_log(&mut b, &h.state, log_given)?;
    customize(&mut b);
    b.build().await.map_err(|e| anyhow!("{e}"))
}

/// The runtime's options: fuel metering with `--fuel`, the `--cache`
/// directory.
fn runtime_options(h: &HostArgs) -> RuntimeOptions {
    let mut options = RuntimeOptions {
        fuel: h.fuel.is_some(),
        max_concurrent_calls: 16,
        ..RuntimeOptions::default()
    };
    if let Some(c) = &h.cache {
        options.cache_dir = Some(c.clone());
    }
    options
}

/// Where the host keeps its session log: the PostgreSQL log of a
/// `postgres://` `--state` (unless the caller gives the log: `log_given`),
/// else the state directory.
fn session_log(b: &mut HostBuilder, state: &StateArgs, log_given: bool) -> Result<()> {
    match postgres_url(state) {
        Some(_) if log_given => {}
        Some(url) => {
            let log = open_postgres(&url, true)?;
            // Recovery on open, as for a state directory: this identity's unfinished calls
            // and those of replicas whose lease expired end as TOOL_OUTCOME_UNKNOWN.
            let recovered = log.recover().map_err(|e| anyhow!("{e}"))?;
            if !recovered.recovered.is_empty() {
                tracing::warn!(calls = ?recovered.recovered, "recovered calls with an unknown outcome");
            }
            b.session_log(std::sync::Arc::new(log));
        }
        None => {
            b.state_dir(state_dir_of(state)?);
        }
    }
    Ok(())
}

/// Refuses a policy file that a call could rewrite: one inside the
/// workspace ([`toolhost::runtime::inside_workspace`]: through a link there, which
/// can be re-pointed, or by the file it resolves to), and one with more
/// than one hard link (the other name may be inside the workspace). The policy is the calls'
/// grant: a tool that rewrote it would choose the grants of every later
/// call, at the next run, restart or reload.
fn refuse_inside_workspace(policy: &Path, workspace: &Path) -> Result<()> {
    if toolhost::runtime::inside_workspace(policy, workspace).is_some() {
        bail!(
            "policy {} is inside the workspace {}, where tools could rewrite the grants of later calls; keep the policy file outside the workspace",
            policy.display(),
            workspace.display()
        );
    }
    // A second name of the same file may be inside the workspace, and
    // nothing short of searching the workspace would tell.
    #[cfg(unix)]
    if let Ok(meta) = std::fs::metadata(policy) {
        use std::os::unix::fs::MetadataExt;
        if meta.nlink() > 1 {
            bail!(
                "policy {} has {} hard links; one could be inside the workspace {}, where tools could rewrite the grants of later calls; keep the policy file a file of its own",
                policy.display(),
                meta.nlink(),
                workspace.display()
            );
        }
    }
    Ok(())
}

/// `--memory-mb` in bytes: a value whose bytes a `usize` cannot hold is
/// refused, never wrapped to a smaller limit.
pub(crate) fn mebibytes(mb: usize) -> Result<usize> {
    mb.checked_mul(1 << 20)
        .ok_or_else(|| anyhow!("--memory-mb {mb} is more than this machine can address"))
}

/// The policy file, or the built-in default without one.
pub(crate) fn load_policy(path: Option<&Path>) -> Result<toolhost::policy::Policy> {
    let Some(p) = path else {
        return Ok(toolhost::policy::Policy::default());
    };
    let src = std::fs::read_to_string(p)
        .with_context(|| format!("cannot read policy {}", p.display()))?;
    toolhost::policy::Policy::from_toml(&src, &p.display().to_string()).map_err(|e| anyhow!("{e}"))
}

/// `--approver`: the kinds of [`approver_from_spec`], and `queue` (requests
/// wait in the state directory, or in the PostgreSQL log's database, for
/// `toolhost approvals decide`).
pub(crate) fn approver_of(h: &HostArgs) -> Result<Box<dyn Approver>> {
    let timeout = Duration::from_secs(h.approval_timeout);
    if h.approver == "queue" {
        return Ok(Box::new(toolhost::QueueApprover::on(
            approval_queue_of(&h.state)?,
            timeout,
        )));
    }
    approver_from_spec(&h.approver, timeout).map_err(|e| anyhow!("{e}; or queue"))
}

/// Parses the `--approver` kinds other than `queue`.
fn approver_from_spec(spec: &str, timeout: Duration) -> Result<Box<dyn Approver>, String> {
    match spec {
        "none" => Ok(Box::new(NoApprover)),
        "tty" => Ok(Box::new(TtyApprover { timeout })),
        "auto-approve" => Ok(Box::new(FixedApprover(ApprovalOutcome::AllowedOnce))),
        "auto-reject" => Ok(Box::new(FixedApprover(ApprovalOutcome::Rejected))),
        s => match s.strip_prefix("command:") {
            Some(p) if !p.trim().is_empty() => Ok(Box::new(CommandApprover {
                program: p.to_string(),
                timeout,
            })),
            _ => Err(format!(
                "unknown approver {s:?} (expected none, tty, auto-approve, auto-reject or command:PROGRAM)"
            )),
        },
    }
}

/// Where `--approver queue` requests wait: the state directory, or, for a
/// PostgreSQL log, its database (shared by the log's replicas).
pub(crate) fn approval_queue_of(state: &StateArgs) -> Result<toolhost::queue::ApprovalQueue> {
    if let Some(url) = postgres_url(state) {
        let approvals =
            toolhost::log::PgApprovals::new(&url, &pg_options()?).map_err(|e| anyhow!("{e}"))?;
        return Ok(toolhost::queue::ApprovalQueue::Postgres(
            std::sync::Arc::new(approvals),
        ));
    }
    Ok(toolhost::queue::ApprovalQueue::Dir(state_dir_of(state)?))
}

/// Requests a process that died left pending are decided `unavailable`;
/// called only once this process holds the state directory's log (for a
/// PostgreSQL log: once it registered as a replica).
pub(crate) async fn recover_approvals(h: &HostArgs) {
    let Ok(queue) = approval_queue_of(&h.state) else {
        return;
    };
    match queue.recover().await {
        Ok(ids) if !ids.is_empty() => {
            tracing::warn!(
                ?ids,
                "approvals left pending by a stopped process are now unavailable"
            )
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot recover pending approvals: {e}"),
    }
}

/// Adds the tools of a tools directory ([`tools_dir_entries`]).
pub(crate) fn add_tools_dir(b: &mut HostBuilder, dir: &Path) -> Result<()> {
    for entry in tools_dir_entries(dir)? {
        match entry {
            ToolFile::Manifest(m) => b.program_tool_file(m),
            ToolFile::Component(c) => b.tool_file(c),
        };
    }
    Ok(())
}

/// One tool source of a tools directory.
pub(crate) enum ToolFile {
    /// A program-backed tool's manifest (`NAME.tool.toml`).
    Manifest(PathBuf),
    /// A component (`*.wasm`).
    Component(PathBuf),
}

/// The tools of a tools directory, by file name: each program-backed
/// tool's manifest (`NAME.tool.toml`), and each component (`*.wasm`) that
/// no manifest claims as its program (`NAME.wasm` beside `NAME.tool.toml`,
/// or the file its `wasm` names).
pub(crate) fn tools_dir_entries(dir: &Path) -> Result<Vec<ToolFile>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read tools directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    let mut entries = Vec::new();
    let mut claimed = std::collections::BTreeSet::new();
    for m in files
        .iter()
        .filter(|p| toolhost::manifest::name_of(p).is_some())
    {
        if let Some(name) = toolhost::manifest::name_of(m) {
            claimed.insert(dir.join(format!("{name}.wasm")));
        }
        // A manifest that does not parse fails the build when it is
        // loaded; here it only claims its conventional program.
        if let Ok(parsed) = toolhost::Manifest::load(m) {
            claimed.insert(parsed.wasm);
        }
        entries.push(ToolFile::Manifest(m.clone()));
    }
    for f in &files {
        if f.extension().is_some_and(|x| x == "wasm") && !claimed.contains(f) {
            entries.push(ToolFile::Component(f.clone()));
        }
    }
    Ok(entries)
}
