//! Library extension points: argument hooks before policy (rewrite or
//! block a call's arguments), and after the body post-execute hooks
//! (inspect, replace `content` or `canonical`, or block) and observers
//! (read-only, after the commit, off the call's path: see `audit.rs`).

use crate::pipeline::audit::AfterCall;
use crate::result::CallResult;
use crate::tools::{ContentItem, Descriptor};

/// What a post-execute hook decides about a successful result.
#[derive(Debug, Clone, PartialEq)]
pub enum PostAction {
    /// Leave the result as it is.
    Keep,
    /// Replace what the model reads. `canonical` is unchanged: hiding data
    /// from the model this way does not hide it from programs or audit.
    ReplaceContent(Vec<ContentItem>),
    /// Replace the structured result (validated again against the output
    /// schema).
    ReplaceCanonical(serde_json::Value),
    /// Withhold the result: the call ends with `POST_EXECUTE_BLOCKED`.
    Block(String),
}

/// Inspects successful results before they are committed. A hook that
/// panics blocks the result (fail closed).
pub trait PostExecuteHook: Send + Sync {
    /// A short name for logs and block messages.
    fn name(&self) -> &str;
    /// Decides about one result.
    fn inspect(&self, tool: &Descriptor, result: &CallResult) -> PostAction;
}

/// What an argument hook decides about a call's arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgsAction {
    /// Leave them as they are.
    Keep,
    /// Use these instead. They are validated against the input schema again
    /// (a schema break refuses with `INVALID_ARGS` before anyone is asked),
    /// and recorded in the intent next to the originals.
    Replace(serde_json::Value),
    /// Refuse the call (`POLICY_DENIED`) with this reason.
    Block(String),
}

/// Rewrites or blocks a call's arguments after they validated and after
/// the policy's `[[patches]]`, before policy, guards and approval see them
/// (each hook sees the previous one's result). A hook that panics blocks
/// the call (fail closed).
pub trait ArgsHook: Send + Sync {
    /// A short name for logs, intents and block messages.
    fn name(&self) -> &str;
    /// Decides about one call's (validated, patched) arguments.
    fn before_call(&self, tool: &Descriptor, args: &serde_json::Value) -> ArgsAction;
}

/// Sees every call's after-call record, read-only: exactly one per call,
/// on every path (success, each refusal, abort, the body's errors), after
/// its result is committed.
///
/// Fire-and-forget: records reach an observer on its own thread through a
/// bounded queue. An observer that is slow, stuck or panics changes no
/// result and delays no call; records it has no room for are dropped and
/// counted ([`Host::observer_drops`](crate::Host::observer_drops)). Implement
/// either method.
pub trait Observer: Send + Sync + 'static {
    /// Called once per call with its final result (what
    /// [`after_call`](Observer::after_call) calls by default).
    fn observe(&self, result: &CallResult) {
        let _ = result;
    }
    /// Called once per call with its after-call record (duration,
    /// principal, scope, code and the result).
    fn after_call(&self, record: &AfterCall) {
        self.observe(&record.result);
    }
}
