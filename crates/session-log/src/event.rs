//! What the log stores: [`EventKind`], [`NewEvent`] (what callers append) and [`Event`]
//! (what they read back), plus the private encoding of an event in the events table.
//!
//! This module owns the stable event names. It must not touch storage.

use std::borrow::Cow;
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
    /// The bytes stored for this event: its JSON, or that JSON compressed (see
    /// [`COMPRESSED`]) when it is at least [`COMPRESS_FROM`] bytes long and compression
    /// makes it shorter.
    pub(crate) fn encode(&self) -> Result<Vec<u8>, crate::LogError> {
        let json = serde_json::to_vec(self)
            .map_err(|e| crate::LogError::Corrupt(format!("event cannot be encoded: {e}")))?;
        Ok(compressed_if_shorter(json))
    }
}

/// The first byte of a compressed stored event (the JSON of an event starts with `{`).
/// After it: the JSON's length (u32, little endian), then the JSON as one LZ4 block.
///
/// A tool's result often carries its text twice (in its canonical result and in the
/// content the model reads); LZ4 stores the second copy as a back reference, and text
/// itself about halves. Stored whole, a 4 KiB `read_file` result took 19–28 KB of the
/// redb file, as its 8.7 KB of JSON did not fit a 4 KiB page.
const COMPRESSED: u8 = 0x01;

/// The tag byte and the length before the LZ4 block.
const COMPRESSED_HEADER: usize = 5;

/// An event whose JSON is shorter than this is stored as JSON: compressing it would
/// save little and cost time on every append.
const COMPRESS_FROM: usize = 1024;

/// LZ4 cannot expand a block more than 255 times (plus a few bytes): a larger declared
/// length is damage, refused before anything is allocated for it.
const MAX_EXPANSION: usize = 255;

fn compressed_if_shorter(json: Vec<u8>) -> Vec<u8> {
    if json.len() < COMPRESS_FROM {
        return json;
    }
    let Ok(len) = u32::try_from(json.len()) else {
        return json;
    };
    let block = lz4_flex::block::compress(&json);
    if COMPRESSED_HEADER + block.len() >= json.len() {
        return json;
    }
    let mut stored = Vec::with_capacity(COMPRESSED_HEADER + block.len());
    stored.push(COMPRESSED);
    stored.extend_from_slice(&len.to_le_bytes());
    stored.extend_from_slice(&block);
    stored
}

/// The JSON of the stored bytes of event `seq`: decompressed if they are compressed,
/// else the bytes themselves.
fn stored_json(seq: u64, bytes: &[u8]) -> Result<Cow<'_, [u8]>, crate::LogError> {
    let Some((&COMPRESSED, rest)) = bytes.split_first() else {
        return Ok(Cow::Borrowed(bytes));
    };
    let damaged =
        |why: &str| crate::LogError::Corrupt(format!("event {seq} cannot be decoded: {why}"));
    let (len, block) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| damaged("a compressed event ends before its length"))?;
    let len = u32::from_le_bytes(*len);
    let len = usize::try_from(len)
        .ok()
        .filter(|&len| len <= block.len().saturating_mul(MAX_EXPANSION).saturating_add(16))
        .ok_or_else(|| damaged(&format!("its compressed block cannot hold {len} bytes")))?;
    let mut json = vec![0; len];
    match lz4_flex::block::decompress_into(block, &mut json) {
        Ok(written) if written == len => Ok(Cow::Owned(json)),
        Ok(written) => Err(damaged(&format!(
            "its compressed block holds {written} bytes, not {len}"
        ))),
        Err(e) => Err(damaged(&format!("its compressed block is damaged ({e})"))),
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
    let json = stored_json(seq, bytes)?;
    let stored: StoredEvent = serde_json::from_slice(&json)
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly on a set-up error")]

    use serde_json::json;

    use super::*;

    fn stored(payload: serde_json::Value) -> Vec<u8> {
        StoredEventRef {
            call_id: "c1",
            kind: EventKind::ToolResult,
            at_unix_ms: 7,
            payload: &payload,
        }
        .encode()
        .unwrap()
    }

    /// A result whose text appears twice, as a `read_file` result's does.
    fn text_result(text: &str) -> serde_json::Value {
        json!({
            "canonical": { "content": text },
            "content": [{ "type": "text", "text": text }],
        })
    }

    #[test]
    fn a_large_event_is_stored_compressed_and_reads_back_the_same() {
        let text: String = (0..400).map(|i| format!("line {i} of a file\n")).collect();
        let bytes = stored(text_result(&text));
        assert_eq!(bytes[0], COMPRESSED);
        let json_len = 2 * text.len();
        assert!(bytes.len() * 3 < json_len, "{} bytes stored", bytes.len());
        let event = decode_event(9, &bytes).unwrap();
        assert_eq!(event.seq, 9);
        assert_eq!(event.call_id, "c1");
        assert_eq!(event.kind, EventKind::ToolResult);
        assert_eq!(event.at_unix_ms, 7);
        assert_eq!(event.payload, text_result(&text));
    }

    #[test]
    fn small_and_incompressible_events_are_stored_as_json() {
        let small = stored(json!({ "tool": "read_file" }));
        assert_eq!(small[0], b'{');
        assert!(serde_json::from_slice::<serde_json::Value>(&small).is_ok());
        // 3 KiB that repeat nothing (a xorshift sequence, hex): the block would not be
        // shorter, so the JSON is kept.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let noise: String = (0..384)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                format!("{x:016x}")
            })
            .collect::<String>()
            .chars()
            .step_by(2)
            .collect();
        let kept = stored(json!({ "noise": noise }));
        assert_eq!(kept[0], b'{');
        assert_eq!(
            decode_event(1, &kept).unwrap().payload,
            json!({ "noise": noise })
        );
    }

    #[test]
    fn damaged_compressed_events_are_refused_with_an_error() {
        let text = "abc ".repeat(1000);
        let good = stored(text_result(&text));
        assert_eq!(good[0], COMPRESSED);
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            ("no length", vec![COMPRESSED, 1, 2]),
            ("tag only", vec![COMPRESSED]),
            ("cut short", good[..good.len() / 2].to_vec()),
        ];
        // A length no block this short can hold: refused before allocating 4 GiB.
        let mut huge = good.clone();
        huge[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
        cases.push(("huge length", huge));
        // A length longer than the block's data.
        let mut longer = good.clone();
        let len = u32::from_le_bytes([good[1], good[2], good[3], good[4]]);
        longer[1..5].copy_from_slice(&(len + 1).to_le_bytes());
        cases.push(("length + 1", longer));
        let mut shorter = good.clone();
        shorter[1..5].copy_from_slice(&(len - 1).to_le_bytes());
        cases.push(("length - 1", shorter));
        let mut flipped = good.clone();
        for b in flipped.iter_mut().skip(COMPRESSED_HEADER) {
            *b = !*b;
        }
        cases.push(("block inverted", flipped));
        for (what, bytes) in cases {
            match decode_event(3, &bytes) {
                Err(crate::LogError::Corrupt(m)) => {
                    assert!(m.starts_with("event 3 cannot be decoded"), "{what}: {m}")
                }
                other => panic!("{what}: {other:?}"),
            }
        }
    }
}
