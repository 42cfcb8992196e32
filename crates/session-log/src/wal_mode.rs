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
//!   go to the WAL in one record and one `fdatasync`. They are then *unapplied*: in
//!   the WAL and in memory, not yet in redb.
//! - **Lazy append:** the events are *unsynced* (in memory only) and unapplied. The next
//!   durable append or [`SessionLog::flush`] carries them into the WAL.
//! - **Reads** (in this process) hold the state's lock, read redb and add the unapplied
//!   events from memory, so they see every appended event; appends wait for them. A read
//!   writes nothing. (Another process sees the database and the WAL's records: see
//!   `reader.rs`.)
//! - **Checkpoint:** on a lazy append once the WAL holds [`CHECKPOINT_BYTES`] (or
//!   [`CHECKPOINT_EVENTS`] wait in memory), on a durable append only at four times those
//!   (a log without lazy appends), and when the log is dropped: one durable redb commit
//!   inserts the unapplied events, then the WAL starts a new round.
//! - **Open:** the WAL's events after the database's last event are inserted in one
//!   durable commit, then the WAL starts a new round. A crash therefore loses no
//!   event whose durable append returned. The WAL's events that the database already
//!   has must be byte for byte the stored ones, and the first missing one must follow the
//!   database's last: otherwise the files do not belong together and opening fails
//!   ([`LogError::Corrupt`](crate::LogError::Corrupt)), leaving both untouched.
//!
//! [`SessionLog::open`]: crate::SessionLog::open
//! [`SessionLog::flush`]: crate::SessionLog::flush

use std::sync::{Arc, Mutex, MutexGuard};

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

/// A checkpoint runs once the WAL's current round holds this many bytes.
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
    /// Set by the first storage failure; the log refuses further use.
    broken: Option<String>,
}

/// The lock of the WAL state.
pub(crate) type WalMutex = Mutex<WalState>;

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
        let (events, end) = wal.read_records().map_err(wal_error)?;
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
        wal.set_round_end(end);
        wal.reset().map_err(wal_error)?;
        wal.prepare().map_err(wal_error)?;
        self.wal = Some(Mutex::new(WalState {
            wal,
            next_seq,
            unapplied: Vec::new(),
            unsynced: Vec::new(),
            broken: None,
        }));
        Ok(())
    }

    /// Locks the WAL state, refusing a log that a storage failure broke.
    fn state<'a>(wal: &'a WalMutex) -> Result<MutexGuard<'a, WalState>, LogError> {
        let state = wal.lock().map_err(|_| {
            LogError::Storage("the session log was poisoned by a panic".to_string())
        })?;
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
        match durability {
            Durability::Durable => {
                if staged.is_empty() && state.unsynced.is_empty() {
                    return Ok(seqs);
                }
                wal_record(&mut state, &staged)?;
            }
            Durability::Lazy => state.unsynced.extend(staged.iter().cloned()),
        }
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
        if state.wal.len() >= factor * CHECKPOINT_BYTES
            || state.unapplied.len() + state.unsynced.len() >= factor as usize * CHECKPOINT_EVENTS
        {
            self.checkpoint(&mut state)?;
        }
        Ok(seqs)
    }

    /// Makes lazily appended events durable: one WAL record and one `fdatasync`, or
    /// nothing when every event is durable already.
    pub(crate) fn flush_wal_mode(&self, wal: &WalMutex) -> Result<(), LogError> {
        let mut state = Self::state(wal)?;
        if state.unsynced.is_empty() {
            return Ok(());
        }
        wal_record(&mut state, &[])
    }

    /// Every event: the database's, then the unapplied ones from memory. Writes nothing.
    pub(crate) fn events_wal_mode(&self, wal: &WalMutex) -> Result<Vec<Event>, LogError> {
        // The state's lock is held across the read, so that no checkpoint moves events
        // from memory into the database in between.
        let state = Self::state(wal)?;
        let read = self.db.begin_read().map_err(from_redb)?;
        read_events(&read, unapplied(&state))
    }

    /// The events of one call: the database's, then the unapplied ones. Writes nothing.
    pub(crate) fn events_for_call_wal_mode(
        &self,
        wal: &WalMutex,
        call_id: &str,
    ) -> Result<Vec<Event>, LogError> {
        let state = Self::state(wal)?;
        let read = self.db.begin_read().map_err(from_redb)?;
        read_events_for_call(&read, call_id, unapplied(&state))
    }

    /// The pending calls of the database, updated by the unapplied events. Writes nothing.
    pub(crate) fn pending_calls_wal_mode(&self, wal: &WalMutex) -> Result<Vec<String>, LogError> {
        let state = Self::state(wal)?;
        let read = self.db.begin_read().map_err(from_redb)?;
        read_pending(&read, unapplied(&state))
    }

    /// Recovery in WAL mode: the pending calls are read and their results appended (one
    /// WAL record) under one hold of the state, so that no append lands in between.
    pub(crate) fn recover_wal_mode(&self, wal: &WalMutex) -> Result<Recovery, LogError> {
        let mut state = Self::state(wal)?;
        let recovered = {
            let read = self.db.begin_read().map_err(from_redb)?;
            read_pending(&read, unapplied(&state))?
        };
        if recovered.is_empty() {
            return Ok(Recovery::default());
        }
        append_locked(&mut state, &recovery_events(&recovered))?;
        Ok(Recovery { recovered })
    }

    /// One durable redb commit that inserts every unapplied event, and a new WAL round.
    fn checkpoint(&self, state: &mut WalState) -> Result<(), LogError> {
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
        if let Ok(mut state) = wal.lock() {
            let clean =
                state.wal.len() == 0 && state.unsynced.is_empty() && state.unapplied.is_empty();
            if state.broken.is_none() && !clean {
                let _ = self.checkpoint(&mut state);
            }
        }
    }
}

/// Appends `events` durably while holding the state (recovery reads and writes under
/// one lock).
fn append_locked(state: &mut WalState, events: &[NewEvent]) -> Result<(), LogError> {
    let after = advance(state.next_seq, events.len())?;
    let staged = shared(stage(events, state.next_seq, now_unix_ms())?);
    wal_record(state, &staged)?;
    state.next_seq = after;
    state.unapplied.extend(staged);
    Ok(())
}

/// The events not yet in the database, in order.
fn unapplied(state: &WalState) -> impl Iterator<Item = &Staged> {
    state.unapplied.iter().map(|s| &**s)
}

/// Writes the unsynced events and then `staged` as one WAL record (one `fdatasync`).
/// A record that cannot be encoded is refused ([`LogError::Invalid`], nothing written).
/// On a storage failure the log is broken: the record may or may not have reached the
/// storage.
fn wal_record(state: &mut WalState, staged: &[Arc<Staged>]) -> Result<(), LogError> {
    let events: Vec<&Staged> = state.unsynced.iter().chain(staged).map(|s| &**s).collect();
    let record = encode_record(&events).map_err(|e| LogError::Invalid(e.to_string()))?;
    if let Err(e) = state.wal.append(&record) {
        let e = storage_error("intent WAL", &e);
        state.broken = Some(e.to_string());
        return Err(e);
    }
    state.unsynced.clear();
    Ok(())
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
