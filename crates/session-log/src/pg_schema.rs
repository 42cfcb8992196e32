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
/// `toolhost_replicas`); 2, `toolhost_approvals` (two-phase approvals, added to a
/// version-1 database by the first writer of this build that opens it).
///
/// The append function is not versioned: its signature and what it writes stay the
/// same, so builds of one version can share a database. A writer replaces an older
/// body when it opens the log (`CREATE_APPEND`; since 2026-12-05 it renews the lease
/// from `clock_timestamp()`, not from its transaction's start).
pub const PG_SCHEMA_VERSION: u64 = 2;

/// The advisory lock that serialises schema creation between replicas starting together.
pub(crate) const SCHEMA_LOCK: i64 = 0x746f_6f6c_686f_7374; // "toolhost"

/// The SQLSTATE `toolhost_append` raises when the replica's epoch is taken (fenced).
pub(crate) const FENCED_SQLSTATE: &str = "TH001";

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
///   Epochs start from the database clock (microseconds), so an identity's epochs are
///   never reused, also after a clean close forgot its row.
/// - `toolhost_append`: an append in one statement (see its comment).
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

/// The table of version 2: two-phase approval requests shared by the replicas of a log
/// (`--approver queue` on a PostgreSQL log), so that a request asked on one replica is
/// listed and decided through any other (`crate::PgApprovals`).
///
/// - `request`: the request as the host serialised it (opaque here);
/// - `replica`: who waits for it (its lease in `toolhost_replicas` says whether it still
///   can);
/// - `decision`: `NULL` while pending; set once, by whoever gets there first (an
///   operator, or the waiting replica when its wait ends), never changed;
/// - `decided_at`: when the decision was made; for a claim (`PgApprovals::claim_once`,
///   a row decided when inserted), until when it must be kept (`infinity`: for good).
///   Rows are removed a grace after it.
pub(crate) const CREATE_APPROVALS: &str = "
CREATE TABLE toolhost_approvals (
    log        text        NOT NULL,
    id         text        NOT NULL,
    request    text        NOT NULL,
    replica    text        NOT NULL,
    asked_at   timestamptz NOT NULL DEFAULT now(),
    decision   text,
    decided_at timestamptz,
    PRIMARY KEY (log, id)
);
";

/// The append function (see [`CREATE`] for the tables it writes): created with the
/// tables, and put in place of an older body by a writer that opens the log.
pub(crate) const CREATE_APPEND: &str = "
-- One append in one statement (its own transaction, one round trip): lock the log's
-- row, renew the lease if the epoch is still ours (else TH001: fenced), insert the
-- events from the log's next sequence number on, keep the pending set in step.
-- Each statement of the function sees what committed before it (READ COMMITTED), as
-- the statements of a transaction would. The lease runs from the time of its update,
-- after the wait for the row lock, not from the transaction's start.
CREATE OR REPLACE FUNCTION toolhost_append(
    p_log text, p_replica text, p_epoch bigint, p_lease float8, p_durable boolean,
    p_call_ids text[], p_kinds text[], p_at bigint, p_payloads text[],
    p_open_ids text[], p_open_at integer[], p_closed_ids text[]
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n integer := cardinality(p_call_ids);
    first_seq bigint;
BEGIN
    IF NOT p_durable THEN
        -- This transaction only: committed and visible at once, durable with the
        -- next synchronous commit (the write-ahead log is flushed in order).
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    UPDATE toolhost_logs SET next_seq = next_seq + n WHERE log = p_log
        RETURNING next_seq - n INTO first_seq;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the row of log % is missing', p_log USING ERRCODE = 'TH002';
    END IF;
    UPDATE toolhost_replicas SET lease_until = clock_timestamp() + make_interval(secs => p_lease)
        WHERE log = p_log AND id = p_replica AND epoch = p_epoch;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'replica % lost its lease', p_replica USING ERRCODE = 'TH001';
    END IF;
    INSERT INTO toolhost_events (log, seq, call_id, kind, at_unix_ms, payload, replica)
        SELECT p_log, first_seq + u.i - 1, u.c, u.k, p_at, u.p, p_replica
        FROM UNNEST(p_call_ids, p_kinds, p_payloads) WITH ORDINALITY AS u(c, k, p, i);
    DELETE FROM toolhost_pending WHERE log = p_log AND call_id = ANY(p_closed_ids);
    INSERT INTO toolhost_pending (log, call_id, seq, replica, epoch)
        SELECT p_log, o.c, first_seq + o.i - 1, p_replica, p_epoch
        FROM UNNEST(p_open_ids, p_open_at) AS o(c, i)
        ON CONFLICT (log, call_id) DO UPDATE
            SET seq = EXCLUDED.seq, replica = EXCLUDED.replica, epoch = EXCLUDED.epoch;
    RETURN first_seq;
END
$$;
";
