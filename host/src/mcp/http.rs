//! The Streamable HTTP transport (`toolhost serve --http ADDR`): MCP at
//! `/mcp`, served by rmcp's [`StreamableHttpService`] behind a front door
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
//! 5. a new session beyond [`MAX_SESSIONS`], or any new session while the
//!    server stops (503);
//! 6. a request whose id another request of its session still holds (400,
//!    a JSON-RPC error; see `open_ids`).
//!
//! rmcp then refuses bodies over [`MAX_MESSAGE_BYTES`] (413) and applies the
//! same `Host`/`Origin` lists again. Every session gets its own handler
//! ([`Server::session`]) on the one host: calls of all sessions share the
//! [`MAX_CALLS_IN_FLIGHT`](super::MAX_CALLS_IN_FLIGHT) cap, and a call's
//! approval is asked of its own session's client.
//!
//! Connections are capped at [`MAX_CONNECTIONS`] (the next waits to be
//! accepted) and must send their request head within
//! [`HEADER_READ_TIMEOUT`]. On SIGTERM / Ctrl-C the server stops accepting,
//! refuses new calls, waits up to the shutdown grace for calls in flight,
//! then closes the sessions and flushes the session log; a call still
//! running then is cut off: it ends `TOOL_OUTCOME_UNKNOWN` (written when
//! its future is dropped, or by recovery if that write is not made durable).

use super::open_ids::{OpenIds, Releasing};
use super::protocol::{Approvals, Server};
use super::{HostFactory, HostParts, MAX_MESSAGE_BYTES, ServeOptions, reload};
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// The path MCP is served at.
pub const MCP_PATH: &str = "/mcp";

/// The most MCP sessions at once; a new one beyond is refused (503) until
/// one ends (a client's `DELETE`, or five idle minutes). Checked before each
/// new session, so initializations racing each other may pass it by at most
/// the number of open connections ([`MAX_CONNECTIONS`]).
pub const MAX_SESSIONS: usize = 64;

/// The most open connections; the next one waits to be accepted.
pub const MAX_CONNECTIONS: usize = 256;

/// How long a connection may take to send a request head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

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
    pub approvals: Option<crate::ApprovalQueue>,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("addr", &self.addr)
            .field("allow_remote", &self.allow_remote)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("tokens", &self.tokens.as_ref().map(|t| t.entries.len()))
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
        for o in &self.allowed_origins {
            if Origin::parse(o.trim_end_matches(":*")).is_none() {
                return Err(format!(
                    "--allowed-origin {o:?} is not scheme://host[:port] (or :* for any port)"
                ));
            }
        }
        for h in &self.allowed_hosts {
            if Authority::parse(h).is_none() {
                return Err(format!("--allowed-host {h:?} is not a host name[:port]"));
            }
        }
        Ok(())
    }
}

/// Bearer tokens, kept as SHA-256 digests and compared in constant time
/// (digests: a wrong guess learns nothing from the length either), each
/// with the principal it maps to.
#[derive(Clone)]
pub struct Tokens {
    entries: Vec<([u8; 32], String)>,
}

impl Tokens {
    /// Reads one token per line, optionally followed by the principal it
    /// maps to (`TOKEN alice`; without one, [`ANONYMOUS_PRINCIPAL`]); blank
    /// lines and lines starting with `#` are skipped. A file without
    /// tokens, a token with characters a bearer token cannot have, or a
    /// principal name that is not one, is an error.
    ///
    /// [`ANONYMOUS_PRINCIPAL`]: toolhost_policy::ANONYMOUS_PRINCIPAL
    pub fn from_file(path: &Path) -> Result<Tokens, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the tokens file {}: {e}", path.display()))?;
        Tokens::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses the text of a tokens file (see [`Tokens::from_file`]).
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut entries = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let token = words.next().unwrap_or_default();
            if !token.bytes().all(is_token_byte) {
                return Err(format!(
                    "line {}: a bearer token has only letters, digits and -._~+/=",
                    n + 1
                ));
            }
            let principal = match (words.next(), words.next()) {
                (None, _) => toolhost_policy::ANONYMOUS_PRINCIPAL.to_string(),
                (Some(p), None) => {
                    toolhost_policy::check_principal_name(p)
                        .map_err(|e| format!("line {}: {e}", n + 1))?;
                    p.to_string()
                }
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "line {}: expected TOKEN or TOKEN PRINCIPAL, found more words",
                        n + 1
                    ));
                }
            };
            entries.push((Sha256::digest(token.as_bytes()).into(), principal));
        }
        if entries.is_empty() {
            return Err("no tokens (one token per line; # starts a comment)".into());
        }
        Ok(Tokens { entries })
    }

    /// Whether `token` is one of the tokens; looks at every one of them.
    #[cfg(test)]
    fn admits(&self, token: &str) -> bool {
        self.principal_of(token).is_some()
    }

    /// The principal `token` maps to, if it is one of the tokens. Looks at
    /// every token and selects without branching on the comparisons.
    fn principal_of(&self, token: &str) -> Option<&str> {
        use subtle::ConditionallySelectable;
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = subtle::Choice::from(0);
        let mut index = 0u64;
        for (i, (d, _)) in self.entries.iter().enumerate() {
            let hit = d.ct_eq(&digest);
            index = u64::conditional_select(&index, &(i as u64), hit);
            found |= hit;
        }
        let found: bool = found.into();
        found
            .then(|| self.entries.get(index as usize).map(|(_, p)| p.as_str()))
            .flatten()
    }
}

/// The principal of an admitted HTTP request (the one its bearer token maps
/// to), passed to the session's handler in the request's extensions.
#[derive(Debug, Clone)]
pub(super) struct Caller(pub(super) String);

/// The bearer token a request offers, if any.
fn bearer(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_string())
        })
}

/// The client of an HTTP request (see `Admission::client_of`), carried in
/// the request's extensions to the protocol handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HttpClient(pub(super) String);

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b)
}

/// A `Host` header or allowed host: lower-case name without brackets, port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    fn parse(s: &str) -> Option<Authority> {
        let a = http::uri::Authority::try_from(s.trim()).ok()?;
        if a.as_str().contains('@') {
            return None;
        }
        Some(Authority {
            host: normalize_host(a.host()),
            port: a.port_u16(),
        })
    }
}

fn normalize_host(h: &str) -> String {
    h.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// An `Origin`: scheme, host and port (the scheme's default when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl Origin {
    fn parse(s: &str) -> Option<Origin> {
        let uri = http::Uri::try_from(s.trim()).ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let authority = uri.authority()?;
        if authority.as_str().contains('@') || uri.path_and_query().is_some_and(|p| p != "/") {
            return None;
        }
        let port = authority.port_u16().or(match scheme.as_str() {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        });
        Some(Origin {
            scheme,
            host: normalize_host(authority.host()),
            port,
        })
    }
}

/// What the front door admits: built once from the options and the bound
/// address.
struct Admission {
    port: u16,
    /// Host names admitted with the bound port (loopback names, the bound
    /// address).
    names: Vec<String>,
    /// `--allowed-host` entries.
    extra_hosts: Vec<Authority>,
    /// `--allowed-origin` entries; `None` port: any.
    origins: Vec<Origin>,
    tokens: Option<Tokens>,
}

impl Admission {
    fn new(options: &HttpOptions, bound: SocketAddr) -> Admission {
        let mut names: Vec<String> = LOOPBACK_NAMES.iter().map(|s| s.to_string()).collect();
        if !bound.ip().is_unspecified() {
            names.push(normalize_host(&bound.ip().to_string()));
        }
        let origins = options
            .allowed_origins
            .iter()
            .filter_map(|o| match o.strip_suffix(":*") {
                Some(base) => Origin::parse(base).map(|o| Origin { port: None, ..o }),
                None => Origin::parse(o),
            })
            .collect();
        Admission {
            port: bound.port(),
            names,
            extra_hosts: options
                .allowed_hosts
                .iter()
                .filter_map(|h| Authority::parse(h))
                .collect(),
            origins,
            tokens: options.tokens.clone(),
        }
    }

    /// The `Host` check (DNS rebinding): a loopback name or the bound
    /// address with the bound port (no port: port 80), or an allowed host.
    fn host_ok(&self, headers: &HeaderMap) -> bool {
        let mut values = headers.get_all(header::HOST).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return false;
        };
        let Some(host) = value.to_str().ok().and_then(Authority::parse) else {
            return false;
        };
        let port = host.port.unwrap_or(80);
        if port == self.port && self.names.contains(&host.host) {
            return true;
        }
        self.extra_hosts
            .iter()
            .any(|a| a.host == host.host && a.port.is_none_or(|p| p == port))
    }

    /// The `Origin` check: absent, or a loopback origin (any port), or an
    /// allowed one.
    fn origin_ok(&self, headers: &HeaderMap) -> bool {
        let mut values = headers.get_all(header::ORIGIN).iter();
        let value = match (values.next(), values.next()) {
            (None, _) => return true,
            (Some(v), None) => v,
            (Some(_), Some(_)) => return false,
        };
        let Some(origin) = value.to_str().ok().and_then(Origin::parse) else {
            return false;
        };
        if matches!(origin.scheme.as_str(), "http" | "https")
            && LOOPBACK_NAMES.contains(&origin.host.as_str())
        {
            return true;
        }
        self.origins.iter().any(|o| {
            o.scheme == origin.scheme
                && o.host == origin.host
                && o.port.is_none_or(|p| Some(p) == origin.port)
        })
    }

    /// The token check: `None` when admitted, else whether a token was
    /// offered at all.
    #[cfg(test)]
    fn token_refused(&self, headers: &HeaderMap) -> Option<bool> {
        self.caller(headers).err()
    }

    /// The token check: `Ok(None)` when no token is asked, `Ok(Some(p))`
    /// when admitted as principal `p`, else `Err(offered)`: whether a token
    /// was offered at all.
    fn caller(&self, headers: &HeaderMap) -> Result<Option<Caller>, bool> {
        let Some(tokens) = self.tokens.as_ref() else {
            return Ok(None);
        };
        let offered = bearer(headers);
        match offered {
            Some(t) => match tokens.principal_of(&t) {
                Some(p) => Ok(Some(Caller(p.to_string()))),
                None => Err(true),
            },
            None => Err(false),
        }
    }

    /// The client of an admitted request, for the policy's `[rate_limits]`:
    /// with `--tokens`, its token (a digest of it); otherwise the address it
    /// connects from. Not the MCP session: a client can open sessions, or
    /// send session-less 2026-07-28 requests, as often as it likes.
    fn client_of(&self, headers: &HeaderMap, remote: SocketAddr) -> HttpClient {
        if self.tokens.is_some()
            && let Some(token) = bearer(headers)
        {
            let digest = Sha256::digest(token.as_bytes());
            return HttpClient(format!("mcp-http-token-{}", hex::encode(&digest[..8])));
        }
        HttpClient(address_client(remote.ip()))
    }

    /// rmcp's own `Host` list (it checks again after the front door).
    fn rmcp_hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = self
            .names
            .iter()
            .map(|n| {
                if n.contains(':') {
                    format!("[{n}]:{}", self.port)
                } else {
                    format!("{n}:{}", self.port)
                }
            })
            .collect();
        if self.port == 80 {
            hosts.extend(self.names.iter().cloned());
        }
        for a in &self.extra_hosts {
            let host = if a.host.contains(':') {
                format!("[{}]", a.host)
            } else {
                a.host.clone()
            };
            hosts.push(match a.port {
                Some(p) => format!("{host}:{p}"),
                None => host,
            });
        }
        hosts
    }

    /// rmcp's own `Origin` list.
    fn rmcp_origins(&self) -> Vec<String> {
        let mut origins = Vec::new();
        for scheme in ["http", "https"] {
            for host in ["localhost", "127.0.0.1", "[::1]"] {
                origins.push(format!("{scheme}://{host}:*"));
            }
        }
        for o in &self.origins {
            let host = if o.host.contains(':') {
                format!("[{}]", o.host)
            } else {
                o.host.clone()
            };
            origins.push(match o.port {
                Some(p) => format!("{}://{host}:{p}", o.scheme),
                None => format!("{}://{host}:*", o.scheme),
            });
        }
        origins
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn unauthorized(offered: bool) -> Response<Body> {
    let mut r = plain(
        StatusCode::UNAUTHORIZED,
        "Unauthorized: a bearer token is required\n",
    );
    let challenge = if offered {
        "Bearer realm=\"toolhost\", error=\"invalid_token\""
    } else {
        "Bearer realm=\"toolhost\""
    };
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        http::HeaderValue::from_static(challenge),
    );
    r
}

/// The answers to POSTs still being sent. A call's response reaches its
/// stream after the call has finished, so a stopping server waits for
/// these, not only for the calls, before it closes the sessions.
#[derive(Default)]
struct Answering {
    open: std::sync::atomic::AtomicUsize,
    none: tokio::sync::Notify,
}

/// One answer being sent; dropped with the response body (sent, or the
/// connection gone).
struct Answer(Arc<Answering>);

/// The most requests one bearer token may have open at once (each with the
/// stream it answers on, until that ends): a quarter of [`MAX_CONNECTIONS`],
/// so that no client holds every connection. Past it: 429.
pub const MAX_REQUESTS_PER_TOKEN: usize = MAX_CONNECTIONS / 4;

/// The open requests of each token (by its SHA-256).
#[derive(Default)]
struct TokenSlots(std::sync::Mutex<std::collections::HashMap<[u8; 32], usize>>);

/// One open request of a token, released when dropped (with its response).
struct TokenSlot {
    slots: Arc<TokenSlots>,
    token: [u8; 32],
}

impl TokenSlots {
    /// A slot for `token`, unless it has [`MAX_REQUESTS_PER_TOKEN`] open.
    fn take(self: &Arc<Self>, token: [u8; 32]) -> Option<TokenSlot> {
        let mut counts = crate::sandbox::state::lock(&self.0);
        let open = counts.entry(token).or_default();
        if *open >= MAX_REQUESTS_PER_TOKEN {
            return None;
        }
        *open += 1;
        Some(TokenSlot {
            slots: self.clone(),
            token,
        })
    }
}

impl Drop for TokenSlot {
    fn drop(&mut self) {
        let mut counts = crate::sandbox::state::lock(&self.slots.0);
        if let Some(open) = counts.get_mut(&self.token) {
            *open -= 1;
            if *open == 0 {
                counts.remove(&self.token);
            }
        }
    }
}

/// `response`, holding `slot` until its body has been sent (or dropped).
fn holding(response: Response<Body>, slot: Option<TokenSlot>) -> Response<Body> {
    let Some(slot) = slot else {
        return response;
    };
    let (parts, body) = response.into_parts();
    let body = body
        .map_frame(move |frame| {
            let _held = &slot;
            frame
        })
        .boxed();
    Response::from_parts(parts, body)
}

impl Answer {
    fn new(answering: &Arc<Answering>) -> Answer {
        answering.open.fetch_add(1, Ordering::SeqCst);
        Answer(answering.clone())
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.none.notify_waiters();
        }
    }
}

impl Answering {
    /// Waits until no answer is being sent, or `limit` has passed.
    async fn settle(&self, limit: Duration) -> bool {
        let wait = async {
            loop {
                let none = self.none.notified();
                if self.open.load(Ordering::SeqCst) == 0 {
                    return;
                }
                none.await;
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }
}

/// How long a POST's body may take to arrive, once its head has.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What the front door reads of a POST body: a request's method and id.
#[derive(serde::Deserialize, Default)]
struct Head {
    method: Option<String>,
    id: Option<rmcp::model::RequestId>,
}

impl Head {
    /// The body's method and id, as rmcp reads them; nothing for a body
    /// that is not one JSON-RPC message (rmcp refuses it).
    fn of(body: &[u8]) -> Head {
        serde_json::from_slice(body).unwrap_or_default()
    }

    /// Whether the message (without a session id) opens a session: an
    /// `initialize` request, the only message that makes rmcp create one.
    fn opens_session(&self) -> bool {
        self.method.as_deref() == Some("initialize")
    }
}

/// The answer to a request whose id another request of its session holds
/// (see `open_ids`): a JSON-RPC error without an id, so that a client does
/// not take it for the answer to the request that holds the id.
fn id_in_use(id: &rmcp::model::RequestId) -> Response<Body> {
    let message = format!(
        "Invalid Request: id {id} is already used by an open request of this session; a session's request ids must not be reused"
    );
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null,
        "error": {"code": -32600, "message": message}});
    let mut r = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|e| match e {})
            .boxed(),
    );
    *r.status_mut() = StatusCode::BAD_REQUEST;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

/// The front door and rmcp behind it, shared by every connection.
struct Front {
    admission: Admission,
    mcp: StreamableHttpService<Server, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    stopping: Arc<AtomicBool>,
    answering: Arc<Answering>,
    /// The approval endpoints: the state directory, and the server whose
    /// policy says who is an owner.
    operator: Option<(crate::ApprovalQueue, Server)>,
    /// With `--tokens`: which token opened each session (its SHA-256). A
    /// session answers only requests with that token: its id is no bearer
    /// credential that works for another principal. At most one entry per
    /// open session (closed ones are dropped when a session opens).
    owners: std::sync::Mutex<std::collections::HashMap<String, [u8; 32]>>,
    /// With `--tokens`: each token's open requests.
    slots: Arc<TokenSlots>,
    /// The request ids open in each session (`open_ids`).
    ids: Arc<OpenIds>,
}

/// The SHA-256 of the bearer token `headers` offer, if any.
fn token_digest(headers: &HeaderMap) -> Option<[u8; 32]> {
    bearer(headers).map(|t| Sha256::digest(t.as_bytes()).into())
}

impl Front {
    async fn handle(&self, mut request: Request<Incoming>, remote: SocketAddr) -> Response<Body> {
        let operator = request
            .uri()
            .path()
            .strip_prefix(super::operator::APPROVALS_PATH)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
        if request.uri().path() != MCP_PATH && !(operator && self.operator.is_some()) {
            return plain(StatusCode::NOT_FOUND, "Not Found: MCP is served at /mcp\n");
        }
        let headers = request.headers();
        if !self.admission.host_ok(headers) {
            tracing::warn!(host = ?headers.get(header::HOST), "refused a request: Host not allowed (DNS rebinding?)");
            return plain(StatusCode::FORBIDDEN, "Forbidden: Host not allowed\n");
        }
        if !self.admission.origin_ok(headers) {
            tracing::warn!(origin = ?headers.get(header::ORIGIN), "refused a request: Origin not allowed");
            return plain(StatusCode::FORBIDDEN, "Forbidden: Origin not allowed\n");
        }
        let caller = match self.admission.caller(headers) {
            Ok(caller) => caller,
            Err(offered) => {
                tracing::warn!(offered, "refused a request without a valid bearer token");
                return unauthorized(offered);
            }
        };
        // Who is calling, as far as the server can tell, for the policy's
        // `[rate_limits]`: the handler reads it from the request's parts
        // (rmcp passes them on).
        let client = self.admission.client_of(headers, remote);
        request.extensions_mut().insert(client);
        // The approval endpoints are not MCP: no session is made there.
        if operator && let Some((state, server)) = &self.operator {
            let host = server.host();
            return super::operator::handle(
                state,
                |p| host.policy().is_owner(p),
                caller.as_ref(),
                request,
            )
            .await;
        }
        // A session answers only the token that opened it.
        let token = caller
            .as_ref()
            .and_then(|_| token_digest(request.headers()));
        // A session id is visible ASCII. rmcp reads one that is not as no
        // session at all, so such a request would open a session past the
        // front door's limit, with no owner: it is refused.
        let session = match request
            .headers()
            .get(rmcp::transport::common::http_header::HEADER_SESSION_ID)
            .map(|v| v.to_str())
        {
            None => None,
            Some(Ok(id)) => Some(id.to_string()),
            Some(Err(_)) => {
                return plain(
                    StatusCode::BAD_REQUEST,
                    "Bad Request: Mcp-Session-Id must be visible ASCII\n",
                );
            }
        };
        if let (Some(session), Some(token)) = (&session, &token) {
            let owner = crate::sandbox::state::lock(&self.owners)
                .get(session)
                .copied();
            if owner.is_some_and(|o| !bool::from(o.ct_eq(token))) {
                tracing::warn!("refused a request on a session another token opened");
                return plain(StatusCode::NOT_FOUND, "Not Found: no such session\n");
            }
        }
        // No token holds more than its share of the connections.
        let slot = match token {
            Some(t) => match self.slots.take(t) {
                Some(slot) => Some(slot),
                None => {
                    tracing::warn!(
                        "refused a request: its token has {MAX_REQUESTS_PER_TOKEN} requests open"
                    );
                    let mut r = plain(
                        StatusCode::TOO_MANY_REQUESTS,
                        "Too Many Requests: this token has too many requests open\n",
                    );
                    r.headers_mut()
                        .insert(header::RETRY_AFTER, http::HeaderValue::from_static("1"));
                    return r;
                }
            },
            None => None,
        };
        // The session's handler reads who is calling from here (rmcp
        // passes the request's parts on to it).
        if let Some(caller) = caller {
            request.extensions_mut().insert(caller);
        }
        if request.method() != http::Method::POST {
            return holding(self.forward(request).await, slot);
        }
        // A POST's body is read here, whole, within a time limit (a client
        // that trickles a body cannot hold a connection), and only one that
        // opens a session (`initialize` without a session id) counts against
        // the session limit: a session-less request (2026-07-28) makes none.
        let (parts, body) = request.into_parts();
        let read = http_body_util::Limited::new(body, MAX_MESSAGE_BYTES).collect();
        let bytes = match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(e)) => {
                let too_large = e
                    .downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some();
                return if too_large {
                    plain(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "Payload Too Large: a message is at most 4 MiB\n",
                    )
                } else {
                    plain(
                        StatusCode::BAD_REQUEST,
                        "Bad Request: the body could not be read\n",
                    )
                };
            }
            Err(_) => {
                return plain(
                    StatusCode::REQUEST_TIMEOUT,
                    "Request Timeout: the body did not arrive in time\n",
                );
            }
        };
        let head = Head::of(&bytes);
        let new_session = session.is_none() && head.opens_session();
        // A request's id is held in its session until rmcp is done with it.
        let open = match (&session, head.method, head.id) {
            (Some(session), Some(_), Some(id)) => match self.ids.open(session, id.clone()) {
                Some(open) => Some(open),
                None => {
                    tracing::warn!(%id, "refused a request: its id is open in its session");
                    return id_in_use(&id);
                }
            },
            _ => None,
        };
        let mut parts = parts;
        if let Some(open) = &open {
            parts.extensions.insert(open.clone());
        }
        if new_session {
            if self.stopping.load(Ordering::SeqCst) {
                return plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Service Unavailable: the server is stopping\n",
                );
            }
            if self.sessions.sessions.read().await.len() >= MAX_SESSIONS {
                tracing::warn!("refused a new session: {MAX_SESSIONS} sessions open");
                let mut r = plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Service Unavailable: too many sessions; retry later\n",
                );
                r.headers_mut()
                    .insert(header::RETRY_AFTER, http::HeaderValue::from_static("5"));
                return r;
            }
        }
        let response = holding(
            self.forward(Request::from_parts(parts, Full::new(bytes)))
                .await,
            slot,
        );
        let response = match open {
            Some(open) => {
                let (parts, body) = response.into_parts();
                let body = Releasing {
                    inner: body,
                    open: Some(open),
                }
                .boxed();
                Response::from_parts(parts, body)
            }
            None => response,
        };
        if new_session
            && let Some(token) = token
            && let Some(id) = response
                .headers()
                .get(rmcp::transport::common::http_header::HEADER_SESSION_ID)
                .and_then(|v| v.to_str().ok())
        {
            let open = self.sessions.sessions.read().await;
            let mut owners = crate::sandbox::state::lock(&self.owners);
            owners.retain(|s, _| open.keys().any(|k| k.as_ref() == s.as_str()));
            owners.insert(id.to_string(), token);
        }
        response
    }

    /// Hands `request` (past the front door's checks) to rmcp.
    async fn forward<B>(&self, request: Request<B>) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::fmt::Display,
    {
        if request.method() == http::Method::DELETE {
            // rmcp answers a session's end with 202 Accepted, which the
            // Python SDK reports as a failed termination: the session is
            // gone when this returns, so say so with 204 No Content.
            let mut response = self.mcp.handle(request).await;
            if response.status() == StatusCode::ACCEPTED {
                *response.status_mut() = StatusCode::NO_CONTENT;
            }
            return response;
        }
        if request.method() != http::Method::POST {
            return self.mcp.handle(request).await;
        }
        let answer = Answer::new(&self.answering);
        let (parts, body) = self.mcp.handle(request).await.into_parts();
        let body = body
            .map_frame(move |frame| {
                let _sending = &answer;
                frame
            })
            .boxed();
        Response::from_parts(parts, body)
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
    http.check()?;
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

    let approvals = Approvals {
        fallback: options.fallback_approver.clone(),
        timeout: options.approval_timeout,
        states: options.approval_states.clone(),
        ask_clients: options.ask_clients,
    };
    let first_snapshot = options.watch.as_deref().map(reload::snapshot);
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
    let log = host.session_log().clone();
    let runtime = host.runtime().clone();
    let server = Server::new(
        host,
        Arc::default(),
        options.scope.clone(),
        options.mode,
        options.principal.clone(),
        approvals,
    );

    let admission = Admission::new(&http, bound);
    let stop_sessions = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(admission.rmcp_hosts())
        .with_allowed_origins(admission.rmcp_origins())
        .enforce_origin_validation()
        .with_max_request_body_bytes(MAX_MESSAGE_BYTES)
        .with_cancellation_token(stop_sessions.clone());
    let sessions = Arc::new(LocalSessionManager::default());
    let sessions_of = server.clone();
    let mcp =
        StreamableHttpService::new(move || Ok(sessions_of.session()), sessions.clone(), config);
    let stopping = Arc::new(AtomicBool::new(false));
    let answering = Arc::new(Answering::default());
    let front = Arc::new(Front {
        admission,
        mcp,
        sessions,
        stopping: stopping.clone(),
        answering: answering.clone(),
        operator: http.approvals.clone().map(|queue| (queue, server.clone())),
        owners: std::sync::Mutex::default(),
        slots: Arc::default(),
        ids: Arc::default(),
    });

    let reloader = options.watch.clone().map(|dir| {
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
    });

    let announcer = super::announce::spawn(server.clone());
    on_ready(bound);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut stop = std::pin::pin!(stop);
    loop {
        let permit = tokio::select! {
            () = &mut stop => break,
            p = connections.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            () = &mut stop => break,
            a = listener.accept() => a,
        };
        let (stream, remote) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, say: back off instead of spinning.
                tracing::warn!("cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // A response is several small writes (head, SSE events, the last
        // chunk): with Nagle's algorithm each waits for the client's
        // delayed ACK, about 40 ms per call.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {e}");
        }
        // Its sends never raise SIGPIPE (`runtime::Tcp`; tokio's vectored
        // writes, which hyper makes, carry no MSG_NOSIGNAL): a client that
        // goes away mid-response cannot end a program that embeds the
        // server and keeps the signal's default action.
        let stream = crate::sandbox::Tcp::new(stream);
        let front = front.clone();
        let service = hyper::service::service_fn(move |request| {
            let front = front.clone();
            async move { Ok::<_, Infallible>(front.handle(request, remote).await) }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection ended: {e}");
            }
            drop(permit);
        });
    }

    // Stop: no new connections or sessions, no new calls; wait for the
    // calls in flight and their answers (bounded), then end the sessions
    // and connections.
    drop(listener);
    tracing::info!("stopping the MCP server");
    let started = tokio::time::Instant::now();
    stopping.store(true, Ordering::SeqCst);
    server.stop_calls();
    if !server.drain(http.shutdown_grace).await {
        tracing::warn!(
            "{} calls still running after {:?}; they are cut off (TOOL_OUTCOME_UNKNOWN)",
            server.calls_in_flight(),
            http.shutdown_grace
        );
    }
    // The answers of the calls just finished, at least a moment for them.
    let left = http
        .shutdown_grace
        .saturating_sub(started.elapsed())
        .max(Duration::from_secs(1));
    if !answering.settle(left).await {
        tracing::debug!("some answers were not sent before the sessions closed");
    }
    stop_sessions.cancel();
    if tokio::time::timeout(Duration::from_secs(2), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("some connections did not close in time");
    }
    if let Some(r) = reloader {
        r.abort();
    }
    announcer.abort();
    super::flush_log(&server.host()).await;
    Ok(())
}

/// The rate-limit client of a request from `ip`: the address itself for
/// IPv4 (and IPv4-mapped IPv6), its /64 for IPv6, since one host commonly
/// holds a whole /64 and could otherwise take a fresh bucket per address.
fn address_client(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => format!("mcp-http-{v4}"),
            None => {
                let s = v6.segments();
                format!("mcp-http-{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
        v4 => format!("mcp-http-{v4}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One IPv6 /64 is one rate-limit client; IPv4, mapped or not, is its
    /// address.
    #[test]
    fn rate_limit_clients_are_addresses_and_ipv6_prefixes() {
        let client = |ip: &str| address_client(ip.parse().unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(client("192.0.2.7"), "mcp-http-192.0.2.7");
        assert_eq!(client("::ffff:192.0.2.7"), "mcp-http-192.0.2.7");
        assert_eq!(client("2001:db8:1:2::1"), "mcp-http-2001:db8:1:2::/64");
        assert_eq!(client("2001:db8:1:2:ffff::9"), client("2001:db8:1:2::1"));
        assert_ne!(client("2001:db8:1:3::1"), client("2001:db8:1:2::1"));
        assert_eq!(client("::1"), "mcp-http-0:0:0:0::/64");
    }

    fn admission(origins: &[&str], hosts: &[&str], tokens: Option<&str>) -> Admission {
        let mut o = HttpOptions::new(SocketAddr::from(([127, 0, 0, 1], 8123)));
        o.allowed_origins = origins.iter().map(|s| s.to_string()).collect();
        o.allowed_hosts = hosts.iter().map(|s| s.to_string()).collect();
        o.tokens = tokens.map(Tokens::parse).transpose().ok().flatten();
        Admission::new(&o, o.addr)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            if let Ok(v) = http::HeaderValue::from_str(v) {
                h.append(*k, v);
            }
        }
        h
    }

    #[test]
    fn host_must_name_the_bound_port_on_loopback() {
        let a = admission(&[], &["tools.example:443"], None);
        for ok in [
            "localhost:8123",
            "127.0.0.1:8123",
            "[::1]:8123",
            "LOCALHOST:8123",
            "tools.example:443",
        ] {
            assert!(a.host_ok(&headers(&[("host", ok)])), "{ok}");
        }
        for bad in [
            "evil.example:8123",
            "localhost:8124",
            "localhost",
            "127.0.0.1.evil.example:8123",
            "user@localhost:8123",
            "tools.example:444",
            "",
        ] {
            assert!(!a.host_ok(&headers(&[("host", bad)])), "{bad}");
        }
        assert!(!a.host_ok(&HeaderMap::new()), "no Host");
        assert!(
            !a.host_ok(&headers(&[
                ("host", "localhost:8123"),
                ("host", "evil.example:8123")
            ])),
            "two Hosts"
        );
    }

    #[test]
    fn origin_is_loopback_or_allowed() {
        let a = admission(
            &["https://app.example:*", "http://ui.example:3000"],
            &[],
            None,
        );
        assert!(a.origin_ok(&HeaderMap::new()), "no Origin");
        for ok in [
            "http://localhost:5173",
            "https://127.0.0.1",
            "http://[::1]:9",
            "https://app.example:8443",
            "http://ui.example:3000",
        ] {
            assert!(a.origin_ok(&headers(&[("origin", ok)])), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "null",
            "http://ui.example:3001",
            "http://ui.example",
            "file://localhost",
            "http://localhost.evil.example",
            "garbage",
        ] {
            assert!(!a.origin_ok(&headers(&[("origin", bad)])), "{bad}");
        }
    }

    #[test]
    fn tokens_parse_skip_comments_and_compare() {
        let t = Tokens::parse("# tokens\n\n  alpha-1  \nbeta/2=\n").ok();
        let Some(t) = t else {
            panic!("tokens did not parse");
        };
        assert!(t.admits("alpha-1") && t.admits("beta/2="));
        assert!(!t.admits("alpha") && !t.admits("") && !t.admits("# tokens"));
        assert!(Tokens::parse("# only a comment\n").is_err());
        // A second word names the token's principal; more is an error.
        let named = Tokens::parse("tok-a alice\ntok-b\n").ok();
        let Some(named) = named else {
            panic!("named tokens did not parse");
        };
        assert_eq!(named.principal_of("tok-a"), Some("alice"));
        assert_eq!(named.principal_of("tok-b"), Some("anonymous"));
        assert_eq!(named.principal_of("alice"), None);
        assert!(Tokens::parse("has two spaces\n").is_err());
        assert!(Tokens::parse("tok bad!name\n").is_err());
        assert!(Tokens::parse("b@d alice\n").is_err());
        let a = admission(&[], &[], Some("s3cret\n"));
        assert_eq!(a.token_refused(&HeaderMap::new()), Some(false));
        assert_eq!(
            a.token_refused(&headers(&[("authorization", "Bearer nope")])),
            Some(true)
        );
        assert_eq!(
            a.token_refused(&headers(&[("authorization", "bearer s3cret")])),
            None
        );
        assert_eq!(
            a.token_refused(&headers(&[("authorization", "Basic s3cret")])),
            Some(false)
        );
    }

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
