//! A tool's `host.log` records as MCP `notifications/message`, for a
//! session whose client asked for them with `logging/setLevel`
//! (2025-11-25), or for one request that asked for them in its `_meta`
//! (`io.modelcontextprotocol/logLevel`, 2026-07-28; it overrides the
//! session's level for that request).
//!
//! Records are sent when the call ends, before its response, in the order
//! the tool wrote them, those at or above the level only; a request with
//! no level gets none. A call keeps at most
//! [`MAX_LOG_RECORDS`](crate::sandbox::bindings::MAX_LOG_RECORDS) records, so a call
//! sends at most that many notifications. (MCP's logging utility is
//! deprecated by SEP-2577 in later revisions; it is what clients of
//! 2025-11-25 and the conformance suite use.)
#![expect(
    deprecated,
    reason = "MCP logging is deprecated upstream but still spoken by 2025-11-25 clients"
)]

use crate::sandbox::state::LogRecord;
use rmcp::Peer;
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::RoleServer;
use serde_json::json;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The level a session's client asked for; `None`: no log notifications.
#[derive(Clone, Default)]
pub(super) struct SessionLevel(Arc<Mutex<Option<LoggingLevel>>>);

impl SessionLevel {
    pub(super) fn set(&self, level: LoggingLevel) {
        match self.0.lock() {
            Ok(mut l) => *l = Some(level),
            Err(poisoned) => *poisoned.into_inner() = Some(level),
        }
    }

    /// A level of its own, for one request: a 2026-07-28 request names
    /// the level it wants in its `_meta` (`io.modelcontextprotocol/logLevel`).
    pub(super) fn fixed(level: LoggingLevel) -> Self {
        Self(Arc::new(Mutex::new(Some(level))))
    }

    pub(super) fn get(&self) -> Option<LoggingLevel> {
        match self.0.lock() {
            Ok(l) => *l,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }
}

/// What one session has of the notifications the server sends it on its
/// own account (log records, progress, approval announcements, list
/// changes): a client that keeps its connection and stops reading its
/// stream leaves rmcp's session worker blocked on the send, and rmcp keeps
/// each notification handed to it (a task per notification) until the
/// worker takes it. So once one notification of the session has waited
/// [`LOG_FORWARD_LIMIT`], the session gets none until that one is taken:
/// what the server holds for a stuck session is bounded by the sends that
/// were already waiting, not by how many it would send.
#[derive(Clone, Default)]
pub(super) struct SendGate(Arc<AtomicUsize>);

/// How a notification sent through a [`SendGate`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sent {
    /// The transport took it.
    Taken,
    /// The client is gone.
    Failed,
    /// Not taken within [`LOG_FORWARD_LIMIT`]; it stays with rmcp until
    /// the session takes it, and the session gets nothing more until then.
    Late,
    /// Not sent: an earlier notification of the session is late.
    Skipped,
}

impl SendGate {
    /// Sends through `sending` unless an earlier notification of the
    /// session is late; waits at most [`LOG_FORWARD_LIMIT`].
    pub(super) async fn send<F, E>(&self, sending: F) -> Sent
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: Send + 'static,
    {
        if self.0.load(Ordering::SeqCst) > 0 {
            return Sent::Skipped;
        }
        let late = self.0.clone();
        let (tell, told) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let mut sending = std::pin::pin!(sending);
            match tokio::time::timeout(LOG_FORWARD_LIMIT, &mut sending).await {
                Ok(r) => {
                    let _ = tell.send(if r.is_ok() { Sent::Taken } else { Sent::Failed });
                }
                Err(_) => {
                    late.fetch_add(1, Ordering::SeqCst);
                    let _ = tell.send(Sent::Late);
                    let _ = sending.await;
                    late.fetch_sub(1, Ordering::SeqCst);
                }
            }
        });
        told.await.unwrap_or(Sent::Failed)
    }
}

/// MCP's level for a tool log level (`trace` has none: it is `debug`).
fn level_of(record: &LogRecord) -> LoggingLevel {
    match record.level {
        "trace" | "debug" => LoggingLevel::Debug,
        "info" => LoggingLevel::Info,
        "warn" => LoggingLevel::Warning,
        _ => LoggingLevel::Error,
    }
}

/// Severity rank, lowest first (RFC 5424 order, as MCP uses it).
pub(super) fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The longest a call's response waits for its log notifications to be
/// taken by the transport: a client that opened the stream they travel on
/// and stopped reading it cannot hold the call (and its slot among the
/// calls in flight) longer. What is not sent by then is dropped.
pub(super) const LOG_FORWARD_LIMIT: Duration = Duration::from_secs(2);

/// Sends `logs` of a call of `tool` to `peer`, as `level` allows, for at
/// most [`LOG_FORWARD_LIMIT`], through the session's `gate`.
pub(super) async fn forward(
    peer: &Peer<RoleServer>,
    gate: &SendGate,
    level: &SessionLevel,
    tool: &str,
    logs: &[LogRecord],
) {
    if tokio::time::timeout(LOG_FORWARD_LIMIT, send(peer, gate, level, tool, logs))
        .await
        .is_err()
    {
        tracing::warn!(
            tool,
            "log notifications not taken in time; the rest are dropped"
        );
    }
}

async fn send(
    peer: &Peer<RoleServer>,
    gate: &SendGate,
    level: &SessionLevel,
    tool: &str,
    logs: &[LogRecord],
) {
    let Some(min) = level.get() else {
        return;
    };
    for record in logs {
        let l = level_of(record);
        if rank(l) < rank(min) {
            continue;
        }
        let data = match &record.fields {
            Some(fields) => json!({ "message": record.message, "fields": fields }),
            None => json!(record.message),
        };
        let mut n = LoggingMessageNotificationParam::new(l, data);
        n.logger = Some(tool.to_string());
        let peer = peer.clone();
        let sent = gate
            .send(async move { peer.notify_logging_message(n).await })
            .await;
        if sent != Sent::Taken {
            // The client is gone, or does not read: the rest would not
            // arrive either.
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// Sends of a session that reads are never held back, even at once;
    /// once one waits past the limit, the session gets none (they are not
    /// even started) until that one is taken.
    #[tokio::test(start_paused = true)]
    async fn a_session_that_does_not_take_a_notification_gets_no_more_until_it_does() {
        let gate = SendGate::default();
        let slow = || async {
            tokio::time::sleep(LOG_FORWARD_LIMIT / 2).await;
            Ok::<(), ()>(())
        };
        let (a, b) = tokio::join!(gate.send(slow()), gate.send(slow()));
        assert_eq!((a, b), (Sent::Taken, Sent::Taken));

        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let stuck = async move {
            let _ = released.await;
            Ok::<(), ()>(())
        };
        assert_eq!(gate.send(stuck).await, Sent::Late);
        let started = Arc::new(AtomicBool::new(false));
        let flag = started.clone();
        let later = async move {
            flag.store(true, Ordering::SeqCst);
            Ok::<(), ()>(())
        };
        assert_eq!(gate.send(later).await, Sent::Skipped);
        assert!(
            !started.load(Ordering::SeqCst),
            "a skipped send was started"
        );
        // The session takes the late one: it gets notifications again.
        let _ = release.send(());
        let mut sent = Sent::Skipped;
        for _ in 0..1000 {
            sent = gate.send(async { Ok::<(), ()>(()) }).await;
            if sent != Sent::Skipped {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(sent, Sent::Taken);
        assert_eq!(gate.send(async { Err::<(), ()>(()) }).await, Sent::Failed);
    }
}
