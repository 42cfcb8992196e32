//! Phase 5, approval: for the policy's `ask`, every escalation and the
//! network `ask` grants. An approver's decision is recorded as a pair,
//! `approval/asked` before and `approval/decided` after, announced pending
//! and decided; anything but `allowed-once` refuses (fail closed). The
//! [`Unpaired`] guard closes a pair whose wait is dropped.

use super::assess::Assessed;
use super::{Escalation, Host, Refusal};
use crate::approval::announce::ApprovalAnnouncement;
use crate::approval::{ApprovalOutcome, ApprovalRequest, Approver};
use crate::sandbox::state::{Interrupt, unpanicked};
use crate::tools::registry::ToolBody;
use futures::FutureExt;
use serde_json::json;
use std::panic::AssertUnwindSafe;
use toolhost_core::ErrorCode;
use toolhost_log::EventKind;

/// Why a call dropped while it waits for its approval ends (the only wait
/// of its admission).
pub(super) const DROPPED_WHILE_ASKING: &str = "the call was dropped while waiting for approval";

/// What an approver is asked about the assessed call `a`, if it needs
/// approval; its reason and the network an approval opens move out of `a`.
pub(super) fn approval_request(
    call_id: &str,
    a: &mut Assessed<'_>,
    escalation: Option<&Escalation>,
    principal: &str,
) -> Option<ApprovalRequest> {
    let reason = a.approval_reason.take()?;
    Some(ApprovalRequest {
        approval_id: format!("{call_id}-approval"),
        call_id: call_id.to_string(),
        tool: a.tool.descriptor.name.clone(),
        args: a.args.clone(),
        reason,
        mode: a.mode,
        justification: escalation.map(|e| e.justification.clone()),
        network: std::mem::take(&mut a.approval_network),
        principal: Some(principal.to_string()),
        code: Some(crate::approval::ApprovedCode {
            sha256: match &a.tool.body {
                ToolBody::Component(c) => c.sha256.clone(),
                ToolBody::Program(p) => p.manifest.approval_digest(&p.sha256),
            },
            side_effect: a.tool.descriptor.side_effect,
        }),
    })
}

impl Host {
    /// Phase 5: `approver` decides `request`, between `approval/asked` and
    /// `approval/decided`; only `allowed-once` lets the call go on. A policy
    /// layer that never asks (`never_by`) refuses without asking.
    pub(super) async fn approve(
        &self,
        approver: &dyn Approver,
        request: ApprovalRequest,
        interrupt: &Interrupt,
        never_by: &Option<String>,
        principal: &str,
    ) -> Result<(), Refusal> {
        if let Some(layer) = never_by {
            return Err((
                ErrorCode::ApprovalUnavailable,
                format!(
                    "approval needed ({}) but the policy never asks (approval = \"never\") [layer {layer}]",
                    request.reason
                ),
            ));
        }
        self.record_asked(approver, &request, principal)?;
        let (outcome, detail) = self
            .await_decision(approver, &request, interrupt, principal)
            .await;
        self.record_decided(approver, &request, outcome, &detail, principal)?;
        let detail = detail.map(|d| format!(": {d}")).unwrap_or_default();
        match outcome {
            ApprovalOutcome::AllowedOnce => Ok(()),
            ApprovalOutcome::Rejected => Err((
                ErrorCode::ApprovalRejected,
                format!("the approver rejected the call{detail}"),
            )),
            ApprovalOutcome::Cancelled => Err((
                ErrorCode::ApprovalCancelled,
                format!("the approval was cancelled{detail}"),
            )),
            ApprovalOutcome::Unavailable => Err((
                ErrorCode::ApprovalUnavailable,
                format!("no approval could be obtained{detail}"),
            )),
        }
    }

    /// Writes `approval/asked`, then announces the request pending.
    fn record_asked(
        &self,
        approver: &dyn Approver,
        request: &ApprovalRequest,
        principal: &str,
    ) -> Result<(), Refusal> {
        let approver_name = crate::approval::name_of(approver);
        let asked = serde_json::to_value(request).unwrap_or_default();
        let mut asked = json!({ "approver": approver_name.clone(), "request": asked });
        // How long this approver may wait: another server of a shared log
        // reads from it how long this one may still be asking.
        if let Some(wait) = unpanicked(|| approver.wait()).flatten() {
            asked[crate::approval::APPROVAL_WAIT_MS] =
                json!(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
        }
        if let Err(e) = self
            .recorder
            .lazy(&request.call_id, EventKind::ApprovalAsked, asked)
        {
            return Err((
                ErrorCode::ApprovalUnavailable,
                format!("the approval request could not be recorded: {e}"),
            ));
        }
        // An approver that tells another party (who may look the request up
        // in the log) gets it only once `approval/asked` is durable; so do
        // the listeners of announcements, when there are any.
        let durable = unpanicked(|| approver.durable_request()).unwrap_or(true)
            || self.announcer.has_listeners();
        if durable && let Err(e) = self.recorder.log().flush() {
            return Err((
                ErrorCode::ApprovalUnavailable,
                format!("the approval request could not be made durable: {e}"),
            ));
        }
        // Listeners hear of the request once the log holds it (durably,
        // for an approver that tells another party).
        self.announcer.announce(ApprovalAnnouncement::Pending {
            approval_id: request.approval_id.clone(),
            call_id: request.call_id.clone(),
            principal: principal.to_string(),
            request: Box::new(request.clone()),
            approver: approver_name,
        });
        Ok(())
    }

    /// Waits for `approver`'s decision on `request`: its outcome, and a
    /// detail to tell the caller.
    async fn await_decision(
        &self,
        approver: &dyn Approver,
        request: &ApprovalRequest,
        interrupt: &Interrupt,
        principal: &str,
    ) -> (ApprovalOutcome, Option<String>) {
        // If this future is dropped while it waits (a caller's timeout, a
        // transport that drops its handler), the pair is still closed:
        // `approval/decided` `cancelled`, announced too (whoever admits the
        // call then ends it, `CANCELLED`: its `Unfinished` guard).
        let mut unpaired = Unpaired {
            host: self,
            call_id: &request.call_id,
            approval_id: &request.approval_id,
            principal,
            armed: true,
        };
        // A panic is `unavailable`, whether `decide` panics before returning
        // its future or while it runs; cancelling the call cancels the wait.
        let panicked = || {
            (
                ApprovalOutcome::Unavailable,
                Some("the approver panicked".to_string()),
            )
        };
        let decided = match std::panic::catch_unwind(AssertUnwindSafe(|| approver.decide(request)))
        {
            Err(_) => panicked(),
            Ok(decision) => tokio::select! {
                r = AssertUnwindSafe(decision).catch_unwind() => r.unwrap_or_else(|_| panicked()),
                () = interrupt.cancelled() => (
                    ApprovalOutcome::Cancelled,
                    Some("the call was cancelled while waiting for approval".into()),
                ),
            },
        };
        unpaired.armed = false;
        decided
    }

    /// Writes `approval/decided`, then announces the decision (as
    /// `unavailable` if it could not be written, which refuses the call).
    fn record_decided(
        &self,
        approver: &dyn Approver,
        request: &ApprovalRequest,
        outcome: ApprovalOutcome,
        detail: &Option<String>,
        principal: &str,
    ) -> Result<(), Refusal> {
        // A decision that consumes a single-use grant is durable before the
        // call goes on (and so before any body): its use is what refuses
        // the grant's next use, also after a restart.
        let used = unpanicked(|| approver.single_use()).flatten();
        let durable_use = used.is_some();
        let mut decided =
            json!({ "approval_id": request.approval_id, "outcome": outcome, "detail": detail });
        if let Some(grant) = used {
            decided["single_use"] = grant;
        }
        let written = self
            .recorder
            .lazy(&request.call_id, EventKind::ApprovalDecided, decided)
            .and_then(|()| {
                if durable_use {
                    self.recorder.log().flush().map_err(|e| e.to_string())
                } else {
                    Ok(())
                }
            });
        // Announced whether or not it could be written: the wait is over
        // either way (a failed write refuses the call below).
        self.announcer.announce(ApprovalAnnouncement::Decided {
            approval_id: request.approval_id.clone(),
            call_id: request.call_id.clone(),
            principal: principal.to_string(),
            outcome: if written.is_ok() {
                outcome
            } else {
                ApprovalOutcome::Unavailable
            },
            detail: detail.clone(),
        });
        written.map_err(|e| {
            (
                ErrorCode::ApprovalUnavailable,
                format!("the approval decision could not be recorded: {e}"),
            )
        })
    }
}

/// Closes an `approval/asked` whose wait was dropped before a decision:
/// records (lazily) and announces `approval/decided` `cancelled`, so the
/// log never holds a question without its answer.
struct Unpaired<'a> {
    host: &'a Host,
    call_id: &'a str,
    approval_id: &'a str,
    principal: &'a str,
    armed: bool,
}

impl Drop for Unpaired<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let detail = DROPPED_WHILE_ASKING.to_string();
        let _ = self.host.recorder.lazy(
            self.call_id,
            EventKind::ApprovalDecided,
            json!({
                "approval_id": self.approval_id,
                "outcome": ApprovalOutcome::Cancelled,
                "detail": detail,
            }),
        );
        self.host.announcer.announce(ApprovalAnnouncement::Decided {
            approval_id: self.approval_id.to_string(),
            call_id: self.call_id.to_string(),
            principal: self.principal.to_string(),
            outcome: ApprovalOutcome::Cancelled,
            detail: Some(detail),
        });
    }
}
