//! The MCP server (`toolhost serve --mcp`): the Model Context Protocol over
//! stdio, as a thin layer over [`Host::call`].
//!
//! This module owns:
//! - the protocol mapping: `tools/list` shows the tools visible in the
//!   server's scope; `tools/call` runs through the whole governed pipeline,
//!   and every refusal or failure is a result with `isError: true` whose text
//!   starts with the stable code (`POLICY_DENIED: ...`), never a protocol
//!   error;
//! - [`McpApprover`], which asks the client through elicitation when the
//!   client declared that capability, and otherwise falls back to the
//!   configured approver;
//! - progress forwarding (a tool's progress reports become
//!   `notifications/progress` when the request carried a progress token) and
//!   cancellation (`notifications/cancelled` trips the call's [`Interrupt`];
//!   the host waits for the body to stop and records `CANCELLED`);
//! - hot reload of a tools directory: the directory is polled, a changed
//!   tool set is loaded into a new [`Host`] that shares the runtime and the
//!   session log, swapped in, and announced with
//!   `notifications/tools/list_changed`. Calls in flight keep the host they
//!   started on; a directory that fails to load keeps the old host;
//! - the stdio framing: stdin is read line by line in front of the protocol
//!   library so that a line that is not JSON gets a JSON-RPC parse error
//!   (`-32700`) and a line over [`MAX_MESSAGE_BYTES`] an invalid-request
//!   error (`-32600`), and neither stops the server. Logs never go to stdout.

use crate::approval::{ApprovalOutcome, ApprovalRequest, Approver, BoxFuture};
use crate::host::{CallRequest, Host, HostBuilder};
use crate::result::CallResult;
use crate::runtime::Runtime;
use crate::state::{Interrupt, Progress, ProgressSink, cut};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, InitializeRequestParams, InitializeResult,
    ListToolsResult, MetaObject, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, Peer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use toolhost_core::{SandboxMode, SideEffect};
use toolhost_log::SessionLog;

/// The largest JSON-RPC message (one line) the server reads. Longer lines
/// are discarded unread and answered with an invalid-request error. Tool
/// arguments are capped at [`crate::MAX_ARGS_BYTES`] anyway.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// How often the tools directory is polled by default.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// What the server hands the host factory on every (re)build: the approver
/// to install and, after the first build, the runtime and session log to
/// share so that a reload neither recompiles the world nor opens a second
/// log.
pub struct HostParts {
    /// The approver to install (an [`McpApprover`]).
    pub approver: Box<dyn Approver>,
    /// The runtime of the first host, on rebuilds.
    pub runtime: Option<Arc<Runtime>>,
    /// The session log of the first host, on rebuilds.
    pub log: Option<Arc<SessionLog>>,
}

impl std::fmt::Debug for HostParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostParts")
            .field("approver", &self.approver.name())
            .field("shared", &self.runtime.is_some())
            .finish_non_exhaustive()
    }
}

impl HostParts {
    /// Installs the parts into a builder (after the rest of its
    /// configuration, so the approver replaces the configured one).
    pub fn apply(self, builder: &mut HostBuilder) {
        builder.approver(self.approver);
        if let Some(r) = self.runtime {
            builder.runtime(r);
        }
        if let Some(l) = self.log {
            builder.session_log(l);
        }
    }
}

/// Builds a host from the server's configuration: called once at start and
/// again on every change of the tools directory.
pub type HostFactory =
    Arc<dyn Fn(HostParts) -> BoxFuture<'static, Result<Host, String>> + Send + Sync>;

/// How the server runs.
#[derive(Clone)]
pub struct ServeOptions {
    /// The scope whose tools are listed and called.
    pub scope: Option<String>,
    /// The sandbox mode of every call (`None`: the policy's default).
    pub mode: Option<SandboxMode>,
    /// A tools directory to watch for hot reload.
    pub watch: Option<PathBuf>,
    /// How often to poll `watch`.
    pub poll_interval: Duration,
    /// The approver used when the client cannot be asked (no elicitation).
    pub fallback_approver: Arc<dyn Approver>,
    /// How long to wait for the client's answer to an elicitation.
    pub approval_timeout: Duration,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("scope", &self.scope)
            .field("mode", &self.mode)
            .field("watch", &self.watch)
            .field("poll_interval", &self.poll_interval)
            .field("fallback_approver", &self.fallback_approver.name())
            .field("approval_timeout", &self.approval_timeout)
            .finish()
    }
}

/// The client of this session, once it has initialized.
type PeerSlot = Arc<OnceLock<Peer<RoleServer>>>;

fn client_elicits(peer: &Peer<RoleServer>) -> bool {
    peer.peer_info()
        .is_some_and(|info| info.capabilities.elicitation.is_some())
}

/// Asks the MCP client through `elicitation/create` when the client declared
/// the elicitation capability; otherwise asks the fallback (the configured
/// `--approver`). The client's answer maps as: accept with `approve: true`
/// → allowed-once; accept with `approve: false` → rejected; decline →
/// rejected; cancel (dismissed) → cancelled; an accept without a boolean
/// `approve`, an error or the timeout → unavailable (fail closed).
pub struct McpApprover {
    peer: PeerSlot,
    fallback: Arc<dyn Approver>,
    timeout: Duration,
}

impl std::fmt::Debug for McpApprover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpApprover")
            .field("fallback", &self.fallback.name())
            .finish_non_exhaustive()
    }
}

impl McpApprover {
    fn client(&self) -> Option<&Peer<RoleServer>> {
        self.peer.get().filter(|p| client_elicits(p))
    }
}

impl Approver for McpApprover {
    fn name(&self) -> String {
        match self.client() {
            Some(_) => "mcp-elicitation".into(),
            None => self.fallback.name(),
        }
    }

    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        let Some(peer) = self.client().cloned() else {
            return self.fallback.decide(request);
        };
        Box::pin(async move {
            let params = match elicitation_params(request) {
                Ok(p) => p,
                Err(e) => {
                    return (
                        ApprovalOutcome::Unavailable,
                        Some(format!("cannot build the elicitation: {e}")),
                    );
                }
            };
            match peer
                .create_elicitation_with_timeout(params, Some(self.timeout))
                .await
            {
                Ok(answer) => map_elicitation(&answer),
                Err(e) => (
                    ApprovalOutcome::Unavailable,
                    Some(format!("the client gave no answer: {e}")),
                ),
            }
        })
    }
}

fn elicitation_params(request: &ApprovalRequest) -> Result<ElicitRequestParams, serde_json::Error> {
    let args = serde_json::to_string(&request.args).unwrap_or_default();
    let mut message = format!(
        "toolhost asks for approval.\ntool: {}\nargs: {}\nreason: {}\nmode: {}",
        request.tool,
        cut(&args, 2000),
        request.reason,
        request.mode
    );
    if let Some(j) = &request.justification {
        message.push_str(&format!("\njustification: {j}"));
    }
    message.push_str("\nAllow this call once?");
    serde_json::from_value(json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                "approve": {
                    "type": "boolean",
                    "title": "Approve",
                    "description": format!("Allow this one call of {}", request.tool),
                }
            },
            "required": ["approve"],
        },
    }))
}

fn map_elicitation(answer: &ElicitResult) -> (ApprovalOutcome, Option<String>) {
    match answer.action {
        ElicitationAction::Accept => match answer
            .content
            .as_ref()
            .and_then(|c| c.get("approve"))
            .and_then(Value::as_bool)
        {
            Some(true) => (ApprovalOutcome::AllowedOnce, None),
            Some(false) => (
                ApprovalOutcome::Rejected,
                Some("the user answered approve = false".into()),
            ),
            None => (
                ApprovalOutcome::Unavailable,
                Some("the client accepted without a boolean \"approve\" field".into()),
            ),
        },
        ElicitationAction::Decline => (ApprovalOutcome::Rejected, Some("the user declined".into())),
        ElicitationAction::Cancel => (
            ApprovalOutcome::Cancelled,
            Some("the user dismissed the question".into()),
        ),
        _ => (
            ApprovalOutcome::Unavailable,
            Some("the client answered with an unknown action".into()),
        ),
    }
}

/// The protocol handler: one per stdio session.
#[derive(Clone)]
struct Server {
    current: Arc<RwLock<Arc<Host>>>,
    peer: PeerSlot,
    scope: Option<String>,
    mode: Option<SandboxMode>,
}

impl Server {
    fn host(&self) -> Arc<Host> {
        match self.current.read() {
            Ok(h) => h.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn swap(&self, host: Host) {
        let host = Arc::new(host);
        match self.current.write() {
            Ok(mut h) => *h = host,
            Err(poisoned) => *poisoned.into_inner() = host,
        }
    }
}

/// The MCP view of a tool.
fn mcp_tool(t: &crate::registry::RegisteredTool) -> Tool {
    let d = &t.descriptor;
    let input = match &d.input_schema {
        Value::Object(o) => o.clone(),
        // `true` (anything goes) as an object schema, which MCP requires.
        _ => json!({"type": "object"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    };
    let mut tool = Tool::new(d.name.clone(), d.description.clone(), Arc::new(input));
    // MCP output schemas describe `structuredContent`, which is always an
    // object: other schemas are not advertised.
    if let Some(Value::Object(o)) = &d.output_schema
        && o.get("type").and_then(Value::as_str) == Some("object")
    {
        tool = tool.with_raw_output_schema(Arc::new(o.clone()));
    }
    let mut annotations = ToolAnnotations::default();
    annotations.read_only_hint = Some(matches!(d.side_effect, SideEffect::None | SideEffect::Read));
    annotations.destructive_hint = Some(matches!(
        d.side_effect,
        SideEffect::Write | SideEffect::External
    ));
    annotations.idempotent_hint = Some(d.idempotent);
    annotations.open_world_hint = Some(d.side_effect == SideEffect::External);
    tool.with_annotations(annotations)
}

/// The MCP view of a result: `structuredContent` is the canonical value (ok
/// results only, and only when it is an object, as MCP requires); `content`
/// the model content; errors are `isError` with `CODE: message` text.
pub fn to_mcp_result(r: &CallResult) -> CallToolResult {
    let mut out = match &r.error {
        None => {
            let content = r
                .content
                .iter()
                .map(|c| ContentBlock::text(c.as_text()))
                .collect();
            let mut out = CallToolResult::success(content);
            if r.canonical.is_object() {
                out.structured_content = Some(r.canonical.clone());
            }
            out
        }
        Some(e) => CallToolResult::error(vec![ContentBlock::text(format!(
            "{}: {}",
            e.code, e.message
        ))]),
    };
    let mut meta = serde_json::Map::new();
    meta.insert(
        "toolhost".into(),
        json!({
            "call_id": r.call_id,
            "code": r.error.as_ref().map(|e| e.code),
            "meta": r.meta,
            "receipt": r.receipt,
        }),
    );
    out.meta = Some(MetaObject(meta));
    out
}

impl ServerHandler for Server {
    fn get_info(&self) -> InitializeResult {
        let mut caps = ServerCapabilities::default();
        caps.tools = Some(json_default_tools_capability());
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
        context.peer.set_peer_info(request.clone());
        let _ = self.peer.set(context.peer.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let host = self.host();
        let tools = host
            .tools(self.scope.as_deref())
            .into_iter()
            .map(mcp_tool)
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // The host this call starts on: a reload swaps in a new one, but
        // this call finishes on this one.
        let host = self.host();
        let args = match request.arguments {
            Some(o) => Value::Object(o).to_string(),
            None => "{}".into(),
        };
        let interrupt = Interrupt::default();
        let watcher = {
            let ct = context.ct.clone();
            let interrupt = interrupt.clone();
            tokio::spawn(async move {
                ct.cancelled().await;
                interrupt.cancel();
            })
        };
        let (progress, forwarder) = match context.meta.get_progress_token() {
            Some(token) => {
                let (sink, task) = progress_forwarder(context.peer.clone(), token);
                (Some(sink), Some(task))
            }
            None => (None, None),
        };
        let result = host
            .call(CallRequest {
                tool: request.name.to_string(),
                args,
                scope: self.scope.clone(),
                mode: self.mode,
                interrupt: Some(interrupt),
                progress,
                ..CallRequest::default()
            })
            .await;
        watcher.abort();
        if let Some(task) = forwarder {
            // The sink was dropped with the call: the forwarder drains the
            // reports already queued, so they precede the response.
            let _ = tokio::time::timeout(Duration::from_secs(1), task).await;
        }
        flush_in_background(&host);
        Ok(to_mcp_result(&result).into())
    }
}

fn json_default_tools_capability() -> rmcp::model::ToolsCapability {
    let mut t = rmcp::model::ToolsCapability::default();
    t.list_changed = Some(true);
    t
}

/// Result events may ride on the next durable commit; for a long-running
/// server, commit them soon after the response instead of at exit.
fn flush_in_background(host: &Arc<Host>) {
    let log = host.log().clone();
    tokio::task::spawn_blocking(move || {
        if let Err(e) = log.flush() {
            tracing::warn!("the session log could not be flushed: {e}");
        }
    });
}

/// A progress sink that queues reports (it runs on the guest's thread and
/// must not block) and a task that sends them as `notifications/progress`.
fn progress_forwarder(
    peer: Peer<RoleServer>,
    token: ProgressToken,
) -> (ProgressSink, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Progress>();
    let task = tokio::spawn(async move {
        while let Some(p) = rx.recv().await {
            let mut n = ProgressNotificationParam::new(token.clone(), p.done as f64);
            n.total = p.total.map(|t| t as f64);
            n.message = p.message;
            if let Err(e) = peer.notify_progress(n).await {
                tracing::debug!("progress notification not sent: {e}");
                break;
            }
        }
    });
    let sink: ProgressSink = Arc::new(move |p: &Progress| {
        let _ = tx.send(p.clone());
    });
    (sink, task)
}

/// Serves MCP on this process's stdin and stdout until the client closes
/// stdin (or the process gets SIGTERM / Ctrl-C). Builds the first host with
/// `factory`; an error there is returned (a configuration error).
pub async fn serve_stdio(factory: HostFactory, options: ServeOptions) -> Result<(), String> {
    serve(factory, options, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serves MCP on any byte streams (one JSON-RPC message per line).
pub async fn serve<R, W>(
    factory: HostFactory,
    options: ServeOptions,
    input: R,
    output: W,
) -> Result<(), String>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let peer: PeerSlot = Arc::new(OnceLock::new());
    let fallback = options.fallback_approver.clone();
    let timeout = options.approval_timeout;
    let approver = move |peer: &PeerSlot| -> Box<dyn Approver> {
        Box::new(McpApprover {
            peer: peer.clone(),
            fallback: fallback.clone(),
            timeout,
        })
    };
    let first_snapshot = options.watch.as_deref().map(snapshot);
    let host = factory(HostParts {
        approver: approver(&peer),
        runtime: None,
        log: None,
    })
    .await?;
    let log = host.log().clone();
    let runtime = host.runtime().clone();
    let server = Server {
        current: Arc::new(RwLock::new(Arc::new(host))),
        peer: peer.clone(),
        scope: options.scope.clone(),
        mode: options.mode,
    };

    // Framing in front of rmcp: garbage gets JSON-RPC errors, not silence.
    let (to_rmcp, rmcp_in) = tokio::io::duplex(1 << 16);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(1 << 16);
    let (errors_tx, errors_rx) = mpsc::unbounded_channel::<String>();
    let reader = tokio::spawn(frame_input(input, to_rmcp, errors_tx));
    let writer = tokio::spawn(frame_output(from_rmcp, errors_rx, output));

    let running = match server.clone().serve((rmcp_in, rmcp_out)).await {
        Ok(r) => r,
        Err(e) => {
            tracing::info!("the MCP session ended before it was initialized: {e}");
            reader.abort();
            let _ = writer.await;
            return Ok(());
        }
    };
    let _ = peer.set(running.peer().clone());

    let reloader = options.watch.clone().map(|dir| {
        let server = server.clone();
        let factory = factory.clone();
        let make = approver.clone();
        let peer = peer.clone();
        let interval = options.poll_interval;
        let snapshot = first_snapshot.unwrap_or_default();
        tokio::spawn(async move {
            watch_tools(
                dir,
                interval,
                snapshot,
                move || {
                    let parts = HostParts {
                        approver: make(&peer),
                        runtime: Some(runtime.clone()),
                        log: Some(log.clone()),
                    };
                    factory(parts)
                },
                server,
            )
            .await
        })
    });

    let stop = running.cancellation_token();
    let signals = tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("stopping the MCP server");
        stop.cancel();
    });
    let quit = running.waiting().await;
    tracing::info!(?quit, "the MCP session ended");
    signals.abort();
    if let Some(r) = reloader {
        r.abort();
    }
    reader.abort();
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
    let host = server.host();
    let log = host.log().clone();
    match tokio::task::spawn_blocking(move || log.flush()).await {
        Ok(Err(e)) => tracing::warn!("the session log could not be flushed: {e}"),
        Err(e) => tracing::warn!("the session log could not be flushed: {e}"),
        Ok(Ok(_)) => {}
    }
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// A JSON-RPC error response with a null id (the id of an unreadable
/// message is unknown).
fn error_line(code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}}).to_string()
}

/// Reads stdin line by line, at most [`MAX_MESSAGE_BYTES`] per line. JSON
/// lines go on to rmcp; other lines are answered with a parse error; an
/// oversized line is skipped without buffering it and answered with an
/// invalid-request error.
async fn frame_input<R, W>(input: R, mut to_rmcp: W, errors: mpsc::UnboundedSender<String>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut input)
            .take(MAX_MESSAGE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!("cannot read stdin: {e}");
                break;
            }
        }
        if line.len() > MAX_MESSAGE_BYTES && line.last() != Some(&b'\n') {
            // Skip the rest of the line without keeping it.
            let mut eof = false;
            loop {
                line.clear();
                match (&mut input)
                    .take(1 << 16)
                    .read_until(b'\n', &mut line)
                    .await
                {
                    Ok(0) | Err(_) => {
                        eof = true;
                        break;
                    }
                    Ok(_) if line.last() == Some(&b'\n') => break,
                    Ok(_) => {}
                }
            }
            tracing::warn!("discarded a message longer than {MAX_MESSAGE_BYTES} bytes");
            let _ = errors.send(error_line(
                -32600,
                &format!("Invalid Request: message longer than {MAX_MESSAGE_BYTES} bytes"),
            ));
            if eof {
                break;
            }
            continue;
        }
        let body = trim_line(&line);
        if body.is_empty() {
            continue;
        }
        if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() {
            tracing::debug!("answered a line that is not JSON with a parse error");
            let _ = errors.send(error_line(
                -32700,
                "Parse error: the message is not valid JSON",
            ));
            continue;
        }
        if to_rmcp.write_all(body).await.is_err()
            || to_rmcp.write_all(b"\n").await.is_err()
            || to_rmcp.flush().await.is_err()
        {
            break;
        }
    }
    let _ = to_rmcp.shutdown().await;
}

fn trim_line(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line
        .strip_prefix(b"\xEF\xBB\xBF".as_slice())
        .unwrap_or(line);
    line.trim_ascii()
}

/// Writes whole lines to stdout: rmcp's messages and the framing errors,
/// never interleaved within a line.
async fn frame_output<R, W>(
    from_rmcp: R,
    mut errors: mpsc::UnboundedReceiver<String>,
    mut output: W,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut from_rmcp = BufReader::new(from_rmcp);
    let mut line = Vec::new();
    let mut rmcp_open = true;
    let mut errors_open = true;
    while rmcp_open || errors_open {
        tokio::select! {
            read = from_rmcp.read_until(b'\n', &mut line), if rmcp_open => {
                match read {
                    Ok(0) | Err(_) => rmcp_open = false,
                    Ok(_) => {
                        if !line.ends_with(b"\n") {
                            line.push(b'\n');
                        }
                        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                            return;
                        }
                        line.clear();
                    }
                }
            }
            e = errors.recv(), if errors_open => {
                match e {
                    None => errors_open = false,
                    Some(e) => {
                        if output.write_all(e.as_bytes()).await.is_err()
                            || output.write_all(b"\n").await.is_err()
                            || output.flush().await.is_err()
                        {
                            return;
                        }
                    }
                }
            }
        }
        if !rmcp_open {
            // rmcp is done: nothing more will be answered.
            break;
        }
    }
}

/// What identifies the contents of a tools directory: names, sizes, mtimes.
type Snapshot = Vec<(String, u64, Option<SystemTime>)>;

fn snapshot(dir: &Path) -> Snapshot {
    let mut files: Snapshot = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "wasm"))
            .map(|e| {
                let meta = e.metadata().ok();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    meta.as_ref().map(|m| m.len()).unwrap_or(0),
                    meta.and_then(|m| m.modified().ok()),
                )
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    files
}

/// Polls `dir`; when its snapshot changed and then stayed the same for one
/// more poll (so a file being copied is not loaded half-written), rebuilds
/// the host, swaps it in and tells the client. A failed build keeps the old
/// host and is logged; the next change retries.
async fn watch_tools<F>(
    dir: PathBuf,
    interval: Duration,
    mut loaded: Snapshot,
    mut build: F,
    server: Server,
) where
    F: FnMut() -> BoxFuture<'static, Result<Host, String>> + Send,
{
    let mut previous = loaded.clone();
    loop {
        tokio::time::sleep(interval).await;
        let now = snapshot(&dir);
        let stable = now == previous;
        previous = now.clone();
        if now == loaded || !stable {
            continue;
        }
        loaded = now;
        match build().await {
            Ok(host) => {
                let names = host
                    .tools(server.scope.as_deref())
                    .iter()
                    .map(|t| t.descriptor.name.clone())
                    .collect::<Vec<_>>();
                server.swap(host);
                tracing::info!(dir = %dir.display(), tools = ?names, "reloaded the tools directory");
                if let Some(peer) = server.peer.get()
                    && let Err(e) = peer.notify_tool_list_changed().await
                {
                    tracing::warn!("cannot send tools/list_changed: {e}");
                }
            }
            Err(e) => {
                tracing::error!(dir = %dir.display(), "the tools directory changed but cannot be loaded; keeping the previous tools: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elicitation_answers_map_fail_closed() {
        let accept = |v: Value| ElicitResult::new(ElicitationAction::Accept).with_content(v);
        assert_eq!(
            map_elicitation(&accept(json!({"approve": true}))).0,
            ApprovalOutcome::AllowedOnce
        );
        assert_eq!(
            map_elicitation(&accept(json!({"approve": false}))).0,
            ApprovalOutcome::Rejected
        );
        assert_eq!(
            map_elicitation(&accept(json!({"approve": "yes"}))).0,
            ApprovalOutcome::Unavailable
        );
        assert_eq!(
            map_elicitation(&ElicitResult::new(ElicitationAction::Accept)).0,
            ApprovalOutcome::Unavailable
        );
        assert_eq!(
            map_elicitation(&ElicitResult::new(ElicitationAction::Decline)).0,
            ApprovalOutcome::Rejected
        );
        assert_eq!(
            map_elicitation(&ElicitResult::new(ElicitationAction::Cancel)).0,
            ApprovalOutcome::Cancelled
        );
    }

    #[test]
    fn elicitation_names_tool_args_reason_mode() {
        let r = ApprovalRequest {
            approval_id: "a".into(),
            call_id: "c".into(),
            tool: "write_file".into(),
            args: json!({"path": "x.txt"}),
            reason: "writes need a human".into(),
            mode: SandboxMode::WorkspaceWrite,
            justification: None,
        };
        let p = elicitation_params(&r);
        let v = p
            .ok()
            .and_then(|p| serde_json::to_value(p).ok())
            .unwrap_or_default();
        let msg = v
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        for needle in [
            "write_file",
            "x.txt",
            "writes need a human",
            "workspace-write",
        ] {
            assert!(msg.contains(needle), "{needle} missing from {msg}");
        }
        assert_eq!(
            v.pointer("/requestedSchema/properties/approve/type"),
            Some(&json!("boolean"))
        );
    }

    #[test]
    fn lines_are_trimmed() {
        assert_eq!(trim_line(b"{}\r\n"), b"{}");
        assert_eq!(trim_line(b"\xEF\xBB\xBF{}\n"), b"{}");
        assert_eq!(trim_line(b"  \n"), b"");
    }
}
