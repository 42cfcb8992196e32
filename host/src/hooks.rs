//! Library extension points: argument hooks before policy (rewrite or
//! block a call's arguments), and after the body post-execute hooks
//! (inspect, replace `content` or `canonical`, or block) and observers
//! (read-only, after the commit, off the call's path: see
//! `pipeline/audit.rs`), with what observers receive: the after-call record
//! ([`AfterCall`]) and where a call started ([`CallStart`]).

use crate::result::{CallResult, Status};
use crate::tools::descriptor::{ContentItem, Descriptor};
use serde::Serialize;
use std::time::{Duration, Instant};
use toolhost_core::ErrorCode;

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

/// One call's after-call record: who asked, what happened, how long it took.
#[derive(Debug, Clone, Serialize)]
pub struct AfterCall {
    /// The call's id.
    pub call_id: String,
    /// The tool, as called.
    pub tool: String,
    /// Who asked (the local principal when the caller named nobody).
    pub principal: String,
    /// The scope the call came from; `None` is the global scope.
    pub scope: Option<String>,
    /// `ok` or `error`.
    pub status: Status,
    /// The stable code of a refusal or failure.
    pub code: Option<ErrorCode>,
    /// From the call entering the pipeline to its result being committed
    /// (approval waits and, in a batch, waits for earlier calls included).
    #[serde(rename = "duration_us", serialize_with = "micros")]
    pub duration: Duration,
    /// The final result, as the caller gets it.
    #[serde(skip)]
    pub result: CallResult,
}

fn micros<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Where and when a call started: what its after-call record needs besides
/// the result.
#[derive(Debug, Clone)]
pub(crate) struct CallStart {
    pub(crate) at: Instant,
    pub(crate) principal: String,
    pub(crate) scope: Option<String>,
}

impl CallStart {
    pub(crate) fn new(principal: Option<&str>, scope: Option<&str>) -> CallStart {
        CallStart {
            at: Instant::now(),
            principal: principal
                .unwrap_or(toolhost_policy::LOCAL_PRINCIPAL)
                .to_string(),
            scope: scope.map(str::to_string),
        }
    }

    /// What the `tool/result` event of `result` carries as `audit`.
    pub(crate) fn audit_json(&self, duration: Duration) -> serde_json::Value {
        serde_json::json!({
            "duration_us": u64::try_from(duration.as_micros()).unwrap_or(u64::MAX),
            "principal": self.principal,
            "scope": self.scope,
        })
    }

    /// The after-call record of `result`, which took `duration`.
    pub(crate) fn record(&self, result: &CallResult, duration: Duration) -> AfterCall {
        AfterCall {
            call_id: result.call_id.clone(),
            tool: result.tool.clone(),
            principal: self.principal.clone(),
            scope: self.scope.clone(),
            status: result.status,
            code: result.code(),
            duration,
            result: result.clone(),
        }
    }
}
