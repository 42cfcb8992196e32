//! `wasi:http/outgoing-handler.handle` and `wasi:http/types`'
//! `future-incoming-response`, the host's own.
//!
//! wasmtime-wasi-http's `handle` runs every request in a task of its own,
//! with the end of its connection awaited by a second one, whatever the
//! request: a refused request still crossed a task (and the worker thread
//! it landed on) before the guest saw its refusal. This one decides the
//! request first (`CallNet::admit_http`): a refusal is the guest's answer
//! at once. An admitted request goes through `CallNet::send` (the address
//! checks, the credential, the limits and the records are the same for
//! every request), in one of two places (`net::Place`: in place is
//! `Tokio` or `Caller`, by how the socket waits):
//!
//! - **In place**, a request without a body: the exchange is the
//!   `future-incoming-response` itself, driven while the guest waits on it
//!   (alone or among other pollables, as a JavaScript `Promise.all` of
//!   `fetch()`es does), and the connection is then driven by the response
//!   body as the guest reads it. No task, no hand-off between threads.
//!   `handle` still never blocks the guest, and a guest can give up on a
//!   response with its own timeout (it drops the future, which closes the
//!   connection). A request the guest never waits for (nor asks for with
//!   `get`) is never sent: it counts against `max_requests` from `handle`
//!   on, and its record, kept from `handle` on, says it was not sent (its
//!   `request_timeout_ms` starts when it first runs). Where the guest runs
//!   decides how the socket waits: in a runtime task (as the MCP server's
//!   calls are) or on a current-thread runtime, tokio's I/O wake-ups reach
//!   it directly; in a multi-thread runtime's `block_on` (a caller outside
//!   the runtime, as the CLI's), each would be handed over from a worker
//!   thread, so there (on Unix) the call's only exchange waits on the
//!   caller's own thread, in `poll(2)` (`tcp::drive_here`), until that
//!   thread has been blocked on it 1 ms in all; then, or once the call has
//!   other exchanges in flight, it waits through tokio (`tcp::Here`).
//! - **In a task of its own** otherwise: a request with a body (the guest
//!   writes the body before it waits for the response, so the request must
//!   go on without it), a body whose file operations block its thread, or
//!   (off Unix) a call in a multi-thread runtime's `block_on`.
//!   The task hands the guest the response's head and the handle of the
//!   task that then drives the connection.
//!
//! Everything else of `wasi:http` (fields, requests, bodies, responses) is
//! wasmtime-wasi-http's.

use crate::egress::call::{CallNet, Place, Sent};
use crate::runtime::store::CallState;
use bytes::Bytes;
use http::uri::{Authority, PathAndQuery};
use http_body_util::{BodyExt, Empty};
use std::future::Future;
use std::pin::Pin;
use toolhost_egress::MAX_METHOD_BYTES;
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceType};
use wasmtime_wasi::p2::Pollable;
use wasmtime_wasi::runtime::AbortOnDropJoinHandle;
use wasmtime_wasi_http::p2::bindings::http::types::{
    ErrorCode, HostFutureIncomingResponse as HostFutureIncomingResponseMethods, Method, Scheme,
};
use wasmtime_wasi_http::p2::body::HostIncomingBody;
use wasmtime_wasi_http::p2::types::{
    HostFutureIncomingResponse, HostIncomingResponse, HostOutgoingRequest,
};
use wasmtime_wasi_http::{
    FieldMap, RequestOptions, WasiBody, WasiHttp, WasiHttpHooks, WasiHttpView,
};

/// The interfaces the host's definitions are in: the version
/// wasmtime-wasi-http's own types are, so that a guest importing any
/// earlier 0.2 version links to them.
const OUTGOING_HANDLER: &str = "wasi:http/outgoing-handler@0.2.12";
const TYPES: &str = "wasi:http/types@0.2.12";

/// Adds `wasi:http/types` (wasmtime-wasi-http's, but for
/// `future-incoming-response`, the host's) and the host's
/// `wasi:http/outgoing-handler` to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    let options = wasmtime_wasi_http::p2::bindings::LinkOptions::default();
    wasmtime_wasi_http::p2::bindings::http::types::add_to_linker::<_, WasiHttp>(
        linker,
        &options.into(),
        |state: &mut CallState| state.http(),
    )?;
    // `future-incoming-response` is the host's own resource (it replaces
    // wasmtime-wasi-http's, with its two methods), so that a request can be
    // exchanged where the guest waits for it instead of in a task.
    linker.allow_shadowing(true);
    let mut types = linker.instance(TYPES)?;
    types.resource(
        "future-incoming-response",
        ResourceType::host::<PendingResponse>(),
        |mut store, rep| {
            store
                .data_mut()
                .http()
                .table
                .delete(Resource::<PendingResponse>::new_own(rep))?;
            Ok(())
        },
    )?;
    types.func_wrap(
        "[method]future-incoming-response.subscribe",
        |mut store, (id,): (Resource<PendingResponse>,)| {
            let table = store.data_mut().http().table;
            Ok((wasmtime_wasi::p2::subscribe(table, id)?,))
        },
    )?;
    types.func_wrap(
        "[method]future-incoming-response.get",
        |store, (id,): (Resource<PendingResponse>,)| get(store, id),
    )?;
    linker.allow_shadowing(false);
    linker.instance(OUTGOING_HANDLER)?.func_wrap(
        "handle",
        |store,
         (request, options): (
            Resource<HostOutgoingRequest>,
            Option<Resource<RequestOptions>>,
        )| handle(store, request, options),
    )
}

/// The host's `future-incoming-response`.
pub(crate) enum PendingResponse {
    /// A request without a body, exchanged in place: where the guest
    /// polls it (its own thread), with no task and no hand-off between
    /// threads. It makes progress while the guest waits on it (alone, or
    /// among other pollables, as a JavaScript `Promise.all` does) and ends
    /// when the guest drops it.
    InPlace(Pin<Box<dyn Future<Output = Sent> + Send>>),
    /// A request exchanged in a task of its own: one with a body (the guest
    /// writes the body before it waits for the response, so the request
    /// must go on without it), or one from a body whose file operations
    /// block its thread.
    Task(AbortOnDropJoinHandle<Sent>),
    /// The response's head, or the error the request failed with.
    Ready(Sent),
    /// Taken by `get`.
    Consumed,
}

#[wasmtime_wasi::async_trait]
impl Pollable for PendingResponse {
    async fn ready(&mut self) {
        let sent = match self {
            PendingResponse::InPlace(exchange) => exchange.as_mut().await,
            PendingResponse::Task(task) => task.await,
            PendingResponse::Ready(_) | PendingResponse::Consumed => return,
        };
        *self = PendingResponse::Ready(sent);
    }
}

/// What `get` gives the guest.
type Got = Option<Result<Result<Resource<HostIncomingResponse>, ErrorCode>, ()>>;

/// `future-incoming-response.get`: the response once its head is in
/// (nothing before; an error the second time).
fn get(
    mut store: StoreContextMut<'_, CallState>,
    id: Resource<PendingResponse>,
) -> wasmtime::Result<(Got,)> {
    let view = store.data_mut().http();
    let pending = view.table.get_mut(&id)?;
    // A response not known to be ready is looked at once (without a
    // waker: a guest that only calls `get`, between waits on other
    // pollables, still sees its response come).
    let polled = match pending {
        PendingResponse::InPlace(exchange) => poll_once(exchange.as_mut()),
        PendingResponse::Task(task) => poll_once(std::pin::Pin::new(task)),
        PendingResponse::Ready(_) | PendingResponse::Consumed => None,
    };
    if let Some(sent) = polled {
        *pending = PendingResponse::Ready(sent);
    }
    let sent = match std::mem::replace(pending, PendingResponse::Consumed) {
        PendingResponse::Ready(sent) => sent,
        PendingResponse::Consumed => return Ok((Some(Err(())),)),
        other => {
            *pending = other;
            return Ok((None,));
        }
    };
    let (response, worker) = match sent {
        Ok(sent) => sent,
        // wasmtime-wasi-http's own conversion of the error (its hooks
        // decide how connection, TLS and protocol errors read), through a
        // response of its own type that is ready with it.
        Err(e) => {
            let ready = view.table.push(HostFutureIncomingResponse::Ready(Err(e)))?;
            let mut view = store.data_mut().http();
            let got = HostFutureIncomingResponseMethods::get(
                &mut view,
                Resource::new_borrow(ready.rep()),
            );
            view.table.delete(ready)?;
            return Ok((got?,));
        }
    };
    let (parts, body) = response.into_parts();
    let headers = FieldMap::new_immutable(view.hooks, parts.headers);
    let mut body = HostIncomingBody::new(body);
    if let Some(worker) = worker {
        body.retain_worker(worker);
    }
    let response = view.table.push(HostIncomingResponse {
        status: parts.status.as_u16(),
        headers,
        body: Some(body),
    })?;
    Ok((Some(Ok(Ok(response))),))
}

/// `future` polled once, with a waker that does nothing.
fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>) -> Option<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.poll(&mut cx) {
        std::task::Poll::Ready(out) => Some(out),
        std::task::Poll::Pending => None,
    }
}

/// What `handle` returns to the guest: a future response, or the error
/// the request failed with before it was sent.
type Handled = (Result<Resource<PendingResponse>, ErrorCode>,);

fn handle(
    mut store: StoreContextMut<'_, CallState>,
    request: Resource<HostOutgoingRequest>,
    options: Option<Resource<RequestOptions>>,
) -> wasmtime::Result<Handled> {
    let state = store.data_mut();
    let net = state.net.clone();
    let may_exchange_in_place = state.may_exchange_in_place;
    let view = state.http();
    // The options are the guest's to give away (an owned handle): taken out
    // of the table, so that a guest passing them with every request does
    // not fill it.
    let options = options.and_then(|o| view.table.delete(o).ok());
    let outgoing = view.table.delete(request)?;
    let has_body = outgoing.body.is_some();
    let request = match to_http(outgoing, view.hooks, &net) {
        Ok(request) => request,
        Err(code) => return Ok((Err(code),)),
    };
    let response = match net.admit_http(&request) {
        Err(refused) => PendingResponse::Ready(Err(refused)),
        Ok(admitted) => {
            // In flight from now: a request not yet polled counts, so that
            // the first of a `Promise.all` is not taken for the only one.
            let flight = net.flight();
            let place = place(has_body, may_exchange_in_place);
            let sent = net.send(admitted, request, options, place, flight);
            match place {
                Place::Task => PendingResponse::Task(wasmtime_wasi::runtime::spawn(sent)),
                Place::Tokio | Place::Caller => PendingResponse::InPlace(Box::pin(sent)),
            }
        }
    };
    let id = store.data_mut().http().table.push(response)?;
    Ok((Ok(id),))
}

/// Where a request that is sent is exchanged (`net::Place`), asked where
/// the guest runs (a store may be built elsewhere).
fn place(has_body: bool, may_exchange_in_place: bool) -> Place {
    if has_body || !may_exchange_in_place {
        Place::Task
    } else if super::store::drives_its_own_io() {
        Place::Tokio
    } else if cfg!(unix) {
        Place::Caller
    } else {
        // Each wake-up would come from a worker: one hand-off in all.
        Place::Task
    }
}

/// The guest's request as an `http::Request`, checked as wasmtime-wasi-http
/// checks it: a method `http` can carry, a supported scheme (or the default
/// one), a URI that parses, and a `content-length` its body can keep. A
/// request that fails is recorded (`net`) as refused before it was read,
/// with what it named of its method and URL.
fn to_http(
    outgoing: HostOutgoingRequest,
    hooks: &mut dyn WasiHttpHooks,
    net: &CallNet,
) -> Result<http::Request<WasiBody>, ErrorCode> {
    let HostOutgoingRequest {
        method,
        scheme,
        authority,
        path_with_query,
        headers,
        body,
    } = outgoing;
    // Kept as `Bytes` (taken from the strings, not copied): the URI is
    // built from them, and a failure's record names them.
    let authority = Bytes::from(authority.unwrap_or_default());
    let path_with_query = path_with_query.map(Bytes::from);
    // Only on a failure: the method and URL as the guest gave them.
    let refuse = |code: ErrorCode, label: &str, reason: &str| {
        let scheme = match &scheme {
            Some(Scheme::Http) => "http",
            Some(Scheme::Https) => "https",
            Some(Scheme::Other(s)) => s.as_str(),
            None => "",
        };
        let url = format!(
            "{scheme}://{}{}",
            String::from_utf8_lossy(&authority),
            String::from_utf8_lossy(path_with_query.as_deref().unwrap_or_default())
        );
        net.refuse_unreadable(method_name(&method), &url, label, reason.to_string());
        code
    };
    let mut lengths = headers.get_all(http::header::CONTENT_LENGTH).iter();
    let length = match (lengths.next(), lengths.next()) {
        (None, _) => None,
        (Some(v), None) => match content_length(v) {
            Ok(n) => Some(n),
            Err(code) => return Err(refuse(code, "invalid_request", "invalid content-length")),
        },
        (Some(_), Some(_)) => {
            let why = "multiple `content-length` header values";
            return Err(refuse(internal(why), "invalid_request", why));
        }
    };
    if body.is_none() && length.is_some_and(|n| n != 0) {
        let why = "a content-length without a body";
        return Err(refuse(
            ErrorCode::HttpRequestBodySize(Some(0)),
            "invalid_request",
            why,
        ));
    }
    let name = method_name(&method);
    if name.len() > MAX_METHOD_BYTES {
        let why = format!("a method is at most {MAX_METHOD_BYTES} bytes long");
        return Err(refuse(
            ErrorCode::HttpRequestMethodInvalid,
            "method_refused",
            &why,
        ));
    }
    // `from_bytes` gives the standard methods their own constants.
    let Ok(http_method) = http::Method::from_bytes(name.as_bytes()) else {
        return Err(refuse(
            ErrorCode::HttpRequestMethodInvalid,
            "method_refused",
            "not a method",
        ));
    };
    let unsupported = crate::egress::call::ONLY_HTTP;
    let http_scheme = match &scheme {
        Some(Scheme::Http) => http::uri::Scheme::HTTP,
        Some(Scheme::Https) => http::uri::Scheme::HTTPS,
        Some(Scheme::Other(s)) => match http::uri::Scheme::try_from(s.as_str()) {
            Ok(s) => s,
            Err(_) => {
                let code = ErrorCode::HttpProtocolError;
                return Err(refuse(code, "unsupported_scheme", unsupported));
            }
        },
        None => match hooks.default_scheme() {
            Some(s) => s,
            None => {
                let code = ErrorCode::HttpProtocolError;
                return Err(refuse(code, "unsupported_scheme", unsupported));
            }
        },
    };
    if !hooks.is_supported_scheme(&http_scheme) {
        let code = ErrorCode::HttpProtocolError;
        return Err(refuse(code, "unsupported_scheme", unsupported));
    }
    let uri = (|| -> Result<http::Uri, http::Error> {
        let mut uri = http::Uri::builder()
            .scheme(http_scheme)
            .authority(Authority::from_maybe_shared(authority.clone())?);
        if let Some(path) = &path_with_query {
            uri = uri.path_and_query(PathAndQuery::from_maybe_shared(path.clone())?);
        }
        uri.build()
    })();
    let uri = match uri {
        Ok(uri) => uri,
        Err(e) => {
            let reason = e.to_string();
            let code = wasmtime_wasi_http::p2::http_request_error(e);
            return Err(refuse(code, "invalid_url", &reason));
        }
    };
    let body = body.unwrap_or_else(|| {
        Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed_unsync()
    });
    let mut request = http::Request::new(body);
    *request.method_mut() = http_method;
    *request.uri_mut() = uri;
    for (name, value) in headers.iter() {
        request.headers_mut().append(name, value.clone());
    }
    Ok(request)
}

/// A method's name, as the guest gave it.
fn method_name(method: &Method) -> &str {
    match method {
        Method::Get => "GET",
        Method::Head => "HEAD",
        Method::Post => "POST",
        Method::Put => "PUT",
        Method::Delete => "DELETE",
        Method::Connect => "CONNECT",
        Method::Options => "OPTIONS",
        Method::Trace => "TRACE",
        Method::Patch => "PATCH",
        Method::Other(m) => m,
    }
}

/// A `content-length` value: decimal digits only (RFC 9110's `1*DIGIT`).
fn content_length(value: &http::HeaderValue) -> Result<u64, ErrorCode> {
    let bytes = value.as_bytes();
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return Err(internal("invalid `content-length` header value"));
    }
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| internal("invalid `content-length` header value"))
}

fn internal(message: &str) -> ErrorCode {
    ErrorCode::InternalError(Some(message.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where a request is exchanged: a request with a body, or one from a
    /// body whose file operations block, in a task of its own; one without,
    /// in place, waiting through tokio where the guest runs in a runtime
    /// task or on a current-thread runtime, and on the caller's own thread
    /// in a multi-thread runtime's `block_on` (the CLI's place).
    #[test]
    fn a_request_is_exchanged_where_its_guest_runs() {
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let current = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let all =
            || [(false, true), (true, true), (false, false)].map(|(body, may)| place(body, may));
        assert_eq!(
            multi.block_on(async { all() }),
            [Place::Caller, Place::Task, Place::Task]
        );
        let in_task = multi
            .block_on(async { tokio::spawn(async move { all() }).await })
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(in_task, [Place::Tokio, Place::Task, Place::Task]);
        assert_eq!(
            current.block_on(async { all() }),
            [Place::Tokio, Place::Task, Place::Task]
        );
    }
}
