//! The network state of one call, enforced (DESIGN.md §2b): the policy's
//! decision on each outgoing HTTP request ([`CallNet::admit_http`], step 1
//! of the flow in `egress`), the wasi:sockets address and bind checks
//! ([`CallNet::check_socket`]), the per-call limits, and the records the
//! call's receipt shows.
//!
//! Sockets (TCP connect, UDP send) are decided per address against
//! `tcp://` and `udp://` grants; a UDP socket takes datagrams only from a
//! peer it sent to (others are dropped unrecorded); binds are allowed only
//! to port 0 (the implicit bind of a connect) and only with a grant of that
//! protocol the call may use (an `allow` one, a matched rule's, an approved
//! `ask` one); listening and accepting are always refused; name lookups are
//! refused at once (`runtime::link`), with a `denied` line only.
//!
//! Every request and connection is recorded as an [`EgressRecord`] for the
//! receipt; refusals are also listed in the receipt's `denied`.

use crate::egress::{Egress, NetworkGrant};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolhost_egress::{
    Decision, EgressOutcome, EgressRecord, GrantRef, Host, MAX_METHOD_BYTES, NO_RESPONSE, NOT_SENT,
    Refusal, Request, Scheme, bounded, check_addr,
};
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi_http::{Error as HttpError, WasiBody};

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
pub(super) const ONLY_HTTP: &str = "only http and https requests are sent";

/// The network state of one call, shared by its HTTP requests and its socket
/// address check, and read for its receipt.
pub(crate) struct CallNet {
    pub(super) grant: NetworkGrant,
    deadline: Instant,
    log: Mutex<NetLog>,
    denied: Mutex<Vec<String>>,
    /// Denied attempts not listed in `denied` (see [`record_denied`]).
    unlisted: AtomicU64,
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
    pub(super) request: Request,
    pub(super) path: String,
    pub(super) rule: GrantRef,
    /// Its record, kept from its admission on: a request the guest never
    /// waits for is never sent, and its record says so.
    pub(super) index: usize,
}

impl CallNet {
    pub(crate) fn new(grant: NetworkGrant, deadline: Instant) -> Arc<CallNet> {
        Arc::new(CallNet {
            grant,
            deadline,
            log: Mutex::new(NetLog::default()),
            denied: Mutex::default(),
            unlisted: AtomicU64::new(0),
        })
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
    pub(super) fn fail(&self, index: usize, e: &HttpError, started: Instant) {
        let (error, ms) = (e.to_string().into(), elapsed_ms(started));
        self.update(index, |r| {
            r.error = Some(error);
            r.ms = ms;
        });
    }

    /// Starts admitted request `index`: false once the call's receipt was
    /// taken ([`CallNet::close`]).
    pub(super) fn start(&self, index: usize) -> bool {
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

    pub(super) fn egress(&self) -> Option<&Arc<Egress>> {
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
    pub(super) fn refuse_timeout(
        &self,
        at: usize,
        request: &Request,
        path: &str,
        started: Instant,
    ) {
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
    pub(crate) fn refuse_lookup(&self, name: &str) {
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
    pub(super) fn file_refusal(&self, at: Option<usize>, record: EgressRecord, code: &str) {
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

    pub(super) fn update(&self, index: usize, f: impl FnOnce(&mut EgressRecord)) {
        if let Ok(mut l) = self.log.lock()
            && let Some(r) = l.records.get_mut(index)
        {
            f(r);
        }
    }

    /// Adds `n` response bytes to record `index` and to the call's total;
    /// false when the total is now above `max`.
    pub(super) fn add_bytes_in(&self, index: usize, n: u64, max: u64) -> bool {
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
    pub(super) fn request_budget(&self, timeout: Duration) -> Duration {
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
                // wasi:http's `handle` refused it already, with the
                // hooks' schemes: here for a caller that did not.
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
        if method.len() > MAX_METHOD_BYTES {
            let reason = format!("a method is at most {MAX_METHOD_BYTES} bytes long");
            self.refuse_unreadable(method, &uri.to_string(), "method_refused", reason);
            return Err(HttpError::HttpRequestMethodInvalid);
        }
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

/// The most denied capability attempts a call's receipt lists; one more
/// line counts the rest. A guest that retries a refused connection in a
/// loop must not grow the receipt, or the session log that records it.
pub(crate) const MAX_DENIED_LISTED: usize = 32;

/// The most bytes of one `denied` line (the rest is cut): a line may quote
/// what the guest asked for.
const MAX_DENIED_LINE: usize = 1024;

/// Records a denied `attempt`: listed while fewer than
/// [`MAX_DENIED_LISTED`] are, otherwise counted in `unlisted` and in the
/// list's last line.
fn record_denied(denied: &mut Vec<String>, unlisted: &AtomicU64, mut attempt: String) {
    if attempt.len() > MAX_DENIED_LINE {
        let mut end = MAX_DENIED_LINE;
        while !attempt.is_char_boundary(end) {
            end -= 1;
        }
        attempt.truncate(end);
        attempt.push_str("...");
    }
    if denied.len() < MAX_DENIED_LISTED {
        denied.push(attempt);
        return;
    }
    let n = unlisted.fetch_add(1, Ordering::Relaxed) + 1;
    let summary = format!("... and {n} more denied attempts, not listed");
    match denied.get_mut(MAX_DENIED_LISTED) {
        Some(last) => *last = summary,
        None => denied.push(summary),
    }
}

/// wasi:http's error code for a refusal (see `toolhost_egress::Refusal`).
pub(super) fn http_error(refusal: &Refusal) -> HttpError {
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

/// Milliseconds since `started`.
pub(super) fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::BodyExt;

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
    #[allow(clippy::unwrap_used, reason = "tests fail loudly on a set-up error")]
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
        let sent = net.clone().send(admitted, request(), None).await;
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

    #[test]
    fn denied_attempts_are_listed_up_to_a_cap_and_then_counted() {
        let mut denied = Vec::new();
        let unlisted = AtomicU64::new(0);
        for i in 0..100_000 {
            record_denied(
                &mut denied,
                &unlisted,
                format!("network: Connect 10.0.0.1:{i}"),
            );
        }
        assert_eq!(denied.len(), MAX_DENIED_LISTED + 1);
        let mut long = Vec::new();
        record_denied(
            &mut long,
            &unlisted,
            format!("network: GET {}", "ü".repeat(100_000)),
        );
        assert!(long[0].len() <= MAX_DENIED_LINE + 3 && long[0].ends_with("..."));
        assert_eq!(denied[0], "network: Connect 10.0.0.1:0");
        assert_eq!(
            denied[MAX_DENIED_LISTED],
            format!(
                "... and {} more denied attempts, not listed",
                100_000 - MAX_DENIED_LISTED
            )
        );
    }
}
