//! The front door of the HTTP transport: every request passes its checks
//! (in the order the transport's doc lists them, `http`) before rmcp sees
//! it. It admits the request ([`Admission`]: `Host`, `Origin`, token),
//! serves `/approvals` (`operator`), keeps each session to the token that
//! opened it, gives each token at most [`MAX_REQUESTS_PER_TOKEN`] open
//! requests, reads a POST's body within a time limit, counts only new
//! sessions against [`MAX_SESSIONS`], and holds a request's id in its
//! session while rmcp answers it (`open_ids`).

use super::MAX_MESSAGE_BYTES;
use super::admission::Admission;
use super::connections::{Body, MAX_CONNECTIONS};
use super::open_ids::{OpenIds, OpenRequest, Releasing};
use super::peer::Caller;
use super::protocol::Server;
use super::tokens::token_digest;
use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

/// The path MCP is served at.
pub const MCP_PATH: &str = "/mcp";

/// The most MCP sessions at once; a new one beyond is refused (503) until
/// one ends (a client's `DELETE`, or five idle minutes). Checked before each
/// new session, so initializations racing each other may pass it by at most
/// the number of open connections ([`MAX_CONNECTIONS`]).
pub const MAX_SESSIONS: usize = 64;

/// A request refused: the response that says why (boxed: a response is
/// large, and refusals are the rare path).
type Refused = Box<Response<Body>>;

/// The front door and rmcp behind it, shared by every connection.
pub(super) struct Front {
    admission: Admission,
    mcp: StreamableHttpService<Server, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    /// Ends rmcp's sessions (and their streams) when the server stops.
    end_sessions: CancellationToken,
    stopping: AtomicBool,
    answering: Arc<Answering>,
    /// The approval endpoints: the state directory, and the server whose
    /// policy says who is an owner.
    operator: Option<(crate::approval::queue::ApprovalQueue, Server)>,
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

impl Front {
    /// The front door of `server`'s sessions (one handler per session, made
    /// by [`Server::session`]), admitting what `admission` admits and, with
    /// a queue of approvals, serving it at `/approvals`.
    pub(super) fn new(
        admission: Admission,
        server: &Server,
        approvals: Option<crate::approval::queue::ApprovalQueue>,
    ) -> Front {
        let end_sessions = CancellationToken::new();
        let config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(admission.rmcp_hosts())
            .with_allowed_origins(admission.rmcp_origins())
            .enforce_origin_validation()
            .with_max_request_body_bytes(MAX_MESSAGE_BYTES)
            .with_cancellation_token(end_sessions.clone());
        let sessions = Arc::new(LocalSessionManager::default());
        let sessions_of = server.clone();
        let mcp =
            StreamableHttpService::new(move || Ok(sessions_of.session()), sessions.clone(), config);
        Front {
            admission,
            mcp,
            sessions,
            end_sessions,
            stopping: AtomicBool::new(false),
            answering: Arc::default(),
            operator: approvals.map(|queue| (queue, server.clone())),
            owners: std::sync::Mutex::default(),
            slots: Arc::default(),
            ids: Arc::default(),
        }
    }

    /// From now on no new session is admitted (503).
    pub(super) fn stop_admitting(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Waits until no answer is being sent, or `limit` has passed; whether
    /// they all were.
    pub(super) async fn answers_sent(&self, limit: Duration) -> bool {
        self.answering.settle(limit).await
    }

    /// Ends every session (rmcp closes their streams).
    pub(super) fn end_sessions(&self) {
        self.end_sessions.cancel();
    }

    /// Answers one request: refused at the first check it fails, else
    /// handed to the approval endpoints or to rmcp.
    pub(super) async fn handle(
        &self,
        mut request: Request<Incoming>,
        remote: SocketAddr,
    ) -> Response<Body> {
        let operator = match self.route(&request) {
            Ok(operator) => operator,
            Err(refused) => return *refused,
        };
        let caller = match self.admit(&mut request, remote) {
            Ok(caller) => caller,
            Err(refused) => return *refused,
        };
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
        let session = match self.session_of(&request, token.as_ref()) {
            Ok(session) => session,
            Err(refused) => return *refused,
        };
        let slot = match self.slot(token) {
            Ok(slot) => slot,
            Err(refused) => return *refused,
        };
        // The session's handler reads who is calling from here (rmcp
        // passes the request's parts on to it).
        if let Some(caller) = caller {
            request.extensions_mut().insert(caller);
        }
        if request.method() != http::Method::POST {
            return holding(self.forward(request).await, slot);
        }
        self.post(request, session, token, slot).await
    }

    /// Whether `request` is for the approval endpoints (served only with a
    /// queue of approvals); refused unless it is for them or for MCP.
    fn route(&self, request: &Request<Incoming>) -> Result<bool, Refused> {
        let operator = request
            .uri()
            .path()
            .strip_prefix(super::operator::APPROVALS_PATH)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
        if request.uri().path() != MCP_PATH && !(operator && self.operator.is_some()) {
            return Err(Box::new(plain(
                StatusCode::NOT_FOUND,
                "Not Found: MCP is served at /mcp\n",
            )));
        }
        Ok(operator)
    }

    /// The `Host`, `Origin` and token checks: who calls (`None`: no token
    /// is asked), with the request's client put in its extensions.
    fn admit(
        &self,
        request: &mut Request<Incoming>,
        remote: SocketAddr,
    ) -> Result<Option<Caller>, Refused> {
        let headers = request.headers();
        if !self.admission.host_ok(headers) {
            tracing::warn!(host = ?headers.get(header::HOST), "refused a request: Host not allowed (DNS rebinding?)");
            return Err(Box::new(plain(
                StatusCode::FORBIDDEN,
                "Forbidden: Host not allowed\n",
            )));
        }
        if !self.admission.origin_ok(headers) {
            tracing::warn!(origin = ?headers.get(header::ORIGIN), "refused a request: Origin not allowed");
            return Err(Box::new(plain(
                StatusCode::FORBIDDEN,
                "Forbidden: Origin not allowed\n",
            )));
        }
        let caller = match self.admission.caller(headers) {
            Ok(caller) => caller,
            Err(offered) => {
                tracing::warn!(offered, "refused a request without a valid bearer token");
                return Err(Box::new(unauthorized(offered)));
            }
        };
        // Who is calling, as far as the server can tell, for the policy's
        // `[rate_limits]`: the handler reads it from the request's parts
        // (rmcp passes them on).
        let client = self.admission.client_of(headers, remote);
        request.extensions_mut().insert(client);
        Ok(caller)
    }

    /// The session `request` names, if any; refused when its id is not
    /// visible ASCII or another token opened it.
    fn session_of(
        &self,
        request: &Request<Incoming>,
        token: Option<&[u8; 32]>,
    ) -> Result<Option<String>, Refused> {
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
                return Err(Box::new(plain(
                    StatusCode::BAD_REQUEST,
                    "Bad Request: Mcp-Session-Id must be visible ASCII\n",
                )));
            }
        };
        if let (Some(session), Some(token)) = (&session, token) {
            let owner = crate::sandbox::state::lock(&self.owners)
                .get(session)
                .copied();
            if owner.is_some_and(|o| !bool::from(o.ct_eq(token))) {
                tracing::warn!("refused a request on a session another token opened");
                return Err(Box::new(plain(
                    StatusCode::NOT_FOUND,
                    "Not Found: no such session\n",
                )));
            }
        }
        Ok(session)
    }

    /// A request slot of `token`: no token holds more than its share of the
    /// connections (429 past it).
    fn slot(&self, token: Option<[u8; 32]>) -> Result<Option<TokenSlot>, Refused> {
        let Some(t) = token else {
            return Ok(None);
        };
        match self.slots.take(t) {
            Some(slot) => Ok(Some(slot)),
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
                Err(Box::new(r))
            }
        }
    }

    /// Answers an admitted POST: its body read whole, its id held in its
    /// session, a new session counted, then rmcp's answer, holding `slot`
    /// and the id until it has been sent.
    async fn post(
        &self,
        request: Request<Incoming>,
        session: Option<String>,
        token: Option<[u8; 32]>,
        slot: Option<TokenSlot>,
    ) -> Response<Body> {
        // A POST's body is read here, whole, within a time limit (a client
        // that trickles a body cannot hold a connection), and only one that
        // opens a session (`initialize` without a session id) counts against
        // the session limit: a session-less request (2026-07-28) makes none.
        let (mut parts, body) = request.into_parts();
        let bytes = match read_body(body).await {
            Ok(bytes) => bytes,
            Err(refused) => return *refused,
        };
        let head = Head::of(&bytes);
        let new_session = session.is_none() && head.opens_session();
        // A request's id is held in its session until rmcp is done with it.
        let open = match self.hold_id(session.as_deref(), head) {
            Ok(open) => open,
            Err(refused) => return *refused,
        };
        if let Some(open) = &open {
            parts.extensions.insert(open.clone());
        }
        if new_session && let Err(refused) = self.admit_session().await {
            return *refused;
        }
        let response = holding(
            self.forward(Request::from_parts(parts, Full::new(bytes)))
                .await,
            slot,
        );
        let response = releasing(response, open);
        if new_session && let Some(token) = token {
            self.record_owner(&response, token).await;
        }
        response
    }

    /// Holds the id of the request `head` describes in `session` (a
    /// request with a session, a method and an id); refused (400) while
    /// another request of the session holds it.
    fn hold_id(&self, session: Option<&str>, head: Head) -> Result<Option<OpenRequest>, Refused> {
        match (session, head.method, head.id) {
            (Some(session), Some(_), Some(id)) => match self.ids.open(session, id.clone()) {
                Some(open) => Ok(Some(open)),
                None => {
                    tracing::warn!(%id, "refused a request: its id is open in its session");
                    Err(Box::new(id_in_use(&id)))
                }
            },
            _ => Ok(None),
        }
    }

    /// Whether a new session may open: not while the server stops, nor
    /// past [`MAX_SESSIONS`] (503).
    async fn admit_session(&self) -> Result<(), Refused> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err(Box::new(plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "Service Unavailable: the server is stopping\n",
            )));
        }
        if self.sessions.sessions.read().await.len() >= MAX_SESSIONS {
            tracing::warn!("refused a new session: {MAX_SESSIONS} sessions open");
            let mut r = plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "Service Unavailable: too many sessions; retry later\n",
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, http::HeaderValue::from_static("5"));
            return Err(Box::new(r));
        }
        Ok(())
    }

    /// Records `token` as the owner of the session `response` opened, if
    /// it opened one (and forgets the owners of closed sessions).
    async fn record_owner(&self, response: &Response<Body>, token: [u8; 32]) {
        let Some(id) = response
            .headers()
            .get(rmcp::transport::common::http_header::HEADER_SESSION_ID)
            .and_then(|v| v.to_str().ok())
        else {
            return;
        };
        let open = self.sessions.sessions.read().await;
        let mut owners = crate::sandbox::state::lock(&self.owners);
        owners.retain(|s, _| open.keys().any(|k| k.as_ref() == s.as_str()));
        owners.insert(id.to_string(), token);
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

/// `response`, holding `open` (a request id held in its session) until its
/// body has been sent (or dropped).
fn releasing(response: Response<Body>, open: Option<OpenRequest>) -> Response<Body> {
    let Some(open) = open else {
        return response;
    };
    let (parts, body) = response.into_parts();
    let body = Releasing {
        inner: body,
        open: Some(open),
    }
    .boxed();
    Response::from_parts(parts, body)
}

/// A POST's body, read whole within [`BODY_READ_TIMEOUT`] and at most
/// [`MAX_MESSAGE_BYTES`] long; else the refusal (413, 400 or 408).
async fn read_body(body: Incoming) -> Result<Bytes, Refused> {
    let read = http_body_util::Limited::new(body, MAX_MESSAGE_BYTES).collect();
    match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) => {
            let too_large = e
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some();
            Err(Box::new(if too_large {
                plain(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "Payload Too Large: a message is at most 4 MiB\n",
                )
            } else {
                plain(
                    StatusCode::BAD_REQUEST,
                    "Bad Request: the body could not be read\n",
                )
            }))
        }
        Err(_) => Err(Box::new(plain(
            StatusCode::REQUEST_TIMEOUT,
            "Request Timeout: the body did not arrive in time\n",
        ))),
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
