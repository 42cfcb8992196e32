//! Phase 9, the commit: every path of a call ends here exactly once, its
//! result (a refusal included) written to the session log with its
//! after-call record, then handed to observers. The [`Unfinished`] guard
//! makes that hold for a call whose future is dropped on the way.

use super::Host;
use super::approve::DROPPED_WHILE_ASKING;
use super::checkpoint::Admitted;
use super::redact::{redact_secrets, screen_logs};
use crate::hooks::CallStart;
use crate::result::CallResult;
use crate::sandbox::state::cut;
use crate::sandbox::{NetWitness, Receipt};
use serde_json::json;
use toolhost_core::{ErrorCode, SandboxMode};
use toolhost_policy::LOCAL_PRINCIPAL;

impl Host {
    /// Phase 9: commit the result to the log with its after-call record
    /// (the `audit` of `tool/result`: duration, principal, scope), then hand
    /// the record to observers (queued, never waited for). Every path of a
    /// call ends here exactly once. Every secret of the policy's
    /// credentials is redacted from the result first (a server may echo a
    /// credential back, and the tool may pass it on): it is never recorded,
    /// observed or shown.
    pub(crate) fn commit(&self, mut result: CallResult, start: &CallStart) -> CallResult {
        if let Some(egress) = &self.egress {
            redact_secrets(&mut result, &egress.credentials);
        }
        screen_logs(self.policy.post_execute(), &mut result.receipt.logs);
        let duration = start.at.elapsed();
        if let Err(e) = self.recorder.result(&result, start.audit_json(duration)) {
            // The body has run; the result stays unrecorded and recovery will
            // report the call as TOOL_OUTCOME_UNKNOWN. Say so.
            tracing::error!(call_id = %result.call_id, error = %e, "the result could not be written to the session log");
        }
        if self.observers.any() {
            self.observers.deliver(start.record(&result, duration));
        }
        result
    }

    /// A call refused before it entered the pipeline (the MCP server's cap
    /// on calls in flight, a stopping server): kept out of the session log
    /// on purpose, but its after-call record goes to the observers.
    #[cfg_attr(
        not(feature = "mcp"),
        expect(dead_code, reason = "only the MCP server refuses before the pipeline")
    )]
    pub(crate) fn observe_unadmitted(&self, result: &CallResult, start: &CallStart) {
        if self.observers.any() {
            self.observers
                .deliver(start.record(result, start.at.elapsed()));
        }
    }

    /// Refuses a call before the pipeline looks at it (an MCP approval
    /// state that does not verify): its call record and the refusal go to
    /// the log under a new call id.
    #[cfg_attr(
        not(feature = "mcp"),
        allow(dead_code, reason = "only the MCP server refuses unheard calls")
    )]
    pub(crate) fn refuse_unheard(
        &self,
        tool: &str,
        args: &str,
        principal: Option<&str>,
        code: ErrorCode,
        message: String,
    ) -> CallResult {
        let call_id = self.new_call_id();
        let tool = &cut(tool, super::MAX_RECORDED_NAME);
        self.recorder.call(
            &call_id,
            json!({ "tool": tool, "args": cut(args, 4096),
                    "principal": principal.unwrap_or(LOCAL_PRINCIPAL) }),
        );
        let start = CallStart::new(principal, None);
        self.refuse(&call_id, tool, code, message, &start)
    }

    /// A refusal before dispatch: recorded and observed like any result.
    pub(crate) fn refuse(
        &self,
        call_id: &str,
        tool: &str,
        code: ErrorCode,
        message: String,
        start: &CallStart,
    ) -> CallResult {
        self.refuse_with(call_id, tool, code, message, Receipt::default(), start)
    }

    /// [`Host::refuse`] with what the call's `receipt` holds.
    fn refuse_with(
        &self,
        call_id: &str,
        tool: &str,
        code: ErrorCode,
        message: String,
        receipt: Receipt,
        start: &CallStart,
    ) -> CallResult {
        self.commit(
            CallResult::error(
                call_id.to_string(),
                tool.to_string(),
                code,
                message,
                receipt,
            ),
            start,
        )
    }
}

/// A call from its admission until its result is committed: whatever the
/// call's future is dropped at (a caller's timeout around the call, a
/// transport that drops its handler, a batch dropped with its calls), the
/// guard commits the result the call has reached, so that no call ends
/// without one and no intent stays pending in a log that lives on (the
/// in-memory log never forgets a pending call):
///
/// - being admitted (its only wait is for its approval, whose pair
///   `Unpaired` closes first): `CANCELLED`;
/// - admitted, its intent not written yet (a batch writes its calls'
///   intents together): `CANCELLED`, its body never ran;
/// - settled (refused, or aborted at the checkpoint), its result not
///   committed yet (a batch commits in call order): that result;
/// - its intent written: `TOOL_OUTCOME_UNKNOWN`, the result recovery would
///   give it after a crash. A body still running then is stopped and
///   abandoned by the runtime (`runtime::invoke`).
///
/// A batch keeps one per call and ends them in call order (`batch::Ending`).
pub(crate) struct Unfinished<'h> {
    host: &'h Host,
    call_id: String,
    tool: String,
    start: CallStart,
    stage: Stage,
    /// One of a batch's calls (what its `CANCELLED` says).
    in_batch: bool,
}

/// How far an [`Unfinished`] call has come.
enum Stage {
    Admitting,
    Admitted,
    Settled(Box<CallResult>),
    /// Its intent is written: the witness of its body's network, its mode,
    /// and when its body could start.
    Open {
        witness: NetWitness,
        mode: SandboxMode,
        at: std::time::Instant,
    },
    /// Its result is committed: nothing left to do.
    Ended,
}

impl<'h> Unfinished<'h> {
    /// The guard of a call about to be admitted, alone or (`in_batch`) as
    /// one of a batch's.
    pub(crate) fn new(
        host: &'h Host,
        call_id: String,
        tool: String,
        start: CallStart,
        in_batch: bool,
    ) -> Unfinished<'h> {
        Unfinished {
            host,
            call_id,
            tool,
            start,
            stage: Stage::Admitting,
            in_batch,
        }
    }

    /// When and for whom the call started.
    pub(crate) fn start(&self) -> &CallStart {
        &self.start
    }

    /// Admission let the call through.
    pub(crate) fn admitted(&mut self) {
        self.stage = Stage::Admitted;
    }

    /// Admission refused the call with `code` and `message`: its refusal,
    /// for a batch to commit in its turn ([`Unfinished::settled`]).
    pub(crate) fn refusal(&self, code: ErrorCode, message: String) -> CallResult {
        CallResult::error(
            self.call_id.clone(),
            self.tool.clone(),
            code,
            message,
            Receipt::default(),
        )
    }

    /// Admission refused the call with `code` and `message`: its refusal,
    /// committed now.
    pub(crate) fn refuse(mut self, code: ErrorCode, message: String) -> CallResult {
        self.stage = Stage::Ended;
        self.host
            .refuse(&self.call_id, &self.tool, code, message, &self.start)
    }

    /// The call's result is `result` (a refusal, an abort), committed in
    /// its turn by [`Unfinished::end`], or when the guard is dropped first.
    pub(crate) fn settled(&mut self, result: &CallResult) {
        self.stage = Stage::Settled(Box::new(result.clone()));
    }

    /// Its intent is written (phase 6); its witness will hold its body's
    /// network, for a result committed without the body's own receipt.
    pub(crate) fn opened(&mut self, admitted: &Admitted<'_>) {
        self.stage = Stage::Open {
            witness: admitted.witness.clone(),
            mode: admitted.mode,
            at: std::time::Instant::now(),
        };
    }

    /// Phase 9: commits the call's result.
    pub(crate) fn end(mut self, result: CallResult) -> CallResult {
        self.stage = Stage::Ended;
        self.host.commit(result, &self.start)
    }
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        let mut receipt = Receipt::default();
        let (code, message) = match std::mem::replace(&mut self.stage, Stage::Ended) {
            Stage::Ended => return,
            Stage::Settled(result) => {
                self.host.commit(*result, &self.start);
                return;
            }
            Stage::Admitting => (ErrorCode::Cancelled, DROPPED_WHILE_ASKING),
            // A batch waits there (for its other calls' admission); a call
            // alone ends there only by a panic while its intent is written.
            Stage::Admitted if self.in_batch => (
                ErrorCode::Cancelled,
                "the batch was dropped by its caller before this call's intent was written; \
                 its body never ran",
            ),
            Stage::Admitted => (
                ErrorCode::Cancelled,
                "the call ended before its intent was written; its body never ran",
            ),
            // With what its body's network did so far (closed now).
            Stage::Open { witness, mode, at } => {
                receipt = witness.receipt(mode, at);
                (
                    ErrorCode::ToolOutcomeUnknown,
                    "the call was dropped after its intent was written and before its result (its \
                 caller gave up on it, or the host stopped): whether its body ran, and what it \
                 did, is unknown",
                )
            }
        };
        self.host.refuse_with(
            &self.call_id,
            &self.tool,
            code,
            message.into(),
            receipt,
            &self.start,
        );
    }
}
