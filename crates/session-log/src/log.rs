//! [`SessionLog`]: the handle through which the host uses the session log, whatever
//! engine stores it, and [`Durability`].
//!
//! This module owns the public surface: the constructors for the engines of this crate,
//! the checks that do not depend on an engine (which events `record_intents` accepts),
//! and the documentation of each operation's guarantees. It must not store anything
//! itself: every operation goes to one [`LogEngine`] (`engine.rs`).

use std::path::Path;
use std::time::Duration;

use crate::engine::LogEngine;
use crate::error::LogError;
use crate::event::{Event, EventKind, NewEvent};
use crate::memory::{DEFAULT_MEMORY_BUDGET, MemoryEngine};
use crate::reader::ReadOnlyLog;
use crate::recovery::Recovery;
use crate::redb_engine::RedbLog;
use crate::storage::Storage;

/// How long [`SessionLog::open`] waits for another writer to release a state directory
/// before it fails with [`LogError::Locked`].
pub const DEFAULT_OPEN_WAIT: Duration = Duration::from_secs(5);

/// The call id of events that belong to the session rather than to a call
/// (`session/recovered`).
pub const SESSION_CALL_ID: &str = "";

/// How durable a commit must be before [`SessionLog::append`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Durable on return: synced to storage. In the WAL mode of
    /// [`SessionLog::open`], one WAL record and at most one `fdatasync`: durable appends
    /// from several threads that arrive together share one (group commit), so under
    /// load there are fewer fsyncs than appends (a log that gets no lazy appends may
    /// also pay for a rare checkpoint); without a WAL, one redb
    /// commit and its `fdatasync`, plus one more in the rare commit that grows the file
    /// (redb grows it geometrically).
    Durable,
    /// Committed and visible to readers on return, but not synced: a crash may lose it.
    /// It becomes durable with the next [`Durability::Durable`] commit or
    /// [`SessionLog::flush`].
    Lazy,
}

/// The durable session log: a handle over one [`LogEngine`]. [`SessionLog::open`] stores
/// it in one redb database and its intent WAL; [`SessionLog::in_memory`] keeps it in
/// memory; [`SessionLog::from_engine`] takes any engine.
///
/// `Send + Sync`: share it behind an `Arc`. Appends from several threads are serialised.
///
/// After a storage error on a write, the log refuses further use
/// ([`LogError::Storage`]); reopen it to continue from the last durable state.
#[derive(Debug)]
pub struct SessionLog {
    engine: Box<dyn LogEngine>,
}

impl SessionLog {
    /// Opens the log of `state_dir` (the database `state_dir/session.redb` and its intent
    /// WAL `state_dir/session.wal`), creating the directory and the files if missing.
    /// Events that the WAL holds and the database lacks (after a crash) are moved
    /// into the database first.
    ///
    /// A durable append then costs one WAL record and one `fdatasync`; events reach the
    /// database in one durable commit at checkpoints and on drop, and reads in this
    /// process add the events that are still on their way.
    ///
    /// One writer holds a state directory at a time. While it has it open, a `holder` file
    /// in the directory names it (pid, program, since when). A second open waits for up
    /// to [`DEFAULT_OPEN_WAIT`] for it to close, then fails with [`LogError::Locked`]
    /// naming the holder; [`SessionLog::open_with_wait`] sets the wait. Readers
    /// ([`SessionLog::open_read_only`]) do not count: they read beside the writer.
    ///
    /// # Ambient Authority
    ///
    /// Creates `state_dir` and opens the files in the process's file system namespace.
    ///
    /// # Errors
    ///
    /// [`LogError::NotWritable`] if the directory or file cannot be created or written;
    /// [`LogError::Locked`] if the log stayed open elsewhere for as long as the open
    /// waited; [`LogError::NotADatabase`] if the
    /// file is not a redb database (it is not modified); [`LogError::NewerFormat`] if a
    /// newer toolhost wrote it; [`LogError::Storage`] or [`LogError::Corrupt`] otherwise
    /// (also if the WAL does not continue the database).
    pub fn open(state_dir: &Path) -> Result<SessionLog, LogError> {
        SessionLog::open_with_wait(state_dir, DEFAULT_OPEN_WAIT)
    }

    /// [`SessionLog::open`], waiting up to `wait` (instead of [`DEFAULT_OPEN_WAIT`]) for
    /// another writer to release the state. `Duration::ZERO` tries once.
    ///
    /// # Ambient Authority
    ///
    /// As [`SessionLog::open`].
    ///
    /// # Errors
    ///
    /// As [`SessionLog::open`].
    pub fn open_with_wait(state_dir: &Path, wait: Duration) -> Result<SessionLog, LogError> {
        RedbLog::open(state_dir, wait).map(SessionLog::from_engine)
    }

    /// Opens the log of `state_dir` read-only, to read it beside a writer that has it open
    /// (`toolhost serve`, a running `toolhost run`) or after one. It never writes,
    /// creates, repairs or recovers anything: appends and [`SessionLog::recover`] fail
    /// with [`LogError::ReadOnly`], and [`SessionLog::flush`] does nothing.
    ///
    /// Every read is a fresh snapshot of the database and the intent WAL, and sees:
    ///
    /// - every event whose durable append has returned (with the lazy events that append
    ///   carried), including those the writer holds only in the intent WAL so far;
    /// - lazy events only once they are durable, after the writer's next durable append,
    ///   [`SessionLog::flush`], checkpoint or close;
    /// - never a WAL record that is torn or still being written (the read stops before
    ///   it, as recovery after a crash would).
    ///
    /// A missing state directory or log file reads as an empty log.
    ///
    /// # Ambient Authority
    ///
    /// Opens the files of `state_dir`, read-only, in the process's file system namespace.
    ///
    /// # Errors
    ///
    /// [`LogError::NotReadable`] if the directory or a file cannot be read;
    /// [`LogError::NeedsRepair`] if the last writer did not close the log and no writer has
    /// it open (open it for writing once); [`LogError::Locked`] if, for
    /// [`DEFAULT_OPEN_WAIT`], a writer was still opening it or a process held it in a way
    /// that excludes readers (an older toolhost); [`LogError::NotADatabase`],
    /// [`LogError::NewerFormat`] or [`LogError::Corrupt`] as for [`SessionLog::open`]
    /// (also if the intent WAL does not continue the database).
    pub fn open_read_only(state_dir: &Path) -> Result<SessionLog, LogError> {
        ReadOnlyLog::open(state_dir, DEFAULT_OPEN_WAIT).map(SessionLog::from_engine)
    }

    /// Opens the log stored in `storage`, initialising it if it is empty, without an
    /// intent WAL: every durable append is a durable redb commit. Used by tests to
    /// count fsyncs, inject faults or simulate crashes of the database alone.
    ///
    /// # Errors
    ///
    /// As [`SessionLog::open`], except that locking is up to the storage.
    pub fn open_with_backend(storage: impl Storage) -> Result<SessionLog, LogError> {
        RedbLog::open_with_backend(storage).map(SessionLog::from_engine)
    }

    /// Opens the log stored in `storage` with its intent WAL (the write-ahead file that
    /// [`SessionLog::open`] keeps in `session.wal`) in `wal`, as [`SessionLog::open`] does
    /// with files. Used by tests and benchmarks to count fsyncs, inject faults or simulate
    /// crashes of both.
    ///
    /// # Errors
    ///
    /// As [`SessionLog::open`], except that locking is up to the storages.
    #[doc(alias = "open_with_wal")]
    pub fn open_with_journal(
        storage: impl Storage,
        wal: impl Storage,
    ) -> Result<SessionLog, LogError> {
        let mut log = RedbLog::open_with_backend(storage)?;
        log.attach_wal(Box::new(wal))?;
        Ok(SessionLog::from_engine(log))
    }

    /// A log in memory: nothing survives the process, and nothing is ever synced (both
    /// durabilities cost the same). For hosts that need no durability, benchmarks and
    /// tests. Events, the call index, pending calls and recovery behave as in a file,
    /// except that the log keeps about [`DEFAULT_MEMORY_BUDGET`] (64 MiB) of events
    /// ([`SessionLog::in_memory_with_budget`]).
    ///
    /// # Errors
    ///
    /// None today; the `Result` keeps the signature of the other constructors.
    pub fn in_memory() -> Result<SessionLog, LogError> {
        SessionLog::in_memory_with_budget(DEFAULT_MEMORY_BUDGET)
    }

    /// A log in memory that keeps about `budget` bytes of events (their strings, and a
    /// few words per value). Past it, the oldest finished calls (those with their
    /// `tool/result`) are forgotten whole; never one without its result (running, or
    /// waiting for an approval or for the rest of its batch), and never the calls of
    /// the append that went over: a call's
    /// result can be read back at least until the next append. A forgotten call reads
    /// as unknown ([`SessionLog::events_for_call`] is empty); sequence numbers keep
    /// increasing.
    ///
    /// # Errors
    ///
    /// None today; the `Result` keeps the signature of the other constructors.
    pub fn in_memory_with_budget(budget: usize) -> Result<SessionLog, LogError> {
        Ok(SessionLog::from_engine(MemoryEngine::new(budget)))
    }

    /// A log stored by `engine`: any implementation of [`LogEngine`], such as an engine of
    /// another crate. Every method of the log goes to the engine, after the checks that do
    /// not depend on it.
    pub fn from_engine(engine: impl LogEngine + 'static) -> SessionLog {
        SessionLog {
            engine: Box::new(engine),
        }
    }

    /// Appends `events` in one commit and returns their sequence numbers.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] if the storage failed. A durable append that returns an error
    /// may still have reached the storage: treat its outcome as unknown (recovery then
    /// resolves it), never as "not written".
    pub fn append(
        &self,
        events: &[NewEvent],
        durability: Durability,
    ) -> Result<Vec<u64>, LogError> {
        self.engine.append(events, durability)
    }

    /// [`SessionLog::append`] of events the caller gives up: the in-memory
    /// engine keeps them as they are instead of copying them.
    ///
    /// # Errors
    ///
    /// As [`SessionLog::append`].
    pub fn append_owned(
        &self,
        events: Vec<NewEvent>,
        durability: Durability,
    ) -> Result<Vec<u64>, LogError> {
        self.engine.append_owned(events, durability)
    }

    /// Appends a batch of `tool/intent` events in one durable commit (group commit: one
    /// `fdatasync` for the batch) and returns their sequence numbers.
    ///
    /// # Errors
    ///
    /// [`LogError::Invalid`] if an event is not a `tool/intent` (nothing is written);
    /// otherwise as [`SessionLog::append`].
    pub fn record_intents(&self, intents: &[NewEvent]) -> Result<Vec<u64>, LogError> {
        only_intents(intents)?;
        self.engine.append(intents, Durability::Durable)
    }

    /// Appends `before` (any events, e.g. the `tool/call` of the calls) and then the
    /// `tool/intent` events `intents`, all in one durable commit: the call record costs
    /// no commit of its own.
    ///
    /// # Errors
    ///
    /// As [`SessionLog::record_intents`].
    pub fn record_intents_after(
        &self,
        before: &[NewEvent],
        intents: &[NewEvent],
    ) -> Result<Vec<u64>, LogError> {
        only_intents(intents)?;
        self.engine.append_intents_after(before, intents)
    }

    /// Whether a durable commit waits for the storage (false only for the
    /// in-memory log, whose commits never block).
    pub fn durable_commit_blocks(&self) -> bool {
        self.engine.durable_commit_blocks()
    }

    /// Makes every earlier [`Durability::Lazy`] append durable: one WAL record of
    /// the lazy events in the WAL mode, an empty durable redb commit without a
    /// WAL; one `fdatasync` either way. Does nothing when there is nothing to make
    /// durable.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] if the storage failed.
    pub fn flush(&self) -> Result<(), LogError> {
        self.engine.flush()
    }

    /// Every event, in sequence order.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] or [`LogError::Corrupt`].
    pub fn events(&self) -> Result<Vec<Event>, LogError> {
        self.engine.events()
    }

    /// The events of one call, in sequence order (read through the call-id index).
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] or [`LogError::Corrupt`] (also if the index names an event
    /// that does not exist).
    pub fn events_for_call(&self, call_id: &str) -> Result<Vec<Event>, LogError> {
        self.engine.events_for_call(call_id)
    }

    /// The calls that have a `tool/intent` and no `tool/result`, in the order of their
    /// intents.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] or [`LogError::Corrupt`].
    pub fn pending_calls(&self) -> Result<Vec<String>, LogError> {
        self.engine.pending_calls()
    }

    /// Resolves every pending call (a durable `tool/intent` without a `tool/result`) as
    /// `TOOL_OUTCOME_UNKNOWN`, plus one `session/recovered` event, in one durable commit.
    /// Idempotent: when nothing is pending it appends nothing.
    ///
    /// Run it right after opening, before any new call: a call whose body is running in
    /// this process is pending too, and would be resolved as unknown. On a log shared by
    /// several replicas (the PostgreSQL engine), only this replica's calls and those of
    /// replicas whose lease expired are resolved.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] or [`LogError::Corrupt`]; nothing is recovered then
    /// ([`LogError::Fenced`] on a replica whose calls were recovered elsewhere).
    pub fn recover(&self) -> Result<Recovery, LogError> {
        self.engine.recover()
    }
}

/// Refuses a batch of intents that holds another kind of event.
fn only_intents(intents: &[NewEvent]) -> Result<(), LogError> {
    match intents.iter().find(|e| e.kind != EventKind::ToolIntent) {
        Some(other) => Err(LogError::Invalid(format!(
            "record_intents got a {} event for call {:?}",
            other.kind, other.call_id
        ))),
        None => Ok(()),
    }
}
