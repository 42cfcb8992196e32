//! Argument patches in the pipeline (phase 2b): the policy's `[[patches]]`
//! applied to validated arguments, and the patched arguments validated
//! again, before policy, guards and approval see them.
//!
//! Only the patched arguments go on: the approver is shown them (and told
//! what changed), the intent records them next to the originals, and the
//! body and post-execute get them. Nothing is staged between phases: the
//! patched value travels with the call itself, so nothing can pile up.

use crate::registry::RegisteredTool;
use serde_json::json;
use toolhost_core::ErrorCode;
use toolhost_policy::{AppliedPatch, Patched, Policy};

/// Applies `policy`'s patches to `args` and validates the result against
/// the tool's input schema. `Ok(None)`: nothing changed.
pub(crate) fn apply(
    policy: &Policy,
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
    let Some(patched) = patched else {
        return Ok(None);
    };
    tool.validate_args(&patched.args).map_err(|e| {
        let which: Vec<&str> = patched.applied.iter().map(|a| a.patch.as_str()).collect();
        (
            ErrorCode::InvalidArgs,
            format!(
                "the policy's patches ({}) make the arguments break the input schema of {name}: {e}",
                which.join(", ")
            ),
        )
    })?;
    Ok(Some(patched))
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
