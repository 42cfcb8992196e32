//! # toolhost
//!
//! Runs AI-agent tools as WebAssembly components behind a governed call
//! pipeline: lookup, argument validation, policy, guards, approval, a
//! durable checkpoint, a sandbox the Wasm runtime enforces, output checks,
//! post-execute hooks and an ordered commit to the session log.
//!
//! Start with [`HostBuilder`]; run calls with [`Host::call`] or
//! [`Host::call_batch`].
//!
//! The crate root exports the pipeline and nothing that runs a tool body
//! around it: the host and its builder, requests and results, approvers,
//! hooks and observers, limits and runtime options, the policy
//! ([`policy`]) and the session log's reading side ([`log`]). Running a body
//! is crate-private. Features: `mcp` (the MCP server, [`mcp`]) and `cli`
//! (the `toolhost` binary), both default; `bench-internals` exposes
//! body-only entry points for the benchmarks and must never be enabled in a
//! host that runs calls.
//!
//! Where each phase of a call lives: `docs/ARCHITECTURE.md`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolhost::HostError> {
//! use toolhost::{CallRequest, Host, SandboxMode};
//! let host = Host::builder().embedded_tools().workspace(".").build().await?;
//! let result = host
//!     .call(CallRequest::new("read_file", serde_json::json!({"path": "README.md"})).mode(SandboxMode::ReadOnly))
//!     .await;
//! println!("{}", serde_json::to_string_pretty(&result).unwrap_or_default());
//! # Ok(()) }
//! ```

mod approval;
mod crashpoint;
mod egress;
mod explain;
mod hooks;
mod pipeline;
mod result;
mod sandbox;
mod tools;

pub use crate::approval::announce::{ANNOUNCE_CAPACITY, ApprovalAnnouncement, ApprovalListener};
pub use crate::approval::queue::{
    ApprovalDecision, ApprovalQueue, DecideError, GRACE as APPROVAL_GRACE, QueueApprover,
    approvals_dir, decide_approval, pending_approvals, recover_pending_approvals,
};
pub use crate::approval::{
    APPROVAL_WAIT_MS, ApprovalOutcome, ApprovalRequest, ApprovedCode, Approver, BoxFuture,
    CommandApprover, FixedApprover, NoApprover, TtyApprover,
};
pub use crate::egress::{NetworkGrant, SharedResolver};
pub use crate::explain::{Answer, Explanation};
pub use crate::hooks::{AfterCall, ArgsAction, ArgsHook, Observer, PostAction, PostExecuteHook};
pub use crate::pipeline::audit::DEFAULT_OBSERVER_QUEUE;
pub use crate::pipeline::log_reader::LogReader;
pub use crate::pipeline::{
    CallRequest, Escalation, Host, HostBuilder, HostError, LIBRARY_CLIENT, MAX_ARGS_BYTES,
};
pub use crate::result::{CallError, CallResult, Status};
pub use crate::sandbox::cache::{CacheStats, default_cache_dir};
pub use crate::sandbox::spec::{
    GUEST_SCRATCH, GUEST_WORKSPACE, Limits, SandboxError, inside_workspace, needs_durable_intent,
    writable_preopens,
};
pub use crate::sandbox::state::{Interrupt, LogRecord, Progress, ProgressSink, printable};
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub use crate::sandbox::{BodyOutcome, LoadedComponent};
pub use crate::sandbox::{
    DESCRIBE_DEADLINE, EPOCH_TICK, LoadError, MAX_WASM_FILE_BYTES, Receipt, Runtime,
    RuntimeOptions, STUCK_GRACE, WasmFileError, read_wasm_file,
};
pub use crate::tools::descriptor::{ContentItem, Descriptor, SideEffect, is_valid_name};
#[doc(hidden)]
pub use crate::tools::embedded::BENCH_GUEST_PATH;
pub use crate::tools::embedded::EMBEDDED_TOOLS;
#[doc(hidden)]
pub use crate::tools::embedded::MCP_FIXTURES_PATH;
pub use crate::tools::manifest::{
    MANIFEST_SUFFIX, Manifest, ManifestCode, ManifestError, ManifestLimits, Preopen,
    name_of as manifest_name,
};
pub use crate::tools::program_tool::ProgramTool;
pub use crate::tools::provider::{Provider, provider_tool};
pub use crate::tools::registry::{RegisteredTool, RegistryError, ScopeSpec, ToolBody};
pub use toolhost_core::{ErrorCode, SandboxMode};
pub use toolhost_log as log;
pub use toolhost_policy as policy;

/// Running WASI command programs (`toolhost exec`) outside the governed
/// pipeline: no policy, approval or log. Feature `exec` (which `cli`
/// enables).
#[cfg(feature = "exec")]
pub mod exec;
#[cfg(feature = "mcp")]
pub mod mcp;

/// Checking third-party tools against the contract (`toolhost conformance`).
pub mod conformance;
