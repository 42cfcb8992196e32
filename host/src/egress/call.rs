//! Network egress of one call, enforced (DESIGN.md §2b): outgoing HTTP
//! requests (sent by the host's `wasi:http/outgoing-handler`,
//! `runtime::outgoing`) and the wasi:sockets address check, both against
//! the call's [`NetworkGrant`].
//!
//! For every outgoing HTTP request:
//!
//! 1. the request's scheme, host, port and method are decided by the
//!    policy (`toolhost_egress`: its `[network]` grants and those of the
//!    policy rules the call matched); a refusal fails inside the guest with
//!    wasi:http's own error code (`HTTP-request-denied`,
//!    `destination-IP-prohibited`, `DNS-error`) and is recorded;
//! 2. an allowed request is planned: its host is resolved once (by the
//!    host's resolver, off the executor) and every address checked; the
//!    connection goes to those addresses only, never through a second
//!    lookup;
//! 3. the credential of exactly that host (if any) is set, replacing any
//!    header of the same name the guest sent, and its response is asked
//!    for whole and uncompressed (`accept-encoding: identity`; the guest's
//!    `range`, `if-range` and `te` dropped; an encoded response refused);
//!    the `Host` header is the request's host (never a userinfo the guest
//!    put in the authority); that host's response is read whole and has
//!    the loaded secrets masked before the guest reads any of it
//!    ([`MaskedBody`]);
//! 4. per-call limits hold: at most `max_requests` requests, at most
//!    `max_response_bytes` response body bytes summed, each request within
//!    `request_timeout_ms` and the call's own deadline;
//! 5. redirects are not followed: the guest sees the 3xx, and a request it
//!    makes to the new location is decided again.
//!
//! Sockets (TCP connect, UDP send) are decided per address against
//! `tcp://` and `udp://` grants; a UDP socket takes datagrams only from a
//! peer it sent to (others are dropped unrecorded); binds are allowed only
//! to port 0 (the implicit bind of a connect) and only with a grant of that
//! protocol the call may use (an `allow` one, a matched rule's, an approved
//! `ask` one); listening and accepting are always refused; name lookups are
//! refused at once ([`refuse_name_lookups`]), with a `denied` line only.
//!
//! Every request and connection is recorded as an [`EgressRecord`] for the
//! receipt; refusals are also listed in the receipt's `denied`.

use crate::egress::{Egress, NetworkGrant};
use crate::runtime::wasi::record_denied;
use bytes::Bytes;
use http::header::{
    ACCEPT_ENCODING, CONTENT_ENCODING, HOST, HeaderName, HeaderValue, IF_RANGE, RANGE, TE,
    TRANSFER_ENCODING,
};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use toolhost_egress::{
    Credentials, Decision, EgressOutcome, EgressRecord, GrantRef, Host, NO_RESPONSE, NOT_SENT,
    Refusal, Request, Scheme, bounded, check_addr, connect_plan_approved,
};
use wasmtime_wasi::runtime::AbortOnDropJoinHandle;
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode as HttpErrorCode;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

/// The most refusal records one call keeps: refusals do not count against
/// `max_requests`, so a guest looping on refused requests must not grow
/// them without bound. Later ones are counted, not kept. Records of allowed requests are
/// always kept (`max_requests` bounds them), so refusals can never push the
/// traffic that did happen out of the receipt. (An admitted request that
/// its address check then refuses turns its own record into a refusal:
/// those come on top, at most `max_requests` of them.)
const MAX_REFUSED_RECORDS: usize = 256;

/// The most binds (to port 0) of one protocol a call may make without a
/// grant of that protocol. Such a bind reaches nothing: what the socket
/// then does (connect, send, listen) is decided and recorded on its own,
/// with its destination. But a bound socket holds one of the machine's
/// ephemeral ports, so a call without a grant may bind only a few. A TCP
/// socket whose connect or listen is refused is closed with it, so its bind
/// stops counting then; any other bind counts until the call ends. Past the
/// limit, a bind is refused (`bind_refused`, in `denied`) and what the
/// socket would have reached is not seen: it is counted in the receipt's
/// `network_dropped`.
pub(crate) const MAX_UNGRANTED_BINDS: u32 = 64;

/// Why a request of another scheme is refused (`unsupported_scheme`).
pub(crate) const ONLY_HTTP: &str = "only http and https requests are sent";

/// What a wasi:http hook's future resolves to.
type SendResult = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
>;

/// The network state of one call, shared by its HTTP requests and its socket
/// address check, and read for its receipt.
pub(crate) struct CallNet {
    grant: NetworkGrant,
    deadline: Instant,
    log: Mutex<NetLog>,
    denied: Mutex<Vec<String>>,
    /// Denied attempts not listed in `denied` (see `record_denied`).
    unlisted: AtomicU64,
    /// HTTP exchanges in flight (see [`Flight`]).
    exchanges: AtomicUsize,
}

/// Where an admitted HTTP request is exchanged (see `runtime::outgoing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// In a task of its own, which then drives the connection.
    Task,
    /// In place, where the guest waits for it, its socket's waits through
    /// tokio's I/O driver (the guest runs in a runtime task, or on a
    /// current-thread runtime).
    Tokio,
    /// In place, where the guest waits for it, on a thread that is not a
    /// runtime worker: its socket's waits are made by that thread, in
    /// `poll(2)` (`tcp::drive_here`), while it is the call's only exchange
    /// and until that thread has been blocked on it 1 ms in all
    /// (`tcp::Here`). Unix only.
    Caller,
}

impl Place {
    /// `poll` with `cx`: in [`Place::Caller`] through `tcp::drive_here`,
    /// which waits for the exchange's socket on this thread.
    fn drive<T>(
        self,
        cx: &mut Context<'_>,
        mut poll: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        match self {
            Place::Caller => crate::egress::nosigpipe::drive_here(cx, poll),
            Place::Task | Place::Tokio => poll(cx),
        }
    }
}

/// One HTTP exchange in flight, counted in [`CallNet::exchanges`] from
/// `handle` until dropped: when the response's body ends (or is dropped),
/// or with the request that failed or was given up. A body the guest
/// neither reads to its end nor drops keeps it in flight, so that the
/// call's later exchanges wait through tokio (`tcp::Here`).
pub(crate) struct Flight(Arc<CallNet>);

impl Drop for Flight {
    fn drop(&mut self) {
        self.0.exchanges.fetch_sub(1, Ordering::Relaxed);
    }
}

impl crate::egress::nosigpipe::Exchanges for CallNet {
    fn in_flight(&self) -> usize {
        self.exchanges.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
struct NetLog {
    records: Vec<EgressRecord>,
    /// Requests and connections counted against `max_requests`.
    requests: u32,
    /// Response body bytes received, all requests summed.
    bytes_in: u64,
    /// UDP destinations already allowed (a datagram stream is one record),
    /// by address and port: an IPv6 reply's flow label or scope is not the
    /// peer's identity.
    udp_peers: Vec<(std::net::IpAddr, u16)>,
    /// Sockets bound to port 0 without a grant of their protocol, TCP and
    /// UDP (see [`MAX_UNGRANTED_BINDS`]).
    ungranted_binds: [u32; 2],
    /// Refusal records kept (at most [`MAX_REFUSED_RECORDS`], besides the
    /// admitted requests' own records turned into refusals).
    refused: usize,
    /// Refusal records not kept (over [`MAX_REFUSED_RECORDS`]).
    dropped: u64,
    /// The call's receipt was taken: a request not started by then is
    /// never sent (its record, in the receipt, says so).
    closed: bool,
}

impl NetLog {
    /// Keeps `record`, unless it is a refusal and the call already kept
    /// [`MAX_REFUSED_RECORDS`] of them; returns its index (`usize::MAX`
    /// when dropped: updates then do nothing).
    fn keep(&mut self, record: EgressRecord) -> usize {
        if matches!(record.outcome, EgressOutcome::Refused { .. }) {
            if self.refused >= MAX_REFUSED_RECORDS {
                self.dropped += 1;
                return usize::MAX;
            }
            self.refused += 1;
        }
        self.records.push(record);
        self.records.len() - 1
    }
}

/// An HTTP request that passed the policy, to be planned and sent.
pub(crate) struct Admitted {
    request: Request,
    path: String,
    rule: GrantRef,
    /// Its record, kept from its admission on: a request the guest never
    /// waits for is never sent, and its record says so.
    index: usize,
}

impl CallNet {
    pub(crate) fn new(grant: NetworkGrant, deadline: Instant) -> Arc<CallNet> {
        Arc::new(CallNet {
            grant,
            deadline,
            log: Mutex::new(NetLog::default()),
            denied: Mutex::default(),
            unlisted: AtomicU64::new(0),
            exchanges: AtomicUsize::new(0),
        })
    }

    /// A request admitted, in flight until the [`Flight`] is dropped.
    pub(crate) fn flight(self: &Arc<Self>) -> Flight {
        self.exchanges.fetch_add(1, Ordering::Relaxed);
        Flight(self.clone())
    }

    /// How many refusal records were not kept (over the per-call cap).
    pub(crate) fn dropped(&self) -> u64 {
        self.log.lock().map(|l| l.dropped).unwrap_or(0)
    }

    /// The call's `denied` lines so far.
    pub(crate) fn denied(&self) -> Vec<String> {
        self.denied.lock().map(|d| d.clone()).unwrap_or_default()
    }

    /// The records of every request and connection, for the call's
    /// receipt: from now on no request starts (a record that says a request
    /// was not sent stays true) and no refusal is filed.
    pub(crate) fn close(&self) -> Vec<EgressRecord> {
        match self.log.lock() {
            Ok(mut l) => {
                l.closed = true;
                l.records.clone()
            }
            Err(_) => Vec::new(),
        }
    }

    /// Records why request `index` failed, `started` its start.
    fn fail(&self, index: usize, e: &HttpError, started: Instant) {
        let (error, ms) = (e.to_string().into(), elapsed_ms(started));
        self.update(index, |r| {
            r.error = Some(error);
            r.ms = ms;
        });
    }

    /// Starts admitted request `index`: false once the call's receipt was
    /// taken ([`CallNet::close`]).
    fn start(&self, index: usize) -> bool {
        match self.log.lock() {
            Ok(mut l) if !l.closed => {
                if let Some(r) = l.records.get_mut(index) {
                    r.error = Some(NO_RESPONSE.into());
                }
                true
            }
            _ => false,
        }
    }

    fn egress(&self) -> Option<&Arc<Egress>> {
        self.grant.egress.as_ref()
    }

    fn deny(&self, line: String) {
        if let Ok(mut d) = self.denied.lock() {
            record_denied(&mut d, &self.unlisted, line);
        }
    }

    /// Records a refused request (receipt record and `denied` line).
    fn refuse(&self, request: &Request, path: &str, refusal: &Refusal) {
        let record = EgressRecord::refused(request, path, refusal);
        self.file_refusal(None, record, refusal.code());
    }

    /// Records a request refused by a per-call limit.
    fn refuse_limit(&self, request: &Request, path: &str, reason: String) {
        self.refuse_with(request, path, "limit_reached", reason);
    }

    /// Records a request given up because its name's lookup outlasted the
    /// request's time (nothing was connected).
    /// (`at`: the request's own record, which the refusal replaces).
    fn refuse_timeout(&self, at: usize, request: &Request, path: &str, started: Instant) {
        let code = "dns_timeout";
        let reason = "the name's lookup did not finish within the request's time \
                      (network.request_timeout_ms, the call's deadline)";
        let mut record = EgressRecord::refused_with(request, path, code, reason.to_string());
        record.ms = elapsed_ms(started);
        self.file_refusal(Some(at), record, code);
    }

    fn refuse_with(&self, request: &Request, path: &str, code: &str, reason: String) {
        let record = EgressRecord::refused_with(request, path, code, reason);
        self.file_refusal(None, record, code);
    }

    /// Records a name lookup through `wasi:sockets`, refused: with why the
    /// call has no network at all, or `lookup_refused`. The name is the
    /// guest's text, bounded (a DNS name is at most 253 bytes), quoted and
    /// escaped, and bounded again, so that the line keeps its code.
    fn refuse_lookup(&self, name: &str) {
        let quoted = format!("{:?}", bounded(name, 253));
        let shown = bounded(&quoted, 300);
        let code = match self.egress() {
            None => self.grant.off_reason().code(),
            Some(_) => "lookup_refused",
        };
        self.deny(format!("network: lookup {shown}: {code}"));
    }

    /// Records a request refused before it could be read as one (see
    /// [`EgressRecord::unreadable`]).
    pub(crate) fn refuse_unreadable(&self, method: &str, url: &str, code: &str, reason: String) {
        let record = EgressRecord::unreadable(method, url, code, reason);
        self.file_refusal(None, record, code);
    }

    /// Files a refusal's record and its `denied` line together, under the
    /// log's lock (then the `denied` list's): both are in the call's
    /// receipt, or, once it was taken, neither is filed. The line names the
    /// record's method, or a socket's scheme.
    fn file_refusal(&self, at: Option<usize>, record: EgressRecord, code: &str) {
        let Ok(mut l) = self.log.lock() else {
            return;
        };
        if l.closed {
            return;
        }
        let label = match &record.method {
            Some(m) => m.as_str(),
            None => record.url.split("://").next().unwrap_or_default(),
        };
        self.deny(format!("network: {label} {}: {code}", record.url));
        match at.and_then(|i| l.records.get_mut(i)) {
            Some(kept) => *kept = record,
            None => {
                l.keep(record);
            }
        }
    }

    /// Counts one admitted request or connection against `max_requests`
    /// and keeps its record, under one lock; `None` (nothing counted or
    /// kept) when over the limit.
    fn count_and_keep(&self, max: u32, record: EgressRecord) -> Option<usize> {
        match self.log.lock() {
            Ok(mut l) if !l.closed && l.requests < max => {
                l.requests += 1;
                Some(l.keep(record))
            }
            _ => None,
        }
    }

    fn update(&self, index: usize, f: impl FnOnce(&mut EgressRecord)) {
        if let Ok(mut l) = self.log.lock()
            && let Some(r) = l.records.get_mut(index)
        {
            f(r);
        }
    }

    /// Adds `n` response bytes to record `index` and to the call's total;
    /// false when the total is now above `max`.
    fn add_bytes_in(&self, index: usize, n: u64, max: u64) -> bool {
        match self.log.lock() {
            Ok(mut l) => {
                l.bytes_in = l.bytes_in.saturating_add(n);
                let total = l.bytes_in;
                if let Some(r) = l.records.get_mut(index) {
                    r.bytes_in = r.bytes_in.saturating_add(n);
                }
                total <= max
            }
            Err(_) => false,
        }
    }

    /// The time a request may take from now: its own timeout, cut at the
    /// call's deadline.
    fn request_budget(&self, timeout: Duration) -> Duration {
        timeout.min(self.deadline.saturating_duration_since(Instant::now()))
    }

    /// Step 1 of an HTTP request: the policy's decision and the request
    /// limit. Pure apart from the records.
    pub(crate) fn admit_http(&self, req: &http::Request<WasiBody>) -> Result<Admitted, HttpError> {
        let uri = req.uri();
        let method = req.method().as_str();
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
        let scheme = match uri.scheme_str().map(str::parse::<Scheme>) {
            Some(Ok(s)) if s.is_http() => s,
            _ => {
                // `to_http` refused it already, with the hooks' schemes:
                // here for a caller that did not.
                let reason = ONLY_HTTP.to_string();
                self.refuse_unreadable(method, &uri.to_string(), "unsupported_scheme", reason);
                return Err(HttpError::HttpProtocolError);
            }
        };
        let authority = uri.authority().map_or("", |a| a.as_str());
        let request = match Request::from_authority(scheme, authority, Some(method)) {
            Ok(r) => r,
            Err(e) => {
                self.refuse_unreadable(method, &uri.to_string(), "invalid_url", e.to_string());
                return Err(HttpError::HttpRequestUriInvalid);
            }
        };
        // TRACE (and IIS's TRACK) echoes the request back, headers
        // included, so a guest could read the credential the host attaches;
        // CONNECT would make the host a tunnel. None is sent, in any case
        // of spelling, whatever the grant (or
        // whether the call has any).
        if ["TRACE", "TRACK", "CONNECT"]
            .iter()
            .any(|m| req.method().as_str().eq_ignore_ascii_case(m))
        {
            self.refuse_with(
                &request,
                &path,
                "method_refused",
                format!("the host never sends {method} requests"),
            );
            return Err(HttpError::HttpRequestMethodInvalid);
        }
        let Some(egress) = self.egress() else {
            let refusal = Refusal::Denied {
                reason: self.grant.off_reason(),
            };
            self.refuse(&request, &path, &refusal);
            return Err(HttpError::HttpRequestDenied);
        };
        let (rule, approved) = match egress.policy.decide_with(&request, &self.grant.rules) {
            Decision::Allow { rule } => (rule, false),
            Decision::Ask { rule } if self.grant.ask_approved => (rule, true),
            Decision::Ask { rule } => {
                let refusal = Refusal::ApprovalRequired {
                    rule,
                    addrs: Vec::new(),
                };
                self.refuse(&request, &path, &refusal);
                return Err(HttpError::HttpRequestDenied);
            }
            Decision::Deny { reason } => {
                let refusal = Refusal::Denied { reason };
                self.refuse(&request, &path, &refusal);
                return Err(http_error(&refusal));
            }
        };
        let max = egress.policy.limits().max_requests;
        let mut record = EgressRecord::allowed(&request, &path, &rule, approved);
        record.error = Some(NOT_SENT.into());
        let Some(index) = self.count_and_keep(max, record) else {
            self.refuse_limit(
                &request,
                &path,
                format!("this call may make at most {max} network requests (network.max_requests)"),
            );
            return Err(HttpError::ConnectionLimitReached);
        };
        Ok(Admitted {
            request,
            path,
            rule,
            index,
        })
    }

    /// Steps 2 to 5 of an HTTP request that was admitted: the response's
    /// head, and what drives its connection afterwards. In place (`place`
    /// is not [`Place::Task`]), the response's body drives it as the guest
    /// reads (no task: the future runs wherever it is polled, the guest's
    /// own thread); otherwise a task of its own does, whose handle is
    /// returned (dropping it ends the connection). `flight` counts the
    /// exchange in flight; the response's body keeps it until it ends.
    pub(crate) async fn send(
        self: Arc<Self>,
        admitted: Admitted,
        mut req: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        place: Place,
        flight: Flight,
    ) -> Sent {
        let Admitted {
            request,
            path,
            rule,
            index,
        } = admitted;
        let Some(egress) = self.egress().cloned() else {
            return Err(HttpError::HttpRequestDenied);
        };
        if !self.start(index) {
            return Err(HttpError::InternalError(Some(
                "the call ended before the request started".into(),
            )));
        }
        let started = Instant::now();
        // A failure before the response's head: its record says what it was.
        let failed = |e: HttpError| {
            self.fail(index, &e, started);
            e
        };
        // The request's whole time, its name's lookup included: its own
        // timeout, cut at the call's deadline. The guest's own timeouts
        // (wasi:http request options) each bound one phase within it: the
        // connection (lookup, connect, TLS), the response's head, and each
        // wait for more of its body.
        let limits = egress.policy.limits();
        let now = tokio::time::Instant::now();
        let until = now + self.request_budget(limits.request_timeout());
        let option = |pick: fn(&RequestOptions) -> Option<Duration>| {
            options
                .as_ref()
                .and_then(pick)
                .map(|t| t.max(Duration::from_millis(1)))
        };
        let (connect_timeout, first_byte_timeout, between_bytes_timeout) = (
            option(|o| o.connect_timeout),
            option(|o| o.first_byte_timeout),
            option(|o| o.between_bytes_timeout),
        );
        let connected_by = connect_timeout.map_or(until, |t| until.min(now + t));
        // Resolve once and check every address (a name's lookup blocks, so
        // it runs off the executor; a lookup that outlasts the request's
        // time is given up, its thread left to finish on its own).
        let plan = match &request.host {
            Host::Ip(_) => connect_plan_approved(
                &request,
                &egress.policy,
                &self.grant.rules,
                &rule,
                &NoLookup,
            ),
            Host::Name(_) => {
                let (looked_up, egress, rule) = (request.clone(), egress.clone(), rule.clone());
                // The rules' grants only (an empty list allocates
                // nothing): a lookup given up keeps nothing else alive.
                let rules = self.grant.rules.clone();
                let lookup = tokio::task::spawn_blocking(move || {
                    connect_plan_approved(
                        &looked_up,
                        &egress.policy,
                        &rules,
                        &rule,
                        &*egress.resolver,
                    )
                });
                match tokio::time::timeout_at(connected_by, lookup).await {
                    Ok(joined) => {
                        joined.map_err(|e| failed(HttpError::InternalError(Some(e.to_string()))))?
                    }
                    Err(_) => {
                        self.refuse_timeout(index, &request, &path, started);
                        return Err(HttpError::DnsTimeout);
                    }
                }
            }
        };
        let plan = match plan {
            Ok(plan) => plan,
            Err(refusal) => {
                let record = EgressRecord::refused(&request, &path, &refusal);
                self.file_refusal(Some(index), record, refusal.code());
                return Err(http_error(&refusal));
            }
        };

        // The credential of exactly this host, replacing the guest's header
        // of that name; the Host header names the request's host.
        let headers = req.headers_mut();
        let credential =
            egress
                .credentials
                .credential_for(request.scheme, &request.host, request.port);
        if let Some(c) = credential {
            let name = HeaderName::from_bytes(c.header().as_bytes())
                .map_err(|e| failed(HttpError::InternalError(Some(e.to_string()))))?;
            let secret = c.header_value();
            let mut value = HeaderValue::from_str(secret.expose())
                .map_err(|_| failed(HttpError::InternalError(Some("invalid credential".into()))))?;
            value.set_sensitive(true);
            headers.remove(&name);
            headers.insert(name, value);
            // Its response must come as it is, so that an echo of the secret
            // is found and masked: not compressed (which would hide it) and
            // whole (a range could cut it).
            headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
            headers.remove(RANGE);
            headers.remove(IF_RANGE);
            headers.remove(TE);
        }
        let host_header = match request.scheme.default_port() {
            Some(p) if p == request.port => request.host.to_string(),
            _ => format!("{}:{}", request.host, request.port),
        };
        let host_value = HeaderValue::from_str(&host_header)
            .map_err(|_| failed(HttpError::HttpRequestUriInvalid))?;
        headers.insert(HOST, host_value);
        // The request line carries the path only.
        *req.uri_mut() = http::Uri::builder()
            .path_and_query(path.as_str())
            .build()
            .map_err(|_| failed(HttpError::HttpRequestUriInvalid))?;
        // Count the bytes sent.
        let out = self.clone();
        let req = req.map(move |body| {
            body.map_frame(move |frame| {
                if let Some(data) = frame.data_ref() {
                    let n = data.len() as u64;
                    out.update(index, |r| r.bytes_out = r.bytes_out.saturating_add(n));
                }
                frame
            })
            .boxed_unsync()
        });

        let tls = request.scheme == Scheme::Https;
        let connection = async {
            let stream: Box<dyn Stream> = if place == Place::Caller {
                Box::new(connect(&plan.addrs, |a| crate::egress::nosigpipe::connect_here(a, self.clone())).await?)
            } else {
                Box::new(connect(&plan.addrs, crate::egress::nosigpipe::connect).await?)
            };
            let io: Box<dyn Stream> = if tls {
                let name = server_name(&request.host)?;
                let connector = tokio_rustls::TlsConnector::from(egress.tls.clone());
                let stream = connector.connect(name, stream).await.map_err(tls_error)?;
                // In a task of its own the connection's end is its task's
                // to make; a yield there could let the guest's drop of the
                // body abort the task before the closure alert is sent.
                if place == Place::Task {
                    Box::new(stream)
                } else {
                    Box::new(CloseAfterYield::new(stream))
                }
            } else {
                Box::new(CloseAfterYield::new(stream))
            };
            hyper::client::conn::http1::handshake(TokioIo::new(io))
                .await
                .map_err(HttpError::Hyper)
        };
        let connected = {
            let mut connection = std::pin::pin!(connection);
            let connection =
                std::future::poll_fn(|cx| place.drive(cx, |cx| connection.as_mut().poll(cx)));
            tokio::time::timeout_at(connected_by, connection)
                .await
                .unwrap_or(Err(HttpError::ConnectionTimeout))
        };
        let (mut sender, conn) = connected.map_err(failed)?;
        // The head: by the request's time (`connection-timeout`, as before
        // the connection), or by the guest's first-byte timeout
        // (`connection-read-timeout`). The connection is driven here until
        // then (it sends the request and reads the head); a connection that
        // ends first (it failed) fails the request.
        let mut conn = Some(Box::pin(conn));
        let sending = sender.send_request(req);
        let mut sending = std::pin::pin!(sending);
        let mut exchange = |cx: &mut Context<'_>| {
            if let Poll::Ready(head) = sending.as_mut().poll(cx) {
                return Poll::Ready(head);
            }
            match conn.as_mut().map(|c| c.as_mut().poll(cx)) {
                Some(Poll::Ready(_)) => {
                    conn = None;
                    sending.as_mut().poll(cx)
                }
                _ => Poll::Pending,
            }
        };
        let sending = std::future::poll_fn(|cx| place.drive(cx, &mut exchange));
        let head = match first_byte_timeout.map(|t| tokio::time::Instant::now() + t) {
            Some(by) if by < until => tokio::time::timeout_at(by, sending)
                .await
                .map_err(|_| HttpError::ConnectionReadTimeout),
            _ => tokio::time::timeout_at(until, sending)
                .await
                .map_err(|_| HttpError::ConnectionTimeout),
        };
        let mut response = head
            .and_then(|r| r.map_err(HttpError::Hyper))
            .map_err(failed)?;
        // A request that carried a credential asked for its response
        // uncompressed; one that comes compressed anyway could hide an
        // echo of the secret from the mask, and is refused.
        if credential.is_some()
            && let Some(coding) = encoded(response.headers())
        {
            return Err(failed(coding));
        }
        // The guest never reads the secret back: the server it was sent to
        // has an echo of it masked (in a header, the body or the trailers),
        // the body read whole first (`MaskedBody`). Other servers never
        // received it, and their responses are passed on as they come: a
        // mask there would only tell a guest which of its own bytes begin
        // a secret.
        let masking = credential.is_some();
        if masking {
            mask_headers(&egress.credentials, response.headers_mut());
        }
        let status = response.status().as_u16();
        self.update(index, |r| {
            r.status = Some(status);
            r.ms = elapsed_ms(started);
            r.error = None;
        });
        // Then the connection lives at most until the request's time is up
        // (a request body the guest streams slowly, a response body it
        // reads slowly: neither outlasts it): in a task of its own, stopped
        // then; driven by its body, polled only by the body's reads, which
        // that time ends. A connection that fails after the response's head
        // fails its body, which is where the guest sees it.
        let net = self.clone();
        let (conn, worker): (Option<Conn>, _) = match conn {
            Some(conn) if place == Place::Task => {
                let conn = async move {
                    let _ = tokio::time::timeout_at(until, conn).await;
                };
                (None, Some(wasmtime_wasi::runtime::spawn(conn)))
            }
            Some(conn) => (
                Some(Box::pin(async move {
                    let _ = conn.await;
                })),
                None,
            ),
            None => (None, None),
        };
        let response = response.map(move |incoming| {
            let body = LimitedBody {
                inner: Box::pin(incoming),
                conn,
                net,
                index,
                max: limits.max_response_bytes,
                until: Box::pin(tokio::time::sleep_until(until)),
                between: between_bytes_timeout.map(Between::new),
                started,
                place,
                flight: Some(flight),
                closure_alert: tls,
            };
            if masking {
                MaskedBody::new(body, egress).boxed_unsync()
            } else {
                body.boxed_unsync()
            }
        });
        Ok((response, worker))
    }

    /// The socket address check: decides one use of `addr` by the guest.
    pub(crate) fn check_socket(&self, addr: SocketAddr, use_: SocketAddrUse) -> bool {
        if matches!(use_, SocketAddrUse::UdpReceive) {
            // A datagram that came, not an attempt of the guest's: taken
            // from a peer the guest sent to (which its grant allowed),
            // dropped unrecorded from anyone else, who could otherwise
            // write the guest's receipt (a forged sender) and fill its
            // refusal records.
            return self
                .log
                .lock()
                .map(|l| l.udp_peers.contains(&(addr.ip(), addr.port())))
                .unwrap_or(false);
        }
        // The call's receipt was taken (or the call gave up on its body):
        // nothing more goes out, and nothing more is filed.
        if self.log.lock().map_or(true, |l| l.closed) {
            return false;
        }
        let scheme = match use_ {
            SocketAddrUse::TcpBind
            | SocketAddrUse::TcpListen
            | SocketAddrUse::TcpAccept
            | SocketAddrUse::TcpConnect => Scheme::Tcp,
            _ => Scheme::Udp,
        };
        let refuse_line = |why: &str| format!("network: {use_:?} {addr}: {why}");
        match use_ {
            SocketAddrUse::TcpBind | SocketAddrUse::UdpBind => {
                return self.check_bind(addr, scheme, refuse_line);
            }
            SocketAddrUse::TcpListen | SocketAddrUse::TcpAccept => {
                // A refused listen drops its socket (and a listening
                // socket, which an accept needs, never exists).
                if matches!(use_, SocketAddrUse::TcpListen) {
                    self.unbind(scheme);
                }
                self.deny(refuse_line(match self.egress() {
                    None => self.grant.off_reason().code(),
                    Some(_) => "listen_refused",
                }));
                return false;
            }
            // A connect without a grant of TCP is refused below, and its
            // socket is dropped with it.
            SocketAddrUse::TcpConnect => self.unbind(scheme),
            _ => {}
        }
        let request = Request::new(scheme, Host::Ip(addr.ip()), addr.port(), None);
        let Some(egress) = self.egress() else {
            let refusal = Refusal::Denied {
                reason: self.grant.off_reason(),
            };
            self.refuse(&request, "", &refusal);
            return false;
        };
        let rule = match egress.policy.decide_with(&request, &self.grant.rules) {
            Decision::Allow { rule } => rule,
            Decision::Ask { rule } if self.grant.ask_approved => rule,
            Decision::Ask { rule } => {
                self.refuse(
                    &request,
                    "",
                    &Refusal::ApprovalRequired {
                        rule,
                        addrs: Vec::new(),
                    },
                );
                return false;
            }
            Decision::Deny { reason } => {
                self.refuse(&request, "", &Refusal::Denied { reason });
                return false;
            }
        };
        let Some(grant) = egress.policy.grant_with(&rule, &self.grant.rules) else {
            self.refuse(&request, "", &Refusal::StaleRule { rule });
            return false;
        };
        if let Err(refusal) = check_addr(addr.ip(), &request.host, std::slice::from_ref(grant)) {
            self.refuse(&request, "", &refusal);
            return false;
        }
        // A UDP peer's datagrams (and its replies) are one record.
        // (Closed meanwhile: not seen, and refused by the count below.)
        let seen = matches!(use_, SocketAddrUse::UdpSend)
            && self
                .log
                .lock()
                .map(|l| !l.closed && l.udp_peers.contains(&(addr.ip(), addr.port())))
                .unwrap_or(false);
        if seen {
            return true;
        }
        let max = egress.policy.limits().max_requests;
        let approved = self.grant.ask_approved && rule.list == toolhost_egress::GrantList::Ask;
        let record = EgressRecord::allowed(&request, "", &rule, approved);
        if self.count_and_keep(max, record).is_none() {
            self.refuse_limit(
                &request,
                "",
                format!("this call may make at most {max} network requests (network.max_requests)"),
            );
            return false;
        }
        if let Ok(mut l) = self.log.lock()
            && scheme == Scheme::Udp
        {
            l.udp_peers.push((addr.ip(), addr.port()));
        }
        true
    }

    /// Whether the call may use a grant of `scheme`'s protocol: an `allow`
    /// one, a matched rule's, or an `ask` one its approval covered.
    fn grants_protocol(&self, scheme: Scheme) -> bool {
        let grant = &self.grant;
        let Some(egress) = &grant.egress else {
            return false;
        };
        let covers =
            |grants: &[toolhost_egress::Grant]| grants.iter().any(|g| g.scheme() == scheme);
        covers(egress.policy.allow())
            || grant.rules.iter().any(|r| covers(r.grants()))
            || (grant.ask_approved && covers(egress.policy.ask()))
    }

    /// A bind (a connect's or a send's implicit one, or the guest's own):
    /// to port 0 only, the port the system picks. It reaches nothing, so it
    /// needs no grant, and is not recorded: the connect, send or listen
    /// that follows is decided, and recorded with its destination. Without
    /// a grant of the protocol, only to the unspecified or a loopback
    /// address (a bind elsewhere would tell the guest which addresses the
    /// machine has), and at most [`MAX_UNGRANTED_BINDS`] times.
    fn check_bind(
        &self,
        addr: SocketAddr,
        scheme: Scheme,
        refuse_line: impl Fn(&str) -> String,
    ) -> bool {
        if addr.port() != 0 {
            self.deny(refuse_line(
                "bind_refused (only port 0, which the system picks, is bound)",
            ));
            return false;
        }
        if self.grants_protocol(scheme) {
            return true;
        }
        if !(addr.ip().is_unspecified() || addr.ip().is_loopback()) {
            self.deny(refuse_line(&format!(
                "bind_refused (without a grant of {scheme}, only to the unspecified or a loopback address)"
            )));
            return false;
        }
        let mut closed = false;
        let bound = self.log.lock().is_ok_and(|mut l| {
            if l.closed {
                closed = true;
                return false;
            }
            let held = &mut l.ungranted_binds[usize::from(scheme == Scheme::Udp)];
            let ok = *held < MAX_UNGRANTED_BINDS;
            if ok {
                *held += 1;
            } else {
                // What the socket would have reached is not seen: counted
                // with the refusal records not kept.
                l.dropped += 1;
            }
            ok
        });
        if !bound && !closed {
            self.deny(refuse_line(&format!(
                "bind_refused (limit_reached: a call may bind at most {MAX_UNGRANTED_BINDS} sockets without a grant of {scheme})"
            )));
        }
        bound
    }

    /// A TCP socket bound without a grant is dropped: its connect or
    /// listen, which no grant allows, is refused.
    fn unbind(&self, scheme: Scheme) {
        if self.grants_protocol(scheme) {
            return;
        }
        if let Ok(mut l) = self.log.lock() {
            let held = &mut l.ungranted_binds[usize::from(scheme == Scheme::Udp)];
            *held = held.saturating_sub(1);
        }
    }
}

/// A resolver for address literals only: a plan of an address literal
/// never looks anything up.
struct NoLookup;

impl toolhost_egress::Resolver for NoLookup {
    fn resolve(
        &self,
        _host: &str,
        _port: u16,
    ) -> Result<Vec<SocketAddr>, toolhost_egress::ResolveError> {
        Err(toolhost_egress::ResolveError::new(
            "no lookup for an address",
        ))
    }
}

/// wasi:http's error code for a refusal (see `toolhost_egress::Refusal`).
fn http_error(refusal: &Refusal) -> HttpError {
    match refusal {
        Refusal::AddressRefused { .. }
        | Refusal::Denied {
            reason: toolhost_egress::DenyReason::AddressRefused { .. },
        } => HttpError::DestinationIpProhibited,
        Refusal::ResolveFailed { .. } | Refusal::NoAddress { .. } => HttpError::DnsError {
            rcode: Some("name unresolvable".to_string()),
            info_code: None,
        },
        _ => HttpError::HttpRequestDenied,
    }
}

fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A connection the client can speak HTTP over (plain or TLS).
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Stream for T {}

/// A connection whose shutdown first lets the tasks it woke run.
///
/// hyper shuts a connection down (and then closes it) in the same poll
/// that hands the response body's end to the guest, so the guest waited
/// for both system calls. Yielding once before the shutdown lets the guest
/// have the body's end first:
/// - in a task of its own (plain TCP only), that task runs first (or
///   another worker takes this one). The guest, having the whole body,
///   then usually drops it, which aborts the connection's task before the
///   shutdown: the socket is closed when the task is dropped, a FIN as the
///   shutdown would have sent. A TLS connection there is not wrapped: its
///   shutdown sends TLS's `close_notify` first, which a close alone would
///   leave out;
/// - driven by its body (plain or TLS), the body's end comes while the
///   connection is still open, and [`LimitedBody::end_connection`] ends
///   it: a plain one is closed (its FIN, without the shutdown), a TLS one's
///   closure alert is sent by a task, off the guest's path.
struct CloseAfterYield<S> {
    inner: S,
    yielded: bool,
}

impl<S> CloseAfterYield<S> {
    fn new(inner: S) -> Self {
        CloseAfterYield {
            inner,
            yielded: false,
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for CloseAfterYield<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for CloseAfterYield<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if !self.yielded {
            self.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Connects to the first of `addrs` that accepts, each through `connect`.
async fn connect<S, F: Future<Output = std::io::Result<S>>>(
    addrs: &[SocketAddr],
    connect: impl Fn(SocketAddr) -> F,
) -> Result<S, HttpError> {
    let mut last = None;
    for addr in addrs {
        match connect(*addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.map_or(HttpError::DestinationNotFound, HttpError::Connect))
}

/// The name the server's certificate must carry: the request's host name,
/// or its address.
fn server_name(host: &Host) -> Result<rustls_pki_types::ServerName<'static>, HttpError> {
    match host {
        Host::Ip(ip) => Ok(rustls_pki_types::ServerName::IpAddress((*ip).into())),
        Host::Name(n) => rustls_pki_types::ServerName::try_from(n.as_str().to_string())
            .map_err(|_| HttpError::HttpRequestUriInvalid),
    }
}

/// The between-bytes timer of a response body.
struct Between {
    gap: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
    running: bool,
}

impl Between {
    fn new(gap: Duration) -> Between {
        Between {
            gap,
            timer: Box::pin(tokio::time::sleep(gap)),
            running: false,
        }
    }

    /// Whether the server has been silent for the whole gap, the timer
    /// started now if it was not running.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.running {
            self.running = true;
            let at = tokio::time::Instant::now() + self.gap;
            self.timer.as_mut().reset(at);
        }
        self.timer.as_mut().poll(cx).is_ready()
    }
}

/// What an HTTP request gives its guest: the response (its head; its body
/// reads from the connection) and, when a task of its own drives the
/// connection, that task's handle.
pub(crate) type Sent =
    Result<(http::Response<WasiBody>, Option<AbortOnDropJoinHandle<()>>), HttpError>;

/// An HTTP/1 connection's own future: it sends the request and reads the
/// response, and ends when the exchange is over or its time is up.
type Conn = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A response body that counts its bytes into the call's records and
/// stops at the call's response byte limit and the request's deadline.
struct LimitedBody<B = hyper::body::Incoming> {
    inner: Pin<Box<B>>,
    /// The connection, when the body drives it: polled when the body has
    /// nothing ready, and ended when the body ends or is dropped
    /// ([`LimitedBody::end_connection`]).
    conn: Option<Conn>,
    net: Arc<CallNet>,
    index: usize,
    max: u64,
    until: Pin<Box<tokio::time::Sleep>>,
    /// The guest's between-bytes timeout and its timer: started when a
    /// read finds nothing yet (the server's gap, not the guest's own pause
    /// between reads), stopped when a frame comes.
    between: Option<Between>,
    started: Instant,
    /// Where it is exchanged: in [`Place::Caller`], its connection's socket
    /// may wait on the thread that polls it.
    place: Place,
    /// The exchange is in flight until its body ends (`None` then) or is
    /// dropped.
    flight: Option<Flight>,
    /// The connection ends with TLS's closure alert, sent when the body
    /// ends ([`LimitedBody::end_connection`]).
    closure_alert: bool,
}

/// A body dropped before its end (a guest that stops reading) ends its
/// connection as its end would: a TLS one with its closure alert.
impl<B> Drop for LimitedBody<B> {
    fn drop(&mut self) {
        self.end_connection();
    }
}

impl<B> LimitedBody<B> {
    /// Ends the body with `e`, which its record keeps.
    fn fail<T>(&mut self, e: HttpError) -> Poll<Option<Result<T, HttpError>>> {
        if self.flight.take().is_some() {
            self.net.fail(self.index, &e, self.started);
        }
        Poll::Ready(Some(Err(e)))
    }

    /// The guest has the whole body (or has dropped it), and the connection
    /// it drives is not polled again on its path. A plain one is closed
    /// (the FIN its shutdown would send). TLS's closure alert, which a TLS
    /// client must send before it closes, is sent by a task of its own,
    /// stopped at the request's time; without a runtime to run it (or if
    /// the runtime stops first) the connection is closed without it.
    fn end_connection(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if self.closure_alert
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            drop(runtime.spawn(tokio::time::timeout_at(self.until.deadline(), conn)));
        }
    }

    fn finish(&mut self) {
        self.end_connection();
        if self.flight.take().is_some() {
            let ms = elapsed_ms(self.started);
            self.net.update(self.index, |r| r.ms = ms);
        }
    }
}

impl<B: Body<Data = Bytes, Error = hyper::Error>> Body for LimitedBody<B> {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let this = self.get_mut();
        if this.flight.is_none() {
            return Poll::Ready(None);
        }
        // The request's time is checked before each read, not only while
        // the guest waits: a slow body always has data waiting for a guest
        // that reads slowly.
        if tokio::time::Instant::now() >= this.until.deadline() {
            return this.fail(HttpError::ConnectionReadTimeout);
        }
        let (conn, inner) = (&mut this.conn, &mut this.inner);
        // What the connection has already given is read first: the
        // connection is polled only for more, so that its end is not made
        // on the guest's path before the guest has the body's end
        // ([`LimitedBody::end_connection`] then closes it).
        let read = |cx: &mut Context<'_>| {
            if let ready @ Poll::Ready(_) = inner.as_mut().poll_frame(cx) {
                return ready;
            }
            let Some(c) = conn.as_mut() else {
                return Poll::Pending;
            };
            if c.as_mut().poll(cx).is_ready() {
                *conn = None;
            }
            inner.as_mut().poll_frame(cx)
        };
        match this.place.drive(cx, read) {
            Poll::Ready(None) => {
                this.finish();
                Poll::Ready(None)
            }
            // A connection whose time ran out while the body was polled (its
            // task stopped, hyper's body cut short) failed the body by that
            // time: a read timeout, as a later read would have been.
            Poll::Ready(Some(Err(_))) if tokio::time::Instant::now() >= this.until.deadline() => {
                this.fail(HttpError::ConnectionReadTimeout)
            }
            Poll::Ready(Some(Err(e))) => this.fail(HttpError::Hyper(e)),
            Poll::Ready(Some(Ok(frame))) => {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                if !this.net.add_bytes_in(this.index, n, this.max) {
                    return this.fail(HttpError::HttpResponseBodySize(Some(this.max)));
                }
                if let Some(between) = this.between.as_mut() {
                    between.running = false;
                }
                // Trailers are the last frame: the guest may drop the body
                // without asking for more.
                if frame.is_trailers() {
                    this.finish();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                let waited_too_long = this.between.as_mut().is_some_and(|b| b.expired(cx));
                if waited_too_long || this.until.as_mut().poll(cx).is_ready() {
                    return this.fail(HttpError::ConnectionReadTimeout);
                }
                Poll::Pending
            }
        }
    }
}

/// A failed TLS handshake as wasi:http names it: a certificate the
/// client does not trust (unknown issuer, expired, another name) is a
/// certificate error, an alert from the server is that alert, anything
/// else is the protocol's error.
fn tls_error(e: std::io::Error) -> HttpError {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(_)) => HttpError::TlsCertificateError,
        Some(rustls::Error::AlertReceived(alert)) => HttpError::TlsAlertReceived {
            alert_id: Some(u8::from(*alert)),
            alert_message: Some(format!("{alert:?}")),
        },
        _ => HttpError::Tls(e),
    }
}

/// The error for a response whose body the mask could not read: the first
/// coding its `content-encoding` names other than `identity`
/// (`HTTP-response-content-coding`), or its `transfer-encoding` other than
/// `identity` or `chunked`, which hyper undoes
/// (`HTTP-response-transfer-coding`), in any of their values.
fn encoded(headers: &http::HeaderMap) -> Option<HttpError> {
    let codings = |name| {
        headers
            .get_all(name)
            .into_iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|c| !c.is_empty())
    };
    let plain = |c: &&[u8], also: &[u8]| {
        c.eq_ignore_ascii_case(b"identity") || c.eq_ignore_ascii_case(also)
    };
    let named = |c: &[u8]| Some(String::from_utf8_lossy(c).into_owned());
    if let Some(c) = codings(CONTENT_ENCODING).find(|c| !plain(c, b"identity")) {
        return Some(HttpError::HttpResponseContentCoding(named(c)));
    }
    codings(TRANSFER_ENCODING)
        .find(|c| !plain(c, b"chunked"))
        .map(|c| HttpError::HttpResponseTransferCoding(named(c)))
}

/// `headers` with every loaded secret masked in their values; a header
/// whose name holds one is dropped. The map is rebuilt only when some
/// header holds a secret.
fn mask_headers(credentials: &Credentials, headers: &mut http::HeaderMap) {
    let in_name = |name: &http::HeaderName| credentials.in_header_name(name.as_str().as_bytes());
    if !headers
        .iter()
        .any(|(name, value)| in_name(name) || credentials.contains(value.as_bytes()))
    {
        return;
    }
    let mut kept = http::HeaderMap::with_capacity(headers.len());
    for (name, value) in headers.iter() {
        if in_name(name) {
            continue;
        }
        let mut bytes = value.as_bytes().to_vec();
        let value = if credentials.mask(&mut bytes) {
            // A mask byte is a visible character: the value stays valid.
            match HeaderValue::from_bytes(&bytes) {
                Ok(v) => v,
                Err(_) => continue,
            }
        } else {
            value.clone()
        };
        kept.append(name.clone(), value);
    }
    *headers = kept;
}

/// The body of a response from the server a credential was sent to, with
/// every loaded secret masked, its trailers' values too.
///
/// Nothing the guest can observe of it depends on the secret: the body is
/// read whole (within the call's response byte limit and the request's
/// time, which [`LimitedBody`] enforces) before the guest reads any of it,
/// then masked in place ([`Credentials::mask`], whose cost does not depend
/// on how the bytes relate to a secret) and given as one data frame, then
/// the trailers (a trailers frame, kept even when every trailer was
/// dropped), then its end. So the sizes and timing of the guest's reads,
/// the frames, the end and any error are what they would be for any other
/// bytes of the same length. A stream that masked as it went would have
/// to hold back the bytes that could begin a secret, and where the
/// guest's reads then ended would tell it which of its guesses do.
struct MaskedBody<B> {
    inner: B,
    egress: Arc<Egress>,
    state: Masking,
}

enum Masking {
    /// Reading the body: the bytes and trailers so far.
    Reading {
        data: Vec<u8>,
        trailers: Option<http::HeaderMap>,
    },
    /// Masked: the frames still to give, in order.
    Giving(std::collections::VecDeque<Frame<Bytes>>),
}

impl<B> MaskedBody<B> {
    fn new(inner: B, egress: Arc<Egress>) -> MaskedBody<B> {
        MaskedBody {
            inner,
            egress,
            state: Masking::Reading {
                data: Vec::new(),
                trailers: None,
            },
        }
    }
}

impl<B> Body for MaskedBody<B>
where
    B: Body<Data = Bytes, Error = HttpError> + Unpin,
{
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let this = self.get_mut();
        loop {
            let (data, trailers) = match &mut this.state {
                Masking::Giving(frames) => return Poll::Ready(frames.pop_front().map(Ok)),
                Masking::Reading { data, trailers } => (data, trailers),
            };
            match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(bytes) => data.extend_from_slice(&bytes),
                    Err(frame) => {
                        // Trailers end a body; a frame of another kind
                        // carries nothing to give.
                        if let Ok(mut t) = frame.into_trailers() {
                            mask_headers(&this.egress.credentials, &mut t);
                            trailers.get_or_insert_with(http::HeaderMap::new).extend(t);
                        }
                    }
                },
                // Nothing read is given: the guest sees the error alone.
                Some(Err(e)) => {
                    this.state = Masking::Giving(Default::default());
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    let mut data = std::mem::take(data);
                    this.egress.credentials.mask(&mut data);
                    let mut frames = std::collections::VecDeque::with_capacity(2);
                    if !data.is_empty() {
                        frames.push_back(Frame::data(Bytes::from(data)));
                    }
                    if let Some(t) = trailers.take() {
                        frames.push_back(Frame::trailers(t));
                    }
                    this.state = Masking::Giving(frames);
                }
            }
        }
    }
}

/// The `wasi:sockets/ip-name-lookup` interface the host shadows.
const IP_NAME_LOOKUP: &str = "wasi:sockets/ip-name-lookup@0.2.12";

/// Shadows wasmtime-wasi's `resolve-addresses` in `linker` (which must
/// hold it already): a guest's name lookup is refused at once with
/// `access-denied`, and recorded in the call's `denied` list. (wasmtime-wasi's
/// own, told not to look names up, fails later with a resolver's failure and
/// records nothing.) A lookup has no address the host could check, and is
/// traffic of its own: names are looked up by the host, for `wasi:http`
/// requests, after their decision.
pub(crate) fn refuse_name_lookups(
    linker: &mut wasmtime::component::Linker<crate::runtime::store::CallState>,
) -> wasmtime::Result<()> {
    use wasmtime::component::Resource;
    use wasmtime_wasi::p2::Network;
    use wasmtime_wasi::p2::bindings::sockets::ip_name_lookup::ResolveAddressStream;
    use wasmtime_wasi::p2::bindings::sockets::network::ErrorCode;
    type Resolved = Result<Resource<ResolveAddressStream>, ErrorCode>;
    linker.allow_shadowing(true);
    let shadowed = linker.instance(IP_NAME_LOOKUP).and_then(|mut lookup| {
        lookup.func_wrap(
            "resolve-addresses",
            |store: wasmtime::StoreContextMut<'_, crate::runtime::store::CallState>,
             (_network, name): (Resource<Network>, String)|
             -> wasmtime::Result<(Resolved,)> {
                store.data().net.refuse_lookup(&name);
                Ok((Err(ErrorCode::AccessDenied),))
            },
        )
    });
    linker.allow_shadowing(false);
    shadowed
}

/// The wasi:http hooks of every call. Requests are sent by the host's own
/// `wasi:http/outgoing-handler` (`runtime::outgoing`), through
/// [`CallNet`]; nothing the host links sends through this hook, and a
/// request that reached it anyway would be refused, never sent ungoverned.
pub(crate) struct HttpHooks;

/// A guest's failed exchange is the guest's business: its code goes to the
/// guest and its record says why. The host's own log hears of it only at
/// debug level (wasmtime-wasi-http warns), so that guests cannot fill it.
impl WasiHttpHooks for HttpHooks {
    fn p2_error_from_hyper(&mut self, err: &hyper::Error) -> HttpErrorCode {
        tracing::debug!("a guest's HTTP exchange failed: {err}");
        HttpErrorCode::HttpProtocolError
    }

    fn p2_error_from_connect(&mut self, err: &std::io::Error) -> HttpErrorCode {
        tracing::debug!("a guest's connection failed: {err}");
        match err.kind() {
            std::io::ErrorKind::NetworkUnreachable | std::io::ErrorKind::HostUnreachable => {
                HttpErrorCode::DestinationUnavailable
            }
            _ => HttpErrorCode::ConnectionRefused,
        }
    }

    fn p2_error_from_tls(&mut self, err: &std::io::Error) -> HttpErrorCode {
        tracing::debug!("a guest's TLS handshake failed: {err}");
        HttpErrorCode::TlsProtocolError
    }

    fn send_request(
        &mut self,
        _request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        Box::new(async { Err(HttpError::HttpRequestDenied) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    /// The grant of exactly `pattern`, as `toolhost exec --allow-net`.
    /// A GET of `url` without a body, as `wasi:http` hands it over.
    fn get(url: &str) -> http::Request<WasiBody> {
        http::Request::get(url)
            .body(
                http_body_util::Empty::<Bytes>::new()
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            )
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn granting(pattern: &str) -> NetworkGrant {
        let grant = toolhost_egress::Grant::parse(pattern).unwrap_or_else(|e| panic!("{e}"));
        NetworkGrant::from_policy(
            &toolhost_egress::NetworkPolicy::from_grants(vec![grant]),
            None,
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn record(refused: bool, n: usize) -> EgressRecord {
        EgressRecord {
            method: Some("GET".into()),
            url: format!("http://127.0.0.1:1/{n}"),
            outcome: if refused {
                EgressOutcome::Refused {
                    code: "denied".into(),
                    reason: "no grant".into(),
                }
            } else {
                EgressOutcome::Allowed {
                    rule: "network.allow[0]".into(),
                }
            },
            status: None,
            bytes_in: 0,
            bytes_out: 0,
            ms: 0,
            error: None,
        }
    }

    /// Refusals, however many, never push an allowed request out of the
    /// records: only refusals are capped.
    #[test]
    fn refusals_are_capped_but_never_crowd_out_allowed_requests() {
        let mut log = NetLog::default();
        for n in 0..MAX_REFUSED_RECORDS + 44 {
            log.keep(record(true, n));
        }
        let index = log.keep(record(false, 9999));
        assert_ne!(index, usize::MAX);
        assert_eq!(log.records[index].url, "http://127.0.0.1:1/9999");
        assert_eq!(log.dropped, 44);
        assert_eq!(log.records.len(), MAX_REFUSED_RECORDS + 1);
    }

    /// A request admitted but not started when its call's receipt is taken
    /// is never sent: its record, in the receipt, says not sent, and stays
    /// true (the request, starting later, fails at once and connects
    /// nowhere). A refusal after the receipt files neither a record nor a
    /// `denied` line.
    #[tokio::test]
    #[allow(clippy::unwrap_used)]
    async fn a_request_not_started_when_the_receipt_is_taken_is_never_sent() {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let grant = granting(&format!("http://127.0.0.1:{port}"));
        let net = CallNet::new(grant, Instant::now() + Duration::from_secs(60));
        let request = || get(&format!("http://127.0.0.1:{port}/late"));
        let admitted = net.admit_http(&request()).unwrap();
        let receipt = net.close();
        assert_eq!(receipt.len(), 1);
        assert_eq!(receipt[0].error.as_deref(), Some(NOT_SENT));
        let sent = net
            .clone()
            .send(admitted, request(), None, Place::Tokio, net.flight())
            .await;
        assert!(sent.is_err());
        assert!(
            listener
                .accept()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
            "a request that started after the receipt connected"
        );
        assert_eq!(net.close()[0].error.as_deref(), Some(NOT_SENT));
        let ungranted = SocketAddr::from(([127, 0, 0, 1], port.wrapping_add(1).max(1)));
        assert!(!net.check_socket(ungranted, SocketAddrUse::TcpConnect));
        assert_eq!(net.close().len(), 1);
        assert!(net.denied().is_empty());
    }

    /// Without a grant, a bind to port 0 of the unspecified or a loopback
    /// address passes and the connect after it is refused and recorded; the
    /// binds are bounded per protocol, and a TCP socket's refused connect
    /// or listen gives its bind back; a bind to another port, or to
    /// another address, is refused.
    #[test]
    fn binds_without_a_grant_are_bounded_and_given_back() {
        let net = CallNet::new(
            NetworkGrant::none(),
            Instant::now() + Duration::from_secs(60),
        );
        let any: SocketAddr = SocketAddr::from(([0, 0, 0, 0], 0));
        let peer = SocketAddr::from(([127, 0, 0, 1], 9));
        // Over twice the limit (and under the 256 refusal records kept).
        for _ in 0..150 {
            assert!(net.check_socket(any, SocketAddrUse::TcpBind));
            assert!(!net.check_socket(peer, SocketAddrUse::TcpConnect));
        }
        let max = MAX_UNGRANTED_BINDS as usize;
        for i in 0..max {
            assert!(net.check_socket(any, SocketAddrUse::TcpBind), "bind {i}");
        }
        assert!(!net.check_socket(any, SocketAddrUse::TcpBind));
        // A refused listen drops its socket: one more bind.
        assert!(!net.check_socket(any, SocketAddrUse::TcpListen));
        assert!(net.check_socket(any, SocketAddrUse::TcpBind));
        assert!(!net.check_socket(any, SocketAddrUse::TcpBind));
        // UDP counts apart, and nothing gives a UDP bind back.
        let v6_loopback = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 0));
        for i in 0..max {
            assert!(
                net.check_socket(v6_loopback, SocketAddrUse::UdpBind),
                "bind {i}"
            );
            assert!(!net.check_socket(peer, SocketAddrUse::UdpSend));
        }
        assert!(!net.check_socket(any, SocketAddrUse::UdpBind));
        // The three binds refused at the limit: what their sockets would
        // have reached is counted as not seen.
        assert_eq!(net.dropped(), 3);
        let records = net.close();
        assert_eq!(records.len(), 150 + max);
        assert!(
            records
                .iter()
                .all(|r| r.url == "tcp://127.0.0.1:9" || r.url == "udp://127.0.0.1:9")
        );

        let fresh = CallNet::new(
            NetworkGrant::none(),
            Instant::now() + Duration::from_secs(60),
        );
        for refused in ["0.0.0.0:80", "10.1.2.3:0", "[fe80::1]:0"] {
            let addr: SocketAddr = refused.parse().unwrap_or_else(|e| panic!("{e}"));
            assert!(
                !fresh.check_socket(addr, SocketAddrUse::TcpBind),
                "{refused}"
            );
            assert!(
                !fresh.check_socket(addr, SocketAddrUse::UdpBind),
                "{refused}"
            );
        }
        assert!(fresh.close().is_empty());
    }

    /// A UDP reply is taken from the peer the guest sent to, whatever the
    /// flow label or scope its IPv6 address arrives with; replies from
    /// another port, or before any send, are dropped, and a datagram from
    /// anyone else (a refused address among them) leaves no record: it is
    /// not the guest's attempt.
    #[test]
    fn a_udp_reply_is_matched_to_its_peer_by_address_and_port() {
        let grant = granting("udp://[::1]:5353");
        let net = CallNet::new(grant, Instant::now() + Duration::from_secs(60));
        let peer = std::net::SocketAddrV6::new(std::net::Ipv6Addr::LOCALHOST, 5353, 0, 0);
        let reply = std::net::SocketAddrV6::new(std::net::Ipv6Addr::LOCALHOST, 5353, 7, 0);
        assert!(!net.check_socket(SocketAddr::V6(reply), SocketAddrUse::UdpReceive));
        assert!(net.check_socket(SocketAddr::V6(peer), SocketAddrUse::UdpSend));
        assert!(net.check_socket(SocketAddr::V6(reply), SocketAddrUse::UdpReceive));
        let other = std::net::SocketAddrV6::new(std::net::Ipv6Addr::LOCALHOST, 5354, 0, 0);
        assert!(!net.check_socket(SocketAddr::V6(other), SocketAddrUse::UdpReceive));
        let metadata: SocketAddr = "169.254.169.254:53"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        for _ in 0..1000 {
            assert!(!net.check_socket(metadata, SocketAddrUse::UdpReceive));
        }
        // One record, allowed, for the stream of datagrams; nothing of the
        // datagrams that were dropped.
        let records = net.close();
        assert_eq!(records.len(), 1, "{records:?}");
        // Once the receipt is taken (or the call gave up on its body),
        // nothing more goes out, not even to the peer already allowed.
        assert!(!net.check_socket(SocketAddr::V6(peer), SocketAddrUse::UdpSend));
        let any = SocketAddr::from(([0, 0, 0, 0], 0));
        assert!(!net.check_socket(any, SocketAddrUse::UdpBind));
        assert_eq!(net.close().len(), 1);
        assert!(matches!(records[0].outcome, EgressOutcome::Allowed { .. }));
        assert_eq!(net.dropped(), 0);
        let denied = net.denied();
        assert!(denied.is_empty(), "{denied:?}");
    }

    /// A connection's shutdown first yields (waking its task, so that the
    /// tasks it woke run before it), then shuts the stream down.
    #[tokio::test]
    async fn a_shutdown_yields_once_then_shuts_the_stream_down() {
        use tokio::io::{AsyncReadExt, AsyncWrite};
        struct Count(std::sync::atomic::AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let (near, mut far) = tokio::io::duplex(64);
        let mut stream = CloseAfterYield::new(near);
        let count = Arc::new(Count(Default::default()));
        let waker = std::task::Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let first = Pin::new(&mut stream).poll_shutdown(&mut cx);
        assert!(first.is_pending());
        assert_eq!(count.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        let second = Pin::new(&mut stream).poll_shutdown(&mut cx);
        assert!(matches!(second, Poll::Ready(Ok(()))), "{second:?}");
        let mut rest = Vec::new();
        assert_eq!(far.read_to_end(&mut rest).await.ok(), Some(0));
    }

    /// A response to a credentialed request is refused when any value of
    /// its `content-encoding` names a coding, or its `transfer-encoding` one
    /// other than `chunked`: the mask could not read such a body. Each
    /// refusal names its header's kind of coding.
    #[test]
    fn any_coding_in_any_value_is_found() {
        let map = |pairs: &[(&'static str, &'static str)]| {
            let mut h = http::HeaderMap::new();
            for (k, v) in pairs {
                h.append(*k, HeaderValue::from_static(v));
            }
            h
        };
        assert!(encoded(&map(&[])).is_none());
        assert!(encoded(&map(&[("content-encoding", "identity")])).is_none());
        assert!(encoded(&map(&[("transfer-encoding", "chunked")])).is_none());
        // Each is named for the header that carried it.
        assert!(matches!(
            encoded(&map(&[("content-encoding", "gzip")])),
            Some(HttpError::HttpResponseContentCoding(Some(c))) if c == "gzip"
        ));
        assert!(matches!(
            encoded(&map(&[("transfer-encoding", "gzip, chunked")])),
            Some(HttpError::HttpResponseTransferCoding(Some(c))) if c == "gzip"
        ));
        let cases: &[&[(&str, &str)]] = &[
            &[
                ("content-encoding", "identity"),
                ("content-encoding", "gzip"),
            ],
            &[("content-encoding", "identity, br")],
            &[("transfer-encoding", "gzip, chunked")],
            &[("content-encoding", " GZIP ")],
        ];
        for pairs in cases {
            assert!(encoded(&map(pairs)).is_some(), "{pairs:?}");
        }
    }

    /// A body's frames, one by one.
    struct Frames(std::collections::VecDeque<Frame<Bytes>>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = HttpError;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
            Poll::Ready(self.0.pop_front().map(Ok))
        }
    }

    /// A server's echo of a secret reaches the guest masked, wherever its
    /// frames cut it, in its headers and its trailers too, and nothing
    /// else changes.
    #[tokio::test]
    async fn an_echoed_secret_is_masked_in_headers_frames_and_trailers() {
        const SECRET: &str = "sk-masked-0123";
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("token");
        std::fs::write(&file, SECRET).unwrap_or_else(|e| panic!("{e}"));
        let policy = toolhost_egress::NetworkPolicy::from_toml(
            &format!(
                "[network]\nallow = [\"https://api.example.com\"]\n\n[[credentials]]\n\
                 host = \"api.example.com\"\nheader = \"Authorization\"\nvalue_file = {:?}\n",
                file.display().to_string()
            ),
            "test.toml",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let egress = Arc::new(Egress::load(&policy, &[], None).unwrap_or_else(|e| panic!("{e}")));
        let masked = "*".repeat(SECRET.len());

        let mut headers = http::HeaderMap::new();
        headers.insert("x-echo", HeaderValue::from_static("Bearer sk-masked-0123"));
        headers.append("x-echo", HeaderValue::from_static("plain"));
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        // A name holding the secret goes whole.
        headers.insert("x-sk-masked-0123", HeaderValue::from_static("named"));
        mask_headers(&egress.credentials, &mut headers);
        let echoed: Vec<_> = headers.get_all("x-echo").iter().collect();
        assert_eq!(echoed, [format!("Bearer {masked}").as_str(), "plain"]);
        assert_eq!(headers["content-type"], "text/plain");
        assert!(!headers.contains_key("x-sk-masked-0123"), "{headers:?}");

        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-trailer", HeaderValue::from_static("sk-masked-0123"));
        let frames = Frames(
            [
                Frame::data(Bytes::from_static(b"a: sk-mas")),
                Frame::data(Bytes::from_static(b"ked-0123 b: ")),
                Frame::data(Bytes::from_static(b"sk-")),
                Frame::trailers(trailers),
            ]
            .into(),
        );
        let mut body = MaskedBody::new(frames, egress.clone());
        let mut got = Vec::new();
        while let Some(frame) = body.frame().await {
            got.push(frame.unwrap_or_else(|e| panic!("{e}")));
        }
        // One data frame, whole and masked, then the trailers, masked.
        assert_eq!(got.len(), 2, "{got:?}");
        let data = got[0].data_ref().unwrap_or_else(|| panic!("{got:?}"));
        assert_eq!(String::from_utf8_lossy(data), format!("a: {masked} b: sk-"));
        let got_trailers = got[1].trailers_ref().unwrap_or_else(|| panic!("{got:?}"));
        assert_eq!(got_trailers["x-trailer"], masked.as_str());

        // Trailers whose every name held the secret: still a trailers
        // frame, empty, as for any other trailers.
        let mut named = http::HeaderMap::new();
        named.insert("x-sk-masked-0123", HeaderValue::from_static("v"));
        let frames = Frames([Frame::trailers(named)].into());
        let mut body = MaskedBody::new(frames, egress);
        let only = body
            .frame()
            .await
            .map(|f| f.unwrap_or_else(|e| panic!("{e}")));
        assert!(
            only.as_ref()
                .and_then(|f| f.trailers_ref())
                .is_some_and(|t| t.is_empty()),
            "{only:?}"
        );
        assert!(body.frame().await.is_none());
    }

    /// The guest's observations of a masked body do not depend on which of
    /// its bytes begin the secret: however the server cuts the same bytes
    /// into frames, whatever prefix of the secret they end with, the guest
    /// gets the same frames (one of the whole body), and a body that fails
    /// gives its error alone.
    #[tokio::test]
    async fn a_masked_body_is_framed_alike_whatever_it_holds() {
        const SECRET: &str = "sk-masked-0123";
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("token");
        std::fs::write(&file, SECRET).unwrap_or_else(|e| panic!("{e}"));
        let policy = toolhost_egress::NetworkPolicy::from_toml(
            &format!(
                "[network]\nallow = [\"https://api.example.com\"]\n\n[[credentials]]\n\
                 host = \"api.example.com\"\nheader = \"Authorization\"\nvalue_file = {:?}\n",
                file.display().to_string()
            ),
            "test.toml",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let egress = Arc::new(Egress::load(&policy, &[], None).unwrap_or_else(|e| panic!("{e}")));
        let shapes = |guess: &'static [u8]| async {
            let mut shapes = Vec::new();
            for cut in 0..=guess.len() {
                let frames = Frames(
                    [
                        Frame::data(Bytes::from_static(&guess[..cut])),
                        Frame::data(Bytes::from_static(&guess[cut..])),
                    ]
                    .into(),
                );
                let mut body = MaskedBody::new(frames, egress.clone());
                let mut sizes = Vec::new();
                while let Some(frame) = body.frame().await {
                    let frame = frame.unwrap_or_else(|e| panic!("{e}"));
                    sizes.push(frame.data_ref().map(|d| d.len()));
                }
                shapes.push(sizes);
            }
            shapes
        };
        // The secret's first five bytes, and five others.
        let right = shapes(b"echo: sk-ma").await;
        let wrong = shapes(b"echo: sk-mb").await;
        assert_eq!(right, wrong);
        assert!(right.iter().all(|s| s == &[Some(11)]), "{right:?}");

        struct Failing(bool);
        impl Body for Failing {
            type Data = Bytes;
            type Error = HttpError;
            fn poll_frame(
                mut self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
                if std::mem::replace(&mut self.0, true) {
                    return Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout)));
                }
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"sk-ma")))))
            }
        }
        let mut body = MaskedBody::new(Failing(false), egress);
        assert!(matches!(
            body.frame().await,
            Some(Err(HttpError::ConnectionReadTimeout))
        ));
        assert!(body.frame().await.is_none());
    }

    /// A body over `inner` that `net` counts, ending by `until`, driving
    /// `conn` (if any) in [`Place::Tokio`].
    fn limited<B>(
        inner: B,
        net: &Arc<CallNet>,
        conn: Option<Conn>,
        until: tokio::time::Instant,
        closure_alert: bool,
    ) -> LimitedBody<B> {
        LimitedBody {
            inner: Box::pin(inner),
            conn,
            net: net.clone(),
            index: usize::MAX,
            max: 1 << 20,
            until: Box::pin(tokio::time::sleep_until(until)),
            between: None,
            started: Instant::now(),
            place: Place::Tokio,
            flight: Some(net.flight()),
            closure_alert,
        }
    }

    /// A response body whose request time is up ends with a read timeout
    /// even when data is waiting (a guest that reads slowly never sees the
    /// body pending, where the timer alone would be looked at).
    #[tokio::test]
    async fn a_body_with_data_waiting_still_ends_at_the_request_time() {
        let net = CallNet::new(
            NetworkGrant::default(),
            Instant::now() + Duration::from_secs(60),
        );
        let inner = Full::new(Bytes::from_static(b"waiting"))
            .map_err(|never: std::convert::Infallible| match never {});
        let body = |until| limited(inner.clone(), &net, None, until, false);
        let now = tokio::time::Instant::now();
        let in_time = body(now + Duration::from_secs(60)).collect().await;
        assert_eq!(
            in_time.map(|c| c.to_bytes()).ok(),
            Some(Bytes::from_static(b"waiting"))
        );
        let late = body(now).frame().await;
        assert!(
            matches!(late, Some(Err(HttpError::ConnectionReadTimeout))),
            "{late:?}"
        );
        // Each body ended its exchange's flight as it ended, the body
        // still held: read to its end, or failed.
        let mut ended = body(now + Duration::from_secs(60));
        let mut failed = body(now);
        while let Some(frame) = ended.frame().await {
            assert!(frame.is_ok());
        }
        assert!(matches!(failed.frame().await, Some(Err(_))));
        assert_eq!(net.exchanges.load(Ordering::SeqCst), 0);
        let held = [net.flight(), net.flight()];
        assert_eq!(net.exchanges.load(Ordering::SeqCst), 2);
        drop(held);
        assert_eq!(net.exchanges.load(Ordering::SeqCst), 0);
        drop((ended, failed));
    }

    /// When a body it drives ends (or is dropped before its end), a
    /// connection still open is not polled on the guest's path again: a
    /// plain one is dropped (closed), and a TLS one is left to a task that
    /// runs it to its end (its closure alert).
    #[tokio::test]
    async fn a_connection_outliving_its_body_is_closed_or_ended_by_a_task() {
        let net = CallNet::new(
            NetworkGrant::default(),
            Instant::now() + Duration::from_secs(60),
        );
        for (closure_alert, read_to_end) in
            [(false, true), (true, true), (false, false), (true, false)]
        {
            // A connection that ends only when told to, after the body, and
            // counts its polls.
            let (go, gone) = tokio::sync::oneshot::channel::<()>();
            let (ended, end) = tokio::sync::oneshot::channel::<()>();
            let mut waiting = Box::pin(async move {
                if gone.await.is_ok() {
                    let _ = ended.send(());
                }
            });
            let polls = Arc::new(AtomicUsize::new(0));
            let counted = polls.clone();
            let conn: Conn = Box::pin(std::future::poll_fn(move |cx| {
                counted.fetch_add(1, Ordering::SeqCst);
                waiting.as_mut().poll(cx)
            }));
            let inner = Full::new(Bytes::from_static(b"whole"))
                .map_err(|never: std::convert::Infallible| match never {});
            let later = tokio::time::Instant::now() + Duration::from_secs(60);
            let mut body = limited(inner, &net, Some(conn), later, closure_alert);
            let mut got = Vec::new();
            while let Some(frame) = body.frame().await {
                got.extend_from_slice(
                    &frame
                        .unwrap_or_else(|e| panic!("{e}"))
                        .into_data()
                        .unwrap_or_default(),
                );
                if !read_to_end {
                    break;
                }
            }
            assert_eq!(got, b"whole");
            // What the body had ready was read without polling the
            // connection for more.
            assert_eq!(polls.load(Ordering::SeqCst), 0);
            if read_to_end {
                assert!(body.conn.is_none(), "the body still holds its connection");
            } else {
                // A guest that stops reading drops the body.
                drop(body);
            }
            let told = go.send(());
            if closure_alert {
                assert!(told.is_ok(), "the TLS connection was dropped");
                assert_eq!(end.await, Ok(()), "the TLS connection did not end");
            } else {
                assert!(told.is_err(), "the plain connection is still open");
            }
        }
    }

    /// A body whose last frame is its trailers ends with them: its flight
    /// and its connection end though the guest never asks for more.
    #[tokio::test]
    async fn a_body_ends_with_its_trailers() {
        let net = CallNet::new(
            NetworkGrant::default(),
            Instant::now() + Duration::from_secs(60),
        );
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-sum", HeaderValue::from_static("1"));
        let frames = [
            Frame::data(Bytes::from_static(b"data")),
            Frame::trailers(trailers),
        ];
        let inner = http_body_util::StreamBody::new(futures::stream::iter(
            frames.map(Ok::<_, hyper::Error>),
        ));
        let (_go, gone) = tokio::sync::oneshot::channel::<()>();
        let conn: Conn = Box::pin(async move {
            let _ = gone.await;
        });
        let later = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut body = limited(inner, &net, Some(conn), later, false);
        let data = body.frame().await.map(|f| f.map(|f| f.is_data()));
        assert!(matches!(data, Some(Ok(true))), "{data:?}");
        assert_eq!(net.exchanges.load(Ordering::SeqCst), 1);
        let last = body.frame().await.map(|f| f.map(|f| f.is_trailers()));
        assert!(matches!(last, Some(Ok(true))), "{last:?}");
        assert_eq!(net.exchanges.load(Ordering::SeqCst), 0);
        assert!(body.conn.is_none(), "the body still holds its connection");
        assert!(body.frame().await.is_none());
    }

    /// A body cut short while its request's time runs out (its connection
    /// stopped at that time, which fails hyper's body) ends with a read
    /// timeout, as a read after that time does; one that ends whole in its
    /// last poll is whole, whenever that poll ends.
    #[tokio::test]
    async fn a_body_cut_at_its_request_time_ends_with_a_read_timeout() {
        /// A body whose only poll outlasts `until`, then ends with `end`
        /// (an error, or whole when there is none).
        struct EndsLate {
            until: tokio::time::Instant,
            end: Option<hyper::Error>,
            polled: Arc<std::sync::atomic::AtomicBool>,
        }
        impl Body for EndsLate {
            type Data = Bytes;
            type Error = hyper::Error;
            fn poll_frame(
                mut self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
                self.polled.store(true, Ordering::SeqCst);
                while tokio::time::Instant::now() < self.until {
                    std::thread::yield_now();
                }
                Poll::Ready(self.end.take().map(Err))
            }
        }
        // A hyper error: a request over a connection whose peer is gone.
        let (client, server) = tokio::io::duplex(64);
        drop(server);
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(client))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        tokio::spawn(conn);
        let Err(cut) = sender
            .send_request(http::Request::new(Full::default()))
            .await
        else {
            panic!("a request over a closed connection was answered");
        };
        let net = CallNet::new(
            NetworkGrant::default(),
            Instant::now() + Duration::from_secs(60),
        );
        for end in [Some(cut), None] {
            let whole = end.is_none();
            let polled = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let until = tokio::time::Instant::now() + Duration::from_millis(100);
            let late = EndsLate {
                until,
                end,
                polled: polled.clone(),
            };
            let mut body = limited(late, &net, None, until, false);
            let last = body.frame().await;
            // The poll began before the time was up.
            assert!(polled.load(Ordering::SeqCst));
            if whole {
                assert!(last.is_none(), "{last:?}");
            } else {
                assert!(
                    matches!(last, Some(Err(HttpError::ConnectionReadTimeout))),
                    "{last:?}"
                );
                assert!(body.frame().await.is_none());
            }
        }
    }

    /// From a multi-thread runtime's `block_on`, an exchange in
    /// [`Place::Caller`] waits for its socket on the calling thread (its
    /// driver blocks in `poll(2)` until the response comes), and in
    /// [`Place::Tokio`] never does; each gets the whole response, and
    /// its flight ends with its body.
    #[cfg(unix)]
    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_callers_exchange_waits_on_its_own_thread() {
        use std::io::{BufRead, BufReader, Write};
        const EACH: usize = 5;
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            for _ in 0..2 * EACH {
                let (mut stream, _) = listener.accept().unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    line.clear();
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                );
            }
        });
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let request = || get(&format!("http://127.0.0.1:{port}/"));
        for place in [Place::Caller, Place::Tokio] {
            let _ = crate::egress::nosigpipe::take_blocked();
            for _ in 0..EACH {
                let net = CallNet::new(
                    granting(&format!("http://127.0.0.1:{port}")),
                    Instant::now() + Duration::from_secs(60),
                );
                let body = rt.block_on(async {
                    let admitted = net.admit_http(&request()).unwrap();
                    let (response, _worker) = net
                        .clone()
                        .send(admitted, request(), None, place, net.flight())
                        .await
                        .unwrap();
                    response.into_body().collect().await.unwrap().to_bytes()
                });
                assert_eq!(body, Bytes::from_static(b"ok"), "{place:?}");
                assert_eq!(net.exchanges.load(Ordering::SeqCst), 0, "{place:?}");
            }
            let (blocked, ended_by_the_socket) = crate::egress::nosigpipe::take_blocked();
            match place {
                // A response that came before its read would not block;
                // not all of them do.
                Place::Caller => assert!(ended_by_the_socket >= 1, "{blocked}"),
                _ => assert_eq!(blocked, 0, "{place:?}"),
            }
        }
        server.join().unwrap();
    }
}
