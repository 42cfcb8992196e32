//! `toolhost approvals`: the requests a `--approver queue` host waits for,
//! listed and decided.

use crate::args::{ApprovalsCommand, StateArgs};
use crate::host::approval_queue_of;
use anyhow::{Result, anyhow};
use std::process::ExitCode;
use toolhost::ApprovalOutcome;
use toolhost::queue::DecideError;

pub(crate) async fn approvals(a: ApprovalsCommand) -> Result<ExitCode> {
    match a {
        ApprovalsCommand::List { state, json } => list(&state, json).await,
        ApprovalsCommand::Decide {
            id,
            decision,
            by,
            state,
        } => decide(&state, &id, decision, &by).await,
    }
}

/// Prints the requests waiting for a decision, oldest first.
async fn list(state: &StateArgs, json: bool) -> Result<ExitCode> {
    let queue = approval_queue_of(state)?;
    let pending = queue.pending().await.map_err(|e| anyhow!("{e}"))?;
    if json {
        outln!("{}", serde_json::to_string(&pending)?);
    } else if pending.is_empty() {
        outln!("no approvals pending");
    } else {
        for r in pending {
            outln!(
                "{}  {} {} (mode {}): {}",
                r.approval_id,
                r.tool,
                r.args,
                r.mode,
                r.reason
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Decides request `id`; exits 1 when the queue refuses the decision (an
/// unknown or already decided request), 2 when it cannot be read or
/// written.
async fn decide(
    state: &StateArgs,
    id: &str,
    decision: ApprovalOutcome,
    by: &str,
) -> Result<ExitCode> {
    toolhost::policy::check_principal_name(by).map_err(|e| anyhow!("--by: {e}"))?;
    let queue = approval_queue_of(state)?;
    match queue.decide(id, decision, by).await {
        Ok(()) => {
            outln!("{id}: {}", decision.as_str());
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ DecideError::Io { .. }) => Err(anyhow!("{e}")),
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(1))
        }
    }
}
