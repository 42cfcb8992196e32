//! `toolhost exec`: runs an existing WASI command program (a component
//! exporting `wasi:cli/run`) under the same sandbox modes and limits as
//! tools, with its stdout/stderr and exit code passed through.

use crate::runtime::{LoadError, Runtime, StoreBuilder, race};
pub use crate::sandbox::SandboxSpec;
use crate::state::Interrupt;
use toolhost_core::ErrorCode;
use wasmtime_wasi::I32Exit;
use wasmtime_wasi::p2::bindings::Command;

/// How a command program ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecOutcome {
    /// It exited with this status (0 for a normal return, 1 for `Err`).
    Exited(i32),
    /// The runtime stopped it (timeout, fuel, memory, trap, cancel).
    Failed {
        /// The stable code.
        code: ErrorCode,
        /// What happened.
        message: String,
    },
}

/// Runs the command component `bytes` with `args` (the first is the
/// program name the guest sees).
pub async fn run_command(
    runtime: &Runtime,
    source: &str,
    bytes: &[u8],
    args: &[String],
    spec: &SandboxSpec,
    interrupt: Interrupt,
) -> Result<ExecOutcome, LoadError> {
    let linked = runtime.link(source, bytes)?;
    let needs = linked.needs;
    let pre = wasmtime_wasi::p2::bindings::CommandPre::new(linked.pre).map_err(|e| {
        LoadError::WrongWorld {
            file: source.to_string(),
            detail: format!("not a WASI command (no wasi:cli/run export): {e:#}"),
        }
    })?;
    let mut builder = StoreBuilder::new(spec);
    builder.interrupt(interrupt).command(args);
    let mut run = match runtime.store(&builder) {
        Ok(r) => r,
        Err((code, message)) => return Ok(ExecOutcome::Failed { code, message }),
    };
    let (deadline, interrupt) = run.deadline();
    let store = &mut run.store;
    let raced = race(
        async {
            store.data().admit(needs.as_ref())?;
            let command: Command = pre.instantiate_async(&mut *store).await?;
            command.wasi_cli_run().call_run(&mut *store).await
        },
        deadline,
        &interrupt,
    )
    .await;
    // An explicit `exit(n)` surfaces as an `I32Exit` error: that is a normal
    // end, not a failure.
    let raced = match raced {
        Some(Err(e)) => match e.downcast_ref::<I32Exit>() {
            Some(exit) => return Ok(ExecOutcome::Exited(exit.0)),
            None => Some(Err(e)),
        },
        other => other,
    };
    Ok(match run.finish(raced) {
        Ok(Ok(())) => ExecOutcome::Exited(0),
        Ok(Err(())) => ExecOutcome::Exited(1),
        Err((code, message)) => ExecOutcome::Failed { code, message },
    })
}
