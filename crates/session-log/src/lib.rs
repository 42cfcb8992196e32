//! The durable session log of toolhost (DESIGN.md §5).
//!
//! One redb file per state directory (`STATE_DIR/session.redb`), with its intent WAL
//! beside it (`STATE_DIR/session.wal`, where durable appends land first), holds the
//! append-only events of a session: what the model asked for (`tool/call`), the approvals, the durable
//! checkpoint before a body runs (`tool/intent`), the result, and what recovery decided.
//! The log is the source of truth for what the model saw and for crash recovery.
//!
//! This crate owns the file format, durability and recovery. It must not know about the
//! pipeline, policy or sandboxes: it stores what it is given and answers questions about
//! it. No type of redb appears in its public API.
//!
//! Map of the crate:
//! - [`SessionLog`] (`log.rs`): open, append, read, flush, recover. A thin handle over one
//!   [`LogEngine`] (`engine.rs`), the interface every storage engine implements: the redb
//!   engine (`redb_engine.rs`, private, with its intent WAL: `wal_mode.rs` decides when
//!   events move, `wal.rs` owns the file format), the in-memory engine (`memory.rs`,
//!   private), the read-only view of a state directory beside its writer
//!   (`reader.rs`, [`SessionLog::open_read_only`]), or any engine given to
//!   [`SessionLog::from_engine`].
//! - `PgEngine` (`pg_engine.rs`, feature `postgres`, tables in `pg_schema.rs`): the
//!   log in PostgreSQL, shared by several replicas with leases and fencing;
//!   `PgApprovals` (`pg_approvals.rs`): two-phase approval requests those replicas share.
//! - [`Holder`] (`holder.rs`): who holds a state directory, and a second writer's
//!   bounded wait.
//! - [`Recovery`], [`recovery_events`] (`recovery.rs`): what recovery appends, the same
//!   for every engine.
//! - [`EventKind`], [`NewEvent`], [`Event`]: what is stored.
//! - [`Storage`] and its implementations: where the bytes go. [`FileStorage`] is the real
//!   file; with the `test-storage` feature (tests and benchmarks only, never a release
//!   build), `MemStorage`, `CountingStorage`, `FailingStorage` and `GatedStorage` count
//!   fsyncs, inject faults, simulate power loss and make concurrent appends meet.
//! - [`LogError`]: every way opening or writing can fail.

mod engine;
mod error;
mod event;
mod holder;
mod log;
mod memory;
#[cfg(feature = "postgres")]
mod pg_approvals;
#[cfg(feature = "postgres")]
mod pg_engine;
#[cfg(feature = "postgres")]
mod pg_schema;
mod reader;
mod recovery;
mod redb_engine;
mod storage;
mod tables;
mod wal;
mod wal_mode;

pub use crate::engine::LogEngine;
pub use crate::error::LogError;
pub use crate::event::{Event, EventKind, NewEvent, UnknownEventKind};
pub use crate::holder::Holder;
pub use crate::log::{DEFAULT_OPEN_WAIT, Durability, SESSION_CALL_ID, SessionLog};
pub use crate::memory::DEFAULT_MEMORY_BUDGET;
#[cfg(feature = "postgres")]
pub use crate::pg_approvals::{Decided, KEEP_DECIDED, PgApprovals};
#[cfg(feature = "postgres")]
pub use crate::pg_engine::{PgEngine, PgOptions, PgStats, PgStatsHandle, keeper_application};
#[cfg(feature = "postgres")]
pub use crate::pg_schema::PG_SCHEMA_VERSION;
pub use crate::recovery::{OUTCOME_UNKNOWN_TEXT, Recovery, recovery_events};
#[cfg(feature = "test-storage")]
pub use crate::storage::{
    CountingStorage, FailingStorage, FaultHandle, GatedStorage, MemStorage, Op, SyncCounter,
    SyncGate,
};
pub use crate::storage::{FileStorage, Storage};
pub use crate::tables::FORMAT_VERSION;
