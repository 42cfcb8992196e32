//! The tables of the PostgreSQL engine and their version, in one place (the counterpart of
//! `tables.rs` for redb).
//!
//! This module owns the database layout. Anything that changes what a table holds must
//! bump [`PG_SCHEMA_VERSION`] and add a migration. It must not contain engine logic.

/// The schema version this build creates and the newest it uses.
///
/// A database whose `toolhost_schema.version` is larger is refused with
/// [`LogError::NewerFormat`](crate::LogError::NewerFormat), never written.
///
/// History: 1, the first schema (`toolhost_logs`, `toolhost_events`, `toolhost_pending`,
/// `toolhost_replicas`).
pub const PG_SCHEMA_VERSION: u64 = 1;

/// The advisory lock that serialises schema creation between replicas starting together.
pub(crate) const SCHEMA_LOCK: i64 = 0x746f_6f6c_686f_7374; // "toolhost"

/// The version table, created first: one row.
pub(crate) const CREATE_VERSION_TABLE: &str = "
CREATE TABLE IF NOT EXISTS toolhost_schema (
    id      integer PRIMARY KEY CHECK (id = 1),
    version bigint  NOT NULL
)";

/// Every other table of version 1.
///
/// - `toolhost_logs`: one row per log (a session log shared by replicas). Its row lock is
///   the log's serialisation point: every write transaction takes it first, so sequence
///   numbers are assigned in commit order and a reader never sees a gap that a later
///   commit fills.
/// - `toolhost_events`: the events, keyed by (log, seq); `replica` is the writer.
/// - `toolhost_pending`: calls with a `tool/intent` and no `tool/result`, with the replica
///   (and its epoch) that wrote the intent; maintained in the events' transaction.
/// - `toolhost_replicas`: who writes a log: a lease (database clock) renewed by every
///   write, and an epoch that recovery of the replica's calls increments (fencing).
pub(crate) const CREATE: &str = "
CREATE TABLE toolhost_logs (
    log      text   PRIMARY KEY,
    next_seq bigint NOT NULL
);
CREATE TABLE toolhost_events (
    log        text   NOT NULL,
    seq        bigint NOT NULL,
    call_id    text   NOT NULL,
    kind       text   NOT NULL,
    at_unix_ms bigint NOT NULL,
    payload    text   NOT NULL,
    replica    text   NOT NULL,
    PRIMARY KEY (log, seq)
);
CREATE INDEX toolhost_events_by_call ON toolhost_events (log, call_id, seq);
CREATE TABLE toolhost_pending (
    log     text   NOT NULL,
    call_id text   NOT NULL,
    seq     bigint NOT NULL,
    replica text   NOT NULL,
    epoch   bigint NOT NULL,
    PRIMARY KEY (log, call_id)
);
CREATE TABLE toolhost_replicas (
    log         text        NOT NULL,
    id          text        NOT NULL,
    epoch       bigint      NOT NULL,
    lease_until timestamptz NOT NULL,
    PRIMARY KEY (log, id)
);
";
