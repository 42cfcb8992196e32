//! A tool's `host.log` records as MCP `notifications/message`, for a
//! session whose client asked for them with `logging/setLevel`
//! (2025-11-25), or for one request that asked for them in its `_meta`
//! (`io.modelcontextprotocol/logLevel`, 2026-07-28; it overrides the
//! session's level for that request).
//!
//! Records are sent when the call ends, before its response, in the order
//! the tool wrote them, those at or above the level only; a request with
//! no level gets none. A call keeps at most
//! [`MAX_LOG_RECORDS`](crate::bindings::MAX_LOG_RECORDS) records, so a call
//! sends at most that many notifications. (MCP's logging utility is
//! deprecated by SEP-2577 in later revisions; it is what clients of
//! 2025-11-25 and the conformance suite use.)
#![expect(
    deprecated,
    reason = "MCP logging is deprecated upstream but still spoken by 2025-11-25 clients"
)]

use crate::state::LogRecord;
use rmcp::Peer;
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::RoleServer;
use serde_json::json;
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
/// most [`LOG_FORWARD_LIMIT`].
pub(super) async fn forward(
    peer: &Peer<RoleServer>,
    level: &SessionLevel,
    tool: &str,
    logs: &[LogRecord],
) {
    if tokio::time::timeout(LOG_FORWARD_LIMIT, send(peer, level, tool, logs))
        .await
        .is_err()
    {
        tracing::warn!(
            tool,
            "log notifications not taken in time; the rest are dropped"
        );
    }
}

async fn send(peer: &Peer<RoleServer>, level: &SessionLevel, tool: &str, logs: &[LogRecord]) {
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
        if peer.notify_logging_message(n).await.is_err() {
            // The client is gone; the rest would not arrive either.
            return;
        }
    }
}
