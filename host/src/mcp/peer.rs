//! Who is calling, as a transport tells the protocol handler: the principal
//! an HTTP request's bearer token maps to ([`Caller`]) and the client the
//! front door verified ([`HttpClient`]). The HTTP front door puts them in
//! the request's extensions and rmcp passes the request's parts on to the
//! handler; over stdio there are none, and the handler falls back on the
//! server's principal and the session.

use rmcp::Peer;
use rmcp::service::{RequestContext, RoleServer};
use std::sync::{Arc, OnceLock};

/// The client of a session, once it has initialized.
pub(super) type PeerSlot = Arc<OnceLock<Peer<RoleServer>>>;

/// The principal of an admitted HTTP request (the one its bearer token maps
/// to), passed to the session's handler in the request's extensions.
#[derive(Debug, Clone)]
pub(super) struct Caller(pub(super) String);

/// The client of an HTTP request (see `Admission::client_of`), carried in
/// the request's extensions to the protocol handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HttpClient(pub(super) String);

impl Caller {
    /// The caller the transport named for a request, if any.
    pub(super) fn of(context: &RequestContext<RoleServer>) -> Option<&Caller> {
        from_parts(context)
    }
}

impl HttpClient {
    /// The client the transport named for a request, if any.
    pub(super) fn of(context: &RequestContext<RoleServer>) -> Option<&HttpClient> {
        from_parts(context)
    }
}

/// An extension of the HTTP request a handler's request came in, if it
/// came in one.
fn from_parts<T: Send + Sync + 'static>(context: &RequestContext<RoleServer>) -> Option<&T> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<T>())
}
