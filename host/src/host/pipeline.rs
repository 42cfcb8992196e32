//! The call pipeline of DESIGN.md §1, in order. Each phase is a method that
//! either hands the call to the next phase or ends it with a stable code.
//!
//! Invariants this module keeps:
//! - rate limits come right after lookup, before validation;
//! - validation comes before policy, guards before approval, approval before
//!   the checkpoint, the checkpoint before the body;
//! - every path except `allowed-once` after `ask` refuses;
//! - no body runs unless its intent is committed, and durable when the call
//!   is granted any effect outside the host (`sandbox::needs_durable_intent`);
//! - policy and guards run for every call, whatever scope it comes from.

use super::gate::Refused;
use super::{CallRequest, Host};
use crate::announce::ApprovalAnnouncement;
use crate::approval::{ApprovalOutcome, ApprovalRequest, Approver};
use crate::audit::CallStart;
use crate::egress::NetworkGrant;
use crate::hooks::PostAction;
use crate::registry::{RegisteredTool, ToolBody};
use crate::result::CallResult;
use crate::runtime::{BodyOutcome, NetWitness, OnAbandon, Receipt, Watch};
use crate::sandbox::{SandboxSpec, needs_durable_intent, writable_preopens};
use crate::state::{Interrupt, cut, unpanicked};
use crate::tool::ContentItem;
use futures::FutureExt;
use serde_json::json;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use toolhost_core::{ErrorCode, SandboxMode, SideEffect};
use toolhost_log::{Durability, EventKind};
use toolhost_policy::{
    AppliedPatch, ApprovalSetting, CallFacts, Decision, LOCAL_PRINCIPAL, Policy, PostVerdict,
    Subject,
};

/// The most bytes of arguments a call may carry.
pub const MAX_ARGS_BYTES: usize = 1 << 20;

/// A call that passed every check before the checkpoint.
pub(crate) struct Admitted<'h> {
    pub call_id: String,
    pub tool: &'h RegisteredTool,
    pub args: serde_json::Value,
    pub args_text: String,
    /// The arguments as the caller sent them, when a policy patch changed them.
    pub original_args: Option<serde_json::Value>,
    /// The patches that changed them.
    pub patches: Vec<AppliedPatch>,
    pub mode: SandboxMode,
    pub interrupt: Interrupt,
    pub progress: Option<crate::state::ProgressSink>,
    /// What the call may reach on the network.
    pub network: NetworkGrant,
    /// What the call still reports of its body's network if it ends
    /// without the body's own receipt (abandoned, or dropped by its caller).
    pub witness: NetWitness,
}

type Refusal = (ErrorCode, String);

/// Whether [`Host::assess`] takes the call's rate-limit tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Charge {
    /// A call: its tokens are taken (or it is refused RATE_LIMITED).
    RateLimits,
    /// An explanation: the rate limits are not consulted.
    Nothing,
}

/// What [`Host::assess`] found: a call that passed phases 1-4 and the
/// sandbox check, and what approval it still needs.
pub(crate) struct Assessed<'h> {
    pub tool: &'h RegisteredTool,
    /// The arguments, patched.
    pub args: serde_json::Value,
    pub original_args: Option<serde_json::Value>,
    pub patches: Vec<AppliedPatch>,
    pub mode: SandboxMode,
    /// What a human must be asked; `None` when nobody needs to be.
    pub approval_reason: Option<String>,
    /// The layer whose `approval = "never"` forbids asking, if any.
    pub approval: Option<String>,
    /// Whether this call's approval, once given, covers the network `ask`
    /// grants (see [`Host::assess`]).
    pub ask_approved: bool,
    /// The network grants of the policy rules this call matches (for a
    /// tool that declares `external`); empty when none apply.
    pub rule_network: Vec<toolhost_policy::egress::RuleGrants>,
    /// What an approval of this call would let it reach: the `ask` grants
    /// and the rules' grants (empty when nobody is asked, or it reaches
    /// nothing more).
    pub approval_network: Vec<String>,
}

/// Refuses a tool a policy layer hides from `subject` in `mode`.
fn hidden_refusal(
    policy: &Policy,
    tool: &str,
    subject: &Subject<'_>,
    mode: SandboxMode,
) -> Result<(), Refusal> {
    match policy.hidden(tool, subject, mode) {
        None => Ok(()),
        Some(blame) => Err((
            ErrorCode::PolicyDenied,
            format!(
                "tool {tool:?} is not available to principal {:?} [{blame}]",
                subject.principal
            ),
        )),
    }
}

impl Host {
    /// Runs one call through the whole pipeline and returns its result.
    /// Refusals and failures are results (`status: error`), never panics.
    pub async fn call(&self, request: CallRequest) -> CallResult {
        let mut request = request.bounded();
        let call_id = request.call_id.take().unwrap_or_else(|| self.new_call_id());
        let tool_name = request.tool.clone();
        let start = CallStart::new(request.principal.as_deref(), request.scope.as_deref());
        let mut call = Unfinished::new(self, call_id.clone(), tool_name, start, false);
        let admitted = match self.admit(call_id, request, call.start()).await {
            Ok(admitted) => admitted,
            Err((code, message)) => return call.refuse(code, message),
        };
        call.admitted();
        if let Err(e) = self.checkpoint(&[&admitted]) {
            return call.end(aborted(&admitted, &e));
        }
        call.opened(&admitted);
        self.dispatch(admitted, call).await
    }

    /// Phase 6, the checkpoint: the intents of `admitted` in one commit
    /// (the calls of a batch share it), durable when any of the calls is
    /// granted an effect outside the host ([`needs_durable_intent`]), lazy
    /// otherwise. On an error no body may run: every call ends [`aborted`].
    pub(crate) fn checkpoint(&self, admitted: &[&Admitted<'_>]) -> Result<(), String> {
        if admitted.is_empty() {
            return Ok(());
        }
        let mut durable = false;
        let intents: Vec<_> = admitted
            .iter()
            .map(|a| {
                let network = a.network.reachable();
                durable |= needs_durable_intent(a.mode, &network, writable_preopens(a.mode));
                (a.call_id.clone(), intent_payload(a, network))
            })
            .collect();
        crate::crashpoint::reached("before-intent");
        let durability = if durable {
            Durability::Durable
        } else {
            Durability::Lazy
        };
        if durable && self.recorder.durable_commit_blocks() {
            // The fsync blocks this thread: on a multi-threaded runtime, let
            // the worker's other tasks move on meanwhile, so that concurrent
            // durable calls reach the log together and share one fsync. (An
            // in-memory log's commit does not block: handing the worker's
            // core to another thread would cost more than the commit.)
            blocking(|| self.recorder.intents(intents, durability))?;
        } else {
            self.recorder.intents(intents, durability)?;
        }
        crate::crashpoint::reached("after-intent");
        Ok(())
    }

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
    ) -> Result<Admitted<'h>, Refusal> {
        // The call record is written with the call's next event (approval,
        // intent or refusal): it costs no commit of its own.
        self.recorder.call(
            &call_id,
            json!({ "tool": req.tool, "args": cut(&req.args, 4096), "scope": req.scope,
                    "mode": req.mode, "escalation": req.escalation.as_ref().map(|e| json!({"mode": e.mode, "justification": e.justification})),
                    "principal": req.principal.as_deref().unwrap_or(LOCAL_PRINCIPAL) }),
        );

        // 1-4: lookup, rate limits, validation, patches, policy, guards.
        let a = self.assess(&req, Charge::RateLimits)?;

        // 5. approval: for `ask`, and for every escalation.
        // Nobody is asked about a call that is already cancelled.
        let interrupt = req.interrupt.unwrap_or_default();
        if interrupt.is_cancelled() {
            return Err((
                ErrorCode::Cancelled,
                "the call was cancelled before it was dispatched".into(),
            ));
        }
        if let Some(reason) = a.approval_reason {
            let request = ApprovalRequest {
                approval_id: format!("{call_id}-approval"),
                call_id: call_id.clone(),
                tool: a.tool.descriptor.name.clone(),
                args: a.args.clone(),
                reason,
                mode: a.mode,
                justification: req.escalation.as_ref().map(|e| e.justification.clone()),
                network: a.approval_network,
                principal: Some(start.principal.clone()),
                code: Some(crate::approval::ApprovedCode {
                    sha256: match &a.tool.body {
                        ToolBody::Component(c) => c.sha256.clone(),
                        ToolBody::Program(p) => p.manifest.approval_digest(&p.sha256),
                    },
                    side_effect: a.tool.descriptor.side_effect,
                }),
            };
            let approver = req.approver.as_deref().unwrap_or(&*self.approver);
            self.approve(approver, request, &interrupt, &a.approval, &start.principal)
                .await?;
        }
        if interrupt.is_cancelled() {
            return Err((
                ErrorCode::Cancelled,
                "the call was cancelled before it was dispatched".into(),
            ));
        }
        Ok(Admitted {
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

    /// Phases 1-4 and the sandbox check: what [`Host::admit`] decides
    /// before anyone is asked, and what `Host::explain` reports. Records
    /// nothing; with [`Charge::RateLimits`] it takes the call's rate-limit
    /// tokens (a call), with [`Charge::Nothing`] it leaves the rate limits
    /// alone (an explanation, which must not use up a client's calls).
    pub(crate) fn assess<'h>(
        &'h self,
        req: &CallRequest,
        charge: Charge,
    ) -> Result<Assessed<'h>, Refusal> {
        let principal = req.principal.as_deref().unwrap_or(LOCAL_PRINCIPAL);
        let scopes = self.registry.scope_chain(req.scope.as_deref());
        let subject = Subject {
            principal,
            scopes: &scopes,
        };

        // 1. lookup, through the one visibility resolver, then the policy
        // layers' visibility (owner-only tools, allow and deny lists).
        let tool = self.lookup(req.scope.as_deref(), &req.tool)?;
        let base_mode = req.mode.unwrap_or_else(|| self.policy.default_mode());
        hidden_refusal(&self.policy, &tool.descriptor.name, &subject, base_mode)?;

        // 1b. rate limits, before validation costs anything: a client over
        // its limit gets RATE_LIMITED and the call goes no further.
        if charge == Charge::RateLimits {
            self.rate.admit(
                req.client.as_deref(),
                &tool.descriptor.name,
                std::time::Instant::now(),
            )?;
        }

        // 2. parse and validate the arguments.
        let mut args = parse_args(tool, &req.args)?;

        // The call's mode: the request's, else the policy's default; an
        // escalation must be strictly wider and justified.
        let mode = match &req.escalation {
            None => base_mode,
            Some(e) => {
                if !e.mode.is_wider_than(base_mode) {
                    return Err((
                        ErrorCode::EscalationInvalid,
                        format!(
                            "escalation to {} is not wider than the call's mode {base_mode}",
                            e.mode
                        ),
                    ));
                }
                if e.justification.trim().is_empty() {
                    return Err((
                        ErrorCode::EscalationInvalid,
                        "an escalation needs a justification".into(),
                    ));
                }
                e.mode
            }
        };
        if mode != base_mode {
            hidden_refusal(&self.policy, &tool.descriptor.name, &subject, mode)?;
        }
        // Writes reach only tools that declare them: a tool that declares
        // `none` or `read` runs at most read-only (SideEffect::widest_mode),
        // so it cannot write past a rule that asks before writes by
        // understating its side effect. Policy and guards see this mode, and
        // a call that can read as a read at least (SideEffect::as_run_in).
        let side_effect = tool.descriptor.side_effect;
        let mode = mode.min(side_effect.widest_mode());
        if req.escalation.is_some() && !mode.is_wider_than(base_mode.min(side_effect.widest_mode()))
        {
            return Err((
                ErrorCode::EscalationInvalid,
                format!(
                    "{} declares side effect {side_effect}, so its calls run at most {}: an escalation would grant it nothing",
                    tool.descriptor.name,
                    side_effect.widest_mode()
                ),
            ));
        }

        // 2b. the policy's argument patches, then validation again: a patch
        // that breaks the schema refuses before anyone is asked.
        let (original_args, patches) =
            match crate::patches::apply(&self.policy, &self.args_hooks, tool, &args)? {
                None => (None, Vec::new()),
                Some(p) => (Some(std::mem::replace(&mut args, p.args)), p.applied),
            };

        let facts = CallFacts::of_call(&tool.descriptor.name, &args, side_effect, mode);

        // 3. pre-execute policy, every layer that applies; strictest wins.
        let trace = self.policy.trace(&facts, &subject);
        // Visibility in the mode the call runs in: a tool clamped to a
        // narrower mode than the one asked for is refused where a layer of
        // that narrower mode hides it.
        if let Some(blame) = &trace.hidden {
            return Err((
                ErrorCode::PolicyDenied,
                format!(
                    "tool {:?} is not available to principal {principal:?} [{blame}]",
                    tool.descriptor.name
                ),
            ));
        }
        let ask_reason = match &trace.decision {
            Decision::Deny { reason } => {
                return Err((
                    ErrorCode::PolicyDenied,
                    format!("{reason} [{}]", trace.decided_by),
                ));
            }
            Decision::Ask { reason } => Some(reason.clone()),
            Decision::Allow => None,
        };

        // 4. guards: deny-only; nothing after this can re-allow.
        if let Some(denial) = self.guards.check(&facts) {
            return Err((
                ErrorCode::GuardDenied,
                format!("{} (guard {})", denial.reason, denial.guard),
            ));
        }
        if let Some((blame, denial)) = &trace.guard {
            return Err((
                ErrorCode::GuardDenied,
                format!("{} (guard {}) [{blame}]", denial.reason, denial.guard),
            ));
        }

        // The sandbox must be able to give the tool what it needs.
        if tool.descriptor.min_mode > mode {
            return Err((
                ErrorCode::SandboxUnavailable,
                format!(
                    "{} needs mode {} but the call runs in {mode}; ask for an escalation with a justification",
                    tool.descriptor.name, tool.descriptor.min_mode
                ),
            ));
        }

        // A body that could not pass the exclusivity gate now (abandoned
        // bodies hold it) is refused before anyone is asked and before its
        // intent is written; the gate checks again when the body starts.
        if let Some(why) = self.gate.refuses(tool.descriptor.concurrency_safe) {
            return Err((ErrorCode::SandboxUnavailable, why));
        }
        // So is a body with file system access while abandoned bodies hold
        // half the instance pool (checked again when the body starts).
        if mode != SandboxMode::None
            && let Some(why) = self.runtime.refuses_file_access()
        {
            return Err((ErrorCode::SandboxUnavailable, why));
        }

        // Network `ask` grants are approved per call, before the body: a
        // call of a tool whose side effect is `external` asks once, naming
        // every `ask` grant; `allowed-once` unlocks them for this call only.
        // Other tools, and every tool under `approval = "never"`, run with
        // the `allow` grants alone: a request an `ask` grant covers is then
        // refused inside the guest (`HTTP-request-denied`, recorded as
        // `approval_required`). Nobody is asked in the middle of a body.
        let ask_network: Vec<String> = match &self.egress {
            Some(egress)
                if tool.descriptor.side_effect == SideEffect::External
                    && trace.approval != ApprovalSetting::Never =>
            {
                egress.policy.ask().iter().map(|g| g.described()).collect()
            }
            _ => Vec::new(),
        };
        // The grants of the policy rules this call matches (the facts it
        // was decided on), `allow` grants of this call alone, for a tool
        // that declares `external`: if the call is asked, they are reached
        // once approved; if it is refused, never. Nothing is allocated
        // when no matching rule grants network.
        let rule_network = match &self.egress {
            Some(_) if tool.descriptor.side_effect == SideEffect::External => {
                self.policy.network_grants(&facts)
            }
            _ => Vec::new(),
        };

        // What a human would be asked, if anything: for `ask`, for every
        // escalation, and for network `ask` grants.
        let reason = match (&ask_reason, &req.escalation) {
            (Some(r), Some(e)) => Some(format!(
                "{r}; escalation to {}: {}",
                e.mode, e.justification
            )),
            (Some(r), None) => Some(r.clone()),
            (None, Some(e)) => Some(format!(
                "escalation from {base_mode} to {}: {}",
                e.mode, e.justification
            )),
            (None, None) => None,
        };
        // An approval asked for any of these also decides whether the
        // rules' grants are reached: the approver is told of them too.
        let ask_approved = !ask_network.is_empty();
        let approval_network: Vec<String> = if reason.is_none() && !ask_approved {
            Vec::new()
        } else {
            let mut list = ask_network;
            for grant in rule_network.iter().flat_map(|r| r.grants()) {
                let grant = grant.described();
                if !list.contains(&grant) {
                    list.push(grant);
                }
            }
            list
        };
        let reason = match (reason, approval_network.is_empty()) {
            (reason, true) => reason,
            (None, false) => Some(format!(
                "the call may reach these network grants only if approved: {}",
                approval_network.join(", ")
            )),
            (Some(r), false) => Some(format!(
                "{r}; the call may reach these network grants only if approved: {}",
                approval_network.join(", ")
            )),
        };
        let approval_reason = reason.map(|r| crate::patches::tell_approver(r, &patches));
        let approval = match &trace.approval_by {
            Some(layer) if trace.approval == ApprovalSetting::Never => Some(layer.clone()),
            _ => None,
        };
        Ok(Assessed {
            tool,
            args,
            original_args,
            patches,
            mode,
            approval_reason,
            approval,
            ask_approved,
            rule_network,
            approval_network,
        })
    }

    fn lookup(&self, scope: Option<&str>, name: &str) -> Result<&RegisteredTool, Refusal> {
        if !self.registry.has_scope(scope) {
            return Err((
                ErrorCode::UnknownTool,
                format!("scope {:?} is not declared", scope.unwrap_or_default()),
            ));
        }
        self.registry.resolve(scope, name).ok_or_else(|| {
            let visible = self.registry.visible_names(scope);
            (
                ErrorCode::UnknownTool,
                format!(
                    "no tool named {:?} is available; available tools: {}",
                    cut(name, 80),
                    visible.join(", ")
                ),
            )
        })
    }

    async fn approve(
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
        let call_id = request.call_id.as_str();
        let approval_id = request.approval_id.clone();
        let approver_name = crate::approval::name_of(approver);
        let asked = serde_json::to_value(&request).unwrap_or_default();
        let mut asked = json!({ "approver": approver_name.clone(), "request": asked });
        // How long this approver may wait: another server of a shared log
        // reads from it how long this one may still be asking.
        if let Some(wait) = unpanicked(|| approver.wait()).flatten() {
            asked[crate::approval::APPROVAL_WAIT_MS] =
                json!(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
        }
        if let Err(e) = self.recorder.lazy(call_id, EventKind::ApprovalAsked, asked) {
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
            approval_id: approval_id.clone(),
            call_id: call_id.to_string(),
            principal: principal.to_string(),
            request: Box::new(request.clone()),
            approver: approver_name,
        });
        // If this future is dropped while it waits (a caller's timeout, a
        // transport that drops its handler), the pair is still closed:
        // `approval/decided` `cancelled`, announced too (whoever admits the
        // call then ends it, `CANCELLED`: its `Unfinished` guard).
        let mut unpaired = Unpaired {
            host: self,
            call_id,
            approval_id: &approval_id,
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
        let (outcome, detail) = match std::panic::catch_unwind(AssertUnwindSafe(|| {
            approver.decide(&request)
        })) {
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
        drop(unpaired);
        // A decision that consumes a single-use grant is durable before the
        // call goes on (and so before any body): its use is what refuses
        // the grant's next use, also after a restart.
        let used = unpanicked(|| approver.single_use()).flatten();
        let durable_use = used.is_some();
        let mut decided =
            json!({ "approval_id": approval_id, "outcome": outcome, "detail": detail });
        if let Some(grant) = used {
            decided["single_use"] = grant;
        }
        let written = self
            .recorder
            .lazy(call_id, EventKind::ApprovalDecided, decided)
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
            approval_id,
            call_id: call_id.to_string(),
            principal: principal.to_string(),
            outcome: if written.is_ok() {
                outcome
            } else {
                ApprovalOutcome::Unavailable
            },
            detail: detail.clone(),
        });
        if let Err(e) = written {
            return Err((
                ErrorCode::ApprovalUnavailable,
                format!("the approval decision could not be recorded: {e}"),
            ));
        }
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

    /// Phases 7-8: sandbox, body, output validation and post-execute.
    pub(crate) async fn execute(&self, a: &Admitted<'_>) -> CallResult {
        let name = a.tool.descriptor.name.clone();
        if a.interrupt.is_cancelled() {
            return CallResult::error(
                a.call_id.clone(),
                name,
                ErrorCode::Cancelled,
                "the call was cancelled before the tool started",
                Receipt::default(),
            );
        }
        // Exclusivity: a body that is not concurrency-safe runs alone on
        // this host, whoever else is calling.
        // A body its call gives up on keeps the pass until it stops.
        let pass = match self
            .gate
            .enter(a.tool.descriptor.concurrency_safe, &a.interrupt)
            .await
        {
            Ok(pass) => Arc::new(pass),
            Err(Refused::Cancelled) => {
                return CallResult::error(
                    a.call_id.clone(),
                    name,
                    ErrorCode::Cancelled,
                    "the call was cancelled while it waited for another call to finish",
                    Receipt::default(),
                );
            }
            Err(Refused::Stuck(why)) => {
                return CallResult::error(
                    a.call_id.clone(),
                    name,
                    ErrorCode::SandboxUnavailable,
                    why,
                    Receipt::default(),
                );
            }
        };
        let held = pass.clone();
        let on_abandon: OnAbandon = Box::new(move || Box::new(held.abandoned()));
        // 7. sandbox + body.
        let spec = SandboxSpec {
            mode: a.mode,
            workspace: self.workspace.clone(),
            limits: self.limits.clone(),
            network: a.network.clone(),
        };
        crate::crashpoint::announce("during-body");
        let (outcome, receipt) = match &a.tool.body {
            ToolBody::Component(component) => {
                self.runtime
                    .invoke(
                        component,
                        &name,
                        &a.args_text,
                        &spec,
                        Watch {
                            interrupt: a.interrupt.clone(),
                            progress: a.progress.clone(),
                            on_abandon: Some(on_abandon),
                            witness: a.witness.clone(),
                        },
                    )
                    .await
            }
            ToolBody::Program(program) => {
                program
                    .run(
                        &self.runtime,
                        &a.args,
                        &spec,
                        a.interrupt.clone(),
                        Some(on_abandon),
                        a.witness.clone(),
                    )
                    .await
            }
        };
        let (canonical, content, meta) = match outcome {
            BodyOutcome::Err { code, message } => {
                return self.tool_error(a.call_id.clone(), name, code, message, receipt);
            }
            BodyOutcome::Ok {
                canonical,
                content,
                meta,
            } => (canonical, content, meta),
        };
        // 8. output validation.
        if let Err(e) = a.tool.validate_output(&canonical) {
            // The message quotes part of the tool's output.
            return self.tool_error(
                a.call_id.clone(),
                name,
                ErrorCode::OutputInvalid,
                format!("the tool's output does not match its output schema: {e}"),
                receipt,
            );
        }
        let mut result = CallResult::ok(a.call_id.clone(), name, canonical, content, meta, receipt);
        // Credentials are redacted before anything edits the content (the
        // content cap could otherwise cut a secret in two, and leave a part
        // that no longer reads as the secret); `commit` redacts again, for
        // what hooks put in and for every other path.
        if let Some(egress) = &self.egress {
            redact_secrets(&mut result, &egress.credentials);
        }
        // 8. post-execute: the policy file's rules, then library hooks.
        if let Err(blocked) = self.post_execute(a.tool, &mut result) {
            return CallResult::error(
                result.call_id,
                result.tool,
                ErrorCode::PostExecuteBlocked,
                blocked,
                result.receipt,
            );
        }
        // A program that exited with a status other than 0 failed as a
        // tool: an error result that keeps its canonical record and the
        // content the model reads (its stderr and status among it).
        if let ToolBody::Program(_) = &a.tool.body
            && let Some(status) = crate::program_tool::exit_status(&result.canonical)
            && status != 0
        {
            result.status = crate::result::Status::Error;
            result.error = Some(crate::result::CallError {
                code: ErrorCode::ToolError,
                message: format!("the program exited with status {status}"),
            });
        }
        result
    }

    /// An error result whose message carries what the tool wrote (its own
    /// error, or its output quoted by a failed validation): it reaches the
    /// model as content does, so the credentials are redacted from it
    /// first, then the policy's text rules (redact, block, cut) apply.
    fn tool_error(
        &self,
        call_id: String,
        tool: String,
        code: ErrorCode,
        message: String,
        receipt: Receipt,
    ) -> CallResult {
        let mut message = message;
        // First the credentials (the message is whole here: no cut has
        // split a secret), then the policy's rules, then the output cap.
        if let Some(egress) = &self.egress
            && let std::borrow::Cow::Owned(r) = egress
                .credentials
                .redact(&message, toolhost_policy::REDACTED)
        {
            message = r;
        }
        let mut texts = vec![message];
        let rules = self.policy.post_execute();
        if !rules.is_empty()
            && let PostVerdict::Blocked { reason } =
                rules.apply(&mut texts, &serde_json::Value::Null)
        {
            return CallResult::error(
                call_id,
                tool,
                ErrorCode::PostExecuteBlocked,
                format!("blocked by policy: {reason}"),
                receipt,
            );
        }
        let message = texts.pop().unwrap_or_default();
        // An error is part of the result the host carries, records and
        // sends: cut to the output cap, once nothing can be left of a secret.
        let max = self.limits.max_output;
        let message = if message.len() <= max {
            message
        } else {
            let mut end = max;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            format!(
                "{}[... {} bytes of the error cut: the limit is {max}]",
                &message[..end],
                message.len() - end
            )
        };
        CallResult::error(call_id, tool, code, message, receipt)
    }

    /// Library hooks first, then the policy file's rules, so the policy has
    /// the last word: content a hook puts in is still redacted, capped and
    /// checked for blocked patterns.
    fn post_execute(&self, tool: &RegisteredTool, result: &mut CallResult) -> Result<(), String> {
        for hook in &self.post_hooks {
            // A hook is library code: a panic in it (or in its name) blocks.
            let name = crate::state::unpanicked(|| hook.name().to_string())
                .unwrap_or_else(|| "(a hook whose name panics)".to_string());
            let action = crate::state::unpanicked(|| hook.inspect(&tool.descriptor, result))
                .unwrap_or_else(|| PostAction::Block(format!("post-execute hook {name} panicked")));
            match action {
                PostAction::Keep => {}
                PostAction::ReplaceContent(c) => result.content = c,
                PostAction::ReplaceCanonical(v) => {
                    tool.validate_output(&v).map_err(|e| {
                        format!("hook {name} replaced the canonical value with one that breaks the output schema: {e}")
                    })?;
                    result.canonical = v;
                }
                PostAction::Block(reason) => {
                    return Err(format!("blocked by {name}: {reason}"));
                }
            }
        }
        let rules = self.policy.post_execute();
        if rules.is_empty() {
            return Ok(());
        }
        // The text rules see the blocks that carry text (text blocks and
        // embedded text resources); images, audio, links and binary
        // resources pass through them unchanged.
        let mut texts: Vec<String> = result
            .content
            .iter_mut()
            .filter_map(|c| c.text_mut().map(|t| t.clone()))
            .collect();
        match rules.apply(&mut texts, &result.canonical) {
            PostVerdict::Blocked { reason } => return Err(format!("blocked by policy: {reason}")),
            PostVerdict::Changed => write_back(&mut result.content, texts),
            PostVerdict::Keep => {}
        }
        Ok(())
    }

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

/// Puts the texts the policy's rules returned back into the blocks they
/// came from; a text-bearing block the rules dropped (a cap) goes.
fn write_back(content: &mut Vec<ContentItem>, texts: Vec<String>) {
    let mut texts = texts.into_iter();
    content.retain_mut(|c| match c.text_mut() {
        None => true,
        Some(t) => match texts.next() {
            Some(new) => {
                *t = new;
                true
            }
            None => false,
        },
    });
}

fn parse_args(tool: &RegisteredTool, text: &str) -> Result<serde_json::Value, Refusal> {
    if text.len() > MAX_ARGS_BYTES {
        return Err((
            ErrorCode::InvalidArgs,
            format!(
                "the arguments are {} bytes; the limit is {MAX_ARGS_BYTES}",
                text.len()
            ),
        ));
    }
    let args: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        (
            ErrorCode::InvalidArgs,
            format!("the arguments are not valid JSON: {e}"),
        )
    })?;
    let mut args = args;
    nulls_as_absent(
        &mut args,
        &tool.descriptor.input_schema,
        &tool.descriptor.input_schema,
        0,
    );
    tool.validate_args(&args).map_err(|e| {
        (
            ErrorCode::InvalidArgs,
            format!(
                "the arguments do not match the input schema of {}: {e}",
                tool.descriptor.name
            ),
        )
    })?;
    whole_numbers_as_integers(&mut args);
    Ok(args)
}

/// Strict function calling (OpenAI's strict mode, which `toolhost list
/// --schema-for openai` targets) makes every optional property required
/// and nullable, so a model sends `null` for an argument it leaves out.
/// Such a `null`, for a property the schema does not require and whose own
/// schema does not accept `null`, reads as the property left out. Where the
/// schema cannot tell (a `$ref` that does not resolve, a property schema
/// without a type), the `null` stays and validation decides. A value under
/// `anyOf` / `oneOf` (how an optional nested object is spelled, beside
/// `null`) is read by its one branch that can hold the value's kind when
/// every other branch plainly cannot; otherwise its nulls stay.
fn nulls_as_absent(
    value: &mut serde_json::Value,
    schema: &serde_json::Value,
    root: &serde_json::Value,
    depth: usize,
) {
    if depth > 64 {
        return;
    }
    let schema = resolve_ref(schema, root);
    let (own, kind) = match value {
        serde_json::Value::Object(_) => ("properties", "object"),
        serde_json::Value::Array(_) => ("items", "array"),
        _ => return,
    };
    let Some(sub) = schema.get(own) else {
        if let Some(branch) = only_branch_for(schema, root, kind) {
            nulls_as_absent(value, branch, root, depth + 1);
        }
        return;
    };
    match value {
        serde_json::Value::Object(map) => {
            let Some(properties) = sub.as_object() else {
                return;
            };
            let required: Vec<&str> = schema
                .get("required")
                .and_then(|r| r.as_array())
                .map(|r| r.iter().filter_map(|n| n.as_str()).collect())
                .unwrap_or_default();
            map.retain(|k, v| {
                !(v.is_null()
                    && !required.contains(&k.as_str())
                    && properties
                        .get(k)
                        .is_some_and(|p| !accepts_null(p, root, &mut 256)))
            });
            for (k, v) in map.iter_mut() {
                if let Some(p) = properties.get(k) {
                    nulls_as_absent(v, p, root, depth + 1);
                }
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                nulls_as_absent(v, sub, root, depth + 1);
            }
        }
        _ => {}
    }
}

/// The one branch of `schema`'s `anyOf` or `oneOf` (its `$ref` followed)
/// that may hold a value of `kind` (`object`, `array`), when every other
/// branch plainly cannot ([`may_hold`]); none otherwise.
fn only_branch_for<'a>(
    schema: &'a serde_json::Value,
    root: &'a serde_json::Value,
    kind: &str,
) -> Option<&'a serde_json::Value> {
    let mut may = branches(schema)?
        .iter()
        .map(|b| resolve_ref(b, root))
        .filter(|b| may_hold(b, kind) != Some(false));
    match (may.next(), may.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

/// What `schema`'s own keywords (its `$ref` already followed) say of a
/// value of `kind` (`null`, `object`, `array`): `Some(false)` when they
/// plainly refuse it (`false`, a `type` without it, a `const` or `enum` of
/// other kinds), `Some(true)` when they may take it (`true`, a `$ref` that
/// did not resolve, a `type` with it), `None` when they say nothing of it.
/// JSON Schema's keywords all apply at once, so one keyword's refusal is
/// the schema's.
fn may_hold(schema: &serde_json::Value, kind: &str) -> Option<bool> {
    let kind_of = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Object(_) => "object",
        serde_json::Value::Array(_) => "array",
        _ => "scalar",
    };
    let Some(o) = schema.as_object() else {
        return Some(schema.as_bool().unwrap_or(true));
    };
    if o.contains_key("$ref") {
        return Some(true);
    }
    match o.get("type") {
        Some(serde_json::Value::String(t)) => return Some(t == kind),
        Some(serde_json::Value::Array(types)) => return Some(types.iter().any(|t| t == kind)),
        Some(_) => return Some(true),
        None => {}
    }
    if let Some(c) = o.get("const") {
        return Some(kind_of(c) == kind);
    }
    if let Some(values) = o.get("enum").and_then(|e| e.as_array()) {
        return Some(values.iter().any(|v| kind_of(v) == kind));
    }
    None
}

/// A local `$ref`'s target (followed a few times), else the schema itself.
fn resolve_ref<'a>(
    schema: &'a serde_json::Value,
    root: &'a serde_json::Value,
) -> &'a serde_json::Value {
    let mut s = schema;
    for _ in 0..8 {
        match s
            .get("$ref")
            .and_then(|r| r.as_str())
            .and_then(|r| r.strip_prefix('#'))
            .and_then(|p| root.pointer(p))
        {
            Some(target) => s = target,
            None => break,
        }
    }
    s
}

/// Whether `schema` may accept `null`: true unless it plainly cannot (its
/// own keywords refuse it, see [`may_hold`], or `anyOf`/`oneOf` branches
/// none of which can).
/// Looks at most `budget` schemas (a tool's schema is untrusted: branches of
/// branches must not multiply the work); past it, the answer is "maybe".
fn accepts_null(schema: &serde_json::Value, root: &serde_json::Value, budget: &mut usize) -> bool {
    if *budget == 0 {
        return true;
    }
    *budget -= 1;
    let schema = resolve_ref(schema, root);
    if let Some(answer) = may_hold(schema, "null") {
        return answer;
    }
    branches(schema).is_none_or(|b| b.iter().any(|b| accepts_null(b, root, budget)))
}

/// `schema`'s `anyOf` branches, else its `oneOf` ones.
fn branches(schema: &serde_json::Value) -> Option<&Vec<serde_json::Value>> {
    ["anyOf", "oneOf"]
        .iter()
        .find_map(|k| schema.get(*k).and_then(|b| b.as_array()))
}

/// Writes every whole number that came spelled as a float (`1.0`, `1e3`) as
/// the integer it is. JSON Schema counts `1.0` as an integer, so validation
/// accepts it; the tool must then read what was validated, and a guest
/// parser that wants an integer refuses `1.0` (Rust's serde, Python's
/// helper), after dispatch. Floats beyond 2^53 are left as they are.
fn whole_numbers_as_integers(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() <= 9_007_199_254_740_992.0
            {
                // Exact: |f| <= 2^53.
                *n = serde_json::Number::from(f as i64);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(whole_numbers_as_integers),
        serde_json::Value::Object(map) => map.values_mut().for_each(whole_numbers_as_integers),
        _ => {}
    }
}

/// The result of an admitted call whose intent could not be made durable
/// (not committed yet).
/// Runs `f`, which blocks (an fsync), without holding up the other tasks of
/// a multi-threaded runtime's worker; elsewhere (a current-thread runtime,
/// no runtime) it just runs.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

pub(crate) fn aborted(a: &Admitted<'_>, error: &str) -> CallResult {
    CallResult::error(
        a.call_id.clone(),
        a.tool.descriptor.name.clone(),
        ErrorCode::AbortedBeforeDispatch,
        format!("the intent could not be made durable, so the tool did not run: {error}"),
        Receipt::default(),
    )
}

fn intent_payload(a: &Admitted<'_>, reachable: Vec<String>) -> serde_json::Value {
    let mut intent = json!({ "tool": a.tool.descriptor.name, "args": a.args, "mode": a.mode, "component": a.tool.sha256() });
    if !reachable.is_empty()
        && let Some(o) = intent.as_object_mut()
    {
        // What the call may reach (grants, never credentials).
        o.insert("network".into(), json!(reachable));
    }
    if let (Some(original), Some(o)) = (&a.original_args, intent.as_object_mut()) {
        o.insert("original_args".into(), original.clone());
        o.insert("patches".into(), crate::patches::applied_json(&a.patches));
    }
    intent
}

/// `sink`, with every loaded secret replaced in each report's message, and
/// the policy's `[post_execute]` text rules applied to it (a message that
/// `block_matching` matches is withheld, the others redacted): a report
/// leaves the host while the body runs (an MCP progress notification, a
/// task's status message), before the result is screened.
fn redacting_progress(
    sink: Option<crate::state::ProgressSink>,
    egress: Option<&Arc<crate::egress::Egress>>,
    rules: &toolhost_policy::PostExecuteRules,
) -> Option<crate::state::ProgressSink> {
    let sink = sink?;
    let egress = egress
        .filter(|e| e.credentials.iter().next().is_some())
        .cloned();
    if egress.is_none() && rules.is_empty() {
        return Some(sink);
    }
    let rules = rules.clone();
    Some(Arc::new(move |p: &crate::state::Progress| {
        let Some(message) = p.message.as_deref() else {
            return sink(p);
        };
        let message = match &egress {
            Some(e) => e.credentials.redact(message, toolhost_policy::REDACTED),
            None => std::borrow::Cow::Borrowed(message),
        };
        let message = if rules.blocks_text(&message) {
            Some(WITHHELD.to_string())
        } else {
            Some(rules.redact_text(&message).into_owned())
        };
        sink(&crate::state::Progress {
            message,
            ..p.clone()
        })
    }))
}

/// What stands for a tool's log message or progress message that the
/// policy's `post_execute.block_matching` matches.
const WITHHELD: &str = "[withheld: matched the policy's post_execute.block_matching]";

/// The policy's `[post_execute]` text rules on a call's log records (which
/// reach an MCP client and the session log beside the content): a record
/// whose message or fields `block_matching` matches is withheld, the
/// others are redacted.
fn screen_logs(rules: &toolhost_policy::PostExecuteRules, logs: &mut [crate::state::LogRecord]) {
    if rules.is_empty() {
        return;
    }
    for log in logs {
        let fields = log.fields.as_ref().map(|f| f.to_string());
        if rules.blocks_text(&log.message)
            || fields.as_deref().is_some_and(|f| rules.blocks_text(f))
        {
            log.message = WITHHELD.to_string();
            log.fields = None;
            continue;
        }
        if let std::borrow::Cow::Owned(m) = rules.redact_text(&log.message) {
            log.message = m;
        }
        if let Some(f) = &mut log.fields {
            redact_json(f, &|s: &mut String| {
                if let std::borrow::Cow::Owned(r) = rules.redact_text(s) {
                    *s = r;
                }
            });
        }
    }
}

/// Replaces every loaded secret in what a result carries (content,
/// canonical, meta, the error message, the receipt's logs and records)
/// with [`REDACTED`](toolhost_policy::REDACTED).
fn redact_secrets(result: &mut CallResult, credentials: &toolhost_policy::egress::Credentials) {
    if credentials.iter().next().is_none() {
        return;
    }
    let fix = |s: &mut String| {
        if let std::borrow::Cow::Owned(r) = credentials.redact(s, toolhost_policy::REDACTED) {
            *s = r;
        }
    };
    // Text-bearing blocks and every URI; media bytes are left alone (a
    // secret in them would be encoded, not echoed).
    for item in &mut result.content {
        if let ContentItem::ResourceLink {
            uri,
            name,
            description,
            mime_type,
        } = item
        {
            fix(uri);
            fix(name);
            description.iter_mut().for_each(&fix);
            mime_type.iter_mut().for_each(&fix);
        }
        if let ContentItem::Resource { resource } = item {
            fix(&mut resource.uri);
            resource.mime_type.iter_mut().for_each(&fix);
        }
        if let ContentItem::Image { mime_type, .. } | ContentItem::Audio { mime_type, .. } = item {
            fix(mime_type);
        }
        if let Some(text) = item.text_mut() {
            fix(text);
        }
    }
    redact_json(&mut result.canonical, &fix);
    redact_json(&mut result.meta, &fix);
    if let Some(e) = &mut result.error {
        fix(&mut e.message);
    }
    for log in &mut result.receipt.logs {
        fix(&mut log.message);
        if let Some(f) = &mut log.fields {
            redact_json(f, &fix);
        }
    }
    for record in &mut result.receipt.network {
        fix(&mut record.url);
        // The host's own texts (borrowed) carry nothing to redact.
        if let Some(std::borrow::Cow::Owned(error)) = &mut record.error {
            fix(error);
        }
    }
    for line in &mut result.receipt.denied {
        fix(line);
    }
}

fn redact_json(value: &mut serde_json::Value, fix: &impl Fn(&mut String)) {
    match value {
        serde_json::Value::String(s) => fix(s),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| redact_json(v, fix)),
        serde_json::Value::Object(map) => {
            let old = std::mem::take(map);
            for (mut k, mut v) in old {
                fix(&mut k);
                redact_json(&mut v, fix);
                map.insert(k, v);
            }
        }
        _ => {}
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

/// Why a call dropped while it waits for its approval ends (the only wait
/// of its admission).
const DROPPED_WHILE_ASKING: &str = "the call was dropped while waiting for approval";

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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Whether a property accepts `null` is looked up within a budget: a
    /// schema of branches of branches (20 wide, 5 deep: 3.2 million) is
    /// "maybe" after 256 looks, and the `null` is left to validation.
    #[test]
    fn a_null_is_kept_where_the_schema_is_too_large_to_tell() {
        // Each level is twenty references to the next: a small schema.
        let mut defs = serde_json::Map::new();
        for level in 0..5 {
            let next = json!({"$ref": format!("#/$defs/d{}", level + 1)});
            defs.insert(format!("d{level}"), json!({"anyOf": vec![next; 20]}));
        }
        defs.insert("d5".into(), json!({"type": "string"}));
        let schema = json!({"type": "object", "$defs": defs,
                            "properties": {"p": {"$ref": "#/$defs/d0"}}});
        let mut args = json!({"p": null});
        nulls_as_absent(&mut args, &schema, &schema, 0);
        assert_eq!(args, json!({"p": null}));
        // Small enough to tell: the null reads as left out.
        let schema =
            json!({"type": "object", "properties": {"p": {"anyOf": [{"type": "string"}]}}});
        let mut args = json!({"p": null});
        nulls_as_absent(&mut args, &schema, &schema, 0);
        assert_eq!(args, json!({}));
    }

    /// An optional nested object (`anyOf` of its `$ref` and `null`, as
    /// schemars spells `Option<Struct>`) has its own left-out properties
    /// read as absent, as the top level's are; so do the objects of an
    /// optional list. Where another branch could hold the object too (one
    /// with properties, or a bare `{"type": "object"}`, or one without a
    /// type), its nulls stay for validation to decide.
    #[test]
    fn nulls_in_an_optional_nested_object_read_as_absent() {
        let schema = json!({
            "type": "object",
            "$defs": {"Inner": {"type": "object",
                "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                "required": ["a"]}},
            "properties": {
                "inner": {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}]},
                "list": {"oneOf": [{"type": "array", "items": {"$ref": "#/$defs/Inner"}},
                                   {"type": "null"}]},
                "either": {"anyOf": [{"$ref": "#/$defs/Inner"},
                                     {"type": "object", "properties": {"b": {"type": "null"}}}]},
                "loose": {"oneOf": [{"$ref": "#/$defs/Inner"},
                                    {"type": "object", "required": ["b"]}]},
                "untyped": {"anyOf": [{"$ref": "#/$defs/Inner"}, {}]}
            }
        });
        let mut args = json!({
            "inner": {"a": "x", "b": null},
            "list": [{"a": "y", "b": null}],
            "either": {"a": "z", "b": null},
            "loose": {"a": "w", "b": null},
            "untyped": {"a": "v", "b": null}
        });
        nulls_as_absent(&mut args, &schema, &schema, 0);
        assert_eq!(
            args,
            json!({
                "inner": {"a": "x"},
                "list": [{"a": "y"}],
                "either": {"a": "z", "b": null},
                "loose": {"a": "w", "b": null},
                "untyped": {"a": "v", "b": null}
            })
        );
    }

    /// A secret that reaches a tool some other way than a server's echo
    /// (which the host masks first) is redacted from its progress reports,
    /// as they leave the host, and from its log records, message and
    /// fields: with two secrets, one inside the other, no piece of either.
    #[test]
    fn secrets_are_redacted_from_progress_and_logs() {
        let dir = tempfile::tempdir().unwrap();
        let (outer, inner) = ("sk-outer-0123456789", "0123456789");
        let spec = |host: &str, file: &std::path::Path| {
            format!(
                "[[credentials]]\nhost = \"{host}\"\nheader = \"A\"\nvalue_file = {:?}\n",
                file.display().to_string()
            )
        };
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, outer).unwrap();
        std::fs::write(&b, inner).unwrap();
        let network = toolhost_policy::egress::NetworkPolicy::from_toml(
            &format!(
                "[network]\nallow = [\"https://a.example.com\"]\n{}{}",
                spec("a.example.com", &a),
                spec("b.example.com", &b)
            ),
            "t.toml",
        )
        .unwrap();
        let egress = Arc::new(crate::egress::Egress::load(&network, &[], None).unwrap());
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = seen.clone();
        let sink: crate::state::ProgressSink = Arc::new(move |p: &crate::state::Progress| {
            into.lock()
                .unwrap()
                .push(p.message.clone().unwrap_or_default());
        });
        let rules = toolhost_policy::PostExecuteRules::default();
        let progress = redacting_progress(Some(sink), Some(&egress), &rules).unwrap();
        progress(&crate::state::Progress {
            done: 1,
            total: None,
            message: Some(format!("token {outer}, then {inner}")),
        });
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [format!(
                "token {REDACTED}, then {REDACTED}",
                REDACTED = toolhost_policy::REDACTED
            )]
        );

        let mut result = CallResult::ok(
            "t".into(),
            "c".into(),
            json!(null),
            Vec::new(),
            None,
            Receipt::default(),
        );
        result.receipt.logs.push(crate::state::LogRecord {
            level: "info",
            message: format!("got {outer}"),
            fields: Some(json!({"token": outer, "n": [inner]})),
        });
        redact_secrets(&mut result, &egress.credentials);
        let text = serde_json::to_string(&result.receipt.logs).unwrap();
        assert!(!text.contains("outer") && !text.contains(inner), "{text}");
        assert!(text.contains(toolhost_policy::REDACTED), "{text}");
    }

    /// A tool's error message is cut to the output cap only after the
    /// credentials are redacted from it: a secret across the cut leaves
    /// nothing of itself (cutting first left its first bytes, which no
    /// longer read as the secret).
    #[tokio::test]
    async fn an_error_is_cut_after_its_secrets_are_redacted() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let secret = "sk-cut-0123456789abcdef";
        let file = dir.path().join("token");
        std::fs::write(&file, secret).unwrap();
        let policy = toolhost_policy::Policy::from_toml(
            &format!(
                "version = 1\n[network]\nallow = [\"https://api.example.com\"]\n\
                 [[credentials]]\nhost = \"api.example.com\"\nheader = \"A\"\nvalue_file = {:?}\n",
                file.display().to_string()
            ),
            "t.toml",
        )
        .unwrap();
        let mut b = crate::HostBuilder::new();
        b.workspace(workspace.path())
            .policy(policy)
            .limits(crate::Limits {
                max_output: 100,
                ..crate::Limits::default()
            })
            .runtime_options(crate::RuntimeOptions {
                cache_dir: None,
                ..crate::RuntimeOptions::default()
            });
        let host = b.build().await.unwrap();
        // The secret starts 90 bytes in: a cut at 100 would keep 10 of it.
        let message = format!("{}{secret} and more", "x".repeat(90));
        let r = host.tool_error(
            "c".into(),
            "t".into(),
            ErrorCode::ToolError,
            message,
            Receipt::default(),
        );
        let text = &r.error.as_ref().unwrap().message;
        assert!(!text.contains(&secret[..6]), "{text}");
        assert!(
            text.contains("bytes of the error cut: the limit is 100"),
            "{text}"
        );
    }

    /// An echoed credential is redacted from every text a resource link
    /// carries (its URI, name, description and MIME type, whose parameters
    /// may be any printable text) and from an image's or audio's MIME type,
    /// not only from text blocks.
    #[test]
    fn resource_links_are_redacted_in_every_field() {
        let dir = tempfile::tempdir().unwrap();
        let secret = "sk-link-0123456789";
        let file = dir.path().join("token");
        std::fs::write(&file, secret).unwrap();
        let policy = toolhost_policy::egress::NetworkPolicy::from_toml(
            &format!(
                "[[credentials]]\nhost = \"api.example.com\"\nheader = \"A\"\nvalue_file = {:?}\n",
                file.display().to_string()
            ),
            "t.toml",
        )
        .unwrap();
        let credentials = toolhost_policy::egress::Credentials::load(policy.credentials()).unwrap();
        let mut result = CallResult::ok(
            "c".into(),
            "t".into(),
            serde_json::Value::Null,
            vec![
                ContentItem::ResourceLink {
                    uri: format!("https://x/{secret}"),
                    name: format!("name {secret}"),
                    description: Some(format!("about {secret}")),
                    mime_type: Some(format!("text/plain; k={secret}")),
                },
                ContentItem::Image {
                    data: "aW1n".into(),
                    mime_type: format!("image/png; k={secret}"),
                },
                ContentItem::Audio {
                    data: "aW1n".into(),
                    mime_type: format!("audio/wav; k={secret}"),
                },
            ],
            None,
            Receipt::default(),
        );
        redact_secrets(&mut result, &credentials);
        let text = serde_json::to_string(&result.content).unwrap();
        assert!(!text.contains(secret), "{text}");
        assert_eq!(text.matches(toolhost_policy::REDACTED).count(), 6, "{text}");
    }
}
