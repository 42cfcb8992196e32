//! `wasi:http` for one call: wasmtime-wasi-http's own `handle`, types and
//! bodies, with the call's network grant in its `send_request` hook
//! ([`GovernedHooks`]), as spin's outbound HTTP does.
//!
//! `handle` calls the hook before anything is spawned: the hook decides
//! the request ([`CallNet::admit_http`]) and returns either its refusal or
//! the exchange ([`CallNet::send`]), which wasmtime-wasi-http runs in a task
//! of its own. The host shadows `handle` itself only to record a request
//! it refuses before the hook sees it (one it cannot read as a request:
//! a malformed URL, a bad method or `content-length`, a scheme other than
//! `http` and `https`), and to take the guest's request options out of the
//! call's resource table (a guest passing them with every request must not
//! fill it). It also shadows `future-incoming-response.get`, which
//! looks at a response not known to be ready before it answers: a guest
//! that only asks for its response (`get` between sleeps on a timer),
//! never waiting on it, still sees it come.

use crate::egress::call::{CallNet, ONLY_HTTP};
use crate::egress::client::SendResult;
use std::future::Future;
use std::sync::Arc;
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi_http::p2::bindings::http::outgoing_handler::Host as _;
use wasmtime_wasi_http::p2::bindings::http::types::HostFutureIncomingResponse as _;
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, Method, Scheme};
use wasmtime_wasi_http::p2::types::{HostFutureIncomingResponse, HostOutgoingRequest};
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks, WasiHttpView,
};

/// The interfaces whose functions the host shadows: the version
/// wasmtime-wasi-http's own types are, so that a guest importing any
/// earlier 0.2 version links to it.
const OUTGOING_HANDLER: &str = "wasi:http/outgoing-handler@0.2.12";
const TYPES: &str = "wasi:http/types@0.2.12";

/// The wasi:http hooks of one call: every request it sends is decided and
/// sent through its [`CallNet`].
pub(crate) struct GovernedHooks {
    net: Arc<CallNet>,
}

impl GovernedHooks {
    pub(crate) fn new(net: Arc<CallNet>) -> GovernedHooks {
        GovernedHooks { net }
    }
}

/// A guest's failed exchange is the guest's business: its code goes to the
/// guest and its record says why. The host's own log hears of it only at
/// debug level (wasmtime-wasi-http warns), so that guests cannot fill it.
impl WasiHttpHooks for GovernedHooks {
    fn p2_error_from_hyper(&mut self, err: &hyper::Error) -> ErrorCode {
        tracing::debug!("a guest's HTTP exchange failed: {err}");
        ErrorCode::HttpProtocolError
    }

    fn p2_error_from_connect(&mut self, err: &std::io::Error) -> ErrorCode {
        tracing::debug!("a guest's connection failed: {err}");
        match err.kind() {
            std::io::ErrorKind::NetworkUnreachable | std::io::ErrorKind::HostUnreachable => {
                ErrorCode::DestinationUnavailable
            }
            _ => ErrorCode::ConnectionRefused,
        }
    }

    fn p2_error_from_tls(&mut self, err: &std::io::Error) -> ErrorCode {
        tracing::debug!("a guest's TLS handshake failed: {err}");
        ErrorCode::TlsProtocolError
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        match self.net.admit_http(&request) {
            Err(refused) => Box::new(async move { Err(refused) }),
            Ok(admitted) => Box::new(self.net.clone().send(admitted, request, options)),
        }
    }
}

/// A store's state that holds its call's [`CallNet`].
pub(crate) trait HasCallNet {
    fn call_net(&self) -> &Arc<CallNet>;
}

/// Adds wasmtime-wasi-http's `wasi:http/types` and
/// `wasi:http/outgoing-handler` to `linker`, `handle` shadowed by
/// [`handle`].
pub(crate) fn add_to_linker<T>(linker: &mut Linker<T>) -> wasmtime::Result<()>
where
    T: WasiHttpView + HasCallNet + 'static,
{
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    linker.allow_shadowing(true);
    let shadowed = linker
        .instance(OUTGOING_HANDLER)
        .and_then(|mut i| {
            i.func_wrap(
                "handle",
                |store,
                 (request, options): (
                    Resource<HostOutgoingRequest>,
                    Option<Resource<RequestOptions>>,
                )| handle(store, request, options),
            )
        })
        .and_then(|()| linker.instance(TYPES))
        .and_then(|mut i| {
            i.func_wrap(
                "[method]future-incoming-response.get",
                |mut store: StoreContextMut<'_, T>,
                 (id,): (Resource<HostFutureIncomingResponse>,)| {
                    let mut view = store.data_mut().http();
                    look_once(view.table.get_mut(&id)?);
                    Ok((view.get(id)?,))
                },
            )
        });
    linker.allow_shadowing(false);
    shadowed
}

/// A pending response looked at once, without a waker: ready when its
/// exchange has ended.
fn look_once(response: &mut HostFutureIncomingResponse) {
    if let HostFutureIncomingResponse::Pending(exchange) = response {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if let std::task::Poll::Ready(sent) = std::pin::Pin::new(exchange).poll(&mut cx) {
            *response = HostFutureIncomingResponse::Ready(sent);
        }
    }
}

/// What `handle` returns to the guest: a future response, or the error
/// the request failed with before it was sent.
type Handled = (Result<Resource<HostFutureIncomingResponse>, ErrorCode>,);

/// wasmtime-wasi-http's `handle`: a request it refuses before the hook is
/// recorded as refused before it could be read, with what it named of its
/// method and URL; the request options are taken out of the table.
fn handle<T: WasiHttpView + HasCallNet>(
    mut store: StoreContextMut<'_, T>,
    request: Resource<HostOutgoingRequest>,
    options: Option<Resource<RequestOptions>>,
) -> wasmtime::Result<Handled> {
    let state = store.data_mut();
    let net = state.call_net().clone();
    let mut view = state.http();
    let named = view.table.get(&request).map(Named::of)?;
    let options_rep = options.as_ref().map(Resource::rep);
    let handled = view.handle(request, options);
    if let Some(rep) = options_rep {
        // wasmtime-wasi-http copied them; the guest gave them away.
        let _ = view.table.delete(Resource::<RequestOptions>::new_own(rep));
    }
    match handled {
        Ok(response) => Ok((Ok(response),)),
        Err(e) => {
            let code = e.downcast()?;
            named.refuse(&net, &code);
            Ok((Err(code),))
        }
    }
}

/// What a request names of its method and URL, as the guest gave them.
struct Named {
    method: String,
    url: String,
}

impl Named {
    fn of(r: &HostOutgoingRequest) -> Named {
        let method = match &r.method {
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
        };
        let scheme = match &r.scheme {
            Some(Scheme::Http) => "http",
            Some(Scheme::Https) => "https",
            Some(Scheme::Other(s)) => s.as_str(),
            None => "",
        };
        let url = format!(
            "{scheme}://{}{}",
            r.authority.as_deref().unwrap_or_default(),
            r.path_with_query.as_deref().unwrap_or_default()
        );
        Named {
            method: toolhost_egress::bounded(method, toolhost_egress::MAX_METHOD_BYTES).to_string(),
            url,
        }
    }

    /// Records the request as refused before it was read, with `code`.
    fn refuse(&self, net: &CallNet, code: &ErrorCode) {
        let (label, reason) = match code {
            ErrorCode::HttpRequestMethodInvalid => ("method_refused", "not a method".to_string()),
            ErrorCode::HttpProtocolError => ("unsupported_scheme", ONLY_HTTP.to_string()),
            ErrorCode::HttpRequestUriInvalid => ("invalid_url", "not a valid URL".to_string()),
            ErrorCode::HttpRequestBodySize(_) => (
                "invalid_request",
                "a content-length without a body".to_string(),
            ),
            ErrorCode::InternalError(Some(why)) => ("invalid_request", why.clone()),
            other => ("invalid_request", format!("{other:?}")),
        };
        net.refuse_unreadable(&self.method, &self.url, label, reason);
    }
}
