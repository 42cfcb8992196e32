//! What the log stores: [`EventKind`], [`NewEvent`] (what callers append) and [`Event`]
//! (what they read back), plus the private encoding of an event in the events table.
//!
//! This module owns the stable event names. It must not touch storage.

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The kind of an event. Serialised as its stable name (`tool/call`, ...); never renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    /// The model asked for a tool call (`tool/call`).
    #[serde(rename = "tool/call")]
    ToolCall,
    /// An approver was asked about a call (`approval/asked`).
    #[serde(rename = "approval/asked")]
    ApprovalAsked,
    /// The approver's decision (`approval/decided`).
    #[serde(rename = "approval/decided")]
    ApprovalDecided,
    /// The durable checkpoint written before a body runs (`tool/intent`).
    #[serde(rename = "tool/intent")]
    ToolIntent,
    /// The result the model saw (`tool/result`).
    #[serde(rename = "tool/result")]
    ToolResult,
    /// Recovery resolved calls whose outcome is unknown (`session/recovered`).
    #[serde(rename = "session/recovered")]
    SessionRecovered,
}

impl EventKind {
    /// Every kind, in pipeline order.
    pub const ALL: [EventKind; 6] = [
        EventKind::ToolCall,
        EventKind::ApprovalAsked,
        EventKind::ApprovalDecided,
        EventKind::ToolIntent,
        EventKind::ToolResult,
        EventKind::SessionRecovered,
    ];

    /// The kind's stable name, e.g. `tool/intent`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::ToolCall => "tool/call",
            EventKind::ApprovalAsked => "approval/asked",
            EventKind::ApprovalDecided => "approval/decided",
            EventKind::ToolIntent => "tool/intent",
            EventKind::ToolResult => "tool/result",
            EventKind::SessionRecovered => "session/recovered",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not the name of an [`EventKind`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownEventKind(pub String);

impl fmt::Display for UnknownEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown event kind {:?} (expected tool/call, approval/asked, approval/decided, \
             tool/intent, tool/result or session/recovered)",
            self.0
        )
    }
}

impl std::error::Error for UnknownEventKind {}

impl FromStr for EventKind {
    type Err = UnknownEventKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownEventKind(s.to_string()))
    }
}

/// An event to append. The log assigns its sequence number and timestamp.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewEvent {
    /// The call this event belongs to (the key of the call-id index).
    pub call_id: String,
    /// What happened.
    pub kind: EventKind,
    /// The event's data, stored as given.
    pub payload: serde_json::Value,
}

impl NewEvent {
    /// An event of `kind` for `call_id`.
    pub fn new(call_id: impl Into<String>, kind: EventKind, payload: serde_json::Value) -> Self {
        NewEvent {
            call_id: call_id.into(),
            kind,
            payload,
        }
    }
}

/// An event as stored in the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Global sequence number: from 1, strictly increasing in append order. A number is
    /// never reused once its event is durable; a lazily appended event that a crash lost
    /// (readers may have seen it) leaves its number to the next event appended.
    pub seq: u64,
    /// The call this event belongs to.
    pub call_id: String,
    /// What happened.
    pub kind: EventKind,
    /// When the event was appended, in milliseconds since the Unix epoch (wall clock).
    pub at_unix_ms: u64,
    /// The event's data.
    pub payload: serde_json::Value,
}

/// The value stored in the events table (the key is the sequence number), as written.
/// Part of the file format: changing it means bumping
/// [`FORMAT_VERSION`](crate::FORMAT_VERSION).
#[derive(Serialize)]
pub(crate) struct StoredEventRef<'a> {
    pub(crate) call_id: &'a str,
    pub(crate) kind: EventKind,
    pub(crate) at_unix_ms: u64,
    pub(crate) payload: &'a serde_json::Value,
}

impl StoredEventRef<'_> {
    /// The bytes stored for this event.
    pub(crate) fn encode(&self) -> Result<Vec<u8>, crate::LogError> {
        serde_json::to_vec(self)
            .map_err(|e| crate::LogError::Corrupt(format!("event cannot be encoded: {e}")))
    }
}

/// The value stored in the events table, as read back.
#[derive(Deserialize)]
struct StoredEvent {
    call_id: String,
    kind: EventKind,
    at_unix_ms: u64,
    payload: serde_json::Value,
}

/// Decodes the stored bytes of event `seq`.
pub(crate) fn decode_event(seq: u64, bytes: &[u8]) -> Result<Event, crate::LogError> {
    let stored: StoredEvent = serde_json::from_slice(bytes)
        .map_err(|e| crate::LogError::Corrupt(format!("event {seq} cannot be decoded: {e}")))?;
    Ok(Event {
        seq,
        call_id: stored.call_id,
        kind: stored.kind,
        at_unix_ms: stored.at_unix_ms,
        payload: stored.payload,
    })
}

/// Wall-clock milliseconds since the Unix epoch (0 if the clock is before it): the
/// timestamp of appended events.
pub(crate) fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
