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
//! around it: the host and its builder, requests and results, tools,
//! approvers, hooks and observers, limits and runtime options, the policy
//! ([`policy`]) and the session log's reading side ([`log`], [`LogReader`]).
//! Four small modules hold what fewer readers need: [`queue`] (the file
//! approval queue), [`manifest`] (WASI programs as tools), [`runtime`]
//! (guest paths, deadlines, the compile cache, the network grant) and
//! [`schemas`] (descriptors in model providers' shapes). Running a body is
//! crate-private. Features: `mcp` (the MCP server, [`mcp`]) and `cli` (the
//! `toolhost` binary), both default; `exec` (which `cli` enables) runs WASI
//! programs outside the pipeline; `bench-internals` exposes body-only entry
//! points for the benchmarks and must never be enabled in a host that runs
//! calls.
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

// The pipeline: the host, one call in and one result out.
pub use crate::pipeline::log_reader::LogReader;
pub use crate::pipeline::{CallRequest, Escalation, Host, HostBuilder, HostError, MAX_ARGS_BYTES};
pub use crate::result::{CallError, CallResult, Status};
pub use toolhost_core::{ErrorCode, SandboxMode};

// Tools: what a call can name.
pub use crate::tools::descriptor::{ContentItem, Descriptor, SideEffect};
pub use crate::tools::embedded::EMBEDDED_TOOLS;
pub use crate::tools::manifest::Manifest;
pub use crate::tools::registry::{RegisteredTool, RegistryError, ScopeSpec, ToolBody};

// Approval: who answers an `ask`.
pub use crate::approval::announce::{ApprovalAnnouncement, ApprovalListener};
pub use crate::approval::queue::QueueApprover;
pub use crate::approval::{
    ApprovalOutcome, ApprovalRequest, ApprovedCode, Approver, BoxFuture, CommandApprover,
    FixedApprover, NoApprover, TtyApprover,
};

// Hooks and observers around the pipeline's phases.
pub use crate::explain::{Answer, Explanation};
pub use crate::hooks::{AfterCall, ArgsAction, ArgsHook, Observer, PostAction, PostExecuteHook};

// The sandbox a body runs in.
pub use crate::sandbox::spec::Limits;
pub use crate::sandbox::state::{Interrupt, Progress};
pub use crate::sandbox::{LoadError, Receipt, Runtime, RuntimeOptions};

pub use toolhost_log as log;
pub use toolhost_policy as policy;

/// The file approval queue: asks one process writes and an operator answers
/// from another (`toolhost approvals`, `toolhost approve`).
pub mod queue {
    pub use crate::approval::APPROVAL_WAIT_MS;
    pub use crate::approval::announce::ANNOUNCE_CAPACITY;
    pub use crate::approval::queue::{
        ApprovalDecision, ApprovalQueue, DecideError, GRACE, approvals_dir, decide_approval,
        pending_approvals, recover_pending_approvals,
    };
}

/// Tool manifests: a WASI program declared as a tool (`NAME.tool.toml`).
pub mod manifest {
    pub use crate::tools::manifest::{
        MANIFEST_SUFFIX, ManifestCode, ManifestError, ManifestLimits, Preopen, name_of,
    };
    pub use crate::tools::program_tool::ProgramTool;
}

/// The sandbox's fixed facts and helpers: guest paths, deadlines, the
/// compile cache, the network grant, and the predicates the CLI shares with
/// the pipeline.
pub mod runtime {
    pub use crate::egress::{NetworkGrant, SharedResolver};
    pub use crate::pipeline::LIBRARY_CLIENT;
    pub use crate::pipeline::audit::DEFAULT_OBSERVER_QUEUE;
    pub use crate::sandbox::cache::{CacheStats, default_cache_dir};
    pub use crate::sandbox::spec::{
        GUEST_SCRATCH, GUEST_WORKSPACE, SandboxError, inside_workspace, needs_durable_intent,
        writable_preopens,
    };
    pub use crate::sandbox::state::{LogRecord, ProgressSink, printable};
    #[cfg(feature = "bench-internals")]
    #[doc(hidden)]
    pub use crate::sandbox::{BodyOutcome, LoadedComponent};
    pub use crate::sandbox::{
        DESCRIBE_DEADLINE, EPOCH_TICK, MAX_WASM_FILE_BYTES, STUCK_GRACE, WasmFileError,
        read_wasm_file,
    };
    pub use crate::tools::descriptor::is_valid_name;
}

/// Tool descriptors in the shapes model providers expect
/// (`toolhost list --schema-for`).
pub mod schemas {
    pub use crate::tools::provider::{Provider, provider_tool};
}

/// Running WASI command programs (`toolhost exec`) outside the governed
/// pipeline: no policy, approval or log. Feature `exec` (which `cli`
/// enables).
#[cfg(feature = "exec")]
pub mod exec;
#[cfg(feature = "mcp")]
pub mod mcp;

/// Checking third-party tools against the contract (`toolhost conformance`).
pub mod conformance;
