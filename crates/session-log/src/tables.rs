//! Every redb table of the session log, and the format version, in one place.
//!
//! This module owns the on-disk layout. Anything that changes what a table holds or how
//! a value is encoded must bump [`FORMAT_VERSION`]. It must not contain logic beyond the
//! definitions.

use redb::{MultimapTableDefinition, TableDefinition};

/// The format this build writes and the newest it reads.
///
/// A file whose `format_version` is larger is refused with
/// [`LogError::NewerFormat`](crate::LogError::NewerFormat), never misread.
///
/// History: 1, the tables below; 2, the same tables plus the intent WAL
/// (`session.wal`), which a format-1 reader would ignore; 3, an event of 1 KiB or more
/// may be stored LZ4-compressed (in the events table and in the WAL), which a format-2
/// reader would take for damage. A format-3 reader reads the events of formats 1 and 2
/// as they are (their values are all JSON).
pub const FORMAT_VERSION: u64 = 3;

/// Metadata: `format_version` → [`FORMAT_VERSION`] of the writer that created the file.
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The key of the format version in [`META`].
pub(crate) const FORMAT_VERSION_KEY: &str = "format_version";

/// Events: global sequence number (from 1, strictly increasing) → the JSON encoding of
/// [`StoredEvent`](crate::event::StoredEvent), LZ4-compressed when that makes a JSON of
/// 1 KiB or more shorter (see `event.rs`).
pub(crate) const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");

/// Index: call id → the sequence numbers of its events.
pub(crate) const BY_CALL: MultimapTableDefinition<&str, u64> =
    MultimapTableDefinition::new("events_by_call");

/// Calls with a `tool/intent` and no `tool/result` yet: call id → sequence number of the
/// intent. Maintained in the same transaction as the events, so it is never out of step.
pub(crate) const PENDING: TableDefinition<&str, u64> = TableDefinition::new("pending_calls");
