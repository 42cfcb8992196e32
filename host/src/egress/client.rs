//! The host's HTTP client for one admitted request (steps 2 to 5 of the
//! flow in `egress`): plan (resolve once, off the executor, and check every
//! address), the credential of exactly the request's host, connect to the
//! checked addresses only, TLS, the HTTP/1 exchange with the connection in
//! a task of its own, and the response's body limited (`body`).
//!
//! A connection is never shared between requests or calls: each request
//! makes its own (no pool), so nothing of one call's traffic can reach
//! another's.

use crate::egress::body::{LimitedBody, MaskedBody, encoded, mask_headers};
use crate::egress::call::{Admitted, CallNet, elapsed_ms, http_error};
use http::header::{ACCEPT_ENCODING, HOST, HeaderName, HeaderValue, IF_RANGE, RANGE, TE};
use http_body_util::BodyExt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost_egress::{EgressRecord, Host, Scheme, connect_plan_approved};
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

/// What a wasi:http hook's future resolves to: the response, and the
/// future that ends with its connection.
pub(super) type SendResult = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
>;

impl CallNet {
    /// Steps 2 to 5 of an HTTP request that was admitted: the response's
    /// head, its body limited (and masked, for the credential's own
    /// server), and the future that ends with its connection, which runs in
    /// a task of its own from the handshake on, stopped at the request's
    /// time (wasmtime-wasi-http keeps it with the body: a body dropped ends
    /// the connection).
    pub(crate) async fn send(
        self: Arc<Self>,
        admitted: Admitted,
        mut req: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> SendResult {
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
            let tcp = connect(&plan.addrs).await?;
            let io: Box<dyn Stream> = if tls {
                let name = server_name(&request.host)?;
                let connector = tokio_rustls::TlsConnector::from(egress.tls.clone());
                Box::new(connector.connect(name, tcp).await.map_err(tls_error)?)
            } else {
                Box::new(tcp)
            };
            hyper::client::conn::http1::handshake(TokioIo::new(io))
                .await
                .map_err(HttpError::Hyper)
        };
        let (mut sender, conn) = tokio::time::timeout_at(connected_by, connection)
            .await
            .unwrap_or(Err(HttpError::ConnectionTimeout))
            .map_err(failed)?;
        // The connection in a task of its own, until the exchange is over
        // or the request's time is up (a request body the guest streams
        // slowly, a response body it reads slowly: neither outlasts it). A
        // connection that fails after the response's head fails its body,
        // which is where the guest sees it.
        let worker = wasmtime_wasi::runtime::spawn(async move {
            let _ = tokio::time::timeout_at(until, conn).await;
        });
        // The head: by the request's time (`connection-timeout`, as before
        // the connection), or by the guest's first-byte timeout
        // (`connection-read-timeout`).
        let sending = sender.send_request(req);
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
        let net = self.clone();
        let response = response.map(move |incoming| {
            let body = LimitedBody::new(
                incoming,
                net,
                index,
                limits.max_response_bytes,
                until,
                between_bytes_timeout,
                started,
            );
            if masking {
                MaskedBody::new(body, egress).boxed_unsync()
            } else {
                body.boxed_unsync()
            }
        });
        let connection: Box<dyn Future<Output = Result<(), HttpError>> + Send> =
            Box::new(async move {
                let _ = worker.await;
                Ok(())
            });
        Ok((response, connection))
    }
}

/// A connection the client can speak HTTP over (plain or TLS).
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Stream for T {}

/// Connects to the first of `addrs` that accepts (each checked: the plan's).
async fn connect(addrs: &[SocketAddr]) -> Result<crate::egress::nosigpipe::Tcp, HttpError> {
    let mut last = None;
    for addr in addrs {
        match crate::egress::nosigpipe::connect(*addr).await {
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
