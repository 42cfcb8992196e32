//! The WAL mode of the redb log (the mode of [`SessionLog::open`]): a durable
//! append goes to the intent WAL (`wal.rs`) with one `fdatasync`; events reach redb
//! later, in one durable commit per checkpoint.
//!
//! This module owns when events move from memory and the WAL into redb, and when the
//! WAL is emptied. It must keep one invariant: every event whose append returned
//! durable is in the WAL or in a durable redb commit, and the WAL's events always
//! continue the database's durable sequence without a gap.
//!
//! # How an event moves
//!
//! - **Durable append:** the events (after any lazily appended events not yet in the WAL)
//!   go to the WAL in one record, then the append waits for an `fdatasync` that covers
//!   it (group commit, below). They are then *unapplied*: in the WAL and in memory, not
//!   yet in redb.
//! - **Lazy append:** the events are *unsynced* (in memory only) and unapplied. The next
//!   durable append or [`SessionLog::flush`] carries them into the WAL.
//! - **Reads** (in this process) hold the state's lock, read redb and add the unapplied
//!   events from memory, so they see every appended event; appends wait for them. A read
//!   writes nothing. (Another process sees the database and the WAL's records: see
//!   `reader.rs`.)
//! - **Checkpoint:** on a lazy append once the WAL and the unsynced events hold
//!   [`CHECKPOINT_BYTES`] (or [`CHECKPOINT_EVENTS`] wait in memory), on a durable
//!   append only at four times those (a log without lazy appends), and when the log
//!   is dropped: one durable redb commit
//!   inserts the unapplied events, then the WAL starts a new round. Except when the log
//!   is dropped, it runs in two phases: the bulk is committed without the state's lock,
//!   while other appends go on into the WAL and memory; then, under the lock, the few
//!   events appended meanwhile are committed and the WAL starts its new round
//!   (`RedbLog::checkpoint_in_two_phases`).
//! - **Open:** the WAL's events after the database's last event are inserted in one
//!   durable commit, then the WAL starts a new round. A crash therefore loses no
//!   event whose durable append returned. The WAL's events that the database already
//!   has must be byte for byte the stored ones, and the first missing one must follow the
//!   database's last: otherwise the files do not belong together and opening fails
//!   ([`LogError::Corrupt`](crate::LogError::Corrupt)), leaving both untouched.
//!
//! # Group commit
//!
//! A record is written under the state's lock, but synced after the lock is released,
//! so that durable appends from several threads arriving together share one
//! `fdatasync`. Each written record gets a ticket (the count of records written so far).
//! An append whose record is written then waits on [`SyncProgress`]: if a sync that
//! started after its record was written has finished, it returns without syncing (a
//! follower); if no sync is running, it becomes the leader: it notes how many records
//! are written, syncs, and wakes every waiter whose ticket that covers; otherwise it
//! waits for the running sync and checks again. One thread appending alone pays exactly
//! one `fdatasync` per durable append, as before; N threads appending together pay as
//! few as two (the one running when they arrived, and one for all of them).
//!
//! A failed sync breaks the log, like a failed write: every waiter it should have
//! covered gets the error, and later appends are refused.
//!
//! [`SessionLog::open`]: crate::SessionLog::open
//! [`SessionLog::flush`]: crate::SessionLog::flush

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use redb::ReadableDatabase;

use crate::error::{LogError, from_redb};
use crate::event::{Event, NewEvent, decode_event, now_unix_ms};
use crate::log::Durability;
use crate::recovery::{Recovery, recovery_events};
use crate::redb_engine::{
    RedbLog, insert_staged, next_seq, read_events, read_events_for_call, read_pending, stage,
};
use crate::storage::Storage;
use crate::tables::EVENTS;
use crate::wal::{IntentWal, Staged, encode_record};

/// A record's place in the write order: the count of WAL records written up to and
/// including it (never reset, across rounds).
type Ticket = u64;

/// A checkpoint runs once the WAL's current round and the lazy events not yet in it
/// hold this many bytes.
pub(crate) const CHECKPOINT_BYTES: u64 = 768 * 1024;

/// ... or once this many events wait in memory for redb.
pub(crate) const CHECKPOINT_EVENTS: usize = 4096;

/// The WAL and the events on their way to redb.
#[derive(Debug)]
pub(crate) struct WalState {
    wal: IntentWal,
    /// The sequence number of the next appended event.
    next_seq: u64,
    /// Appended events not yet inserted into redb, in order.
    unapplied: Vec<Arc<Staged>>,
    /// Lazily appended events not yet in the WAL, in order (shared with
    /// `unapplied`: a lazy event's bytes are not copied).
    unsynced: Vec<Arc<Staged>>,
    /// The size of the events of `unsynced`: it counts toward a checkpoint as if they
    /// were in the WAL already, so that large lazy events neither pile up in memory nor
    /// make the next durable append write them all as one record.
    unsynced_bytes: u64,
    /// Set by the first storage failure; the log refuses further use.
    broken: Option<String>,
    /// A checkpoint's first phase (the bulk commit, without this lock) is running.
    checkpointing: bool,
    /// Counts the times events left `unapplied` for the database (see
    /// [`RedbLog::read_with_state`]).
    generation: u64,
}

/// How far the WAL is synced (group commit, see the module documentation).
#[derive(Debug, Default)]
struct SyncProgress {
    /// Every record with a ticket up to this one is durable.
    synced: Ticket,
    /// Whether a leader is syncing now (without the state's lock).
    syncing: bool,
    /// Set when a sync failed: the records it should have covered are of unknown fate.
    failed: Option<String>,
}

/// The WAL of a log in WAL mode: its state under one lock, and what group commit
/// needs to sync outside that lock.
pub(crate) struct WalMutex {
    state: Mutex<WalState>,
    /// The ticket of the last record written; set under the state's lock, after the
    /// write.
    written: AtomicU64,
    progress: Mutex<SyncProgress>,
    /// Signalled when a sync ends.
    synced: Condvar,
    /// The WAL's storage, for `sync_data` only (writes go through [`WalState::wal`]).
    storage: Arc<dyn Storage>,
}

impl std::fmt::Debug for WalMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalMutex")
            .field("state", &self.state)
            .field("written", &self.written)
            .field("progress", &self.progress)
            .finish_non_exhaustive()
    }
}

impl WalMutex {
    /// The lock of the WAL state, whatever a panic left behind.
    fn lock(&self) -> Result<MutexGuard<'_, WalState>, LogError> {
        self.state
            .lock()
            .map_err(|_| LogError::Storage("the session log was poisoned by a panic".to_string()))
    }

    /// Waits until the record with `ticket` is durable, syncing it (and every record
    /// written before the sync starts) if no running sync covers it. See the module
    /// documentation.
    fn wait_synced(&self, ticket: Ticket) -> Result<(), LogError> {
        let poisoned = || LogError::Storage("the session log was poisoned by a panic".to_string());
        let mut progress = self.progress.lock().map_err(|_| poisoned())?;
        loop {
            if progress.synced >= ticket {
                return Ok(());
            }
            if let Some(why) = &progress.failed {
                return Err(LogError::Storage(format!("intent WAL: {why}")));
            }
            if progress.syncing {
                progress = self.synced.wait(progress).map_err(|_| poisoned())?;
                continue;
            }
            // The leader: every record written before this load is covered by the sync.
            progress.syncing = true;
            let target = self.written.load(Ordering::SeqCst);
            drop(progress);
            let result = self.storage.sync_data();
            progress = self.progress.lock().map_err(|_| poisoned())?;
            progress.syncing = false;
            match &result {
                Ok(()) => progress.synced = progress.synced.max(target),
                Err(e) => progress.failed = Some(e.to_string()),
            }
            self.synced.notify_all();
            if let Err(e) = result {
                drop(progress);
                // Lock order: the state, then the progress; never the other way.
                let e = storage_error("intent WAL", &e);
                if let Ok(mut state) = self.state.lock() {
                    state.broken.get_or_insert_with(|| e.to_string());
                }
                return Err(e);
            }
        }
    }
}

fn storage_error(what: &str, e: &dyn std::fmt::Display) -> LogError {
    LogError::Storage(format!("{what}: {e}"))
}

impl RedbLog {
    /// Attaches the intent WAL in `storage` to an opened database: replays the
    /// WAL's events that the database lacks (one durable commit), then empties the
    /// WAL and prepares it for appends.
    pub(crate) fn attach_wal(&mut self, storage: Box<dyn Storage>) -> Result<(), LogError> {
        let wal_error = |e: std::io::Error| storage_error("intent WAL", &e);
        let mut wal = IntentWal::new(storage).map_err(wal_error)?;
        let (events, _) = wal.read_records().map_err(wal_error)?;
        let (last, missing) = {
            let read = self.db.begin_read().map_err(from_redb)?;
            let table = read.open_table(EVENTS).map_err(from_redb)?;
            let last = next_seq(&table)? - 1;
            // Events the database has must be exactly the WAL's: the WAL holds
            // the stored bytes (timestamps included), so anything else means the two
            // files do not belong together (a replaced or rewritten database).
            let (kept, missing): (Vec<_>, Vec<_>) =
                events.into_iter().partition(|(seq, _)| *seq <= last);
            for (seq, bytes) in &kept {
                let stored = table.get(*seq).map_err(from_redb)?;
                if stored.as_ref().map(|s| s.value()) != Some(bytes.as_slice()) {
                    return Err(LogError::Corrupt(format!(
                        "the intent WAL's event {seq} differs from the database's: the \
                         WAL belongs to another log"
                    )));
                }
            }
            (last, missing)
        };
        let missing: Vec<Staged> = missing
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
        if let Some(first) = missing.first()
            && first.seq != last + 1
        {
            return Err(LogError::Corrupt(format!(
                "the intent WAL continues at event {} but the database ends at event \
                 {last}: the WAL belongs to another log",
                first.seq
            )));
        }
        if !missing.is_empty() {
            self.write(Durability::Durable, |tx| insert_staged(tx, &missing))?;
        }
        let next_seq = missing
            .last()
            .map_or(last, |s| s.seq)
            .checked_add(1)
            .ok_or_else(exhausted)?;
        // Clear the whole file, not only the records read, and make that
        // durable before any new record: behind a torn record there can be
        // intact records whose events were lost with it (a device writes
        // back out of order). Their numbers are handed out again from here,
        // so one of them would otherwise read as the continuation of a new
        // record that happens to end where it starts. One sync per open.
        wal.set_round_end(wal.capacity());
        wal.reset().map_err(wal_error)?;
        wal.prepare().map_err(wal_error)?;
        wal.storage().sync_data().map_err(wal_error)?;
        let storage = wal.storage();
        self.wal = Some(WalMutex {
            state: Mutex::new(WalState {
                wal,
                next_seq,
                unapplied: Vec::new(),
                unsynced: Vec::new(),
                unsynced_bytes: 0,
                broken: None,
                checkpointing: false,
                generation: 0,
            }),
            written: AtomicU64::new(0),
            progress: Mutex::new(SyncProgress::default()),
            synced: Condvar::new(),
            storage,
        });
        Ok(())
    }

    /// Locks the WAL state, refusing a log that a storage failure broke.
    fn state(wal: &WalMutex) -> Result<MutexGuard<'_, WalState>, LogError> {
        let state = wal.lock()?;
        if let Some(why) = &state.broken {
            return Err(LogError::Storage(format!(
                "an earlier write failed ({why}); reopen the log to continue from its last \
                 durable state"
            )));
        }
        Ok(state)
    }

    /// Appends `events` in WAL mode (see the module documentation).
    pub(crate) fn append_wal_mode(
        &self,
        wal: &WalMutex,
        events: &[NewEvent],
        durability: Durability,
    ) -> Result<Vec<u64>, LogError> {
        let mut state = Self::state(wal)?;
        let after = advance(state.next_seq, events.len())?;
        let staged = shared(stage(events, state.next_seq, now_unix_ms())?);
        let seqs: Vec<u64> = staged.iter().map(|s| s.seq).collect();
        let ticket = match durability {
            Durability::Durable => {
                if staged.is_empty() {
                    // Nothing of its own, but a durable append returns only once every
                    // earlier event is durable, also those of a record another thread
                    // wrote and has not synced yet: what a flush does.
                    drop(state);
                    return self.flush_wal_mode(wal).map(|()| seqs);
                }
                Some(wal_record(wal, &mut state, &staged)?)
            }
            Durability::Lazy => {
                let bytes: u64 = staged.iter().map(|s| s.bytes.len() as u64).sum();
                state.unsynced_bytes = state.unsynced_bytes.saturating_add(bytes);
                state.unsynced.extend(staged.iter().cloned());
                None
            }
        };
        state.next_seq = after;
        state.unapplied.extend(staged);
        // A checkpoint costs a durable redb commit: it runs on a lazy append
        // (a result, after the body), so that a durable append (an intent,
        // before the body) costs exactly its one WAL fsync. Only a log
        // that never gets lazy appends checkpoints on a durable one, at four
        // times the threshold.
        let factor = match durability {
            Durability::Lazy => 1,
            Durability::Durable => 4,
        };
        let due = state.wal.len().saturating_add(state.unsynced_bytes) >= factor * CHECKPOINT_BYTES
            || state.unapplied.len() + state.unsynced.len() >= factor as usize * CHECKPOINT_EVENTS;
        // One checkpoint at a time: while one commits its bulk, appends go on
        // (and do not start another).
        let batch = (due && !state.checkpointing).then(|| {
            state.checkpointing = true;
            state.unapplied.clone()
        });
        drop(state);
        if let Some(batch) = batch {
            self.checkpoint_in_two_phases(wal, batch)?;
        }
        if let Some(ticket) = ticket {
            wal.wait_synced(ticket)?;
        }
        Ok(seqs)
    }

    /// Makes lazily appended events durable: one WAL record and one `fdatasync`, or
    /// nothing when every event is durable already.
    pub(crate) fn flush_wal_mode(&self, wal: &WalMutex) -> Result<(), LogError> {
        let mut state = Self::state(wal)?;
        let ticket = if state.unsynced.is_empty() {
            // Nothing left to write, but a record that carried lazy events
            // may still be waiting for its sync: wait for the last one
            // written (at once when it is synced already).
            wal.written.load(Ordering::SeqCst)
        } else {
            wal_record(wal, &mut state, &[])?
        };
        drop(state);
        wal.wait_synced(ticket)
    }

    /// Every event: the database's, then the unapplied ones from memory. Writes nothing.
    pub(crate) fn events_wal_mode(&self, wal: &WalMutex) -> Result<Vec<Event>, LogError> {
        let (read, state) = self.read_with_state(wal)?;
        read_events(&read, not_in(&read, &state)?)
    }

    /// The events of one call: the database's, then the unapplied ones. Writes nothing.
    pub(crate) fn events_for_call_wal_mode(
        &self,
        wal: &WalMutex,
        call_id: &str,
    ) -> Result<Vec<Event>, LogError> {
        let (read, state) = self.read_with_state(wal)?;
        read_events_for_call(&read, call_id, not_in(&read, &state)?)
    }

    /// The pending calls of the database, updated by the unapplied events. Writes nothing.
    pub(crate) fn pending_calls_wal_mode(&self, wal: &WalMutex) -> Result<Vec<String>, LogError> {
        let (read, state) = self.read_with_state(wal)?;
        read_pending(&read, not_in(&read, &state)?)
    }

    /// Recovery in WAL mode: the pending calls are read and their results appended (one
    /// WAL record) under one hold of the state, so that no append lands in between.
    pub(crate) fn recover_wal_mode(&self, wal: &WalMutex) -> Result<Recovery, LogError> {
        let mut state = Self::state(wal)?;
        let recovered = {
            let read = self.db.begin_read().map_err(from_redb)?;
            read_pending(&read, not_in(&read, &state)?)?
        };
        if recovered.is_empty() {
            return Ok(Recovery::default());
        }
        let ticket = append_locked(wal, &mut state, &recovery_events(&recovered))?;
        drop(state);
        wal.wait_synced(ticket)?;
        Ok(Recovery { recovered })
    }

    /// A read transaction of the database and the locked state that belong together:
    /// no events left memory for the database between the transaction's start and the
    /// lock (else it starts again; after three tries it starts under the lock). The
    /// transaction is begun without the lock: redb may make it wait for a commit that
    /// is running, and a checkpoint's first phase must not hold up appends that way.
    /// That first phase may commit in between; [`not_in`] leaves out what the
    /// transaction already sees in the database.
    fn read_with_state<'w>(
        &self,
        wal: &'w WalMutex,
    ) -> Result<(redb::ReadTransaction, MutexGuard<'w, WalState>), LogError> {
        for _ in 0..3 {
            let generation = Self::state(wal)?.generation;
            let read = self.db.begin_read().map_err(from_redb)?;
            let state = Self::state(wal)?;
            if state.generation == generation {
                return Ok((read, state));
            }
        }
        let state = Self::state(wal)?;
        let read = self.db.begin_read().map_err(from_redb)?;
        Ok((read, state))
    }

    /// A checkpoint that holds the state's lock only for its short second phase.
    ///
    /// 1. Without the lock: one durable redb commit of `batch` (the events
    ///    unapplied when the checkpoint began). Appends go on meanwhile, into the
    ///    WAL after its current records and into memory; reads see `batch` once,
    ///    from memory until the commit and from the database after it
    ///    ([`not_in`]). The WAL keeps every record, so a crash in this phase
    ///    loses nothing: at open, the WAL's events the database has are checked
    ///    and the others inserted.
    /// 2. Under the lock: `batch` leaves the unapplied list, and
    ///    [`RedbLog::checkpoint`] commits the events appended during phase 1
    ///    (few: those of one commit's time) and starts a new WAL round.
    ///
    /// Before, the whole commit ran under the lock, and every append of every
    /// thread waited for it (about 7 ms per MiB of events on this project's
    /// machines, see BENCHMARKS.md).
    fn checkpoint_in_two_phases(
        &self,
        wal: &WalMutex,
        batch: Vec<Arc<Staged>>,
    ) -> Result<(), LogError> {
        let committed = if batch.is_empty() {
            Ok(())
        } else {
            self.write(Durability::Durable, |tx| {
                insert_staged(tx, batch.iter().map(|s| &**s))
            })
        };
        let mut state = wal.lock()?;
        state.checkpointing = false;
        if let Err(e) = committed {
            state.broken.get_or_insert_with(|| e.to_string());
            return Err(e);
        }
        if let Some(why) = &state.broken {
            return Err(LogError::Storage(format!(
                "an earlier write failed ({why}); reopen the log to continue from its last \
                 durable state"
            )));
        }
        // Only a checkpoint removes unapplied events, and this is the only one
        // running: the list still starts with the batch.
        let starts_with_batch = state.unapplied.len() >= batch.len()
            && state
                .unapplied
                .iter()
                .zip(&batch)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        if !starts_with_batch {
            let e = LogError::Corrupt(
                "a checkpoint found the events it committed no longer first in line".to_string(),
            );
            state.broken = Some(e.to_string());
            return Err(e);
        }
        state.unapplied.drain(..batch.len());
        self.checkpoint(&mut state)
    }

    /// One durable redb commit that inserts every unapplied event, and a new WAL round.
    fn checkpoint(&self, state: &mut WalState) -> Result<(), LogError> {
        state.generation += 1;
        if !state.unapplied.is_empty() {
            if let Err(e) = self.write(Durability::Durable, |tx| {
                insert_staged(tx, unapplied(state))
            }) {
                state.broken = Some(e.to_string());
                return Err(e);
            }
            state.unapplied.clear();
        }
        state.unsynced.clear();
        state.unsynced_bytes = 0;
        if let Err(e) = state.wal.reset() {
            let e = storage_error("intent WAL", &e);
            state.broken = Some(e.to_string());
            return Err(e);
        }
        Ok(())
    }

    /// At close: a last checkpoint (best effort: the WAL keeps every durable event
    /// anyway). The WAL's storage is released when it is dropped, after the database
    /// (see [`RedbLog`]).
    pub(crate) fn close_wal(&self, wal: &WalMutex) {
        if let Ok(mut state) = wal.state.lock() {
            let clean =
                state.wal.len() == 0 && state.unsynced.is_empty() && state.unapplied.is_empty();
            if state.broken.is_none() && !clean {
                let _ = self.checkpoint(&mut state);
            }
        }
    }
}

/// Writes `events` to the WAL while holding the state (recovery reads and writes under
/// one lock); durable once [`WalMutex::wait_synced`] returns for the ticket.
fn append_locked(
    wal: &WalMutex,
    state: &mut WalState,
    events: &[NewEvent],
) -> Result<Ticket, LogError> {
    let after = advance(state.next_seq, events.len())?;
    let staged = shared(stage(events, state.next_seq, now_unix_ms())?);
    let ticket = wal_record(wal, state, &staged)?;
    state.next_seq = after;
    state.unapplied.extend(staged);
    Ok(ticket)
}

/// The events not yet in the database, in order.
fn unapplied(state: &WalState) -> impl Iterator<Item = &Staged> {
    state.unapplied.iter().map(|s| &**s)
}

/// The unapplied events that the database seen by `read` does not have: all of
/// them, except while a checkpoint's first phase has committed its batch and not
/// yet removed it from memory (see [`RedbLog::checkpoint_in_two_phases`]).
fn not_in<'a>(
    read: &redb::ReadTransaction,
    state: &'a WalState,
) -> Result<impl Iterator<Item = &'a Staged>, LogError> {
    let table = read.open_table(EVENTS).map_err(from_redb)?;
    let next = next_seq(&table)?;
    Ok(unapplied(state).filter(move |s| s.seq >= next))
}

/// Writes the unsynced events and then `staged` as one WAL record, not yet synced, and
/// returns its ticket: the record is durable once [`WalMutex::wait_synced`] returns for
/// it. A record that cannot be encoded is refused ([`LogError::Invalid`], nothing
/// written). On a storage failure the log is broken: the record may or may not have
/// reached the storage.
fn wal_record(
    wal: &WalMutex,
    state: &mut WalState,
    staged: &[Arc<Staged>],
) -> Result<Ticket, LogError> {
    let events: Vec<&Staged> = state.unsynced.iter().chain(staged).map(|s| &**s).collect();
    let record = encode_record(&events).map_err(|e| LogError::Invalid(e.to_string()))?;
    if let Err(e) = state.wal.write_record(&record) {
        let e = storage_error("intent WAL", &e);
        state.broken = Some(e.to_string());
        return Err(e);
    }
    state.unsynced.clear();
    state.unsynced_bytes = 0;
    // Only written under the state's lock: tickets follow the write order.
    let ticket = wal.written.load(Ordering::SeqCst) + 1;
    wal.written.store(ticket, Ordering::SeqCst);
    Ok(ticket)
}

/// Staged events, shared between the unapplied and unsynced lists.
fn shared(staged: Vec<Staged>) -> Vec<Arc<Staged>> {
    staged.into_iter().map(Arc::new).collect()
}

/// The sequence number after `count` events from `next`.
fn advance(next: u64, count: usize) -> Result<u64, LogError> {
    u64::try_from(count)
        .ok()
        .and_then(|n| next.checked_add(n))
        .ok_or_else(exhausted)
}

fn exhausted() -> LogError {
    LogError::Corrupt("the sequence number space is exhausted".to_string())
}
