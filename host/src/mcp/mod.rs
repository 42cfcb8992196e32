//! The MCP server (`toolhost serve --mcp`, `toolhost serve --http ADDR`):
//! the Model Context Protocol as a thin layer over [`Host::call`]. Logs
//! never go to stdout.
//!
//! This module holds the public entry points ([`serve`], [`serve_stdio`],
//! [`serve_http`], [`ServeOptions`], [`HttpOptions`], [`HostFactory`],
//! [`HostParts`], [`to_mcp_result`]) and composes sessions from their parts,
//! one concern each:
//!
//! | module | owns |
//! |---|---|
//! | `protocol` | the `ServerHandler`: `initialize`, `tools/list`, `tools/call`; cancellation; at most [`MAX_CALLS_IN_FLIGHT`] calls |
//! | `convert` | the MCP shapes of tools and results (a call's, or its JSON in the session log) |
//! | `peer` | who is calling, as the transport tells the handler: the bearer token's principal, the verified client |
//! | `framing` | the stdio transport: line framing, parse errors, oversized lines, backpressure on stdin |
//! | `stdio` | stdin and stdout as that transport's streams: pipes and sockets polled without blocking, anything else on tokio's blocking streams |
//! | `http` | the Streamable HTTP transport: its options, and its parts wired together; graceful stop |
//! | `tokens` | the bearer tokens of `--tokens FILE`: digests, constant-time comparison |
//! | `admission` | who the HTTP front door lets in: `Host`, `Origin`, bearer token; the rate-limit client |
//! | `front` | the HTTP front door: admission, sessions kept to their token, per-token request slots, bounded bodies, request ids held, then rmcp |
//! | `connections` | the HTTP connections: the accept loop, connection cap, header timeout, graceful close |
//! | `annotations` | the tool annotations of `tools/list`, from what the host enforces (mode, minimum mode, network), not from the author's claims |
//! | `approval` | [`McpApprover`]: approvals asked through elicitation, mapped fail-closed |
//! | `mrtr` | approvals of 2026-07-28 clients as multi-round-trip requests: sealed, single-use `requestState` ([`ApprovalStates`]) |
//! | `operator` | `/approvals` on the HTTP server: an owner lists and decides queued approvals |
//! | `logging` | a tool's `host.log` records as `notifications/message`, at the level the session set |
//! | `announce` | approval requests, pending and decided, as `notifications/message` (logger [`APPROVALS_LOGGER`]) to the sessions allowed to see them |
//! | `progress` | a call's progress reports as `notifications/progress`: coalesced, at most one per [`PROGRESS_INTERVAL`], none after the response |
//! | `tasks` | the tasks extension: a call as a task, `tasks/get` and `tasks/cancel` answered from the running calls and the session log |
//! | `reload` | hot reload of a tools directory (`notifications/tools/list_changed`) |
//! | `startup` | a stdio server that cannot start answers the client's `initialize` with the reason |
//!
//! `protocol`, `convert`, `approval`, `progress` and `reload` know nothing about the
//! transport: `http` replaces `framing`, with one handler per session on
//! one shared host. An approval is asked of the client of the call's own
//! session: every call carries an [`McpApprover`] built from the peer of
//! its request (`CallRequest::approver`), so with several sessions per host
//! no session sees another's elicitation. (The approver in [`HostParts`] is
//! only what the host falls back on for calls that carry none.)
//!
//! Nothing a guest or a client feeds the server is queued without bound:
//! progress is one slot per call, framing answers wait for stdout, calls in
//! flight are capped, and log flushes after calls are coalesced.

mod admission;
mod annotations;
mod announce;
mod approval;
mod bounds;
mod connections;
mod convert;
mod framing;
mod front;
mod http;
mod in_flight;
pub use bounds::{MAX_CALLS_IN_FLIGHT, MAX_MESSAGE_BYTES};
pub use in_flight::MAX_IN_FLIGHT;
mod logging;
mod mrtr;
mod open_ids;
mod operator;
mod peer;
mod progress;
mod protocol;
mod reload;
mod startup;
mod stdio;
mod tasks;
mod tokens;

pub use announce::APPROVALS_LOGGER;
pub use approval::McpApprover;
pub use connections::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS};
pub use convert::to_mcp_result;
pub use front::{MAX_REQUESTS_PER_TOKEN, MAX_SESSIONS, MCP_PATH};
pub use http::{DEFAULT_SHUTDOWN_GRACE, HttpOptions, serve_http, serve_http_until};
pub use mrtr::{
    APPROVAL_INPUT, APPROVAL_KEY_FILE, ApprovalKeyStore, ApprovalStates,
    DEFAULT_APPROVAL_STATE_TTL, KeyFile, SharedClaims,
};
pub use operator::APPROVALS_PATH;
pub use progress::PROGRESS_INTERVAL;
pub use protocol::STDIO_CLIENT;
pub use startup::STARTUP_ANSWER_WAIT;
pub use tasks::{MAX_TASKS_PER_CLIENT, TASK_POLL_INTERVAL_MS};
pub use tokens::Tokens;

use crate::approval::{Approver, BoxFuture};
use crate::pipeline::{Host, HostBuilder};
use crate::sandbox::Runtime;
use framing::Framing;
use peer::PeerSlot;
use protocol::{Approvals, Server};
use rmcp::ServiceExt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use toolhost_core::SandboxMode;
use toolhost_log::SessionLog;

/// How often the tools directory is polled by default.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// What the server hands the host factory on every (re)build: the approver
/// to install and, after the first build, the runtime and session log to
/// share so that a reload neither recompiles the world nor opens a second
/// log, and the host being replaced, whose exclusivity gate the new host
/// shares (calls in flight on the old host and calls on the new one still
/// exclude each other).
pub struct HostParts {
    /// The approver to install (an [`McpApprover`]).
    pub approver: Box<dyn Approver>,
    /// The runtime of the first host, on rebuilds.
    pub runtime: Option<Arc<Runtime>>,
    /// The session log of the first host, on rebuilds.
    pub log: Option<Arc<SessionLog>>,
    /// The host being replaced, on rebuilds.
    replaces: Option<Arc<Host>>,
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
        if let Some(previous) = self.replaces {
            builder.successor_of(&previous);
        }
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
    /// The approver used when the client cannot be asked (no elicitation),
    /// or for every call when `ask_clients` is false.
    pub fallback_approver: Arc<dyn Approver>,
    /// Whether a client that elicits is asked to approve its own session's
    /// calls (`elicitation/create`, or a multi-round-trip request). False
    /// when an approver outside the client was configured (an operator's
    /// queue, a terminal, a command): then that approver decides every
    /// ask, and no client can approve the calls it makes.
    pub ask_clients: bool,
    /// How long to wait for the client's answer to an elicitation.
    pub approval_timeout: Duration,
    /// Who calls, as the policy sees it, when the transport names nobody:
    /// over stdio, the client's profile (`None`: the local principal, an
    /// owner); over HTTP with tokens, each token's principal overrides it.
    pub principal: Option<String>,
    /// Seals and redeems the `requestState` of approvals asked through
    /// multi-round-trip requests (2026-07-28 clients that elicit); `None`:
    /// those clients are asked like any other (elicitation in a session,
    /// else the fallback).
    pub approval_states: Option<Arc<ApprovalStates>>,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("scope", &self.scope)
            .field("mode", &self.mode)
            .field("watch", &self.watch)
            .field("poll_interval", &self.poll_interval)
            .field("fallback_approver", &self.fallback_approver.name())
            .field("ask_clients", &self.ask_clients)
            .field("approval_timeout", &self.approval_timeout)
            .field("principal", &self.principal)
            .field("approval_states", &self.approval_states)
            .finish()
    }
}

/// Serves MCP on this process's stdin and stdout until the client closes
/// stdin (or the process gets SIGTERM / Ctrl-C). Builds the first host with
/// `factory`; an error there is returned (a configuration error).
///
/// A write to a pipe whose reader is gone raises `SIGPIPE`, and no flag of
/// the write can stop that for a pipe: a program that calls this with a
/// pipe as its stdout must ignore the signal, as Rust programs do unless
/// they restore its default action (the `toolhost` binary keeps Rust's:
/// ignored). On Linux a socket as stdout (what Node's libuv gives a child
/// process) needs nothing of the kind, nor does the HTTP server
/// ([`serve_http`]): their sends never raise it. (On Apple's systems an
/// inherited socket may still raise it: ignore the signal there.)
///
/// A server that cannot start (its tools do not load, say) answers the
/// client's first request, `initialize`, with an error that carries the
/// reason, then returns it (see [`answer_startup_failure`]).
pub async fn serve_stdio(factory: HostFactory, options: ServeOptions) -> Result<(), String> {
    let stdio::Stdio {
        input,
        output,
        restore,
    } = stdio::Stdio::open();
    let answer = !std::io::IsTerminal::is_terminal(&std::io::stdin());
    let served = serve_with(factory, options, input, output, answer).await;
    drop(restore);
    served
}

/// Serves MCP on any byte streams (one JSON-RPC message per line). A
/// server that cannot start answers the first request on `input` with the
/// reason, as [`serve_stdio`] does, then returns it.
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
    serve_with(factory, options, input, output, true).await
}

/// [`serve`]; a startup failure is answered on the streams when
/// `answer_failure` (not to a terminal, where nobody sends a request).
async fn serve_with<R, W>(
    factory: HostFactory,
    options: ServeOptions,
    input: R,
    output: W,
    answer_failure: bool,
) -> Result<(), String>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let peer: PeerSlot = Arc::new(OnceLock::new());
    let fallback = options.fallback_approver.clone();
    let timeout = options.approval_timeout;
    let ask_clients = options.ask_clients;
    let approver = move |peer: &PeerSlot| -> Box<dyn Approver> {
        let peer = if ask_clients {
            peer.clone()
        } else {
            PeerSlot::default()
        };
        Box::new(McpApprover::new(peer, fallback.clone(), timeout))
    };
    let first_snapshot = options.watch.as_deref().map(reload::snapshot);
    let started = first_host(&factory, &options, approver(&peer)).await;
    let host = match started {
        Ok(host) => host,
        Err(reason) => {
            if answer_failure {
                startup::answer_with_error(input, output, &reason).await;
            }
            return Err(reason);
        }
    };
    let log = host.session_log().clone();
    let runtime = host.runtime().clone();
    let approvals = Approvals {
        fallback: options.fallback_approver.clone(),
        timeout: options.approval_timeout,
        states: options.approval_states.clone(),
        ask_clients: options.ask_clients,
    };
    let server = Server::new(
        host,
        peer.clone(),
        options.scope.clone(),
        options.mode,
        options.principal.clone(),
        approvals,
    );

    // Framing in front of rmcp: garbage gets JSON-RPC errors, not silence.
    let in_flight = Arc::new(in_flight::InFlight::default());
    let (framing, pipes) = Framing::start(input, output, in_flight.clone());
    let counted = in_flight::Counted {
        server: server.clone(),
        in_flight: in_flight.clone(),
    };
    let transport = in_flight::CountedTransport {
        inner: rmcp::transport::async_rw::AsyncRwTransport::new_server(pipes.0, pipes.1),
        in_flight,
    };
    // Listens before the session is served: rmcp runs the client's requests
    // as soon as the initialize response is written, and a listener taken
    // after that misses what their calls announce in between.
    let announcer = announce::spawn(server.clone());
    let running = match counted.serve(transport).await {
        Ok(r) => r,
        Err(e) => {
            announcer.abort();
            tracing::info!("the MCP session ended before it was initialized: {e}");
            framing.finish().await;
            return Ok(());
        }
    };
    let _ = peer.set(running.peer().clone());

    let reloader = options.watch.clone().map(|dir| {
        let server = server.clone();
        let current = server.clone();
        let factory = factory.clone();
        let make = approver.clone();
        let peer = peer.clone();
        let interval = options.poll_interval;
        let snapshot = first_snapshot.unwrap_or_default();
        tokio::spawn(async move {
            reload::watch_tools(
                dir,
                interval,
                snapshot,
                move || {
                    let parts = HostParts {
                        approver: make(&peer),
                        runtime: Some(runtime.clone()),
                        log: Some(log.clone()),
                        replaces: Some(current.host()),
                    };
                    factory(parts)
                },
                server,
            )
            .await
        })
    });

    let stop = running.cancellation_token();
    let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel::<()>();
    let signals = tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("stopping the MCP server");
        stop.cancel();
        let _ = stopped_tx.send(());
    });
    // rmcp ends a session only once every answer it holds is written: with a
    // client that reads nothing more, never. A stop (SIGTERM, Ctrl-C) waits
    // for that at most SIGNAL_GRACE, then goes on without it.
    let waiting = running.waiting();
    tokio::pin!(waiting);
    tokio::select! {
        quit = &mut waiting => tracing::info!(?quit, "the MCP session ended"),
        () = async {
            if stopped_rx.await.is_ok() {
                tokio::time::sleep(SIGNAL_GRACE).await;
            } else {
                std::future::pending::<()>().await;
            }
        } => tracing::warn!(
            "the MCP client did not take the session's last answers within {SIGNAL_GRACE:?}; stopping without them"
        ),
    }
    // The client's requests were cancelled with the session; the tasks it
    // started run on their own: interrupt them too, and wait (bounded) for
    // every body to stop and its result to be recorded, as a cancelled
    // call's is, before the process ends.
    server.stop_calls();
    server.cancel_tasks();
    if !server.drain(http::DEFAULT_SHUTDOWN_GRACE).await {
        tracing::warn!(
            "calls still running after {:?}; they are cut off (TOOL_OUTCOME_UNKNOWN)",
            http::DEFAULT_SHUTDOWN_GRACE
        );
    }
    signals.abort();
    announcer.abort();
    if let Some(r) = reloader {
        r.abort();
    }
    framing.finish().await;
    flush_log(&server.host()).await;
    Ok(())
}

/// The first host, from `factory`, with its tools directory checked.
async fn first_host(
    factory: &HostFactory,
    options: &ServeOptions,
    approver: Box<dyn Approver>,
) -> Result<Host, String> {
    let host = factory(HostParts {
        approver,
        runtime: None,
        log: None,
        replaces: None,
    })
    .await?;
    if let Some(dir) = &options.watch {
        reload::check_watched(dir, &host)?;
    }
    Ok(host)
}

/// Tells the client of a stdio server that is not started (a flag or file
/// of its configuration is wrong) why: its first request on this process's
/// stdin is answered with an error carrying `reason` on stdout, within
/// [`STARTUP_ANSWER_WAIT`]. Nothing is read from a terminal. [`serve_stdio`]
/// does this itself when its host cannot be built.
pub async fn answer_startup_failure(reason: &str) {
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        return;
    }
    let stdio::Stdio {
        input,
        output,
        restore,
    } = stdio::Stdio::open();
    startup::answer_with_error(input, output, reason).await;
    drop(restore);
}

/// How long a stop (SIGTERM, Ctrl-C) waits for a stdio client to take the
/// answers the session still holds.
const SIGNAL_GRACE: Duration = Duration::from_secs(2);

/// Commits what the session log still holds (results ride on the next
/// durable commit), off the async threads.
async fn flush_log(host: &Host) {
    let log = host.session_log().clone();
    match tokio::task::spawn_blocking(move || log.flush()).await {
        Ok(Err(e)) => tracing::warn!("the session log could not be flushed: {e}"),
        Err(e) => tracing::warn!("the session log could not be flushed: {e}"),
        Ok(Ok(_)) => {}
    }
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
