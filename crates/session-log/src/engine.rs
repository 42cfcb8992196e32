//! [`LogEngine`]: the one interface through which the session log is stored (DESIGN.md
//! §5b), so that another engine (PostgreSQL, shared by several replicas) plugs in
//! without touching the pipeline.
//!
//! This module owns the contract every engine keeps. It holds no implementation: the
//! redb engine is `redb_engine.rs` (with its intent WAL in `wal_mode.rs`), the in-memory
//! engine `memory.rs`.
//! Callers use an engine through [`SessionLog`](crate::SessionLog), which checks what
//! does not depend on the engine (such as "only `tool/intent` events in
//! `record_intents`") once, before the engine is called.

use std::fmt::Debug;

use crate::error::LogError;
use crate::event::{Event, NewEvent};
use crate::log::Durability;
use crate::recovery::Recovery;

/// Where and how the events of a session log are stored.
///
/// An engine keeps these rules; [`SessionLog`](crate::SessionLog) relies on them and adds
/// nothing in between:
///
/// - **Sequence numbers** start at 1 and increase by one per event, in append order,
///   across the whole log. One append's events get consecutive numbers and land together
///   (one commit): a reader sees all of them or none.
/// - **Durability:** an append with [`Durability::Durable`] returns only once its events,
///   and every event appended before them, survive a crash. [`Durability::Lazy`] events
///   are visible to this engine's readers at once and become durable with the next
///   durable append or [`LogEngine::flush`]. A durable append that returns an error may
///   still have reached the storage: its outcome is unknown, never "not written".
/// - **Pending calls:** a `tool/intent` makes its call pending until a `tool/result` with
///   the same call id is appended.
/// - **Recovery** resolves each pending call with one `TOOL_OUTCOME_UNKNOWN` result and
///   one `session/recovered` event ([`recovery_events`](crate::recovery_events)), in one
///   durable commit, exactly once: reading the pending set and appending the results is
///   atomic with respect to every other writer of the same log. An engine that several
///   live processes write (PostgreSQL) resolves only the calls of its own writer and of
///   writers that are gone (their lease expired): never a live writer's running call.
/// - **Failure:** after a storage error on a write, an engine may refuse further use
///   ([`LogError::Storage`]); reopening continues from the last durable state, and the
///   recovery after it resolves the calls whose result was lost. An engine that goes on
///   instead (PostgreSQL reconnects) resolves those calls itself, as recovery would,
///   once it can write again: a call whose `tool/result` was in a failed
///   [`Durability::Lazy`] append never stays pending in a log that is still being
///   written. (The caller of a failed durable append is told, and may try again.)
/// - **Retention:** the engines that store the log keep every event. The in-memory one
///   forgets the oldest finished calls whole past its byte budget, never an unfinished one
///   ([`SessionLog::in_memory_with_budget`](crate::SessionLog::in_memory_with_budget)).
///
/// An engine is shared between threads (`Send + Sync`); concurrent appends are
/// serialised by the engine.
pub trait LogEngine: Send + Sync + Debug {
    /// Appends `events` in one commit, in order, and returns their sequence numbers.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] if the storage failed, [`LogError::Corrupt`] if the sequence
    /// number space is exhausted.
    fn append(&self, events: &[NewEvent], durability: Durability) -> Result<Vec<u64>, LogError>;

    /// [`LogEngine::append`] of events the caller gives up. The default
    /// appends them by reference; an engine that keeps the events themselves
    /// (the in-memory one) takes them instead of copying each payload.
    ///
    /// # Errors
    ///
    /// As [`LogEngine::append`].
    fn append_owned(
        &self,
        events: Vec<NewEvent>,
        durability: Durability,
    ) -> Result<Vec<u64>, LogError> {
        self.append(&events, durability)
    }

    /// Appends `before` and then `intents` (only `tool/intent` events: the caller has
    /// checked) in one durable commit, and returns their sequence numbers.
    ///
    /// The default appends the concatenation with [`Durability::Durable`]; an engine may
    /// avoid the copy.
    ///
    /// # Errors
    ///
    /// As [`LogEngine::append`].
    fn append_intents_after(
        &self,
        before: &[NewEvent],
        intents: &[NewEvent],
    ) -> Result<Vec<u64>, LogError> {
        let all: Vec<NewEvent> = before.iter().chain(intents).cloned().collect();
        self.append_owned(all, Durability::Durable)
    }

    /// Whether a [`Durability::Durable`] commit waits for the storage (an
    /// `fdatasync`, a database round trip), so that a caller on an async
    /// executor should move it off the executor's thread. True unless the
    /// engine keeps everything in memory.
    fn durable_commit_blocks(&self) -> bool {
        true
    }

    /// Makes every earlier [`Durability::Lazy`] append durable. Does nothing when there
    /// is nothing to make durable.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] if the storage failed.
    fn flush(&self) -> Result<(), LogError>;

    /// Every event, in sequence order.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] or [`LogError::Corrupt`].
    fn events(&self) -> Result<Vec<Event>, LogError>;

    /// The events of one call, in sequence order.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] or [`LogError::Corrupt`].
    fn events_for_call(&self, call_id: &str) -> Result<Vec<Event>, LogError>;

    /// The calls that have a `tool/intent` and no `tool/result`, in the order of their
    /// intents.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] or [`LogError::Corrupt`].
    fn pending_calls(&self) -> Result<Vec<String>, LogError>;

    /// Resolves every pending call as `TOOL_OUTCOME_UNKNOWN` (see the trait's rules) and
    /// reports which. Appends nothing when nothing is pending.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] or [`LogError::Corrupt`]; nothing is recovered then.
    fn recover(&self) -> Result<Recovery, LogError>;
}
