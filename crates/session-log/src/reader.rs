//! The read-only engine ([`SessionLog::open_read_only`](crate::SessionLog::open_read_only)):
//! a state directory's log as another process sees it, while a writer has it open or
//! after.
//!
//! This module owns what a reader sees and how it reads. It must never write, create,
//! repair or recover anything: it opens `session.redb` read-only with redb (in the
//! writer's `SingleWriter` mode, which lets it share the file with a live writer) and
//! reads `session.wal` with plain reads. The only locks it takes are shared ones (redb's
//! reader locks, and for a moment the WAL's, to tell whether a writer is alive).
//!
//! # What a reader sees
//!
//! Each read ([`LogEngine::events`] and the others) is one snapshot: the intent WAL's
//! intact records, then the database's latest commit, combined.
//!
//! - **Every durable event** (an append with `Durability::Durable` that returned, and the
//!   lazy events it carried), as of the read. The writer's WAL mode keeps events out of
//!   redb between checkpoints; they are in the WAL, from its first record on, as
//!   consecutive sequence numbers that continue the database's last durable commit.
//! - **Lazy events** only once they are durable: after the writer's next durable append,
//!   [`flush`](crate::SessionLog::flush), checkpoint or close. Until then they are in the
//!   writer's memory only. (redb refuses non-durable commits in `SingleWriter` mode, and
//!   a reader never sees a commit whose header is not flushed.)
//! - **Not** an append in progress: a WAL record that is torn or partly written (wrong
//!   magic, length past the end, CRC mismatch) ends the WAL there, as after a crash; the
//!   append has not returned yet. (A record that is whole but not yet synced is shown: its
//!   append is about to return, or to fail with its outcome unknown, as the
//!   [`LogEngine`] rules say of any durable append that fails.)
//!
//! The WAL is read first and the database second. A checkpoint that runs in between
//! puts every event the reader took from the WAL into the database (so they are still
//! there), and the WAL's next round starts after them, so the two never leave a gap.
//! Should they anyway (a WAL of another log), the read is tried again a few times and
//! then fails with [`LogError::Corrupt`]. WAL events that the database also has must be
//! byte for byte the stored ones, as the writer checks when it opens.
//!
//! # Opening
//!
//! A missing state directory or log file is an empty log (nothing was recorded there,
//! and nothing is created). A database that its last writer left without closing it
//! (killed) needs a repair that only a writer can make: the open fails with
//! [`LogError::NeedsRepair`] when no writer is alive, and waits for the writer when one
//! is (redb reports the same while a writer is still opening the file).

use std::collections::HashMap;
use std::fmt;
use std::fs::{File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use redb::{ConcurrencyMode, ReadOnlyDatabase, ReadTransaction, ReadableDatabase, TableError};

use crate::engine::LogEngine;
use crate::error::{LogError, from_redb, from_redb_open};
use crate::event::{Event, NewEvent, decode_event};
use crate::holder::retry_while_locked;
use crate::log::{DEFAULT_OPEN_WAIT, Durability};
use crate::recovery::Recovery;
use crate::redb_engine::{
    CACHE_BYTES, FILE_NAME, WAL_NAME, next_seq, pending_after, read_events, read_events_for_call,
    read_pending,
};
use crate::tables::{EVENTS, FORMAT_VERSION, FORMAT_VERSION_KEY, META};
use crate::wal::{Staged, parse};

/// How many times a read is tried when the WAL does not continue the database.
const SNAPSHOT_ATTEMPTS: usize = 8;

/// The read-only engine.
pub(crate) struct ReadOnlyLog {
    state_dir: PathBuf,
    db_path: PathBuf,
    wal_path: PathBuf,
    /// Opened once the state directory has a log file: at open, or at the first read
    /// after a writer created it.
    db: OnceLock<ReadOnlyDatabase>,
}

impl fmt::Debug for ReadOnlyLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadOnlyLog")
            .field("db_path", &self.db_path)
            .field("wal_path", &self.wal_path)
            .field("has_database", &self.db.get().is_some())
            .finish()
    }
}

/// One read's view: the database's snapshot (if there is a database) and the WAL's
/// events after its last one.
struct Snapshot {
    read: Option<ReadTransaction>,
    tail: Vec<Staged>,
}

impl ReadOnlyLog {
    /// Opens the log of `state_dir` read-only; waits up to `wait` while a writer is still
    /// opening it, or while a process holds it in a mode that excludes readers.
    pub(crate) fn open(state_dir: &Path, wait: Duration) -> Result<ReadOnlyLog, LogError> {
        let log = ReadOnlyLog {
            state_dir: state_dir.to_path_buf(),
            db_path: state_dir.join(FILE_NAME),
            wal_path: state_dir.join(WAL_NAME),
            db: OnceLock::new(),
        };
        match std::fs::metadata(state_dir) {
            Ok(meta) if meta.is_dir() => {
                log.database(wait)?;
            }
            Ok(_) => return Err(not_readable(state_dir, &"not a directory")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(not_readable(state_dir, &e)),
        }
        Ok(log)
    }

    /// The database, opened (and its format checked) the first time the state directory
    /// has a log file; `None` until then.
    fn database(&self, wait: Duration) -> Result<Option<&ReadOnlyDatabase>, LogError> {
        if let Some(db) = self.db.get() {
            return Ok(Some(db));
        }
        match std::fs::metadata(&self.db_path) {
            // An empty file is what a writer would initialise: no log yet.
            Ok(meta) if meta.len() == 0 => return Ok(None),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(not_readable(&self.db_path, &e)),
        }
        let db = retry_while_locked(&self.state_dir, wait, || {
            open_database(&self.state_dir, &self.db_path)
        })?;
        check_format(&db)?;
        // Another thread may have opened it meanwhile: either handle will do.
        let _ = self.db.set(db);
        Ok(self.db.get())
    }

    /// The events of the WAL's intact records, as `(seq, stored bytes)` (see `wal.rs`).
    /// A missing WAL has none.
    fn wal_events(&self) -> Result<Vec<(u64, Vec<u8>)>, LogError> {
        match std::fs::read(&self.wal_path) {
            Ok(bytes) => Ok(parse(&bytes).0),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(LogError::Storage(format!(
                "{}: {e}",
                self.wal_path.display()
            ))),
        }
    }

    /// One consistent view: the WAL first, the database second (see the module
    /// documentation).
    fn snapshot(&self) -> Result<Snapshot, LogError> {
        let mut gap = None;
        for _ in 0..SNAPSHOT_ATTEMPTS {
            let wal = self.wal_events()?;
            let read = match self.database(DEFAULT_OPEN_WAIT)? {
                Some(db) => Some(db.begin_read().map_err(from_redb)?),
                None => None,
            };
            let last = match &read {
                Some(read) => {
                    let events = read.open_table(EVENTS).map_err(from_redb)?;
                    let last = next_seq(&events)? - 1;
                    for (seq, bytes) in wal.iter().filter(|(seq, _)| *seq <= last) {
                        let stored = events.get(*seq).map_err(from_redb)?;
                        if stored.as_ref().map(|s| s.value()) != Some(bytes.as_slice()) {
                            return Err(LogError::Corrupt(format!(
                                "the intent WAL's event {seq} differs from the database's: the \
                                 WAL belongs to another log"
                            )));
                        }
                    }
                    last
                }
                None => 0,
            };
            let tail: Vec<(u64, Vec<u8>)> =
                wal.into_iter().filter(|(seq, _)| *seq > last).collect();
            match tail.first() {
                Some((first, _)) if Some(*first) != last.checked_add(1) => {
                    gap = Some((*first, last));
                }
                _ => {
                    let tail = tail
                        .into_iter()
                        .map(|(seq, bytes)| {
                            let event = decode_event(seq, &bytes)?;
                            Ok(Staged {
                                seq,
                                call_id: event.call_id,
                                kind: event.kind,
                                bytes,
                            })
                        })
                        .collect::<Result<_, LogError>>()?;
                    return Ok(Snapshot { read, tail });
                }
            }
        }
        let (first, last) = gap.unwrap_or_default();
        Err(LogError::Corrupt(format!(
            "the intent WAL continues at event {first} but the database ends at event {last}: \
             the WAL belongs to another log"
        )))
    }

    fn read_only(&self) -> LogError {
        LogError::ReadOnly {
            path: self.db_path.clone(),
        }
    }
}

impl LogEngine for ReadOnlyLog {
    fn append(&self, _events: &[NewEvent], _durability: Durability) -> Result<Vec<u64>, LogError> {
        Err(self.read_only())
    }

    fn flush(&self) -> Result<(), LogError> {
        Ok(())
    }

    fn events(&self) -> Result<Vec<Event>, LogError> {
        let snapshot = self.snapshot()?;
        match &snapshot.read {
            Some(read) => read_events(read, &snapshot.tail),
            None => snapshot
                .tail
                .iter()
                .map(|s| decode_event(s.seq, &s.bytes))
                .collect(),
        }
    }

    fn events_for_call(&self, call_id: &str) -> Result<Vec<Event>, LogError> {
        let snapshot = self.snapshot()?;
        match &snapshot.read {
            Some(read) => read_events_for_call(read, call_id, &snapshot.tail),
            None => snapshot
                .tail
                .iter()
                .filter(|s| s.call_id == call_id)
                .map(|s| decode_event(s.seq, &s.bytes))
                .collect(),
        }
    }

    fn pending_calls(&self) -> Result<Vec<String>, LogError> {
        let snapshot = self.snapshot()?;
        match &snapshot.read {
            Some(read) => read_pending(read, &snapshot.tail),
            None => Ok(pending_after(HashMap::new(), &snapshot.tail)),
        }
    }

    fn recover(&self) -> Result<Recovery, LogError> {
        Err(self.read_only())
    }
}

/// Refuses a newer format and a redb file that is not a session log.
fn check_format(db: &ReadOnlyDatabase) -> Result<(), LogError> {
    let read = db.begin_read().map_err(from_redb)?;
    let meta = match read.open_table(META) {
        Ok(meta) => meta,
        Err(TableError::TableDoesNotExist(_)) => {
            return Err(LogError::Corrupt(
                "a redb database without a toolhost format version (not a session log)".to_string(),
            ));
        }
        Err(e) => return Err(from_redb(e)),
    };
    match meta.get(FORMAT_VERSION_KEY).map_err(from_redb)? {
        Some(found) if found.value() > FORMAT_VERSION => Err(LogError::newer_format(found.value())),
        Some(found) if found.value() == 0 => Err(LogError::Corrupt("format version 0".to_string())),
        Some(_) => Ok(()),
        None => Err(LogError::Corrupt(
            "a redb database without a toolhost format version (not a session log)".to_string(),
        )),
    }
}

/// One attempt to open the database read-only.
fn open_database(state_dir: &Path, path: &Path) -> Result<ReadOnlyDatabase, LogError> {
    let opened = redb::Builder::new()
        .set_cache_size(CACHE_BYTES)
        .set_concurrency_mode(ConcurrencyMode::SingleWriter)
        .open_read_only(path);
    match opened {
        Ok(db) => Ok(db),
        // redb reports a file that its last writer left unclean, unless a live writer
        // holds it: one that is still opening (and repairing) it, or none at all.
        Err(redb::DatabaseError::RepairAborted) if writer_is_alive(state_dir) => {
            Err(LogError::locked(path.to_path_buf()))
        }
        Err(redb::DatabaseError::RepairAborted) => Err(LogError::NeedsRepair {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(from_redb_open(e, path.to_path_buf())),
    }
}

/// The error for a directory or file that cannot be read.
fn not_readable(path: &Path, e: &dyn fmt::Display) -> LogError {
    LogError::NotReadable {
        path: path.to_path_buf(),
        detail: e.to_string(),
    }
}

/// Whether a writer holds the state: the intent WAL's file lock is taken. Found by
/// trying a shared lock, released at once.
fn writer_is_alive(state_dir: &Path) -> bool {
    let Ok(file) = File::open(state_dir.join(WAL_NAME)) else {
        return false;
    };
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(TryLockError::WouldBlock) => true,
        Err(TryLockError::Error(_)) => false,
    }
}
