//! Library extension points after the body: post-execute hooks (inspect,
//! replace `content` or `canonical`, or block) and observers (read-only).

use crate::result::CallResult;
use crate::tool::{ContentItem, Descriptor};

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

/// Sees every final result, read-only. An observer that fails or panics
/// changes nothing about the result.
pub trait Observer: Send + Sync {
    /// Called once per call, after the result is final.
    fn observe(&self, result: &CallResult);
}
