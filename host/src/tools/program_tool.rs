//! Program-backed tools: a WASI program (a preview 1 command, a preview 1
//! reactor exporting `run`, or a command component) made a tool by its
//! `NAME.tool.toml` manifest (see `manifest`).
//!
//! Such a tool is registered like a component tool and every call goes
//! through the whole pipeline (lookup, validation, policy, guards,
//! approval, durable intent, sandbox, output checks, ordered commit); only
//! the body differs. This module owns that body: arguments become argv and
//! stdin as the manifest says, the program runs in a fresh store under the
//! call's mode and limits (the manifest's cap the host's), and its exit
//! status and bounded stdout and stderr become the result. It decides
//! nothing about whether a call may run.
//!
//! The canonical result is `{exit_code, stdout, stderr, stdout_truncated,
//! stderr_truncated}`; the content is what the model should read: stdout,
//! and stderr with the exit status when the status is not 0. A non-zero
//! exit is the tool's own error (`TOOL_ERROR`, with that canonical and
//! content), not a failure of the host.

use crate::sandbox::spec::{CommandSpec, GUEST_WORKSPACE, SandboxSpec};
use crate::sandbox::state::Interrupt;
use crate::sandbox::{BodyOutcome, Program, Receipt, Runtime, StoreBuilder, WasmFileError, race};
use crate::tools::descriptor::ContentItem;
use crate::tools::manifest::{Manifest, ManifestCode, ManifestError};
use serde_json::json;
use sha2::Digest;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use toolhost_core::{ErrorCode, SandboxMode};

/// A program-backed tool: its manifest and its program, compiled (through
/// the compile cache) and linked.
pub struct ProgramTool {
    /// The checked manifest.
    pub manifest: Manifest,
    /// Where the program came from (its path).
    pub source: String,
    /// SHA-256 of the program's bytes (hex).
    pub sha256: String,
    program: Program,
}

impl std::fmt::Debug for ProgramTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgramTool")
            .field("name", &self.manifest.descriptor.name)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl ProgramTool {
    /// Reads the manifest at `path`, then compiles (or loads from the
    /// cache) and links the program it names. Blocking: compiling a large
    /// program takes a while.
    pub(crate) fn load(runtime: &Runtime, path: &Path) -> Result<ProgramTool, ManifestError> {
        let manifest = Manifest::load(path)?;
        let error = |code, detail: String| ManifestError {
            code,
            path: path.display().to_string(),
            detail,
        };
        let source = manifest.wasm.display().to_string();
        let bytes = crate::sandbox::read_wasm_file(&manifest.wasm).map_err(|e| {
            let code = match e {
                WasmFileError::Io(_) => ManifestCode::WasmMissing,
                WasmFileError::NotAFile | WasmFileError::TooLarge => ManifestCode::NotProgram,
            };
            error(code, format!("cannot read {source}: {e}"))
        })?;
        let program = runtime
            .link_tool_program(&source, &bytes)
            .map_err(|e| error(ManifestCode::NotProgram, e.to_string()))?;
        let sha256 = hex::encode(sha2::Sha256::digest(&bytes));
        Ok(ProgramTool {
            manifest,
            source,
            sha256,
            program,
        })
    }

    /// Runs the program once for a call whose `args` were validated, under
    /// `spec` (its mode, workspace, limits and network grant), each limit
    /// the tighter of the spec's and the manifest's.
    ///
    /// The body runs on a blocking thread of its own, where its file
    /// operations are done in place instead of each being handed to
    /// tokio's blocking pool (an interpreter reads hundreds of files from
    /// its standard library on every start). The deadline and cancellation
    /// are raced there as everywhere else, and, as for a component tool's
    /// body with file access, one stuck in a host system call that never
    /// returns (a FIFO without a writer, a hung network mount) is abandoned
    /// [`crate::sandbox::STUCK_GRACE`] after its deadline or cancellation.
    /// `watch` cancels it, keeps what an abandoned body holds and shares its
    /// network records (a program reports no progress); `door` carries its
    /// `host.call` frames (code mode).
    pub(crate) async fn run(
        self: &Arc<Self>,
        runtime: &Arc<Runtime>,
        args: &serde_json::Value,
        spec: &SandboxSpec,
        watch: crate::sandbox::Watch,
        door: Option<crate::sandbox::door::Door>,
    ) -> (BodyOutcome, Receipt) {
        let crate::sandbox::Watch {
            interrupt,
            on_abandon,
            witness,
            ..
        } = watch;
        // The manifest's timeout, when tighter, is the deadline the body
        // is abandoned after.
        let mut spec = spec.clone();
        if let Some(t) = self.manifest.limits.timeout {
            spec.limits.deadline = spec.limits.deadline.min(t);
        }
        let (tool, rt, args) = (self.clone(), runtime.clone(), args.clone());
        let body_witness = witness.clone();
        runtime
            .invoker()
            .on_own_thread(
                &spec,
                interrupt,
                on_abandon,
                witness,
                move |spec, interrupt| async move {
                    tool.run_here(&rt, &args, &spec, interrupt, &body_witness, door)
                        .await
                },
            )
            .await
    }

    /// [`ProgramTool::run`] on the current thread, whose file operations
    /// it blocks; `witness` shares its network records with the call.
    async fn run_here(
        &self,
        runtime: &Runtime,
        args: &serde_json::Value,
        spec: &SandboxSpec,
        interrupt: Interrupt,
        witness: &crate::sandbox::NetWitness,
        door: Option<crate::sandbox::door::Door>,
    ) -> (BodyOutcome, Receipt) {
        let started = Instant::now();
        let m = &self.manifest;
        let refuse = |code, message: String| {
            (
                BodyOutcome::Err { code, message },
                Receipt {
                    mode: Some(spec.mode),
                    ..Receipt::default()
                },
            )
        };
        let argv = match m.argv(args) {
            Ok(a) => a,
            Err(e) => return refuse(ErrorCode::InvalidArgs, e),
        };
        // The manifest's limits cap the host's: the tighter of the two holds.
        let mut spec = spec.clone();
        let limits = &m.limits;
        let l = &mut spec.limits;
        if let Some(t) = limits.timeout {
            l.deadline = l.deadline.min(t);
        }
        if let Some(f) = limits.fuel {
            l.fuel = Some(l.fuel.map_or(f, |h| h.min(f)));
        }
        if let Some(mem) = limits.memory {
            l.max_memory = l.max_memory.min(mem);
        }
        if let Some(out) = limits.output {
            l.max_stdio = l.max_stdio.min(out);
        }
        // The program's output becomes the result, which the host's output
        // cap bounds (stdout and stderr are in it twice, canonical and
        // content): keep at most a quarter of it of each stream, and check
        // the result against the cap once it is built.
        spec.limits.max_stdio = spec
            .limits
            .max_stdio
            .min(spec.limits.max_output.saturating_sub(1024) / 4);
        // Each preopen was resolved inside the manifest's directory when the
        // tool was loaded, and is opened by that resolved path at each call:
        // it must still resolve to itself. A directory on its way replaced
        // by a symbolic link since then (by whoever can write there) would
        // otherwise hand the program whatever the link names.
        for p in &m.preopens {
            if std::fs::canonicalize(&p.host).ok().as_deref() != Some(p.host.as_path()) {
                return refuse(
                    ErrorCode::SandboxUnavailable,
                    format!(
                        "the preopen {} (for {}) no longer resolves to itself since the tool was loaded",
                        p.host.display(),
                        p.guest
                    ),
                );
            }
        }
        // Mode `none` shows the program no file of the workspace: a preopen
        // that holds the workspace, or lies inside it, would.
        if spec.mode == SandboxMode::None
            && let Some(p) = overlapping_preopen(&m.preopens, &spec.workspace)
        {
            return refuse(
                ErrorCode::SandboxUnavailable,
                format!(
                    "the preopen {} (for {}) holds or is inside the workspace {}, which a call in \
                     mode none may not see",
                    p.host.display(),
                    p.guest,
                    spec.workspace.display()
                ),
            );
        }
        let command = CommandSpec {
            args: argv,
            env: m.env.clone(),
            stdin: m.stdin(args),
            // Mode `none` mounts nothing, and `danger-full-access` the host
            // root (starting in the workspace): the manifest's mount point
            // applies to the two modes that mount the workspace.
            mount: if matches!(spec.mode, SandboxMode::None | SandboxMode::DangerFullAccess) {
                GUEST_WORKSPACE.to_string()
            } else {
                m.workspace.clone()
            },
            capture: true,
            read_only_dirs: m
                .preopens
                .iter()
                .map(|p| (p.host.clone(), p.guest.clone()))
                .collect(),
        };
        let mut builder = StoreBuilder::new(&spec);
        builder
            .interrupt(interrupt)
            .command(&command)
            .blocking(true)
            .witness(witness)
            .door(door);
        let mut run = match runtime.store(&builder) {
            Ok(r) => r,
            Err((code, message)) => return refuse(code, message),
        };
        let (deadline, interrupt) = run.deadline();
        let raced = race(self.program.run(&mut run.store), deadline, &interrupt).await;
        let ended = run.finish(raced);
        let mut receipt = run.receipt();
        receipt.wall_us = started.elapsed().as_micros() as u64;
        let status = match ended {
            Ok(status) => status,
            Err((code, message)) => return (BodyOutcome::Err { code, message }, receipt),
        };
        // A program that failed after a memory growth was refused failed
        // for the limit (an interpreter turns the refusal into its own
        // error, `MemoryError`, and exits 1).
        if status != 0
            && let Some(refused) = run.memory_refused()
        {
            let message = format!("{refused}; the program then exited with status {status}");
            return (
                BodyOutcome::Err {
                    code: ErrorCode::MemoryLimit,
                    message,
                },
                receipt,
            );
        }
        let state = run.store.data();
        let (stdout, out_dropped) = state.stdout.snapshot();
        let (stderr, err_dropped) = state.stderr.snapshot();
        let content = model_text(status, &stdout, out_dropped, &stderr, err_dropped);
        let canonical = json!({
            "exit_code": status,
            "stdout": stdout,
            "stderr": stderr,
            "stdout_truncated": out_dropped > 0,
            "stderr_truncated": err_dropped > 0,
        });
        // JSON escapes control bytes six times over: measure what is sent.
        let size = canonical.to_string().len() + content.len();
        if size > spec.limits.max_output {
            return (
                BodyOutcome::Err {
                    code: ErrorCode::OutputTooLarge,
                    message: format!(
                        "the result is {size} bytes; the limit is {}",
                        spec.limits.max_output
                    ),
                },
                receipt,
            );
        }
        (
            BodyOutcome::Ok {
                canonical,
                content: vec![ContentItem::text(content)],
                meta: None,
            },
            receipt,
        )
    }
}

/// The exit status a program tool's canonical result records, if it is one.
pub(crate) fn exit_status(canonical: &serde_json::Value) -> Option<u64> {
    canonical.get("exit_code").and_then(|c| c.as_u64())
}

/// What the model reads of a program's run: its stdout; and when it exited
/// with a status other than 0, its stderr and that status too. A cut stream
/// says how much of it was dropped.
fn model_text(
    status: u8,
    stdout: &str,
    out_dropped: u64,
    stderr: &str,
    err_dropped: u64,
) -> String {
    let mut text = stdout.to_string();
    if out_dropped > 0 {
        text.push_str(&format!(
            "\n[stdout cut: {out_dropped} more bytes not kept]"
        ));
    }
    if status != 0 {
        if !stderr.is_empty() {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(stderr);
        }
        if err_dropped > 0 {
            text.push_str(&format!(
                "\n[stderr cut: {err_dropped} more bytes not kept]"
            ));
        }
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("[exit status {status}]"));
    }
    text
}

/// The first of `preopens` (resolved paths) that holds `workspace` or lies
/// inside it. A workspace that cannot be resolved overlaps every preopen
/// unless it does not exist (then nothing lies inside it).
fn overlapping_preopen<'p>(
    preopens: &'p [crate::tools::manifest::Preopen],
    workspace: &std::path::Path,
) -> Option<&'p crate::tools::manifest::Preopen> {
    let workspace = match std::fs::canonicalize(workspace) {
        Ok(w) => Some(w),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(_) => None,
    };
    preopens.iter().find(|p| {
        workspace
            .as_ref()
            .is_none_or(|w| w.starts_with(&p.host) || p.host.starts_with(w))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_reads_stderr_and_the_status_only_on_failure() {
        assert_eq!(model_text(0, "out\n", 0, "noise", 0), "out\n");
        assert_eq!(
            model_text(3, "out", 0, "boom\n", 0),
            "out\nboom\n[exit status 3]"
        );
        assert_eq!(
            model_text(0, "abc", 5, "", 0),
            "abc\n[stdout cut: 5 more bytes not kept]"
        );
    }
}
