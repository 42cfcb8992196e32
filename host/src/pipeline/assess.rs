//! Phases 1-4 and the mode (4b): everything decided about a call before
//! anyone is asked, one function per phase, and what phase 5 must then ask.
//! `Host::admit` assesses a call, `Host::explain` explains one with the
//! same function, so an explanation cannot drift from a call. Records
//! nothing.
//!
//! The call's mode is settled right after its arguments: patches, policy and
//! guards judge the call in the mode it runs in. Whether the sandbox can
//! give the tool that mode is checked after the guards.

use super::args::parse_args;
use super::{CallRequest, Escalation, Host, Refusal};
use crate::sandbox::state::cut;
use crate::tools::registry::RegisteredTool;
use toolhost_core::{ErrorCode, SandboxMode, SideEffect};
use toolhost_policy::egress::RuleGrants;
use toolhost_policy::{
    AppliedPatch, ApprovalSetting, CallFacts, Decision, LOCAL_PRINCIPAL, Policy, Subject, Trace,
};

/// Whether [`Host::assess`] takes the call's rate-limit tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Charge {
    /// A call: its tokens are taken (or it is refused RATE_LIMITED).
    RateLimits,
    /// An explanation: the rate limits are not consulted.
    Nothing,
}

/// What [`Host::assess`] found: a call that passed phases 1-4b, and what
/// approval it still needs.
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
    /// grants (see [`Host::network_to_approve`]).
    pub ask_approved: bool,
    /// The network grants of the policy rules this call matches (for a
    /// tool that declares `external`); empty when none apply.
    pub rule_network: Vec<RuleGrants>,
    /// What an approval of this call would let it reach: the `ask` grants
    /// and the rules' grants (empty when nobody is asked, or it reaches
    /// nothing more).
    pub approval_network: Vec<String>,
}

/// The arguments after phase 2b: patched, with the caller's own when a
/// patch changed them, and the patches that did.
struct Patched {
    args: serde_json::Value,
    original_args: Option<serde_json::Value>,
    patches: Vec<AppliedPatch>,
}

impl Host {
    /// Phases 1-4b: what [`Host::admit`] decides before anyone is asked,
    /// and what `Host::explain` reports. Records nothing; with
    /// [`Charge::RateLimits`] it takes the call's rate-limit tokens (a
    /// call), with [`Charge::Nothing`] it leaves the rate limits alone (an
    /// explanation, which must not use up a client's calls).
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
        let base_mode = req.mode.unwrap_or_else(|| self.policy.default_mode());
        // 1. lookup
        let tool = self.lookup(req, &subject, base_mode)?;
        // 1b. rate limits
        if charge == Charge::RateLimits {
            self.rate_limit(req, tool)?;
        }
        // 2. arguments
        let args = parse_args(tool, &req.args)?;
        // 4b. mode, first half: the mode the call runs in, which 2b-4 judge.
        let mode = self.call_mode(req, tool, &subject, base_mode)?;
        // 2b. patches
        let patched = self.patch(tool, args)?;
        let facts = CallFacts::of_call(
            &tool.descriptor.name,
            &patched.args,
            tool.descriptor.side_effect,
            mode,
        );
        // 3. policy
        let trace = self.policy.trace(&facts, &subject);
        let ask_reason = policy_decision(&trace, tool, principal)?;
        // 4. guards
        self.guard(&facts, &trace)?;
        // 4b. mode, second half: whether the sandbox can run the call now.
        self.sandbox_check(tool, mode)?;

        // What phase 5 must ask, and what an approval lets the call reach.
        let (ask_network, rule_network) = self.network_to_approve(tool, &trace, &facts);
        let ask_approved = !ask_network.is_empty();
        let reason = ask_or_escalation(ask_reason, req.escalation.as_ref(), base_mode);
        let approval_network = approval_network(reason.is_some(), ask_network, &rule_network);
        let approval_reason = naming_network(reason, &approval_network)
            .map(|r| crate::pipeline::patches::tell_approver(r, &patched.patches));
        let approval = match &trace.approval_by {
            Some(layer) if trace.approval == ApprovalSetting::Never => Some(layer.clone()),
            _ => None,
        };
        Ok(Assessed {
            tool,
            args: patched.args,
            original_args: patched.original_args,
            patches: patched.patches,
            mode,
            approval_reason,
            approval,
            ask_approved,
            rule_network,
            approval_network,
        })
    }

    /// Phase 1: the tool, through the one visibility resolver, then the
    /// policy layers' visibility (owner-only tools, allow and deny lists)
    /// in the mode the call asks for.
    fn lookup(
        &self,
        req: &CallRequest,
        subject: &Subject<'_>,
        base_mode: SandboxMode,
    ) -> Result<&RegisteredTool, Refusal> {
        let tool = self.resolve(req.scope.as_deref(), &req.tool)?;
        hidden_refusal(&self.policy, &tool.descriptor.name, subject, base_mode)?;
        Ok(tool)
    }

    /// The tool `name` in `scope`, through the registry's resolver.
    fn resolve(&self, scope: Option<&str>, name: &str) -> Result<&RegisteredTool, Refusal> {
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

    /// Phase 1b: the rate limits, before validation costs anything: a
    /// client over its limit gets RATE_LIMITED and the call goes no further.
    fn rate_limit(&self, req: &CallRequest, tool: &RegisteredTool) -> Result<(), Refusal> {
        self.rate.admit(
            req.client.as_deref(),
            &tool.descriptor.name,
            std::time::Instant::now(),
        )
    }

    /// Phase 4b, the call's mode: the request's, else the policy's default
    /// (`base_mode`); an escalation must be strictly wider and justified.
    fn call_mode(
        &self,
        req: &CallRequest,
        tool: &RegisteredTool,
        subject: &Subject<'_>,
        base_mode: SandboxMode,
    ) -> Result<SandboxMode, Refusal> {
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
            hidden_refusal(&self.policy, &tool.descriptor.name, subject, mode)?;
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
        Ok(mode)
    }

    /// Phase 2b: the policy's argument patches, then validation again: a
    /// patch that breaks the schema refuses before anyone is asked.
    fn patch(&self, tool: &RegisteredTool, args: serde_json::Value) -> Result<Patched, Refusal> {
        Ok(
            match crate::pipeline::patches::apply(&self.policy, &self.args_hooks, tool, &args)? {
                None => Patched {
                    args,
                    original_args: None,
                    patches: Vec::new(),
                },
                Some(p) => Patched {
                    args: p.args,
                    original_args: Some(args),
                    patches: p.applied,
                },
            },
        )
    }

    /// Phase 4: the guards, deny-only; nothing after this can re-allow.
    fn guard(&self, facts: &CallFacts<'_>, trace: &Trace) -> Result<(), Refusal> {
        if let Some(denial) = self.guards.check(facts) {
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
        Ok(())
    }

    /// Phase 4b, the sandbox check: the sandbox must be able to give the
    /// tool what it needs, and have room for its body now.
    fn sandbox_check(&self, tool: &RegisteredTool, mode: SandboxMode) -> Result<(), Refusal> {
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
        Ok(())
    }

    /// The network grants an approval of this call decides: the `ask`
    /// grants, described, and the grants of the policy rules it matches.
    ///
    /// Network `ask` grants are approved per call, before the body: a
    /// call of a tool whose side effect is `external` asks once, naming
    /// every `ask` grant; `allowed-once` unlocks them for this call only.
    /// Other tools, and every tool under `approval = "never"`, run with
    /// the `allow` grants alone: a request an `ask` grant covers is then
    /// refused inside the guest (`HTTP-request-denied`, recorded as
    /// `approval_required`). Nobody is asked in the middle of a body.
    fn network_to_approve(
        &self,
        tool: &RegisteredTool,
        trace: &Trace,
        facts: &CallFacts<'_>,
    ) -> (Vec<String>, Vec<RuleGrants>) {
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
                self.policy.network_grants(facts)
            }
            _ => Vec::new(),
        };
        (ask_network, rule_network)
    }
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

/// Phase 3: the pre-execute policy's decision over every layer that
/// applies (strictest wins): a refusal, or what to ask if it asks.
fn policy_decision(
    trace: &Trace,
    tool: &RegisteredTool,
    principal: &str,
) -> Result<Option<String>, Refusal> {
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
    match &trace.decision {
        Decision::Deny { reason } => Err((
            ErrorCode::PolicyDenied,
            format!("{reason} [{}]", trace.decided_by),
        )),
        Decision::Ask { reason } => Ok(Some(reason.clone())),
        Decision::Allow => Ok(None),
    }
}

/// What a human would be asked for the policy's `ask` and for an
/// escalation (every escalation is asked about), if anything.
fn ask_or_escalation(
    ask_reason: Option<String>,
    escalation: Option<&Escalation>,
    base_mode: SandboxMode,
) -> Option<String> {
    match (ask_reason, escalation) {
        (Some(r), Some(e)) => Some(format!(
            "{r}; escalation to {}: {}",
            e.mode, e.justification
        )),
        (Some(r), None) => Some(r),
        (None, Some(e)) => Some(format!(
            "escalation from {base_mode} to {}: {}",
            e.mode, e.justification
        )),
        (None, None) => None,
    }
}

/// What an approval would let the call reach: the `ask` grants, then the
/// rules' grants not among them. An approval asked for any reason also
/// decides whether the rules' grants are reached, so the approver is told
/// of them too; nothing when nobody is asked.
fn approval_network(
    asked: bool,
    ask_network: Vec<String>,
    rule_network: &[RuleGrants],
) -> Vec<String> {
    if !asked && ask_network.is_empty() {
        return Vec::new();
    }
    let mut list = ask_network;
    for grant in rule_network.iter().flat_map(|r| r.grants()) {
        let grant = grant.described();
        if !list.contains(&grant) {
            list.push(grant);
        }
    }
    list
}

/// `reason` with the network grants an approval would open named in it;
/// those alone when there is no other reason to ask.
fn naming_network(reason: Option<String>, network: &[String]) -> Option<String> {
    match (reason, network.is_empty()) {
        (reason, true) => reason,
        (None, false) => Some(format!(
            "the call may reach these network grants only if approved: {}",
            network.join(", ")
        )),
        (Some(r), false) => Some(format!(
            "{r}; the call may reach these network grants only if approved: {}",
            network.join(", ")
        )),
    }
}
