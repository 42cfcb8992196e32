//! The bound on a stdio session's unanswered requests.
//!
//! rmcp reads a request, spawns a task to handle it, and reads the next:
//! it never waits for an answer to be written before reading on. A client
//! that sends requests (even `ping`s) and never reads stdout would make the
//! host hold one task and one answer per request, without bound (400,000
//! pings held 856 MB). So every request rmcp hands to the server is counted
//! from the moment its handler starts until its answer is written to
//! stdout, and while [`MAX_IN_FLIGHT`] are counted, the framing stops
//! reading stdin: the client is slowed down, not buffered.
//!
//! While the reader waits, a client's answers to the server's own requests
//! (an elicited approval) and its cancellations wait too; an approval that
//! is not answered in its time is a no, so nothing waits forever.

use super::protocol::Server;
use rmcp::model::{RequestId, ServerConfig};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, Service};
use rmcp::{ErrorData as McpError, model};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// The most requests of one stdio session being handled or waiting for
/// their answer to be written: twice the calls a server runs at once, so
/// that calls waiting for an approval never fill it alone.
pub const MAX_IN_FLIGHT: usize = 2 * super::MAX_CALLS_IN_FLIGHT;

/// The requests of one session counted between their handler's start and
/// their answer on stdout, by id. An id counts once however often a client
/// reuses it while it is open: rmcp keeps one answer per open id (it drops
/// the other), so that is what can wait. A cancelled request is uncounted
/// at its cancellation: rmcp drops its answer.
#[derive(Default)]
pub(super) struct InFlight {
    ids: Mutex<Ids>,
    room: Notify,
}

/// The ids counted, and the ids cancelled while not counted (a cancellation
/// can be handled before its request's handler starts): the next start of
/// such an id is not counted. At most [`MAX_EARLY_CANCELS`] of those are
/// kept, oldest dropped, so a client that cancels what it never sent cannot
/// grow them; a dropped one makes a later request count once more than it
/// should until its answer, never less.
#[derive(Default)]
struct Ids {
    open: HashSet<String>,
    early: HashSet<String>,
    early_order: std::collections::VecDeque<String>,
}

/// The most cancellations of requests not yet counted that are remembered.
const MAX_EARLY_CANCELS: usize = 1024;

/// An id as the key both sides agree on: its JSON text as rmcp writes it.
fn key(id: &RequestId) -> String {
    id.clone().into_json_value().to_string()
}

impl InFlight {
    fn ids(&self) -> std::sync::MutexGuard<'_, Ids> {
        crate::state::lock(&self.ids)
    }

    /// A request's handler starts.
    pub(super) fn begin(&self, id: &RequestId) {
        let id = key(id);
        let mut ids = self.ids();
        if ids.early.remove(&id) {
            ids.early_order.retain(|e| *e != id);
            return;
        }
        ids.open.insert(id);
    }

    /// An answer carrying `id` (as JSON) was written. Answers to requests
    /// not counted change nothing.
    pub(super) fn answered(&self, id: &serde_json::Value) {
        if self.ids().open.remove(&id.to_string()) {
            self.room.notify_waiters();
        }
    }

    /// The request `id` was cancelled: rmcp drops its answer.
    fn cancelled(&self, id: &RequestId) {
        let id = key(id);
        let mut ids = self.ids();
        if ids.open.remove(&id) {
            drop(ids);
            self.room.notify_waiters();
            return;
        }
        if ids.early.insert(id.clone()) {
            ids.early_order.push_back(id);
            if ids.early_order.len() > MAX_EARLY_CANCELS
                && let Some(oldest) = ids.early_order.pop_front()
            {
                ids.early.remove(&oldest);
            }
        }
    }

    /// How many requests are counted.
    pub(super) fn len(&self) -> usize {
        self.ids().open.len()
    }

    /// Returns once fewer than [`MAX_IN_FLIGHT`] requests are counted.
    pub(super) async fn wait_for_room(&self) {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            // Registered before the check, so an answer written between
            // the check and the wait is not missed.
            room.as_mut().enable();
            if self.len() < MAX_IN_FLIGHT {
                return;
            }
            room.await;
        }
    }
}

/// The server of a stdio session, counting each request in `in_flight`
/// when its handler starts.
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
        self.in_flight.begin(&context.id);
        Service::handle_request(&self.server, request, context).await
    }

    async fn handle_notification(
        &self,
        notification: model::ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), McpError> {
        if let model::ClientNotification::CancelledNotification(n) = &notification
            && let Some(id) = &n.params.request_id
        {
            self.in_flight.cancelled(id);
        }
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

    #[test]
    fn an_id_counts_once_until_its_answer_or_its_cancellation() {
        let f = InFlight::default();
        let one = RequestId::Number(1);
        f.begin(&one);
        f.begin(&one);
        f.begin(&RequestId::String("1".into()));
        assert_eq!(f.len(), 2, "a reused open id counts once");
        f.answered(&serde_json::json!(1));
        assert_eq!(f.len(), 1);
        // An answer to a request never counted changes nothing.
        f.answered(&serde_json::json!(7));
        assert_eq!(f.len(), 1);
        f.cancelled(&RequestId::String("1".into()));
        assert_eq!(f.len(), 0);
        f.answered(&serde_json::json!("1"));
        assert_eq!(f.len(), 0);
        // A cancellation handled before its request's handler started: that
        // start is not counted (its answer will be dropped).
        f.cancelled(&RequestId::Number(9));
        f.begin(&RequestId::Number(9));
        assert_eq!(f.len(), 0);
        f.begin(&RequestId::Number(9));
        assert_eq!(f.len(), 1, "only the one start is skipped");
        // Cancellations of what was never sent are remembered boundedly.
        for i in 0..(MAX_EARLY_CANCELS as i64 + 10) {
            f.cancelled(&RequestId::Number(1000 + i));
        }
        assert_eq!(f.ids().early.len(), MAX_EARLY_CANCELS);
        assert_eq!(f.ids().early_order.len(), MAX_EARLY_CANCELS);
    }
}
