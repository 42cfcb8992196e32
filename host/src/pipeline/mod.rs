//! The library API: a [`Host`] built with a [`HostBuilder`], and
//! [`Host::call`], which runs one call through the whole pipeline of
//! DESIGN.md §1. The CLI and the MCP server are thin layers over it.
//!
//! One call, phase by phase. Each phase either hands the call to the next
//! or ends it with a stable code; the numbers are the ones in the code's
//! comments and in `docs/ARCHITECTURE.md`.
//!
//! | # | phase | file |
//! |---|---|---|
//! | | the sequence: admit (1-5), checkpoint (6), dispatch (7-8), commit (9) | `call.rs` (`Host::call`); a step's calls: `batch.rs` |
//! | 1 | lookup, then the policy layers' visibility | `assess.rs` |
//! | 1b | rate limits, per client | `assess.rs` → `rate.rs` |
//! | 2 | arguments parsed and validated (nulls, whole numbers normalised) | `args.rs` |
//! | 2b | argument patches, then validation again | `assess.rs` → `crate::patches` |
//! | 3 | policy: allow, deny or ask, strictest wins | `assess.rs` |
//! | 4 | guards: deny-only | `assess.rs` |
//! | 4b | mode: the call's mode (escalation, capped by the side effect), settled before 2b; then the sandbox check (`min_mode`, room for the body) | `assess.rs` |
//! | 5 | approval: `approval/asked` and `approval/decided`, fail closed | `approve.rs` |
//! | 6 | checkpoint: the intents, durable when a call may act outside the host | `checkpoint.rs` |
//! | — | exclusivity: safe bodies share, others run alone | `execute.rs` → `gate.rs` |
//! | 7 | sandbox and body | `execute.rs` → `crate::runtime`; code mode's inner calls: `code_mode.rs` |
//! | 8 | output validation | `execute.rs` |
//! | 8b | post-execute: hooks, then the policy's rules | `execute.rs` |
//! | 9 | commit: the result and its after-call record, then observers; the one exit of every path | `commit.rs` |
//!
//! Beside the phases:
//! - `redact.rs`: secrets and the policy's `[post_execute]` text rules in
//!   what leaves the host (results, progress reports, log records);
//! - `builder.rs`: [`HostBuilder`], loading, the state directory check;
//! - `gate.rs`: exclusivity across every caller of the host;
//! - `rate.rs`: the policy's `[rate_limits]`, per client, before validation.
//!
//! Invariants the phases keep:
//! - rate limits come right after lookup, before validation;
//! - validation comes before policy, guards before approval, approval before
//!   the checkpoint, the checkpoint before the body;
//! - every path except `allowed-once` after `ask` refuses;
//! - no body runs unless its intent is committed, and durable when the call
//!   is granted any effect outside the host (`sandbox::needs_durable_intent`);
//! - policy and guards run for every call, whatever scope it comes from;
//! - every call ends in phase 9 exactly once, also when its future is
//!   dropped (`commit.rs`'s `Unfinished` guard).

mod approve;
mod args;
mod assess;
pub(crate) mod audit;
mod batch;
mod builder;
mod call;
mod caller;
mod checkpoint;
mod code_mode;
mod commit;
mod execute;
mod gate;
pub(crate) mod log_reader;
pub(crate) mod patches;
mod rate;
pub(crate) mod record;
mod redact;

pub use args::MAX_ARGS_BYTES;
pub(crate) use assess::Charge;
pub use builder::HostBuilder;
pub use rate::LIBRARY_CLIENT;

use crate::approval::Approver;
use crate::hooks::PostExecuteHook;
use crate::pipeline::record::Recorder;
use crate::sandbox::spec::Limits;
use crate::sandbox::state::{Interrupt, ProgressSink};
use crate::sandbox::{LoadError, Runtime};
use crate::tools::registry::{RegisteredTool, Registry};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use toolhost_core::SandboxMode;
use toolhost_log::SessionLog;
use toolhost_policy::{Guards, Policy};

/// A refusal before dispatch: its stable code and message.
type Refusal = (toolhost_core::ErrorCode, String);

/// The longest tool or scope name a call's records keep (valid names are at most
/// 64 bytes).
pub const MAX_RECORDED_NAME: usize = 128;

/// A requested escalation: run this call in a wider mode, if approved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escalation {
    /// The mode asked for; must be strictly wider than the call's mode.
    pub mode: SandboxMode,
    /// Why; must not be empty.
    pub justification: String,
}

/// One call, from any origin (CLI, library, MCP).
#[derive(Clone, Default)]
pub struct CallRequest {
    /// The tool's name.
    pub tool: String,
    /// The arguments as JSON text (parsed and validated by the host).
    pub args: String,
    /// The scope the call comes from; `None` is the global scope.
    pub scope: Option<String>,
    /// The sandbox mode for this call; `None` uses the policy's default.
    pub mode: Option<SandboxMode>,
    /// A one-call escalation request.
    pub escalation: Option<Escalation>,
    /// Cancels the call (before dispatch, or by interrupting the body).
    pub interrupt: Option<Interrupt>,
    /// Receives the tool's progress reports.
    pub progress: Option<ProgressSink>,
    /// Who decides this call's approval, instead of the host's approver:
    /// a server with several clients asks the client that made the call.
    pub approver: Option<Arc<dyn Approver>>,
    /// Who asked: a principal name (see [`policy::Subject`](toolhost_policy::Subject)).
    /// `None` is [`LOCAL_PRINCIPAL`](toolhost_policy::LOCAL_PRINCIPAL), an owner.
    pub principal: Option<String>,
    /// Who is calling, for the policy's `[rate_limits]`: the MCP server
    /// names what it can verify (the stdio session; over HTTP the bearer
    /// token, else the remote address); `None` is [`LIBRARY_CLIENT`].
    pub client: Option<String>,
    /// The call's id, when the caller must know it before the call runs
    /// (the MCP server names the retry of a multi-round-trip approval after
    /// the call that asked, so that the log shows the state's use under a
    /// name it can look up); `None`: the host picks one. A caller that sets
    /// it must never reuse an id the log holds.
    pub call_id: Option<String>,
    /// The call whose code made this one (code mode, `code_mode.rs`):
    /// recorded with the call, so the log names every inner call's parent.
    pub parent: Option<String>,
}

impl std::fmt::Debug for CallRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallRequest")
            .field("tool", &self.tool)
            .field("args", &self.args)
            .field("scope", &self.scope)
            .field("mode", &self.mode)
            .field("escalation", &self.escalation)
            .field("principal", &self.principal)
            .field("client", &self.client)
            .field("parent", &self.parent)
            .finish_non_exhaustive()
    }
}

impl CallRequest {
    /// A call of `tool` with `args`.
    pub fn new(tool: impl Into<String>, args: serde_json::Value) -> Self {
        CallRequest {
            tool: tool.into(),
            args: args.to_string(),
            ..CallRequest::default()
        }
    }

    /// Sets the mode.
    pub fn mode(mut self, mode: SandboxMode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Sets the scope.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// Sets who asked (a principal name).
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = Some(principal.into());
        self
    }

    /// Requests an escalation.
    pub fn escalate(mut self, mode: SandboxMode, justification: impl Into<String>) -> Self {
        self.escalation = Some(Escalation {
            mode,
            justification: justification.into(),
        });
        self
    }

    /// This request with what a client chose freely and the session log records
    /// cut to a bound: the tool and scope names to [`MAX_RECORDED_NAME`] bytes (no
    /// valid name is that long, so a cut name is still refused), an escalation's
    /// justification to 4 KiB. A client cannot grow the log by naming a 4 MiB tool.
    pub(crate) fn bounded(mut self) -> Self {
        use crate::sandbox::state::cut;
        if self.tool.len() > MAX_RECORDED_NAME {
            self.tool = cut(&self.tool, MAX_RECORDED_NAME);
        }
        if let Some(scope) = self.scope.as_mut().filter(|s| s.len() > MAX_RECORDED_NAME) {
            *scope = cut(scope, MAX_RECORDED_NAME);
        }
        if let Some(e) = self
            .escalation
            .as_mut()
            .filter(|e| e.justification.len() > 4096)
        {
            e.justification = cut(&e.justification, 4096);
        }
        self
    }

    /// Names the caller (for the policy's `[rate_limits]`).
    pub fn client(mut self, client: impl Into<String>) -> Self {
        self.client = Some(client.into());
        self
    }

    /// Sets the cancellation token.
    pub fn interrupt(mut self, interrupt: Interrupt) -> Self {
        self.interrupt = Some(interrupt);
        self
    }
}

/// Errors building a host: configuration, not calls.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// A component could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Tool names collide, or a scope is wrong.
    #[error(transparent)]
    Registry(#[from] crate::tools::registry::RegistryError),
    /// A tool's descriptor is unusable.
    #[error("{0}")]
    Descriptor(String),
    /// A program-backed tool's manifest (or its program) is unusable.
    #[error(transparent)]
    Manifest(#[from] crate::tools::manifest::ManifestError),
    /// The workspace is missing.
    #[error("workspace {0} does not exist or is not a directory")]
    Workspace(PathBuf),
    /// The session log could not be opened.
    #[error("session log: {0}")]
    Log(String),
    /// The state directory would be writable by tools.
    #[error("{0}")]
    UnsafeState(String),
    /// The policy's network section could not be loaded (a credential's
    /// variable or file, the CA file).
    #[error("network: {0}")]
    Network(String),
    /// `build` was called a second time on the same builder.
    #[error(
        "this HostBuilder already built a host and its configuration moved into it; use a new builder"
    )]
    AlreadyBuilt,
}

/// A configured host: tools, policy, guards, approver, hooks and the log.
pub struct Host {
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) registry: Registry,
    pub(crate) policy: Policy,
    pub(crate) guards: Guards,
    pub(crate) approver: Box<dyn Approver>,
    pub(crate) post_hooks: Vec<Box<dyn PostExecuteHook>>,
    pub(crate) args_hooks: Vec<Box<dyn crate::hooks::ArgsHook>>,
    pub(crate) observers: crate::pipeline::audit::Observers,
    /// Where approval requests are announced (shared with successors).
    pub(crate) announcer: crate::approval::announce::Announcer,
    pub(crate) recorder: Recorder,
    pub(crate) workspace: PathBuf,
    pub(crate) limits: Limits,
    pub(crate) session: String,
    pub(crate) next_call: AtomicU64,
    pub(crate) gate: Arc<gate::Gate>,
    /// The policy's network grants, loaded (credentials read, TLS roots);
    /// `None` when the policy grants no network (neither `[network]` nor
    /// a rule).
    pub(crate) egress: Option<Arc<crate::egress::Egress>>,
    pub(crate) rate: Arc<rate::RateLimiter>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("workspace", &self.workspace)
            .field("tools", &self.registry.visible_names(None))
            .finish_non_exhaustive()
    }
}

impl Host {
    /// A new builder.
    pub fn builder() -> HostBuilder {
        HostBuilder::new()
    }

    /// The tools visible from `scope`.
    pub fn tools(&self, scope: Option<&str>) -> Vec<&RegisteredTool> {
        self.registry.visible(scope)
    }

    /// The tools `principal` sees from `scope` when calls run in `mode`
    /// (`None`: the policy's default mode): the scope's tools minus those a
    /// policy layer hides (owner-only tools for a non-owner, say). `None`
    /// as principal is the local one. Listing over MCP uses this.
    pub fn tools_for(
        &self,
        scope: Option<&str>,
        principal: Option<&str>,
        mode: Option<SandboxMode>,
    ) -> Vec<&RegisteredTool> {
        let scopes = self.registry.scope_chain(scope);
        let subject = toolhost_policy::Subject {
            principal: principal.unwrap_or(toolhost_policy::LOCAL_PRINCIPAL),
            scopes: &scopes,
        };
        let mode = mode.unwrap_or_else(|| self.policy.default_mode());
        self.registry
            .visible(scope)
            .into_iter()
            // Hidden in the mode asked for, or in the narrower mode its
            // calls are clamped to (its side effect's widest): a call would
            // be refused there, so it is not offered.
            .filter(|t| {
                let clamped = mode.min(t.descriptor.side_effect.widest_mode());
                self.policy
                    .hidden(&t.descriptor.name, &subject, mode)
                    .is_none()
                    && self
                        .policy
                        .hidden(&t.descriptor.name, &subject, clamped)
                        .is_none()
            })
            .collect()
    }

    /// A listener for the approval announcements made from now on: each
    /// request when it is pending and when it is decided (see
    /// [`ApprovalAnnouncement`](crate::ApprovalAnnouncement)). Bounded: a
    /// listener that lags loses the oldest and counts them.
    pub fn approval_listener(&self) -> crate::ApprovalListener {
        self.announcer.listen()
    }

    /// After-call records dropped so far because an observer's queue was
    /// full (summed over observers; see [`Observer`](crate::Observer)).
    pub fn observer_drops(&self) -> u64 {
        self.observers.dropped()
    }

    /// The runtime.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The session log, to read: only the pipeline appends to it.
    pub fn log(&self) -> crate::pipeline::log_reader::LogReader {
        crate::pipeline::log_reader::LogReader::new(self.recorder.log().clone())
    }

    /// The session log itself, for the crate's own writers (the MCP
    /// server's approvals and session events).
    #[cfg_attr(
        not(feature = "mcp"),
        expect(dead_code, reason = "only the MCP server writes beside the pipeline")
    )]
    pub(crate) fn session_log(&self) -> &Arc<SessionLog> {
        self.recorder.log()
    }

    /// The workspace (canonical path).
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Whether any network grant could apply to a call of `tool`: what MCP's
    /// `openWorldHint` reports, and what makes a tool no longer read-only
    /// whatever its sandbox mode. The policy's grants apply only to the
    /// calls of tools that declare the side effect `external` (its `ask`
    /// grants once asked for per call, a rule's to the calls it matches);
    /// without `[network]` or a rule that grants network to `tool`, no
    /// call of it may.
    pub fn may_reach_network(&self, tool: &str) -> bool {
        self.registry
            .resolve(None, tool)
            .is_some_and(|t| self.grants_network_to(&t.descriptor))
    }

    /// Whether the policy's network grants reach some call of `tool` (see
    /// [`Host::may_reach_network`]).
    pub(crate) fn grants_network_to(&self, tool: &crate::tools::descriptor::Descriptor) -> bool {
        tool.side_effect == toolhost_core::SideEffect::External
            && self.egress.as_ref().is_some_and(|egress| {
                egress.policy.is_enabled() || self.policy.may_grant_network(&tool.name)
            })
    }
}
