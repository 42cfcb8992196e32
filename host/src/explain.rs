//! [`Host::explain`]: what a call would meet, layer by layer, without
//! running anything (`toolhost explain`).
//!
//! The answer comes from the same function the pipeline admits calls with
//! (`Host::assess`: lookup, visibility, validation, patches, every policy
//! layer, guards, the sandbox check), so an explanation cannot drift from
//! what a real call does. It stops short of the approver: nobody is asked,
//! nothing is recorded, no body runs.

use crate::pipeline::{CallRequest, Host};
use serde::Serialize;
use serde_json::{Value, json};
use toolhost_core::{ErrorCode, SandboxMode};
use toolhost_policy::{CallFacts, Decision, GuardDenial, LOCAL_PRINCIPAL, Subject, Trace};

/// The final answer of an explanation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Answer {
    /// The call would run without asking anyone.
    Allow,
    /// The call would run only if the approver allows it.
    Ask {
        /// What the approver would be told.
        reason: String,
        /// The approver that would be asked.
        approver: String,
    },
    /// The call would be refused before dispatch.
    Refused {
        /// The stable code the call would end with.
        code: ErrorCode,
        /// Its message (naming the layer and rule where one decided).
        message: String,
    },
}

/// What [`Host::explain`] reports.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// The tool asked for.
    pub tool: String,
    /// Who asked.
    pub principal: String,
    /// From which scope.
    pub scope: Option<String>,
    /// The mode the call would run in (its escalation's, if any, capped by
    /// the tool's side effect).
    pub mode: SandboxMode,
    /// The arguments after the policy's patches (`null` when they do not
    /// parse or the tool is unknown).
    pub args: Value,
    /// What the patches changed, in order.
    pub patches: Vec<String>,
    /// One entry per policy layer that applies, in order.
    pub layers: Vec<Value>,
    /// The first denial of the host's guards (the policy file's
    /// `[[guards]]` and library guards), if any.
    pub guard: Option<String>,
    /// The final answer.
    pub answer: Answer,
}

impl Host {
    /// Explains `request` without running it: every layer's view, the
    /// guards, whether approval would be asked, and the final answer.
    /// Nothing is recorded, nobody is asked, and no rate-limit token is
    /// taken (so the answer does not say whether the client is over its
    /// rate limit). The answer reads the host's state as the pipeline does:
    /// a call that abandoned bodies keep out of the exclusivity gate is
    /// refused here too, while they hold it.
    pub fn explain(&self, request: &CallRequest) -> Explanation {
        let principal = request
            .principal
            .clone()
            .unwrap_or_else(|| LOCAL_PRINCIPAL.to_string());
        let base_mode = request.mode.unwrap_or_else(|| self.policy.default_mode());
        let mode = request.escalation.as_ref().map_or(base_mode, |e| e.mode);
        let view = self.view(request, &principal, mode);
        let answer = match self.assess(request, crate::pipeline::Charge::Nothing) {
            Err((code, message)) => Answer::Refused { code, message },
            Ok(a) => match (a.approval_reason, a.approval) {
                (None, _) => Answer::Allow,
                (Some(reason), Some(layer)) => Answer::Refused {
                    code: ErrorCode::ApprovalUnavailable,
                    message: format!(
                        "approval needed ({reason}) but the policy never asks (approval = \"never\") [layer {layer}]"
                    ),
                },
                (Some(reason), None) => {
                    let approver = request.approver.as_deref().unwrap_or(&*self.approver);
                    let approver = crate::approval::name_of(approver);
                    Answer::Ask { reason, approver }
                }
            },
        };
        let (mode, args, patches, layers, guard) = match view {
            None => (mode, Value::Null, Vec::new(), Vec::new(), None),
            Some(v) => (
                v.mode,
                v.args,
                v.patches,
                v.trace.steps.iter().map(step_json).collect(),
                v.guard.map(|d| d.to_string()),
            ),
        };
        Explanation {
            tool: request.tool.clone(),
            principal,
            scope: request.scope.clone(),
            mode,
            args,
            patches,
            layers,
            guard,
            answer,
        }
    }

    /// The layers' view of a call whose tool resolves and whose arguments
    /// parse, as far as it can be computed (also for calls that are
    /// refused later on).
    fn view(&self, request: &CallRequest, principal: &str, mode: SandboxMode) -> Option<View> {
        let scope = request.scope.as_deref();
        if !self.registry.has_scope(scope) {
            return None;
        }
        let tool = self.registry.resolve(scope, &request.tool)?;
        let mut args: Value = serde_json::from_str(&request.args).ok()?;
        let mut patches = Vec::new();
        if let Ok(Some(p)) =
            crate::pipeline::patches::apply(&self.policy, &self.args_hooks, tool, &args)
        {
            args = p.args;
            patches = p.applied.iter().map(ToString::to_string).collect();
        }
        let scopes = self.registry.scope_chain(scope);
        let subject = Subject {
            principal,
            scopes: &scopes,
        };
        // The facts as the pipeline builds them: the mode the call would run
        // in is capped by the tool's side effect, so the layers shown are
        // the ones applied.
        let facts = CallFacts::of_call(
            &tool.descriptor.name,
            &args,
            tool.descriptor.side_effect,
            mode,
        );
        let trace = self.policy.trace(&facts, &subject);
        let guard = self.guards.check(&facts);
        let mode = facts.mode;
        Some(View {
            mode,
            trace,
            guard,
            patches,
            args,
        })
    }
}

struct View {
    /// The mode the call would run in (the tool's side effect caps it).
    mode: SandboxMode,
    trace: Trace,
    guard: Option<GuardDenial>,
    patches: Vec<String>,
    args: Value,
}

fn step_json(s: &toolhost_policy::LayerStep) -> Value {
    let (decision, reason) = match &s.decision {
        None => (None, None),
        Some(Decision::Allow) => (Some("allow"), None),
        Some(Decision::Ask { reason }) => (Some("ask"), Some(reason.clone())),
        Some(Decision::Deny { reason }) => (Some("deny"), Some(reason.clone())),
    };
    json!({
        "layer": s.layer,
        "visible": s.hidden_by.is_none(),
        "hidden_by": s.hidden_by,
        "decision": decision,
        "reason": reason,
        "rule": s.rule,
        "guard": s.guard.as_ref().map(|g| json!({"guard": g.guard, "reason": g.reason})),
        "approval": s.approval.map(|a| a.as_str()),
    })
}
