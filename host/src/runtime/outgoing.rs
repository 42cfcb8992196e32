//! `wasi:http/outgoing-handler.handle`, the host's own.
//!
//! wasmtime-wasi-http's `handle` runs every request in a task of its own,
//! with the end of its connection awaited by a second one, whatever the
//! request: a refused request still crossed a task (and the worker thread
//! it landed on) before the guest saw its refusal. This one decides the
//! request first (`CallNet::admit_http`): a refusal is the guest's answer
//! at once, and an admitted request runs in a task of its own, which hands
//! the guest the response's head and the handle of the task that drives
//! the connection (no third task awaiting that one). Both go through
//! `CallNet`: the address checks, the credential, the limits and the
//! records are the same for every request.
//!
//! `handle` never waits for the network itself. Exchanging a request
//! without a body inside the call, up to the response's head, measured
//! about 25 µs less per GET from a runtime task (BENCHMARKS.md, section
//! 10), but it made `handle` block the guest: concurrent requests (a
//! JavaScript `Promise.all` of `fetch()`es) would run one after another,
//! and a guest could no longer give up on a response with its own timeout.
//!
//! Everything else of `wasi:http` (fields, requests, bodies, responses) is
//! wasmtime-wasi-http's.

use crate::runtime::store::CallState;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, Method, Scheme};
use wasmtime_wasi_http::p2::types::{HostFutureIncomingResponse, HostOutgoingRequest};
use wasmtime_wasi_http::{RequestOptions, WasiBody, WasiHttp, WasiHttpHooks, WasiHttpView};

/// The interface the host's `handle` is defined in: the version
/// wasmtime-wasi-http's own types are, so that a guest importing any
/// earlier 0.2 version links to it.
const OUTGOING_HANDLER: &str = "wasi:http/outgoing-handler@0.2.12";

/// Adds `wasi:http/types` (wasmtime-wasi-http's) and the host's
/// `wasi:http/outgoing-handler` to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    let options = wasmtime_wasi_http::p2::bindings::LinkOptions::default();
    wasmtime_wasi_http::p2::bindings::http::types::add_to_linker::<_, WasiHttp>(
        linker,
        &options.into(),
        |state: &mut CallState| state.http(),
    )?;
    linker.instance(OUTGOING_HANDLER)?.func_wrap(
        "handle",
        |store,
         (request, options): (
            Resource<HostOutgoingRequest>,
            Option<Resource<RequestOptions>>,
        )| handle(store, request, options),
    )
}

/// What `handle` returns to the guest: a future response, or the error
/// the request failed with before it was sent.
type Handled = (Result<Resource<HostFutureIncomingResponse>, ErrorCode>,);

fn handle(
    mut store: StoreContextMut<'_, CallState>,
    request: Resource<HostOutgoingRequest>,
    options: Option<Resource<RequestOptions>>,
) -> wasmtime::Result<Handled> {
    let state = store.data_mut();
    let net = state.net.clone();
    let view = state.http();
    // The options are the guest's to give away (an owned handle): taken out
    // of the table, so that a guest passing them with every request does
    // not fill it.
    let options = options.and_then(|o| view.table.delete(o).ok());
    let outgoing = view.table.delete(request)?;
    let request = match to_http(outgoing, view.hooks) {
        Ok(request) => request,
        Err(code) => return Ok((Err(code),)),
    };
    let response = match net.admit_http(&request) {
        Err(refused) => HostFutureIncomingResponse::Ready(Err(refused)),
        Ok(admitted) => HostFutureIncomingResponse::Pending(wasmtime_wasi::runtime::spawn(
            net.send(admitted, request, options),
        )),
    };
    let id = store.data_mut().http().table.push(response)?;
    Ok((Ok(id),))
}

/// The guest's request as an `http::Request`, checked as wasmtime-wasi-http
/// checks it: a method `http` can carry, a supported scheme (or the default
/// one), a URI that parses, and a `content-length` its body can keep.
fn to_http(
    outgoing: HostOutgoingRequest,
    hooks: &mut dyn WasiHttpHooks,
) -> Result<http::Request<WasiBody>, ErrorCode> {
    let HostOutgoingRequest {
        method,
        scheme,
        authority,
        path_with_query,
        headers,
        body,
    } = outgoing;
    let mut lengths = headers.get_all(http::header::CONTENT_LENGTH).iter();
    let length = match (lengths.next(), lengths.next()) {
        (None, _) => None,
        (Some(v), None) => Some(content_length(v)?),
        (Some(_), Some(_)) => return Err(internal("multiple `content-length` header values")),
    };
    if body.is_none() && length.is_some_and(|n| n != 0) {
        return Err(ErrorCode::HttpRequestBodySize(Some(0)));
    }
    let method = match method {
        Method::Get => http::Method::GET,
        Method::Head => http::Method::HEAD,
        Method::Post => http::Method::POST,
        Method::Put => http::Method::PUT,
        Method::Delete => http::Method::DELETE,
        Method::Connect => http::Method::CONNECT,
        Method::Options => http::Method::OPTIONS,
        Method::Trace => http::Method::TRACE,
        Method::Patch => http::Method::PATCH,
        Method::Other(m) => http::Method::from_bytes(m.as_bytes())
            .map_err(|_| ErrorCode::HttpRequestMethodInvalid)?,
    };
    let scheme = match scheme {
        Some(Scheme::Http) => http::uri::Scheme::HTTP,
        Some(Scheme::Https) => http::uri::Scheme::HTTPS,
        Some(Scheme::Other(s)) => {
            http::uri::Scheme::try_from(s.as_str()).map_err(|_| ErrorCode::HttpProtocolError)?
        }
        None => hooks.default_scheme().ok_or(ErrorCode::HttpProtocolError)?,
    };
    if !hooks.is_supported_scheme(&scheme) {
        return Err(ErrorCode::HttpProtocolError);
    }
    let mut uri = http::Uri::builder()
        .scheme(scheme)
        .authority(authority.unwrap_or_default());
    if let Some(path) = path_with_query {
        uri = uri.path_and_query(path);
    }
    let uri = uri
        .build()
        .map_err(wasmtime_wasi_http::p2::http_request_error)?;
    let body = body.unwrap_or_else(|| {
        Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed_unsync()
    });
    let mut request = http::Request::new(body);
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    for (name, value) in headers.iter() {
        request.headers_mut().append(name, value.clone());
    }
    Ok(request)
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
