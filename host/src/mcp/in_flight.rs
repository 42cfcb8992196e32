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
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// The most requests of one stdio session being handled or waiting for
/// their answer to be written: twice the calls a server runs at once, so
/// that calls waiting for an approval never fill it alone.
pub const MAX_IN_FLIGHT: usize = 2 * super::MAX_CALLS_IN_FLIGHT;

/// The requests of one session counted between their handler's start and
/// their answer on stdout, by id (a client may reuse an id; each use
/// counts).
#[derive(Default)]
pub(super) struct InFlight {
    ids: Mutex<Counts>,
    room: Notify,
}

#[derive(Default)]
struct Counts {
    by_id: HashMap<String, usize>,
    total: usize,
}

/// An id as the key both sides agree on: its JSON text as rmcp writes it.
fn key(id: &RequestId) -> String {
    id.clone().into_json_value().to_string()
}

impl InFlight {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        match self.ids.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A request's handler starts.
    pub(super) fn begin(&self, id: &RequestId) {
        let mut c = self.counts();
        *c.by_id.entry(key(id)).or_default() += 1;
        c.total += 1;
    }

    /// An answer carrying `id` (as JSON) was written. Answers to requests
    /// not counted (the `initialize` rmcp answers itself) change nothing.
    pub(super) fn answered(&self, id: &serde_json::Value) {
        let id = id.to_string();
        let mut c = self.counts();
        let Some(n) = c.by_id.get_mut(&id) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            c.by_id.remove(&id);
        }
        c.total -= 1;
        drop(c);
        self.room.notify_waiters();
    }

    /// How many requests are counted.
    pub(super) fn len(&self) -> usize {
        self.counts().total
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
    fn each_use_of_an_id_counts_until_its_answer() {
        let f = InFlight::default();
        let one = RequestId::Number(1);
        f.begin(&one);
        f.begin(&one);
        f.begin(&RequestId::String("1".into()));
        assert_eq!(f.len(), 3);
        f.answered(&serde_json::json!(1));
        assert_eq!(f.len(), 2);
        // An answer to a request never counted changes nothing.
        f.answered(&serde_json::json!(7));
        assert_eq!(f.len(), 2);
        f.answered(&serde_json::json!("1"));
        f.answered(&serde_json::json!(1));
        f.answered(&serde_json::json!(1));
        assert_eq!(f.len(), 0);
    }
}
