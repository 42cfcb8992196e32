//! Approval announcements ([`ApprovalAnnouncement`](crate::ApprovalAnnouncement))
//! as MCP `notifications/message`, logger [`APPROVALS_LOGGER`], level
//! `notice`, to the client of every open session that may see them: the
//! session's principal made the call, or is an owner. As with a tool's log
//! records, a session gets them only once its client set a log level at or
//! below `notice` (`logging/setLevel`).
//!
//! One forwarding task per server. It never holds up a call: it reads the
//! host's bounded ring, and a client that does not take a notification
//! within [`LOG_FORWARD_LIMIT`](super::logging::LOG_FORWARD_LIMIT) loses it
//! (and gets none until it takes that one: [`SendGate`](super::logging::SendGate)); while the task waits, the ring
//! drops the oldest announcements, and the next notification sent carries
//! the count (`dropped`).
#![expect(
    deprecated,
    reason = "MCP logging is deprecated upstream but still spoken by 2025-11-25 clients"
)]

use super::logging::{Sent, rank};
use super::protocol::Server;
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use serde_json::json;

/// The `logger` of approval notifications.
pub const APPROVALS_LOGGER: &str = "toolhost/approvals";

/// Forwards the announcements of `server`'s host (and its successors)
/// until the host is gone or the task is aborted.
pub(super) fn spawn(server: Server) -> tokio::task::JoinHandle<()> {
    let mut listener = server.host().approval_listener();
    tokio::spawn(async move {
        while let Some(a) = listener.recv().await {
            let mut data = serde_json::to_value(&a).unwrap_or_else(|_| json!({}));
            if let Some(o) = data.as_object_mut() {
                o.insert("dropped".into(), json!(listener.dropped()));
            }
            let host = server.host();
            for session in server.sessions() {
                let Some(min) = session.level.get() else {
                    continue;
                };
                if rank(LoggingLevel::Notice) < rank(min) {
                    continue;
                }
                // Who may see it: an owner, or the principal of the call.
                let allowed = host.policy().is_owner(&session.principal)
                    || a.principal() == session.principal;
                if !allowed {
                    continue;
                }
                let mut n =
                    LoggingMessageNotificationParam::new(LoggingLevel::Notice, data.clone());
                n.logger = Some(APPROVALS_LOGGER.to_string());
                let peer = session.peer.clone();
                let sent = session
                    .gate
                    .send(async move { peer.notify_logging_message(n).await })
                    .await;
                if matches!(sent, Sent::Late | Sent::Skipped) {
                    tracing::warn!(
                        "an MCP client did not take an approval notification in time; dropped"
                    );
                }
            }
        }
    })
}
