//! The redb engine: the session log in one redb database, `STATE_DIR/session.redb`
//! (or a test [`Storage`]), with its intent WAL in WAL mode (`wal_mode.rs`).
//!
//! This module owns the transactions: which tables an append touches and with which
//! durability it commits, how the file is created and opened, and its format check. It
//! must not decide what an event means beyond the two facts the log indexes (call id, and
//! intent/result pairing); recovery lives in `recovery.rs`.
//!
//! # What redb guarantees, and what we rely on
//!
//! - A commit with `redb::Durability::Immediate` is durable when `commit()` returns. In
//!   redb's default single-process mode with 1-phase commit (checksummed roots), that is
//!   one `sync_data` of the storage, plus one more only when the commit had to grow the
//!   file (redb syncs the new length before a header can name it).
//! - A commit with `redb::Durability::None` is visible to later transactions at once but
//!   is not written durably; after a crash it may be lost. A later `Immediate` commit
//!   persists the whole database state, so it makes every earlier non-durable commit
//!   durable too (redb: "will not be persisted to disk unless followed by a commit with
//!   `Durability::Immediate`").
//! - After a crash, redb opens at the last durable commit (it checks the checksums of the
//!   newest root and falls back to the previous one). A failed write poisons the open
//!   `Database` (every later call fails); reopening recovers the last durable state.
//! - Write transactions are serialised by redb, so appends from several threads are safe
//!   and sequence numbers never collide.
//! - Closing the database (dropping the log) makes pending non-durable commits durable.
//!   We do not rely on it: a crash skips it.
//!
//! The above is redb's `ExclusiveWriter` mode, the mode of a log opened over a
//! [`Storage`]. The database of a state directory is opened in `SingleWriter` mode, so
//! that other processes can open it read-only while the writer has it (`reader.rs`).
//! There redb refuses non-durable commits (another process could not see them), and
//! every commit is two-phase: the pages are synced, then the header names them, synced
//! again, so a reader never follows a header to pages that are not on disk. A reader
//! sees a commit once its header is flushed. WAL mode needs only durable commits, one per
//! checkpoint, so the mode costs the pipeline nothing: a durable append is still one
//! record and one `fdatasync` of the intent WAL.
//!
//! # Two modes
//!
//! [`SessionLog::open`](crate::SessionLog::open) is in *WAL mode* (`wal_mode.rs`): a
//! durable append is one record in the intent WAL `session.wal` and one `fdatasync`, and
//! redb takes one durable commit per checkpoint. That is what makes the
//! durable intent cost little more than a raw `write` + `fdatasync`: a durable redb
//! commit writes several B-tree pages and its header before its sync, and measured about
//! 120 µs more than the raw write of the same event.
//! [`SessionLog::open_with_backend`](crate::SessionLog::open_with_backend) has no WAL:
//! every durable append is a durable redb commit, as described above.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redb::backends::FileBackend;
use redb::{
    ConcurrencyMode, Database, ReadTransaction, ReadableDatabase, ReadableTable, TableError,
    WriteTransaction,
};

use crate::engine::LogEngine;
use crate::error::{LogError, from_open_io, from_redb, from_redb_open};
use crate::event::{Event, EventKind, NewEvent, StoredEventRef, decode_event, now_unix_ms};
use crate::holder::{HolderFile, retry_while_locked};
use crate::log::Durability;
use crate::recovery::Recovery;
use crate::storage::{Backend, FileStorage, Storage};
use crate::tables::{BY_CALL, EVENTS, FORMAT_VERSION, FORMAT_VERSION_KEY, META, PENDING};
use crate::wal::Staged;
use crate::wal_mode::WalMutex;

/// The name of the log file inside a state directory.
pub(crate) const FILE_NAME: &str = "session.redb";

/// The name of the intent WAL inside a state directory (`wal.rs`).
pub(crate) const WAL_NAME: &str = "session.wal";

/// redb's page cache. The log is read rarely (recovery, `toolhost log`), so this is small.
pub(crate) const CACHE_BYTES: usize = 16 * 1024 * 1024;

/// The redb-backed log (a file, or a test storage).
///
/// Its fields are dropped in their order, after [`Drop::drop`] has made a last
/// checkpoint: the holder file is removed, then redb closes the database, and only then
/// does the intent WAL release its file lock, the state's lock. A writer that waits for
/// the state therefore never finds the database still open.
#[derive(Debug)]
pub(crate) struct RedbLog {
    /// The holder file of the state directory, for a log opened from one.
    holder: Option<HolderFile>,
    pub(crate) db: Database,
    /// Set by a `Lazy` commit, cleared by a `Durable` one: whether [`SessionLog::flush`]
    /// has anything to make durable.
    lazy_pending: AtomicBool,
    /// The intent WAL, in WAL mode (`wal_mode.rs`); `None` when every durable
    /// append is a durable redb commit.
    pub(crate) wal: Option<WalMutex>,
}

impl Drop for RedbLog {
    fn drop(&mut self) {
        if let Some(wal) = &self.wal {
            self.close_wal(wal);
        }
    }
}

impl RedbLog {
    /// Opens the log of `state_dir` for writing (the database `state_dir/session.redb`
    /// and its intent WAL `state_dir/session.wal`), creating the directory and the files
    /// if missing, and writes the holder file. While another writer holds the state, the
    /// open tries again for up to `wait`.
    ///
    /// The database is opened in redb's `ConcurrencyMode::SingleWriter`, so that a
    /// reader in another process can open it read-only beside this writer
    /// ([`SessionLog::open_read_only`](crate::SessionLog::open_read_only)). The state's
    /// lock is the intent WAL's file lock, taken first and released last.
    ///
    /// # Ambient Authority
    ///
    /// Creates `state_dir` and opens the files in the process's file system namespace.
    ///
    /// # Errors
    ///
    /// [`LogError::NotWritable`] if the directory or a file cannot be created or written;
    /// [`LogError::Locked`] (naming the holder) if the log stayed open elsewhere for
    /// `wait`; [`LogError::NotADatabase`] if the file is not a redb database (it is not
    /// modified); [`LogError::NewerFormat`] if a newer toolhost wrote it;
    /// [`LogError::Storage`] or [`LogError::Corrupt`] otherwise.
    pub(crate) fn open(state_dir: &Path, wait: Duration) -> Result<RedbLog, LogError> {
        std::fs::create_dir_all(state_dir)
            .map_err(|e| from_open_io(&e, state_dir.to_path_buf()))?;
        let mut log = retry_while_locked(state_dir, wait, || RedbLog::try_open(state_dir))?;
        log.holder = Some(HolderFile::write(state_dir));
        Ok(log)
    }

    /// One attempt of [`RedbLog::open`]: fails at once with [`LogError::Locked`] if the
    /// state is held.
    fn try_open(state_dir: &Path) -> Result<RedbLog, LogError> {
        let wal = FileStorage::open(&state_dir.join(WAL_NAME))?;
        let path = state_dir.join(FILE_NAME);
        if !path.exists() {
            create_atomically(state_dir, &path)?;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| from_open_io(&e, path.clone()))?;
        let backend = FileBackend::new(file).map_err(|e| from_redb_open(e, path.clone()))?;
        let db = redb::Builder::new()
            .set_cache_size(CACHE_BYTES)
            .set_concurrency_mode(ConcurrencyMode::SingleWriter)
            .create_with_backend(backend)
            .map_err(|e| from_redb_open(e, path))?;
        let mut log = RedbLog::from_database(db)?;
        log.attach_wal(Box::new(wal))?;
        // The WAL's directory entry must survive a power loss before any record in
        // it is relied on. Synced on every open, not only when this open created the
        // file: an earlier open may have died between creating it and syncing.
        std::fs::File::open(state_dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| from_open_io(&e, state_dir.to_path_buf()))?;
        Ok(log)
    }

    /// Opens the log stored in `storage`, initialising it if it is empty. Used by tests to
    /// count fsyncs, inject faults or simulate crashes.
    ///
    /// # Errors
    ///
    /// As [`SessionLog::open`], except that locking is up to the storage.
    pub(crate) fn open_with_backend(storage: impl Storage) -> Result<RedbLog, LogError> {
        let path = storage.path().map_or_else(
            || PathBuf::from("(storage without a path)"),
            Path::to_path_buf,
        );
        let db = redb::Builder::new()
            .set_cache_size(CACHE_BYTES)
            .create_with_backend(Backend(storage))
            .map_err(|e| from_redb_open(e, path))?;
        RedbLog::from_database(db)
    }

    fn from_database(db: Database) -> Result<RedbLog, LogError> {
        let log = RedbLog {
            holder: None,
            db,
            lazy_pending: AtomicBool::new(false),
            wal: None,
        };
        log.check_format()?;
        Ok(log)
    }

    /// Refuses a newer format; initialises a new file (durably) with the current one.
    fn check_format(&self) -> Result<(), LogError> {
        let read = self.db.begin_read().map_err(from_redb)?;
        match read.open_table(META) {
            Ok(meta) => match meta.get(FORMAT_VERSION_KEY).map_err(from_redb)? {
                Some(found) if found.value() > FORMAT_VERSION => {
                    return Err(LogError::newer_format(found.value()));
                }
                Some(found) if found.value() == 0 => {
                    return Err(LogError::Corrupt("format version 0".to_string()));
                }
                Some(found) if found.value() == FORMAT_VERSION => return Ok(()),
                Some(_) => {
                    // An older format of this crate: the tables are the same; the new
                    // number keeps older builds from opening a log whose intent WAL
                    // they would ignore.
                    drop(read);
                    return self.write(Durability::Durable, |tx| {
                        tx.open_table(META)
                            .map_err(from_redb)?
                            .insert(FORMAT_VERSION_KEY, FORMAT_VERSION)
                            .map_err(from_redb)?;
                        Ok(())
                    });
                }
                None => {}
            },
            Err(TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(from_redb(e)),
        }
        // No version: only an empty database may be initialised. A redb file that some
        // other program filled is not ours to write to.
        if read.list_tables().map_err(from_redb)?.next().is_some()
            || read
                .list_multimap_tables()
                .map_err(from_redb)?
                .next()
                .is_some()
        {
            return Err(LogError::Corrupt(
                "a redb database without a toolhost format version (not a session log)".to_string(),
            ));
        }
        drop(read);
        self.write(Durability::Durable, |tx| {
            tx.open_table(META)
                .map_err(from_redb)?
                .insert(FORMAT_VERSION_KEY, FORMAT_VERSION)
                .map_err(from_redb)?;
            tx.open_table(EVENTS).map_err(from_redb)?;
            tx.open_multimap_table(BY_CALL).map_err(from_redb)?;
            tx.open_table(PENDING).map_err(from_redb)?;
            Ok(())
        })
    }
}

impl LogEngine for RedbLog {
    fn append(&self, events: &[NewEvent], durability: Durability) -> Result<Vec<u64>, LogError> {
        if let Some(wal) = &self.wal {
            return self.append_wal_mode(wal, events, durability);
        }
        if events.is_empty() && durability == Durability::Lazy {
            return Ok(Vec::new());
        }
        self.write(durability, |tx| insert_events(tx, events))
    }

    fn flush(&self) -> Result<(), LogError> {
        if let Some(wal) = &self.wal {
            return self.flush_wal_mode(wal);
        }
        // A durable commit clears the flag before it commits: taking the
        // writer first waits until any such commit in flight is durable (or
        // has failed, and set the flag again).
        let writer = self.db.begin_write().map_err(from_redb)?;
        let pending = self.lazy_pending.load(Ordering::SeqCst);
        writer.abort().map_err(from_redb)?;
        if !pending {
            return Ok(());
        }
        self.write(Durability::Durable, |_| Ok(()))
    }

    fn events(&self) -> Result<Vec<Event>, LogError> {
        if let Some(wal) = &self.wal {
            return self.events_wal_mode(wal);
        }
        let read = self.db.begin_read().map_err(from_redb)?;
        read_events(&read, [])
    }

    fn events_for_call(&self, call_id: &str) -> Result<Vec<Event>, LogError> {
        if let Some(wal) = &self.wal {
            return self.events_for_call_wal_mode(wal, call_id);
        }
        let read = self.db.begin_read().map_err(from_redb)?;
        read_events_for_call(&read, call_id, [])
    }

    fn pending_calls(&self) -> Result<Vec<String>, LogError> {
        if let Some(wal) = &self.wal {
            return self.pending_calls_wal_mode(wal);
        }
        let read = self.db.begin_read().map_err(from_redb)?;
        read_pending(&read, [])
    }

    fn recover(&self) -> Result<Recovery, LogError> {
        self.resolve_pending()
    }
}

impl RedbLog {
    /// Runs `f` in one write transaction and commits it with `durability`. An error from
    /// `f` aborts the transaction: nothing is written.
    pub(crate) fn write<T>(
        &self,
        durability: Durability,
        f: impl FnOnce(&WriteTransaction) -> Result<T, LogError>,
    ) -> Result<T, LogError> {
        let mut tx = self.db.begin_write().map_err(from_redb)?;
        tx.set_durability(match durability {
            Durability::Durable => redb::Durability::Immediate,
            Durability::Lazy => redb::Durability::None,
        })
        .map_err(from_redb)?;
        let value = f(&tx)?;
        match durability {
            Durability::Durable => {
                // Cleared while this transaction holds the writer: no lazy commit can land
                // between the swap and the commit, which persists everything before it.
                let had_lazy = self.lazy_pending.swap(false, Ordering::SeqCst);
                if let Err(e) = tx.commit() {
                    if had_lazy {
                        self.lazy_pending.store(true, Ordering::SeqCst);
                    }
                    return Err(from_redb(e));
                }
            }
            Durability::Lazy => {
                tx.commit().map_err(from_redb)?;
                self.lazy_pending.store(true, Ordering::SeqCst);
            }
        }
        Ok(value)
    }
}

/// Every event of the database read by `read`, in sequence order, followed by `tail`:
/// events that follow the database's last, in order (the unapplied events of the WAL
/// mode, or the WAL's records a reader adds).
pub(crate) fn read_events<'a>(
    read: &ReadTransaction,
    tail: impl IntoIterator<Item = &'a Staged>,
) -> Result<Vec<Event>, LogError> {
    let table = read.open_table(EVENTS).map_err(from_redb)?;
    let mut events = Vec::new();
    for entry in table.iter().map_err(from_redb)? {
        let (seq, bytes) = entry.map_err(from_redb)?;
        events.push(decode_event(seq.value(), bytes.value())?);
    }
    for staged in tail {
        events.push(decode_event(staged.seq, &staged.bytes)?);
    }
    Ok(events)
}

/// The events of one call in the database read by `read` (through the call-id index),
/// followed by its events in `tail` (as in [`read_events`]).
pub(crate) fn read_events_for_call<'a>(
    read: &ReadTransaction,
    call_id: &str,
    tail: impl IntoIterator<Item = &'a Staged>,
) -> Result<Vec<Event>, LogError> {
    let index = read.open_multimap_table(BY_CALL).map_err(from_redb)?;
    let table = read.open_table(EVENTS).map_err(from_redb)?;
    let mut events = Vec::new();
    for seq in index.get(call_id).map_err(from_redb)? {
        let seq = seq.map_err(from_redb)?.value();
        let bytes = table.get(seq).map_err(from_redb)?.ok_or_else(|| {
            LogError::Corrupt(format!(
                "the index of call {call_id:?} names event {seq}, which does not exist"
            ))
        })?;
        events.push(decode_event(seq, bytes.value())?);
    }
    for staged in tail.into_iter().filter(|s| s.call_id == call_id) {
        events.push(decode_event(staged.seq, &staged.bytes)?);
    }
    Ok(events)
}

/// The pending calls of the database read by `read`, updated by the events of `tail` (as
/// in [`read_events`]: an intent adds its call, a result removes it), in the order of
/// their intents.
pub(crate) fn read_pending<'a>(
    read: &ReadTransaction,
    tail: impl IntoIterator<Item = &'a Staged>,
) -> Result<Vec<String>, LogError> {
    let table = read.open_table(PENDING).map_err(from_redb)?;
    let mut pending: HashMap<String, u64> = HashMap::new();
    for entry in table.iter().map_err(from_redb)? {
        let (call_id, seq) = entry.map_err(from_redb)?;
        pending.insert(call_id.value().to_string(), seq.value());
    }
    Ok(pending_after(pending, tail))
}

/// The calls of `pending` (call id → sequence number of its intent) after the events of
/// `tail`, in the order of their intents.
pub(crate) fn pending_after<'a>(
    mut pending: HashMap<String, u64>,
    tail: impl IntoIterator<Item = &'a Staged>,
) -> Vec<String> {
    for staged in tail {
        match staged.kind {
            EventKind::ToolIntent => {
                pending.insert(staged.call_id.clone(), staged.seq);
            }
            EventKind::ToolResult => {
                pending.remove(&staged.call_id);
            }
            _ => {}
        }
    }
    let mut by_seq: Vec<(u64, String)> = pending.into_iter().map(|(c, s)| (s, c)).collect();
    by_seq.sort();
    by_seq.into_iter().map(|(_, call_id)| call_id).collect()
}

/// Inserts `events` with the next sequence numbers, updates the call-id index and the
/// pending set, and returns the sequence numbers.
pub(crate) fn insert_events(
    tx: &WriteTransaction,
    events: &[NewEvent],
) -> Result<Vec<u64>, LogError> {
    let first = {
        let table = tx.open_table(EVENTS).map_err(from_redb)?;
        next_seq(&table)?
    };
    let staged = stage(events, first, now_unix_ms())?;
    insert_staged(tx, &staged)?;
    Ok(staged.iter().map(|s| s.seq).collect())
}

/// The sequence number after the last event of `table` (1 for an empty log).
pub(crate) fn next_seq(table: &impl ReadableTable<u64, &'static [u8]>) -> Result<u64, LogError> {
    match table.last().map_err(from_redb)? {
        Some((seq, _)) => seq
            .value()
            .checked_add(1)
            .ok_or_else(|| LogError::Corrupt("the sequence number space is exhausted".to_string())),
        None => Ok(1),
    }
}

/// Encodes `events` for the events table with sequence numbers from `first`.
pub(crate) fn stage(
    events: &[NewEvent],
    first: u64,
    at_unix_ms: u64,
) -> Result<Vec<Staged>, LogError> {
    // `first..` never wraps: u64 sequence numbers cannot run out in practice.
    events
        .iter()
        .zip(first..)
        .map(|(event, seq)| {
            let bytes = StoredEventRef {
                call_id: &event.call_id,
                kind: event.kind,
                at_unix_ms,
                payload: &event.payload,
            }
            .encode()?;
            Ok(Staged {
                seq,
                call_id: event.call_id.clone(),
                kind: event.kind,
                bytes,
            })
        })
        .collect()
}

/// Inserts staged events under their own sequence numbers and updates the call-id index
/// and the pending set.
pub(crate) fn insert_staged<'a>(
    tx: &WriteTransaction,
    staged: impl IntoIterator<Item = &'a Staged>,
) -> Result<(), LogError> {
    let mut table = tx.open_table(EVENTS).map_err(from_redb)?;
    let mut index = tx.open_multimap_table(BY_CALL).map_err(from_redb)?;
    let mut pending = tx.open_table(PENDING).map_err(from_redb)?;
    for event in staged {
        table
            .insert(event.seq, event.bytes.as_slice())
            .map_err(from_redb)?;
        index
            .insert(event.call_id.as_str(), event.seq)
            .map_err(from_redb)?;
        match event.kind {
            EventKind::ToolIntent => {
                pending
                    .insert(event.call_id.as_str(), event.seq)
                    .map_err(from_redb)?;
            }
            EventKind::ToolResult => {
                pending.remove(event.call_id.as_str()).map_err(from_redb)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Creates a new, initialised log file at `path` so that it appears whole or
/// not at all: it is built under a temporary name, synced, then linked into
/// place. A process killed half-way through leaves only a temporary file
/// (removed by a later open), never a `session.redb` that redb refuses.
fn create_atomically(state_dir: &Path, path: &Path) -> Result<(), LogError> {
    remove_stale_creations(state_dir);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let tmp = state_dir.join(format!(
        "{FILE_NAME}{CREATING}{}-{nanos}",
        std::process::id()
    ));
    let io = |e: std::io::Error| from_open_io(&e, path.to_path_buf());
    {
        let log = RedbLog::open_with_backend(FileStorage::open(&tmp)?)?;
        drop(log);
    }
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io)?;
    // `hard_link` fails if another process created the log meanwhile: then
    // that one is used and ours is discarded.
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(e)),
    }
    std::fs::File::open(state_dir)
        .and_then(|d| d.sync_all())
        .map_err(io)?;
    Ok(())
}

/// The infix of a log file being created.
const CREATING: &str = ".creating-";

/// Removes temporary files of creations that did not finish (their process
/// died). A file another process is still creating is locked, so it is left.
fn remove_stale_creations(state_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(state_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let is_ours = name
            .to_str()
            .is_some_and(|n| n.starts_with(FILE_NAME) && n.contains(CREATING));
        if is_ours && FileStorage::open(&entry.path()).is_ok() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
