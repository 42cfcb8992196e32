//! The connections of the HTTP transport: the accept loop, with at most
//! [`MAX_CONNECTIONS`] open (the next waits to be accepted), a request head
//! due within [`HEADER_READ_TIMEOUT`], and a graceful close. It knows
//! nothing of MCP: every request goes to the handler it is given (the
//! front door, `front`).

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The most open connections; the next one waits to be accepted.
pub const MAX_CONNECTIONS: usize = 256;

/// How long a connection may take to send a request head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The body of every response the transport sends.
pub(super) type Body = BoxBody<Bytes, Infallible>;

/// Accepts connections on `listener` and serves their requests with
/// `handle` until `stop` completes; then stops listening and returns the
/// connections still open, for [`close`].
pub(super) async fn accept_until<H, F>(
    listener: TcpListener,
    handle: H,
    stop: impl Future<Output = ()>,
) -> GracefulShutdown
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let graceful = GracefulShutdown::new();
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
        serve_connection(stream, remote, handle.clone(), &graceful, permit);
    }
    graceful
}

/// Serves one connection's requests with `handle` in a task of its own,
/// holding `permit` until the connection ends.
fn serve_connection<H, F>(
    stream: TcpStream,
    remote: SocketAddr,
    handle: H,
    graceful: &GracefulShutdown,
    permit: OwnedSemaphorePermit,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
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
    let service = hyper::service::service_fn(move |request| {
        let answer = handle(request, remote);
        async move { Ok::<_, Infallible>(answer.await) }
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

/// Closes the connections [`accept_until`] left open, waiting a little for
/// each to finish what it is sending.
pub(super) async fn close(connections: GracefulShutdown) {
    if tokio::time::timeout(Duration::from_secs(2), connections.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("some connections did not close in time");
    }
}
