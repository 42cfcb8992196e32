//! Argument patches in the pipeline (phase 2b): the policy's `[[patches]]`
//! and then the library's argument hooks applied to validated arguments,
//! and the patched arguments validated again, before policy, guards and
//! approval see them. A hook may also block the call.
//!
//! Only the patched arguments go on: the approver is shown them (and told
//! what changed), the intent records them next to the originals, and the
//! body and post-execute get them. Nothing is staged between phases: the
//! patched value travels with the call itself, so nothing can pile up.

use crate::hooks::{ArgsAction, ArgsHook};
use crate::tools::registry::RegisteredTool;
use serde_json::json;
use toolhost_core::ErrorCode;
use toolhost_policy::{AppliedPatch, Patched, Policy};

/// Applies `policy`'s patches, then the library's argument hooks, to `args`,
/// and validates the result against the tool's input schema. `Ok(None)`:
/// nothing changed.
pub(crate) fn apply(
    policy: &Policy,
    hooks: &[Box<dyn ArgsHook>],
    tool: &RegisteredTool,
    args: &serde_json::Value,
) -> Result<Option<Patched>, (ErrorCode, String)> {
    let name = &tool.descriptor.name;
    let patched = policy.patch(name, args).map_err(|e| {
        (
            ErrorCode::InvalidArgs,
            format!("a policy patch cannot apply to this call of {name}: {e}"),
        )
    })?;
    let (mut current, mut applied) = match patched {
        Some(p) => (p.args, p.applied),
        None => (args.clone(), Vec::new()),
    };
    for hook in hooks {
        // Library code: a panic in it (or in its name) blocks the call.
        let hook_name = crate::sandbox::state::unpanicked(|| hook.name().to_string())
            .unwrap_or_else(|| "(a hook whose name panics)".to_string());
        let action =
            crate::sandbox::state::unpanicked(|| hook.before_call(&tool.descriptor, &current))
                .unwrap_or_else(|| ArgsAction::Block("the hook panicked".into()));
        match action {
            ArgsAction::Keep => {}
            ArgsAction::Replace(v) if v == current => {}
            ArgsAction::Replace(v) => {
                applied.push(AppliedPatch {
                    patch: format!("hook {hook_name}"),
                    pointer: String::new(),
                    before: Some(std::mem::replace(&mut current, v.clone())),
                    after: v,
                });
            }
            ArgsAction::Block(reason) => {
                return Err((
                    ErrorCode::PolicyDenied,
                    format!("blocked by argument hook {hook_name}: {reason}"),
                ));
            }
        }
    }
    if applied.is_empty() {
        return Ok(None);
    }
    tool.validate_args(&current).map_err(|e| {
        let which: Vec<&str> = applied.iter().map(|a| a.patch.as_str()).collect();
        (
            ErrorCode::InvalidArgs,
            format!(
                "the patches ({}) make the arguments break the input schema of {name}: {e}",
                which.join(", ")
            ),
        )
    })?;
    Ok(Some(Patched {
        args: current,
        applied,
    }))
}

/// The approval reason, with what the patches changed.
pub(crate) fn tell_approver(reason: String, applied: &[AppliedPatch]) -> String {
    if applied.is_empty() {
        return reason;
    }
    let what: Vec<String> = applied.iter().map(ToString::to_string).collect();
    format!(
        "{reason} (the policy patched the arguments: {})",
        what.join("; ")
    )
}

/// The patches of an intent, as recorded.
pub(crate) fn applied_json(applied: &[AppliedPatch]) -> serde_json::Value {
    applied
        .iter()
        .map(|a| json!({ "patch": a.patch, "pointer": a.pointer, "before": a.before, "after": a.after }))
        .collect()
}
