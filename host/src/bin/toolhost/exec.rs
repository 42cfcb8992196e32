//! `toolhost exec`: a WASI command program under a sandbox mode, outside
//! the governed pipeline, and its receipt file.

use crate::args::ExecArgs;
use crate::host::mebibytes;
use crate::log::network_line;
use anyhow::{Context, Result, anyhow, bail};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use toolhost::exec::{CommandSpec, ExecOutcome, SandboxSpec, run_command};
use toolhost::policy::egress::EgressOutcome;
use toolhost::{Interrupt, Limits, Receipt, RuntimeOptions, SandboxMode};

/// The most `toolhost exec --stdin` reads.
const EXEC_STDIN_CAP: u64 = 64 << 20;

/// Runs the program as the flags say, reports on stderr what its sandbox
/// refused and its grants let through, and writes `--receipt`. The exit
/// status is the program's, or 125 when the runtime stopped it or its
/// receipt could not be written.
pub(crate) async fn exec(a: ExecArgs) -> Result<ExitCode> {
    let bytes = toolhost::runtime::read_wasm_file(&a.program)
        .map_err(|e| anyhow!("cannot read {}: {e}", a.program.display()))?;
    let workspace = exec_workspace(&a)?;
    let network = exec_network(&a)?;
    let command = command_of(&a)?;
    command.check(a.mode)?;
    let runtime = toolhost::Runtime::new(RuntimeOptions {
        fuel: a.fuel.is_some(),
        max_concurrent_calls: 4,
        ..RuntimeOptions::default()
    })
    .map_err(|e| anyhow!("{e}"))?;
    let spec = SandboxSpec {
        mode: a.mode,
        workspace,
        limits: Limits {
            deadline: Duration::from_millis(a.timeout_ms),
            fuel: a.fuel,
            max_memory: mebibytes(a.memory_mb)?,
            max_stdio: a.max_output,
            ..Limits::default()
        },
        network,
    };
    let receipt = match &a.receipt {
        Some(path) => Some(ReceiptFile::prepare(path, a.mode, &spec.workspace)?),
        None => None,
    };
    let interrupt = Interrupt::default();
    let on_ctrl_c = interrupt.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_ctrl_c.cancel();
        }
    });
    let program = a.program.display().to_string();
    let report = run_command(&runtime, &program, &bytes, &spec, &command, interrupt)
        .await
        .map_err(|e| {
            // Nothing ran: what is at the receipt's path is not this run's.
            if let Some(r) = &receipt {
                r.discard_stale();
            }
            anyhow!("{e}")
        })?;
    report_receipt(&report.receipt);
    let (status, exit, error) = outcome(&report.outcome);
    if let Some(receipt) = receipt {
        let json = serde_json::json!({
            "program": program,
            "exit": exit,
            "error": error,
            "receipt": report.receipt,
        });
        if !receipt.write_or_say(&json, exit) {
            return Ok(ExitCode::from(125));
        }
    }
    Ok(ExitCode::from(status))
}

/// How the run ended: toolhost's exit status, the program's own (none when
/// the runtime stopped it, which stderr is told) and the receipt's error.
fn outcome(outcome: &ExecOutcome) -> (u8, Option<u8>, Option<serde_json::Value>) {
    match outcome {
        ExecOutcome::Exited(status) => (*status, Some(*status), None),
        ExecOutcome::Failed { code, message } => {
            eprintln!("error: {code}: {message}");
            (
                125,
                None,
                Some(serde_json::json!({ "code": code, "message": message })),
            )
        }
    }
}

/// The workspace: `--workspace`, else the current directory; one that is
/// not a directory is refused unless the mode opens none.
fn exec_workspace(a: &ExecArgs) -> Result<PathBuf> {
    let workspace = match &a.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir()?,
    };
    if a.mode != SandboxMode::None && !workspace.is_dir() {
        bail!(
            "workspace {} does not exist or is not a directory",
            workspace.display()
        );
    }
    Ok(workspace)
}

/// The program's command line, environment (a later `--env` of the same
/// key wins), standard input and mount point.
fn command_of(a: &ExecArgs) -> Result<CommandSpec> {
    let mut args = vec![
        a.program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    ];
    args.extend(a.args.iter().cloned());
    let mut env: Vec<(String, String)> = Vec::new();
    for (key, value) in &a.env {
        match env.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value.clone(),
            None => env.push((key.clone(), value.clone())),
        }
    }
    Ok(CommandSpec {
        args,
        env,
        stdin: match &a.stdin {
            Some(path) => read_stdin(path)?,
            None => Vec::new(),
        },
        mount: a.mount.clone(),
        ..Default::default()
    })
}

/// Tells stderr what the run's receipt holds.
fn report_receipt(receipt: &Receipt) {
    // What the sandbox refused, so that a program's "permission denied" or
    // "connection refused" can be traced to a missing grant.
    for denied in &receipt.denied {
        eprintln!("toolhost: denied: {denied}");
    }
    // And what the grants let through (a refusal is a `denied` line above).
    for record in &receipt.network {
        if matches!(record.outcome, EgressOutcome::Refused { .. }) {
            continue;
        }
        if let Ok(json) = serde_json::to_value(record) {
            eprintln!("toolhost: network: {}", network_line(&json));
        }
    }
    // Refusals past what a run records (256 records; binds past the 64 a
    // run may make without a grant) are counted, not recorded.
    if receipt.network_dropped > 0 {
        eprintln!(
            "toolhost: receipt: {} more refused attempts counted, not recorded",
            receipt.network_dropped
        );
    }
}

/// Where `exec --receipt` goes: a new file made beside the path before the
/// program runs, written once the run ends and then renamed over the path
/// (whatever is there then, a link included, is replaced, not written
/// through). Dropped unwritten, it is removed. Readable by its owner only.
struct ReceiptFile {
    path: PathBuf,
    tmp: tempfile::NamedTempFile,
}

impl ReceiptFile {
    /// Refuses, before the program runs: a program that may write where the
    /// receipt goes (inside the workspace in a mode that writes there, or
    /// anywhere in `danger-full-access`), a path that names no file or a
    /// directory, and a directory where the new file cannot be made.
    fn prepare(path: &Path, mode: SandboxMode, workspace: &Path) -> Result<ReceiptFile> {
        if mode == SandboxMode::DangerFullAccess {
            bail!(
                "--receipt cannot be kept from a program in mode danger-full-access, which may write anywhere; use another mode"
            );
        }
        if toolhost::runtime::writable_preopens(mode) {
            let workspace = workspace
                .canonicalize()
                .with_context(|| format!("cannot resolve the workspace {}", workspace.display()))?;
            if toolhost::runtime::inside_workspace(path, &workspace).is_some() {
                bail!(
                    "--receipt {} is inside the workspace {}, which the program may write in mode {mode}; keep the receipt outside it",
                    path.display(),
                    workspace.display()
                );
            }
        }
        let name = match path.file_name() {
            Some(n) if !path.is_dir() => n,
            _ => bail!("--receipt {} does not name a file", path.display()),
        };
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        // A name of its own, made with `create_new` (never someone else's
        // file), removed unless renamed.
        let mut prefix = std::ffi::OsString::from(".");
        prefix.push(name);
        prefix.push(".");
        let tmp = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(".tmp")
            .tempfile_in(dir)
            .with_context(|| {
                format!(
                    "cannot write --receipt {} in {}",
                    path.display(),
                    dir.display()
                )
            })?;
        Ok(ReceiptFile {
            path: path.to_path_buf(),
            tmp,
        })
    }

    /// Removes what is at the path: it is not this run's receipt.
    fn discard_stale(&self) {
        let _ = std::fs::remove_file(&self.path);
    }

    /// Writes `json` as the receipt; false, once what is at the path is
    /// removed (it is not this run's receipt) and stderr says why, when it
    /// could not be written. `exit` is the program's status, which the
    /// caller then does not exit with.
    fn write_or_say(self, json: &serde_json::Value, exit: Option<u8>) -> bool {
        let path = self.path.clone();
        let Err(e) = self.write(json) else {
            return true;
        };
        // What is at the path is not this run's receipt.
        let _ = std::fs::remove_file(&path);
        let lost = match exit {
            Some(status) => format!(" (toolhost exits 125 instead of the program's {status})"),
            None => String::new(),
        };
        eprintln!(
            "error: cannot write --receipt {}: {e}{lost}",
            path.display()
        );
        false
    }

    /// Writes `json` and renames it over the path.
    fn write(self, json: &serde_json::Value) -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(self.tmp.as_file());
        serde_json::to_writer_pretty(&mut out, json)?;
        std::io::Write::flush(&mut out)?;
        drop(out);
        self.tmp.persist(&self.path).map(drop).map_err(|e| e.error)
    }
}

/// The network grant of `exec --allow-net`, with its `--ca-file` and its
/// `--net-*` limits.
fn exec_network(a: &ExecArgs) -> Result<toolhost::runtime::NetworkGrant> {
    use toolhost::policy::egress::{Grant, Limits as NetLimits, NetworkPolicy};
    let grants = a
        .allow_net
        .iter()
        .map(|p| Grant::parse(p).map_err(|e| anyhow!("--allow-net: {p:?}: {e}")))
        .collect::<Result<Vec<_>>>()?;
    let defaults = NetLimits::default();
    let limits = NetLimits {
        max_requests: a.net_max_requests.unwrap_or(defaults.max_requests),
        max_response_bytes: a
            .net_max_response_bytes
            .unwrap_or(defaults.max_response_bytes),
        request_timeout_ms: a
            .net_request_timeout_ms
            .unwrap_or(defaults.request_timeout_ms),
    };
    let policy = NetworkPolicy::from_grants(grants)
        .with_ca_file(a.ca_file.clone())
        .with_limits(limits);
    // Named as the flag that caused it: a grant's (a socket grant naming a
    // host), the CA file's, or the system's TLS roots (SSL_CERT_FILE).
    toolhost::runtime::NetworkGrant::from_policy(&policy, None).map_err(|e| {
        if let Some(rest) = e.strip_prefix("network.ca_file ") {
            anyhow!("--ca-file {rest}")
        } else if let Some(rest) = e.strip_prefix("network grant ") {
            anyhow!("--allow-net: {rest}")
        } else {
            anyhow!("{e}")
        }
    })
}

/// The program's stdin for `exec --stdin`: the file's bytes, or toolhost's
/// own stdin for `-`, at most [`EXEC_STDIN_CAP`] bytes.
fn read_stdin(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let read = if path == Path::new("-") {
        std::io::stdin()
            .lock()
            .take(EXEC_STDIN_CAP + 1)
            .read_to_end(&mut bytes)
            .context("cannot read toolhost's standard input")
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(EXEC_STDIN_CAP + 1).read_to_end(&mut bytes))
            .with_context(|| format!("cannot read --stdin {}", path.display()))
    };
    read?;
    if bytes.len() as u64 > EXEC_STDIN_CAP {
        bail!(
            "--stdin {} is larger than {} MiB, the most toolhost exec reads as a program's input",
            path.display(),
            EXEC_STDIN_CAP >> 20
        );
    }
    Ok(bytes)
}
