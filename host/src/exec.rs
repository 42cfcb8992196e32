//! Outside the governed pipeline: no policy, approval or log.
//!
//! `toolhost exec`: runs an existing WASI command program, a component
//! exporting `wasi:cli/run` or a WASI preview 1 core module exporting
//! `_start`, under the same sandbox modes and limits as tools, with the
//! args, environment and stdin the user lists (nothing inherited), its
//! stdout/stderr passed through (up to a cap each) and its exit status
//! passed through.
//!
//! What runs here is what the caller chose: a program, a mode up to
//! `danger-full-access` and a network grant, with no policy rule, guard,
//! approval, intent or session-log record between the caller and the
//! program. The sandbox still holds (the mode's preopens, the limits, the
//! grant enforced as for a tool). It is for a user who runs a program
//! themselves, as the `toolhost exec` command does, and is compiled only
//! with the `exec` feature (which `cli` enables). A program that should be
//! governed is made a tool with a manifest (`NAME.tool.toml`), whose calls
//! go through the whole pipeline.

pub use crate::sandbox::spec::{CommandSpec, SandboxSpec};
use crate::sandbox::state::Interrupt;
use crate::sandbox::{
    LoadError, NetWitness, Receipt, Run, Runtime, STUCK_GRACE, StoreBuilder, race,
};
use toolhost_core::{ErrorCode, SandboxMode};

/// How a command program ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecOutcome {
    /// It exited with this status: 0 for a normal end; a component's
    /// `exit(err)` is 1 and its `exit-with-code(n)` is `n`; a preview 1
    /// module's `proc_exit(n)` is `n` (255 for any `n` above 255).
    Exited(u8),
    /// The runtime stopped it (timeout, fuel, memory, trap, cancel), or cut
    /// its output at the cap (`OUTPUT_TOO_LARGE`).
    Failed {
        /// The stable code.
        code: ErrorCode,
        /// What happened.
        message: String,
    },
}

/// How a command program ended, and what the runtime saw it do: among
/// others the capability attempts it refused (`receipt.denied`) and every
/// network request (`receipt.network`).
#[derive(Debug, Clone)]
pub struct ExecReport {
    /// How it ended.
    pub outcome: ExecOutcome,
    /// What it did, as a tool call's receipt records it.
    pub receipt: Receipt,
}

/// Runs the command program `bytes` (read from `source`) in a fresh store
/// built for `spec`, giving it what `command` lists. The network is what
/// `spec.network` grants, nothing else.
pub async fn run_command(
    runtime: &Runtime,
    source: &str,
    bytes: &[u8],
    spec: &SandboxSpec,
    command: &CommandSpec,
    interrupt: Interrupt,
) -> Result<ExecReport, LoadError> {
    let program = runtime.link_program(source, bytes)?;
    // A program that may write the workspace must not be able to write the
    // compile cache there: the host maps its entries as native code.
    if spec.mode == SandboxMode::WorkspaceWrite
        && let (Some(cache), Ok(workspace)) = (
            runtime.cache().configured_dir(),
            spec.workspace.canonicalize(),
        )
        && let Some(inside) = crate::sandbox::spec::resolved_inside(cache, &workspace)
    {
        return Ok(ExecReport {
            outcome: ExecOutcome::Failed {
                code: ErrorCode::SandboxUnavailable,
                message: format!(
                    "the compile cache {} is inside the workspace {}, which this program may \
                     write; use TOOLHOST_CACHE_DIR outside the workspace",
                    inside.display(),
                    workspace.display()
                ),
            },
            receipt: Receipt::default(),
        });
    }

    let witness = NetWitness::default();
    let mut builder = StoreBuilder::new(spec);
    builder
        .interrupt(interrupt)
        .command(command)
        .witness(&witness);
    let mut run = match runtime.store(&builder) {
        Ok(r) => r,
        Err((code, message)) => {
            return Ok(ExecReport {
                outcome: ExecOutcome::Failed { code, message },
                receipt: Receipt::default(),
            });
        }
    };
    let (deadline, interrupt) = run.deadline();
    // The program runs on a thread of its own, so that one stuck in a host
    // system call nothing interrupts (writing to an output nobody reads,
    // reading a FIFO) is abandoned shortly after its deadline or its
    // cancellation, as a tool's body is. An abandoned thread is left to end
    // when that system call returns (the CLI exits without waiting for it).
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let handle = tokio::runtime::Handle::current();
    let body_interrupt = interrupt.clone();
    std::thread::spawn(move || {
        let report = handle.block_on(async move {
            let raced = race(program.run(&mut run.store), deadline, &body_interrupt).await;
            let outcome = outcome(&mut run, raced);
            ExecReport {
                outcome,
                receipt: run.receipt(),
            }
        });
        let _ = done_tx.send(report);
    });
    // Given up on: with what the program's network did so far.
    let started = std::time::Instant::now();
    let abandoned = |code: ErrorCode, message: &str| {
        let receipt = witness.receipt(spec.mode, started);
        ExecReport {
            outcome: ExecOutcome::Failed {
                code,
                message: message.to_string(),
            },
            receipt,
        }
    };
    Ok(tokio::select! {
        biased;
        done = done_rx => done.unwrap_or_else(|_| abandoned(
            ErrorCode::Trap,
            "the thread running the program ended without a report",
        )),
        () = tokio::time::sleep_until(deadline + STUCK_GRACE) => abandoned(
            ErrorCode::Timeout,
            "the program did not stop at its deadline: it is blocked in a host system call \
             (such as writing to an output nobody reads); abandoned",
        ),
        () = async {
            interrupt.cancelled().await;
            tokio::time::sleep(STUCK_GRACE).await;
        } => abandoned(
            ErrorCode::Cancelled,
            "the program was cancelled while blocked in a host system call; abandoned",
        ),
    })
}

/// How the run ended, from what the body returned (an explicit exit is
/// already a status, see `Program::run`); a cut output overrides a normal
/// end, since the user did not get all of it.
fn outcome(run: &mut Run, raced: Option<wasmtime::Result<u8>>) -> ExecOutcome {
    let ended = run.finish(raced);
    if let Err((code, message)) = run.check_passthrough() {
        let then = match &ended {
            Ok(status) => format!("it then exited with status {status}"),
            Err((code, message)) => format!("it then ended {code}: {message}"),
        };
        return ExecOutcome::Failed {
            code,
            message: format!("{message}; {then}"),
        };
    }
    match ended {
        Ok(status) => ExecOutcome::Exited(status),
        Err((code, message)) => ExecOutcome::Failed { code, message },
    }
}
