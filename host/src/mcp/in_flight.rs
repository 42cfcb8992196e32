//! The bound on what a stdio session holds for a client.
//!
//! rmcp reads a request, spawns a task to handle it, and reads the next:
//! it never waits for an answer to be written before reading on. A client
//! that sends requests (even `ping`s) and never reads stdout would make the
//! host hold one task and one answer per request, without bound (400,000
//! pings held 856 MB). So the session counts what it holds: each request
//! whose handler runs, and each message rmcp has handed to the transport
//! that is not yet written (an answer, a notification, a request of the
//! server's); while [`MAX_IN_FLIGHT`] are counted, the framing stops
//! reading stdin: the client is slowed down, not buffered. A request is
//! counted from its handler's start until rmcp has taken its answer (sent
//! on, or dropped), so an answer waiting between the handler and the
//! transport is counted too.
//!
//! Nothing is counted by request id: a client may reuse ids and may cancel
//! requests (rmcp then drops some answers), and neither changes what is
//! held, which is what is counted. An answer rmcp drops was never handed to
//! the transport.
//!
//! While the reader waits, a client's answers to the server's own requests
//! (an elicited approval) and its cancellations wait too; an approval that
//! is not answered in its time is a no, so nothing waits forever.

use super::protocol::Server;
use rmcp::model::ServerConfig;
use rmcp::service::{NotificationContext, RequestContext, RoleServer, Service, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::{ErrorData as McpError, model};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::Notify;

/// The most requests being handled plus messages waiting to be written, in
/// one stdio session: twice the calls a server runs at once, so that calls
/// waiting for an approval never fill it alone.
pub const MAX_IN_FLIGHT: usize = 2 * super::bounds::MAX_CALLS_IN_FLIGHT;

/// How long after its handler returned a request counts at most: rmcp
/// hands its answer to the transport, or drops it, at once.
pub(super) const ANSWER_TAKEN: std::time::Duration = std::time::Duration::from_secs(1);

/// What one session holds: requests whose handler runs, and messages
/// handed to the transport and not yet written.
#[derive(Default)]
pub(super) struct InFlight {
    held: AtomicUsize,
    room: Notify,
}

/// One thing counted in [`InFlight`]; uncounted when dropped.
pub(super) struct Held(Arc<InFlight>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::SeqCst);
        self.0.room.notify_waiters();
    }
}

impl InFlight {
    /// Counts one more thing held until the returned guard is dropped.
    pub(super) fn hold(self: &Arc<Self>) -> Held {
        self.held.fetch_add(1, Ordering::SeqCst);
        Held(self.clone())
    }

    /// How many things are counted.
    pub(super) fn len(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Returns once fewer than [`MAX_IN_FLIGHT`] things are counted.
    pub(super) async fn wait_for_room(&self) {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            // Registered before the check, so a release between the check
            // and the wait is not missed.
            room.as_mut().enable();
            if self.len() < MAX_IN_FLIGHT {
                return;
            }
            room.await;
        }
    }
}

/// rmcp's transport with every message it is handed counted in
/// [`InFlight`] until written. rmcp hands a message over (calls `send`) at
/// once and writes it in a task of its own, so a message waiting for a
/// client that does not read is counted from the moment rmcp lets go of
/// it.
pub(super) struct CountedTransport<T> {
    pub inner: T,
    pub in_flight: Arc<InFlight>,
}

impl<T> Transport<RoleServer> for CountedTransport<T>
where
    T: Transport<RoleServer>,
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let held = self.in_flight.hold();
        let send = self.inner.send(item);
        async move {
            let sent = send.await;
            drop(held);
            sent
        }
    }

    fn receive(
        &mut self,
    ) -> impl Future<Output = Option<rmcp::service::RxJsonRpcMessage<RoleServer>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// The server of a stdio session, counting each request in `in_flight`
/// while its handler runs.
#[derive(Clone)]
pub(super) struct Counted {
    pub server: Server,
    pub in_flight: Arc<InFlight>,
}

impl Service<RoleServer> for Counted {
    async fn handle_request(
        &self,
        request: model::ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<model::ServerResult, McpError> {
        // Held while the handler runs and until rmcp is done with its answer:
        // rmcp cancels the request's token when it takes the answer to send
        // it (the transport counts it from there) and when the client
        // cancels the request (its answer is then dropped). Some tokens it
        // never cancels while the session lasts (`initialize`'s, answered
        // through the transport all the same; a request's whose id another
        // request took over while it ran), so the count also ends
        // [`ANSWER_TAKEN`] after the handler returned: rmcp takes an answer
        // long before that.
        let held = self.in_flight.hold();
        let resolved = context.ct.clone();
        let answer = Service::handle_request(&self.server, request, context).await;
        tokio::spawn(async move {
            let _ = tokio::time::timeout(ANSWER_TAKEN, resolved.cancelled()).await;
            drop(held);
        });
        answer
    }

    async fn handle_notification(
        &self,
        notification: model::ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), McpError> {
        Service::handle_notification(&self.server, notification, context).await
    }

    fn get_info(&self) -> ServerConfig {
        Service::get_info(&self.server)
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [model::ProtocolVersion]> {
        Service::supported_protocol_versions(&self.server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_is_held_is_counted_until_released() {
        let f = Arc::new(InFlight::default());
        let held: Vec<Held> = (0..MAX_IN_FLIGHT).map(|_| f.hold()).collect();
        assert_eq!(f.len(), MAX_IN_FLIGHT);
        let waiter = {
            let f = f.clone();
            tokio::spawn(async move { f.wait_for_room().await })
        };
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(!waiter.is_finished(), "room while full");
        drop(held);
        assert_eq!(f.len(), 0);
        assert!(waiter.await.is_ok());
    }
}
