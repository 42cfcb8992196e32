//! Phase 6, the checkpoint: the intents of admitted calls written to the
//! session log in one commit, before any body may start. It exists once and
//! serves `Host::call` and `Host::call_batch`.

use super::Host;
use crate::egress::NetworkGrant;
use crate::result::CallResult;
use crate::sandbox::spec::{needs_durable_intent, writable_preopens};
use crate::sandbox::state::Interrupt;
use crate::sandbox::{NetWitness, Receipt};
use crate::tools::registry::RegisteredTool;
use serde_json::json;
use toolhost_core::{ErrorCode, SandboxMode};
use toolhost_log::Durability;
use toolhost_policy::AppliedPatch;

/// A call that passed every check before the checkpoint (phases 1-5): what
/// phase 6 writes as its intent, and phases 7-9 run.
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
    pub progress: Option<crate::sandbox::state::ProgressSink>,
    /// What the call may reach on the network.
    pub network: NetworkGrant,
    /// What the call still reports of its body's network if it ends
    /// without the body's own receipt (abandoned, or dropped by its caller).
    pub witness: NetWitness,
    /// Who made the call: what its inner calls (code mode) are made as.
    pub caller: super::caller::Caller,
    /// For an inner call of code mode: the outer call's pass at the gate.
    pub lent: Option<super::caller::Lent>,
}

impl Host {
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
}

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

/// The result of an admitted call whose intent could not be made durable
/// (not committed yet).
pub(crate) fn aborted(a: &Admitted<'_>, error: &str) -> CallResult {
    CallResult::error(
        a.call_id.clone(),
        a.tool.descriptor.name.clone(),
        ErrorCode::AbortedBeforeDispatch,
        format!("the intent could not be made durable, so the tool did not run: {error}"),
        Receipt::default(),
    )
}

/// The intent phase 6 writes for `a`: the tool, its code, the arguments
/// (and the caller's, when a patch changed them), the mode, and what the
/// call may reach.
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
        o.insert(
            "patches".into(),
            crate::pipeline::patches::applied_json(&a.patches),
        );
    }
    intent
}
