//! The Streamable HTTP transport (`toolhost serve --http ADDR`): MCP at
//! `/mcp`, served by rmcp's [`StreamableHttpService`](rmcp::transport::streamable_http_server::StreamableHttpService) behind a front door
//! that refuses, before anything is dispatched:
//!
//! 1. a path other than `/mcp` (404), or `/approvals` on a server with a
//!    queue of approvals (`operator.rs`, served after the checks below);
//! 2. a `Host` that is not the bound address or a loopback name with the
//!    bound port, or an `--allowed-host` (403: DNS rebinding);
//! 3. an `Origin`, when present, that is not `http(s)://localhost`,
//!    `127.0.0.1` or `[::1]` (any port) or an `--allowed-origin` (403);
//! 4. with `--tokens FILE`, a request without one of its bearer tokens
//!    (401 with `WWW-Authenticate: Bearer`; compared in constant time);
//! 5. a new session beyond [`MAX_SESSIONS`](super::MAX_SESSIONS), or any new session while the
//!    server stops (503);
//! 6. a request whose id another request of its session still holds (400,
//!    a JSON-RPC error; see `open_ids`).
//!
//! rmcp then refuses bodies over [`MAX_MESSAGE_BYTES`](super::MAX_MESSAGE_BYTES) (413) and applies the
//! same `Host`/`Origin` lists again. Every session gets its own handler
//! ([`Server::session`]) on the one host: calls of all sessions share the
//! [`MAX_CALLS_IN_FLIGHT`](super::MAX_CALLS_IN_FLIGHT) cap, and a call's
//! approval is asked of its own session's client.
//!
//! Connections are capped at [`MAX_CONNECTIONS`](super::MAX_CONNECTIONS) (the next waits to be
//! accepted) and must send their request head within
//! [`HEADER_READ_TIMEOUT`](super::HEADER_READ_TIMEOUT). On SIGTERM / Ctrl-C the server stops accepting,
//! refuses new calls, waits up to the shutdown grace for calls in flight,
//! then closes the sessions and flushes the session log; a call still
//! running then is cut off: it ends `TOOL_OUTCOME_UNKNOWN` (written when
//! its future is dropped, or by recovery if that write is not made durable).
//!
//! This file holds the options and wires the parts together; the parts are
//! `tokens` (the bearer tokens), `admission` (checks 2 to 4), `front` (the
//! front door: the other checks, then rmcp) and `connections`.

use super::admission::{Admission, check_allowed};
use super::connections;
use super::front::Front;
use super::protocol::{Approvals, Server};
use super::tokens::Tokens;
use super::{HostFactory, HostParts, ServeOptions, reload};
use hyper_util::server::graceful::GracefulShutdown;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The default of how long a stopping server waits for calls in flight.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How the HTTP transport listens and whom it admits.
#[derive(Clone)]
pub struct HttpOptions {
    /// Where to listen (port 0: any free port).
    pub addr: SocketAddr,
    /// Allow an address that is not loopback.
    pub allow_remote: bool,
    /// Host names (with or without a port) admitted in `Host` besides the
    /// loopback names and the bound address.
    pub allowed_hosts: Vec<String>,
    /// Origins admitted besides the loopback ones
    /// (`scheme://host[:port]`, or `:*` for any port).
    pub allowed_origins: Vec<String>,
    /// Bearer tokens; `None`: no token asked.
    pub tokens: Option<Tokens>,
    /// How long a stopping server waits for calls in flight.
    pub shutdown_grace: Duration,
    /// The queue of a `--approver queue` server: its pending approvals are
    /// served to owners at `/approvals`.
    pub approvals: Option<crate::approval::queue::ApprovalQueue>,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("addr", &self.addr)
            .field("allow_remote", &self.allow_remote)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("tokens", &self.tokens.as_ref().map(Tokens::count))
            .field("shutdown_grace", &self.shutdown_grace)
            .field("approvals", &self.approvals)
            .finish()
    }
}

impl HttpOptions {
    /// Options for `addr` with every default: loopback only, no tokens.
    pub fn new(addr: SocketAddr) -> HttpOptions {
        HttpOptions {
            addr,
            allow_remote: false,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            tokens: None,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            approvals: None,
        }
    }

    /// Refuses a configuration that would expose the server by accident or
    /// could never admit anyone.
    pub fn check(&self) -> Result<(), String> {
        if !self.addr.ip().is_loopback() && !self.allow_remote {
            return Err(format!(
                "{} is not a loopback address: anyone who can reach it could call the tools; \
                 pass --allow-remote to serve on it (and --tokens FILE to ask for a token)",
                self.addr
            ));
        }
        check_allowed(&self.allowed_hosts, &self.allowed_origins)
    }
}

/// Serves MCP over Streamable HTTP on `http.addr` until SIGTERM / Ctrl-C.
/// `on_ready` gets the bound address once the server accepts connections.
pub async fn serve_http(
    factory: HostFactory,
    options: ServeOptions,
    http: HttpOptions,
    on_ready: impl FnOnce(SocketAddr) + Send,
) -> Result<(), String> {
    serve_http_until(factory, options, http, on_ready, super::wait_for_signal()).await
}

/// [`serve_http`], stopping when `stop` completes.
pub async fn serve_http_until(
    factory: HostFactory,
    options: ServeOptions,
    http: HttpOptions,
    on_ready: impl FnOnce(SocketAddr) + Send,
    stop: impl Future<Output = ()> + Send,
) -> Result<(), String> {
    // 1. The host, and the protocol handler all sessions share it through:
    // built before the listener, so that a server whose tools do not load
    // never accepts a connection (its reason goes to the caller, and no
    // client meets a server that cannot answer).
    http.check()?;
    let first_snapshot = options.watch.as_deref().map(reload::snapshot);
    let server = start_server(&factory, &options).await?;
    // 2. Listen.
    let (listener, bound) = listen(&http).await?;
    // 3. The front door, and rmcp behind it.
    let admission = Admission::new(
        bound,
        &http.allowed_hosts,
        &http.allowed_origins,
        http.tokens.clone(),
    );
    let front = Arc::new(Front::new(admission, &server, http.approvals.clone()));
    // 4. In the background: hot reload, approvals announced.
    let reloader = options
        .watch
        .clone()
        .map(|dir| spawn_reloader(dir, &factory, &options, &server, first_snapshot));
    let announcer = super::announce::spawn(server.clone());
    // 5. Serve until told to stop.
    on_ready(bound);
    let door = front.clone();
    let handle = move |request, remote| {
        let front = door.clone();
        async move { front.handle(request, remote).await }
    };
    let open = connections::accept_until(listener, handle, stop).await;
    // 6. Stop (the listener is closed already), then the background tasks,
    // and make the session log durable.
    shut_down(&server, &front, http.shutdown_grace, open).await;
    if let Some(r) = reloader {
        r.abort();
    }
    announcer.abort();
    super::flush_log(&server.host()).await;
    Ok(())
}

/// Listens on `http.addr`: the listener and the address it is bound to.
async fn listen(http: &HttpOptions) -> Result<(TcpListener, SocketAddr), String> {
    let listener = TcpListener::bind(http.addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", http.addr))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    if !bound.ip().is_loopback() && http.tokens.is_none() {
        tracing::warn!(
            "serving on {bound} without --tokens: anyone who can reach it can call the tools"
        );
    }
    Ok((listener, bound))
}

/// Builds the host and the protocol handler of the server's sessions.
async fn start_server(factory: &HostFactory, options: &ServeOptions) -> Result<Server, String> {
    let approvals = Approvals {
        fallback: options.fallback_approver.clone(),
        timeout: options.approval_timeout,
        states: options.approval_states.clone(),
        ask_clients: options.ask_clients,
    };
    let host = factory(HostParts {
        // The configured approver, shared (over HTTP the host's own
        // approver is only the fallback of calls that carry none).
        approver: Box::new(options.fallback_approver.clone()),
        runtime: None,
        log: None,
        replaces: None,
    })
    .await?;
    if let Some(dir) = &options.watch {
        reload::check_watched(dir, &host)?;
    }
    Ok(Server::new(
        host,
        Arc::default(),
        options.scope.clone(),
        options.mode,
        options.principal.clone(),
        approvals,
    ))
}

/// Watches `dir` and swaps `server`'s host for one built anew when the
/// tools in it change; the new host shares the runtime and session log.
fn spawn_reloader(
    dir: PathBuf,
    factory: &HostFactory,
    options: &ServeOptions,
    server: &Server,
    first_snapshot: Option<reload::Snapshot>,
) -> JoinHandle<()> {
    let host = server.host();
    let log = host.session_log().clone();
    let runtime = host.runtime().clone();
    let current = server.clone();
    let factory = factory.clone();
    let fallback = options.fallback_approver.clone();
    let interval = options.poll_interval;
    let snapshot = first_snapshot.unwrap_or_default();
    let server = server.clone();
    tokio::spawn(async move {
        reload::watch_tools(
            dir,
            interval,
            snapshot,
            move || {
                factory(HostParts {
                    approver: Box::new(fallback.clone()),
                    runtime: Some(runtime.clone()),
                    log: Some(log.clone()),
                    replaces: Some(current.host()),
                })
            },
            server,
        )
        .await
    })
}

/// Stops: no new sessions, no new calls; waits for the calls in flight and
/// their answers (bounded by `grace`), then ends the sessions and closes
/// the `open` connections.
async fn shut_down(server: &Server, front: &Front, grace: Duration, open: GracefulShutdown) {
    tracing::info!("stopping the MCP server");
    let started = tokio::time::Instant::now();
    front.stop_admitting();
    server.stop_calls();
    if !server.drain(grace).await {
        tracing::warn!(
            "{} calls still running after {:?}; they are cut off (TOOL_OUTCOME_UNKNOWN)",
            server.calls_in_flight(),
            grace
        );
    }
    // The answers of the calls just finished, at least a moment for them.
    let left = grace
        .saturating_sub(started.elapsed())
        .max(Duration::from_secs(1));
    if !front.answers_sent(left).await {
        tracing::debug!("some answers were not sent before the sessions closed");
    }
    front.end_sessions();
    connections::close(open).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_addresses_need_an_explicit_flag() {
        let mut o = HttpOptions::new(SocketAddr::from(([0, 0, 0, 0], 8080)));
        assert!(o.check().is_err());
        o.allow_remote = true;
        assert!(o.check().is_ok());
        o.allowed_origins = vec!["not an origin".into()];
        assert!(o.check().is_err());
        assert!(
            HttpOptions::new(SocketAddr::from(([127, 0, 0, 1], 0)))
                .check()
                .is_ok()
        );
    }
}
