//! The protocol part of the server, independent of the transport: the
//! [`ServerHandler`] (`initialize`, `tools/list`, `tools/call`). The MCP
//! shapes of tools and results are `convert`'s; who is calling, as the
//! transport tells it, is `peer`'s.
//!
//! `tools/list` shows the tools visible in the server's scope; `tools/call`
//! runs through the whole governed pipeline ([`Host::call`]), and every
//! refusal or failure is a result with `isError: true` whose text starts
//! with the stable code (`POLICY_DENIED: ...`), never a protocol error.
//! `notifications/cancelled` trips the call's [`Interrupt`]; the host waits
//! for the body to stop and records `CANCELLED`.
//!
//! An `ask` is put to the client that made the call: each call carries an
//! [`McpApprover`] for the peer of its own request (its session), so with
//! several sessions on one host (Streamable HTTP) an elicitation never
//! reaches another session.
//!
//! What a client can make the server hold is bounded: at most
//! [`MAX_CALLS_IN_FLIGHT`] calls run per server (the next is refused; all
//! sessions of an HTTP server share the count), and the session-log flushes
//! that follow calls are coalesced (one queued at most).

use super::annotations::Enforced;
use super::approval::McpApprover;
use super::bounds::MAX_CALLS_IN_FLIGHT;
use super::convert::{mcp_tool, to_mcp_result};
use super::logging::{self, SendGate, SessionLevel};
use super::mrtr::{ApprovalStates, AskThroughResult};
use super::peer::PeerSlot;
use super::peer::{Caller, HttpClient};
use super::progress::ProgressForwarder;
use super::tasks::{MAX_TASKS_PER_CLIENT, Tasks};
use crate::approval::Approver;
use crate::hooks::CallStart;
use crate::pipeline::{CallRequest, Host};
use crate::result::CallResult;
use crate::sandbox::Receipt;
use crate::sandbox::state::Interrupt;
use rmcp::Peer;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, GetTaskParams,
    GetTaskResult, Implementation, InitializeRequestParams, InitializeResult, JsonObject,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
    TASKS_EXTENSION_ID,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use toolhost_core::{ErrorCode, SandboxMode};
use toolhost_policy::LOCAL_PRINCIPAL;

/// The client name of the stdio session, for the policy's `[rate_limits]`
/// (over HTTP the client is what the front door verified: the bearer token,
/// `mcp-http-token-<digest>`, with `--tokens`, else the remote address,
/// `mcp-http-<ip>`).
pub const STDIO_CLIENT: &str = "mcp-stdio";

/// How a call's approval is asked: the client of the call's session if it
/// elicits, else `fallback`, waiting at most `timeout` for the client.
///
/// A client of the 2026-07-28 revision that declares elicitation in the
/// request is asked through a multi-round-trip request instead, when the
/// server has `states` (see [`super::mrtr`]).
#[derive(Clone)]
pub(super) struct Approvals {
    pub(super) fallback: Arc<dyn Approver>,
    pub(super) timeout: Duration,
    pub(super) states: Option<Arc<ApprovalStates>>,
    /// Whether a client that elicits is asked (`ServeOptions::ask_clients`).
    pub(super) ask_clients: bool,
}

impl Approvals {
    /// The approver of one call made by the client of `peer`: that client
    /// if it elicits and clients are asked, else the fallback.
    pub(super) fn for_peer(&self, peer: Peer<RoleServer>) -> McpApprover {
        if self.ask_clients {
            McpApprover::for_peer(peer, self.fallback.clone(), self.timeout)
        } else {
            McpApprover::new(Arc::default(), self.fallback.clone(), self.timeout)
        }
    }
}

/// One open session as announcements see it.
#[derive(Clone)]
pub(super) struct SessionPeer {
    pub(super) peer: Peer<RoleServer>,
    /// Who initialized the session.
    pub(super) principal: String,
    /// The log level its client set.
    pub(super) level: SessionLevel,
    /// Its notifications' gate (see [`SendGate`]).
    pub(super) gate: SendGate,
}

/// The protocol handler of one session. Clones share the session's state;
/// [`Server::session`] makes the handler of another session that shares
/// the host, the cap on calls and the log flushes, not the peer.
#[derive(Clone)]
pub(super) struct Server {
    current: Arc<RwLock<Arc<Host>>>,
    pub(super) peer: PeerSlot,
    pub(super) scope: Option<String>,
    mode: Option<SandboxMode>,
    /// Who calls when the transport names nobody (stdio: the server's
    /// `--principal`; HTTP without tokens); `None` is the local principal.
    principal: Option<String>,
    approvals: Approvals,
    /// The clients of every session that initialized and is still open
    /// (told about reloads and approvals), with who each is and the log
    /// level it set; pruned when a session initializes.
    peers: Arc<Mutex<Vec<SessionPeer>>>,
    /// The server is stopping: calls are refused.
    stopping: Arc<AtomicBool>,
    /// One permit per `tools/call` in flight.
    calls: Arc<Semaphore>,
    /// A session-log flush is queued and has not started yet.
    flush_queued: Arc<AtomicBool>,
    /// This session's client name for the policy's `[rate_limits]`, when
    /// the request carries none from the HTTP front door.
    client: Arc<str>,
    /// The log level this session's client set (`logging/setLevel`).
    log_level: SessionLevel,
    /// This session's notifications (see [`SendGate`]).
    pub(super) gate: SendGate,
    /// The tasks running in this server (all sessions).
    tasks: Arc<Tasks>,
}

impl Server {
    /// A handler serving `host`'s tools visible in `scope`, every call in
    /// `mode`, asking approvals as `approvals` says; `peer` is filled in
    /// when the client initializes.
    pub(super) fn new(
        host: Host,
        peer: PeerSlot,
        scope: Option<String>,
        mode: Option<SandboxMode>,
        principal: Option<String>,
        approvals: Approvals,
    ) -> Server {
        let approval_wait = approvals.timeout;
        Server {
            current: Arc::new(RwLock::new(Arc::new(host))),
            peer,
            scope,
            mode,
            principal,
            approvals,
            peers: Arc::default(),
            stopping: Arc::default(),
            calls: Arc::new(Semaphore::new(MAX_CALLS_IN_FLIGHT)),
            flush_queued: Arc::default(),
            client: Arc::from(STDIO_CLIENT),
            log_level: SessionLevel::default(),
            gate: SendGate::default(),
            tasks: Arc::new(Tasks::new(approval_wait)),
        }
    }

    /// The handler of a new session on the same host: everything shared
    /// but the peer, which that session's `initialize` fills in.
    pub(super) fn session(&self) -> Server {
        Server {
            peer: Arc::new(OnceLock::new()),
            // Replaced per request by what the front door verified.
            client: Arc::from("mcp-http"),
            log_level: SessionLevel::default(),
            gate: SendGate::default(),
            ..self.clone()
        }
    }

    /// Waits until no call is in flight, or `limit` has passed; true when
    /// none is. New calls are not held off: the caller stops them first.
    pub(super) async fn drain(&self, limit: Duration) -> bool {
        let all = MAX_CALLS_IN_FLIGHT as u32;
        matches!(
            tokio::time::timeout(limit, self.calls.acquire_many(all)).await,
            Ok(Ok(_))
        )
    }

    /// Refuses every call from now on (the server is stopping).
    pub(super) fn stop_calls(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Interrupts every task running in this server (it is stopping).
    pub(super) fn cancel_tasks(&self) {
        self.tasks.cancel_all();
    }

    /// The sessions still open: client, principal, log level.
    pub(super) fn sessions(&self) -> Vec<SessionPeer> {
        let mut peers = match self.peers.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        };
        peers.retain(|p| !p.peer.is_transport_closed());
        peers.clone()
    }

    fn add_peer(&self, peer: Peer<RoleServer>, principal: String) {
        let mut peers = match self.peers.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        };
        peers.retain(|p| !p.peer.is_transport_closed());
        peers.push(SessionPeer {
            peer,
            principal,
            level: self.log_level.clone(),
            gate: self.gate.clone(),
        });
    }

    /// Who makes a request: the principal its bearer token maps to (HTTP
    /// with tokens), else the server's.
    fn principal_of(&self, context: &RequestContext<RoleServer>) -> Option<String> {
        Caller::of(context)
            .map(|c| c.0.clone())
            .or_else(|| self.principal.clone())
    }

    /// Calls in flight now.
    pub(super) fn calls_in_flight(&self) -> usize {
        MAX_CALLS_IN_FLIGHT - self.calls.available_permits()
    }

    /// The current host (a reload may replace it between calls).
    pub(super) fn host(&self) -> Arc<Host> {
        match self.current.read() {
            Ok(h) => h.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replaces the host for calls that start from now on.
    pub(super) fn swap(&self, host: Host) {
        let host = Arc::new(host);
        match self.current.write() {
            Ok(mut h) => *h = host,
            Err(poisoned) => *poisoned.into_inner() = host,
        }
    }

    /// Result events (and the intents of calls granted nothing outside
    /// the host) may ride on the next durable commit; for a long-running
    /// server, commit them soon after the response instead of at exit:
    /// within [`FLUSH_DELAY`]. At most one flush is queued at a time, and it
    /// starts after every result committed so far, so the calls answered
    /// within one delay share one flush (one fsync) instead of paying one
    /// each.
    fn flush_soon(&self, host: &Host) {
        if self.flush_queued.swap(true, Ordering::SeqCst) {
            return;
        }
        let queued = self.flush_queued.clone();
        let log = host.session_log().clone();
        tokio::spawn(async move {
            tokio::time::sleep(FLUSH_DELAY).await;
            let flushed = tokio::task::spawn_blocking(move || {
                queued.store(false, Ordering::SeqCst);
                log.flush()
            })
            .await;
            match flushed {
                Ok(Err(e)) => tracing::warn!("the session log could not be flushed: {e}"),
                Err(e) => tracing::warn!("the session log could not be flushed: {e}"),
                Ok(Ok(())) => {}
            }
        });
    }
}

/// How long a new task's handle waits for the call's first events to be
/// written (they are, unless the log fails: admission is pure, and an
/// approval request is written before anyone is asked).
const TASK_RECORD_WAIT: Duration = Duration::from_secs(5);

/// How long after a response its lazily committed events are flushed at
/// the latest (they are flushed at exit in any case).
pub(super) const FLUSH_DELAY: std::time::Duration = std::time::Duration::from_millis(20);

impl Server {
    /// Runs a call as a task: its id is the call's, its state the session
    /// log's (see [`super::tasks`]). The call holds `permit` until its
    /// result is committed.
    async fn start_task(
        &self,
        host: Arc<Host>,
        tool: &str,
        args: String,
        principal: Option<String>,
        permit: OwnedSemaphorePermit,
        context: &RequestContext<RoleServer>,
    ) -> Result<CreateTaskResult, CallResult> {
        let call_id = host.new_call_id();
        let interrupt = Interrupt::default();
        let owner = principal.as_deref().unwrap_or(LOCAL_PRINCIPAL);
        let client = client_of(context, &self.client);
        let Some((seed, progress)) = self
            .tasks
            .start(&call_id, owner, &client, interrupt.clone())
        else {
            tracing::warn!("refused a task: its client runs {MAX_TASKS_PER_CLIENT} tasks");
            return Err(CallResult::error(
                String::new(),
                tool.to_string(),
                ErrorCode::SandboxUnavailable,
                format!(
                    "this client already runs {MAX_TASKS_PER_CLIENT} tasks; retry when one has \
                     finished"
                ),
                Receipt::default(),
            ));
        };
        let request = CallRequest {
            tool: tool.to_string(),
            args,
            scope: self.scope.clone(),
            mode: self.mode,
            principal,
            interrupt: Some(interrupt),
            progress: Some(progress),
            approver: Some(Arc::new(self.approvals.for_peer(context.peer.clone()))),
            client: Some(client),
            call_id: Some(call_id.clone()),
            ..CallRequest::default()
        };
        let server = self.clone();
        let recorded = host.recorder.on_first_write(&call_id);
        let log = host.session_log().clone();
        let recorder = host.recorder.clone();
        let id = call_id.clone();
        let finishing = self.tasks.finish_on_drop(&call_id);
        tokio::spawn(async move {
            let _permit = permit;
            // The result goes to the log, where `tasks/get` reads it.
            let _ = host.call(request).await;
            drop(finishing);
            server.flush_soon(&host);
        });
        // The handle is given once the call is in the log (its first
        // events: the intent, an approval request or a refusal) and
        // flushed: then every server of the log (replicas on one
        // PostgreSQL log) knows the task. A call that writes nothing in
        // time (a failing log) is still known here.
        let written = tokio::time::timeout(TASK_RECORD_WAIT, recorded).await;
        recorder.forget_first_write(&id);
        if written.is_ok_and(|r| r.is_ok())
            && let Err(e) = tokio::task::spawn_blocking(move || log.flush())
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
        {
            tracing::warn!("a task's first events could not be flushed: {e}");
        }
        Ok(CreateTaskResult::new(seed))
    }
}

/// The answer to a `tools/call` while the server stops: refused before the
/// pipeline, like [`too_many_calls`].
fn stopping(tool: &str) -> CallResult {
    CallResult::error(
        String::new(),
        tool.to_string(),
        ErrorCode::SandboxUnavailable,
        "the server is stopping; no new calls are taken".to_string(),
        Receipt::default(),
    )
}

/// The answer to a `tools/call` over [`MAX_CALLS_IN_FLIGHT`]: refused before
/// the pipeline (so it has no call id and is not in the session log).
fn too_many_calls(tool: &str) -> CallResult {
    CallResult::error(
        String::new(),
        tool.to_string(),
        ErrorCode::SandboxUnavailable,
        format!(
            "this server already runs {MAX_CALLS_IN_FLIGHT} calls; retry when one has finished"
        ),
        Receipt::default(),
    )
}

/// The rate-limit client of a request: over HTTP, what the front door
/// verified (token or address); over stdio, the session.
fn client_of(context: &RequestContext<RoleServer>, session: &str) -> String {
    HttpClient::of(context).map_or_else(|| session.to_string(), |c| c.0.clone())
}

/// Who answers a call's `ask`, and what a multi-round-trip retry brought.
struct Asking {
    approver: Arc<dyn Approver>,
    /// The call id a redeemed approval state names.
    call_id: Option<String>,
    /// The question of a first round, to go back as the result.
    through_result: Option<Arc<AskThroughResult>>,
    states: Option<Arc<ApprovalStates>>,
}

impl Server {
    /// A client could otherwise keep any number of calls waiting (on an
    /// approval, say), each holding its arguments and a task. These two
    /// refusals come before the pipeline and stay out of the session log (a
    /// flood of them must not grow it), but observers get their after-call
    /// record like any call's.
    fn admit(
        &self,
        tool: &str,
        start: &CallStart,
    ) -> Result<OwnedSemaphorePermit, rmcp::model::CallToolResult> {
        let Ok(in_flight) = self.calls.clone().try_acquire_owned() else {
            tracing::warn!("refused a call: {MAX_CALLS_IN_FLIGHT} calls already in flight");
            let r = too_many_calls(tool);
            self.host().observe_unadmitted(&r, start);
            return Err(to_mcp_result(&r));
        };
        // Checked with the permit held: a stopping server that saw no call
        // in flight sees no call start after it.
        if self.stopping.load(Ordering::SeqCst) {
            let r = stopping(tool);
            self.host().observe_unadmitted(&r, start);
            return Err(to_mcp_result(&r));
        }
        Ok(in_flight)
    }

    /// Approvals: through a multi-round-trip request for a 2026-07-28
    /// client that elicits (a retry carries its answer and state), else
    /// through the client's session (elicitation/create) or `--approver`.
    async fn approver_for(
        &self,
        host: &Host,
        request: &CallToolRequestParams,
        args: &str,
        principal: Option<&str>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Asking, rmcp::model::CallToolResult> {
        let states = self
            .approvals
            .states
            .clone()
            .filter(|_| self.approvals.ask_clients && asks_through_results(context));
        let mut asking = Asking {
            // The client of this request's session is asked, never the
            // client of another session on the same host.
            approver: Arc::new(self.approvals.for_peer(context.peer.clone())),
            call_id: None,
            through_result: None,
            states: states.clone(),
        };
        match (&request.request_state, &states) {
            (Some(sealed), _) => {
                let redeemed = match &states {
                    None => Err((
                        ErrorCode::ApprovalStateInvalid,
                        "this server issued no approval state to this client (a requestState needs a 2026-07-28 request that declares elicitation)".to_string(),
                    )),
                    Some(states) => states.redeem(
                        sealed,
                        &request.name,
                        args,
                        principal.unwrap_or(LOCAL_PRINCIPAL),
                        request.input_responses.as_ref(),
                        host.session_log(),
                    )
                    .await,
                };
                match redeemed {
                    Ok(r) => {
                        asking.call_id = Some(r.call_id);
                        asking.approver = Arc::new(r.approver);
                    }
                    Err((code, message)) => {
                        tracing::warn!(%code, "refused an approval state: {message}");
                        let refused =
                            host.refuse_unheard(&request.name, args, principal, code, message);
                        self.flush_soon(host);
                        return Err(to_mcp_result(&refused));
                    }
                }
            }
            (None, Some(_)) => {
                let ask = Arc::new(AskThroughResult::default());
                asking.through_result = Some(ask.clone());
                asking.approver = ask;
            }
            (None, None) => {}
        }
        Ok(asking)
    }

    /// Runs one admitted call through the pipeline, with its progress, its
    /// cancellation and its log records, which go out before the response.
    async fn run_call(
        &self,
        host: &Host,
        mut call: CallRequest,
        context: &RequestContext<RoleServer>,
    ) -> CallResult {
        let interrupt = Interrupt::default();
        call.interrupt = Some(interrupt.clone());
        let forwarder = context.meta.get_progress_token().map(|token| {
            let (sink, forwarder) =
                ProgressForwarder::start(context.peer.clone(), self.gate.clone(), token);
            call.progress = Some(sink);
            forwarder
        });
        let call = host.call(call);
        // A `notifications/cancelled` for this request interrupts the call,
        // which then ends as the pipeline ends a cancelled call (after its
        // body has stopped). Raced here rather than in a watcher task: no
        // task spawned and aborted per call.
        tokio::pin!(call);
        let result = tokio::select! {
            r = &mut call => r,
            () = context.ct.cancelled() => {
                interrupt.cancel();
                call.await
            }
        };
        // The tool's log records at the level the request asked for in its
        // `_meta` (2026-07-28), else at the session's (`logging/setLevel`,
        // 2025-11-25).
        let level = match context.meta.log_level() {
            Some(asked) => SessionLevel::fixed(asked),
            None => self.log_level.clone(),
        };
        logging::forward(
            &context.peer,
            &self.gate,
            &level,
            &result.tool,
            &result.receipt.logs,
        )
        .await;
        if let Some(forwarder) = forwarder {
            // The last report goes out before the response, never after.
            forwarder.finish().await;
        }
        self.flush_soon(host);
        result
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> InitializeResult {
        let mut caps = ServerCapabilities::default();
        caps.tools = Some(json_default_tools_capability());
        caps.logging = Some(Default::default());
        caps.extensions = Some([(TASKS_EXTENSION_ID.to_string(), JsonObject::new())].into());
        InitializeResult::new(caps)
            .with_server_info(Implementation::new("toolhost", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "toolhost runs each tool call through a governed pipeline (validation, policy, guards, approval, \
                 a durable checkpoint, a Wasm sandbox). Refusals come back as isError results whose text starts \
                 with a stable code such as POLICY_DENIED.",
            )
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        // One initialize per session: a repeated one would add the same
        // client to the session list again, once per message, and every
        // approval notice would then be sent to it once per entry.
        if self.peer.set(context.peer.clone()).is_err() {
            return Err(McpError::invalid_request(
                "this session is already initialized; open a new session to initialize again",
                None,
            ));
        }
        context.peer.set_peer_info(request.clone());
        let principal = self
            .principal_of(&context)
            .unwrap_or_else(|| toolhost_policy::LOCAL_PRINCIPAL.to_string());
        self.add_peer(context.peer.clone(), principal);
        self.negotiate_initialize(&request)
    }

    #[expect(
        deprecated,
        reason = "MCP logging is deprecated upstream but still spoken by 2025-11-25 clients"
    )]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.log_level.set(request.level);
        Ok(())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let principal = self.principal_of(&context);
        let principal = principal.as_deref().unwrap_or(LOCAL_PRINCIPAL);
        self.tasks
            .get(&request.task_id, principal, self.host().session_log())
            .map(GetTaskResult::new)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let principal = self.principal_of(&context);
        let principal = principal.as_deref().unwrap_or(LOCAL_PRINCIPAL);
        self.tasks
            .cancel(&request.task_id, principal, self.host().session_log())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let host = self.host();
        let principal = self.principal_of(&context);
        // What this principal may see: owner-only tools are not listed
        // for anyone else (and refused if called all the same).
        let tools = host
            .tools_for(self.scope.as_deref(), principal.as_deref(), self.mode)
            .into_iter()
            .map(|t| mcp_tool(t, Enforced::of(&host, &t.descriptor, self.mode)))
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let start = CallStart::new(
            self.principal_of(&context).as_deref(),
            self.scope.as_deref(),
        );
        let in_flight = match self.admit(&request.name, &start) {
            Ok(permit) => permit,
            Err(refused) => return Ok(refused.into()),
        };
        // The host this call starts on: a reload swaps in a new one, but
        // this call finishes on this one.
        let host = self.host();
        let args = match request.arguments.take() {
            Some(o) => Value::Object(o).to_string(),
            None => "{}".into(),
        };
        let principal = self.principal_of(&context);
        // A client that declared the tasks extension gets a task handle at
        // once (a retry of an approval is answered in the request).
        if request.request_state.is_none() && wants_task(&context) {
            return match self
                .start_task(host, &request.name, args, principal, in_flight, &context)
                .await
            {
                Ok(task) => Ok(task.into()),
                Err(refused) => {
                    self.host().observe_unadmitted(&refused, &start);
                    Ok(to_mcp_result(&refused).into())
                }
            };
        }
        let asking = match self
            .approver_for(&host, &request, &args, principal.as_deref(), &context)
            .await
        {
            Ok(asking) => asking,
            Err(refused) => return Ok(refused.into()),
        };
        let call = CallRequest {
            tool: request.name.to_string(),
            args: args.clone(),
            scope: self.scope.clone(),
            mode: self.mode,
            principal: principal.clone(),
            approver: Some(asking.approver),
            client: Some(client_of(&context, &self.client)),
            call_id: asking.call_id,
            ..CallRequest::default()
        };
        let result = self.run_call(&host, call, &context).await;
        // The question of a first round goes back as the result; the call
        // itself ended unapproved (nothing ran).
        if let (Some(ask), Some(states)) = (asking.through_result, &asking.states)
            && result.error.as_ref().map(|e| e.code) == Some(ErrorCode::ApprovalUnavailable)
            && let Some(asked) = ask.asked()
        {
            let principal = principal.as_deref().unwrap_or(LOCAL_PRINCIPAL);
            return match states.input_required(&asked, &args, principal) {
                Ok(input) => Ok(input.into()),
                Err(e) => {
                    tracing::warn!("could not issue an approval state: {e}");
                    Ok(to_mcp_result(&result).into())
                }
            };
        }
        Ok(to_mcp_result(&result).into())
    }
}

/// Whether this request declares the tasks extension.
fn wants_task(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks())
}

/// Whether this request's approvals go through multi-round-trip requests:
/// its protocol is 2026-07-28 or later and it declares elicitation.
fn asks_through_results(context: &RequestContext<RoleServer>) -> bool {
    let v2026 = context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    v2026
        && context
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some())
}

fn json_default_tools_capability() -> rmcp::model::ToolsCapability {
    let mut t = rmcp::model::ToolsCapability::default();
    t.list_changed = Some(true);
    t
}
