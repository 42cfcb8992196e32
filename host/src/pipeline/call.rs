//! One call through the pipeline: admit (phases 1-5) → checkpoint (6) →
//! dispatch (7-8) → commit (9). Each phase either hands the call to the
//! next or ends it with a stable code; `batch.rs` runs the same phases for
//! the calls of a step.

use super::approve::approval_request;
use super::assess::Charge;
use super::caller::{Caller, Lent};
use super::checkpoint::{Admitted, aborted};
use super::commit::Unfinished;
use super::redact::redacting_progress;
use super::{CallRequest, Host, Refusal};
use crate::egress::NetworkGrant;
use crate::hooks::CallStart;
use crate::result::CallResult;
use crate::sandbox::NetWitness;
use crate::sandbox::state::{Interrupt, cut};
use serde_json::json;
use std::sync::atomic::Ordering;
use toolhost_core::ErrorCode;
use toolhost_policy::LOCAL_PRINCIPAL;

impl Host {
    /// Runs one call through the whole pipeline and returns its result.
    /// Refusals and failures are results (`status: error`), never panics.
    pub async fn call(&self, request: CallRequest) -> CallResult {
        self.call_in(request, None).await
    }

    /// [`Host::call`]; an inner call of code mode runs under the pass its
    /// outer call `lent` it at the exclusivity gate (`code_mode.rs`).
    pub(crate) async fn call_in(&self, request: CallRequest, lent: Option<Lent>) -> CallResult {
        let mut request = request.bounded();
        let call_id = request.call_id.take().unwrap_or_else(|| self.new_call_id());
        let tool_name = request.tool.clone();
        let start = CallStart::new(request.principal.as_deref(), request.scope.as_deref());
        let mut call = Unfinished::new(self, call_id.clone(), tool_name, start, false);
        let admitted = match self.admit(call_id, request, call.start(), lent).await {
            Ok(admitted) => admitted,
            Err((code, message)) => return call.refuse(code, message),
        };
        call.admitted();
        if let Err(e) = self.checkpoint(&[&admitted]) {
            return call.end(aborted(&admitted, &e));
        }
        call.opened(&admitted);
        if admitted.lent.is_some() {
            crate::crashpoint::reached("after-inner-intent");
        }
        self.dispatch(admitted, call).await
    }

    /// The next call id of this host's session (a counter).
    pub(crate) fn new_call_id(&self) -> String {
        let n = self.next_call.fetch_add(1, Ordering::Relaxed);
        format!("call-{}-{n}", self.session)
    }

    /// Phases 1-5: everything that decides whether the call may run.
    pub(crate) async fn admit<'h>(
        &'h self,
        call_id: String,
        req: CallRequest,
        start: &CallStart,
        lent: Option<Lent>,
    ) -> Result<Admitted<'h>, Refusal> {
        // The call record is written with the call's next event (approval,
        // intent or refusal): it costs no commit of its own.
        self.recorder.call(
            &call_id,
            json!({ "tool": req.tool, "args": cut(&req.args, 4096), "scope": req.scope,
                    "mode": req.mode, "escalation": req.escalation.as_ref().map(|e| json!({"mode": e.mode, "justification": e.justification})),
                    "principal": req.principal.as_deref().unwrap_or(LOCAL_PRINCIPAL),
                    "parent": req.parent }),
        );

        // 1-4b: lookup, rate limits, arguments, mode, patches, policy,
        // guards, the sandbox check.
        let mut a = self.assess(&req, Charge::RateLimits)?;
        // An inner call of code mode its outer call's gate pass does not
        // cover is refused now, before anyone is asked about it.
        if let Some(lent) = lent {
            lent.covers(a.tool.descriptor.concurrency_safe)?;
        }

        // 5. approval, if the call needs it. Nobody is asked about a call
        // that is already cancelled.
        let interrupt = req.interrupt.unwrap_or_default();
        not_cancelled(&interrupt)?;
        if let Some(request) =
            approval_request(&call_id, &mut a, req.escalation.as_ref(), &start.principal)
        {
            let approver = req.approver.as_deref().unwrap_or(&*self.approver);
            self.approve(approver, request, &interrupt, &a.approval, &start.principal)
                .await?;
        }
        not_cancelled(&interrupt)?;
        let caller = Caller {
            scope: req.scope.clone(),
            principal: req.principal.clone(),
            client: req.client.clone(),
            approver: req.approver.clone(),
        };
        Ok(Admitted {
            caller,
            lent,
            call_id,
            tool: a.tool,
            args_text: a.args.to_string(),
            args: a.args,
            original_args: a.original_args,
            patches: a.patches,
            mode: a.mode,
            interrupt,
            progress: redacting_progress(
                req.progress,
                self.egress.as_ref(),
                self.policy.post_execute(),
            ),
            // Reaching this point with `ask` grants named means the
            // approval above returned `allowed-once`; so does reaching it
            // with the grants of an `ask` rule.
            network: NetworkGrant::for_tool(
                self.egress.clone(),
                a.tool.descriptor.side_effect,
                a.ask_approved,
                a.rule_network,
            ),
            witness: NetWitness::default(),
        })
    }

    /// Phases 7-9 for a call whose intent is durable; `call` commits its
    /// result (or, dropped first, `TOOL_OUTCOME_UNKNOWN`).
    pub(crate) async fn dispatch(
        &self,
        admitted: Admitted<'_>,
        call: Unfinished<'_>,
    ) -> CallResult {
        let result = self.execute(&admitted).await;
        crate::crashpoint::reached("after-body");
        let result = call.end(result);
        crate::crashpoint::reached("after-result");
        result
    }
}

/// Refuses a call cancelled before it was dispatched.
fn not_cancelled(interrupt: &Interrupt) -> Result<(), Refusal> {
    if interrupt.is_cancelled() {
        return Err((
            ErrorCode::Cancelled,
            "the call was cancelled before it was dispatched".into(),
        ));
    }
    Ok(())
}
