//! The in-memory engine ([`SessionLog::in_memory`](crate::SessionLog::in_memory)): the
//! same events, call index and pending set as the redb tables, in a `Vec` and two maps.
//!
//! This module owns nothing durable: nothing survives the process and nothing is ever
//! synced, so both durabilities cost the same. It must keep the rules of
//! [`LogEngine`] that do not concern durability exactly as the redb engine does, so that
//! tests and benchmarks on it say something about the real log.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use crate::engine::LogEngine;
use crate::error::LogError;
use crate::event::{Event, EventKind, NewEvent, now_unix_ms};
use crate::log::Durability;
use crate::recovery::{Recovery, recovery_events};

/// The in-memory engine.
#[derive(Debug, Default)]
pub(crate) struct MemoryEngine {
    log: Mutex<MemLog>,
}

impl MemoryEngine {
    fn lock(&self) -> Result<MutexGuard<'_, MemLog>, LogError> {
        self.log
            .lock()
            .map_err(|_| LogError::Storage("the in-memory log was poisoned by a panic".to_string()))
    }
}

impl LogEngine for MemoryEngine {
    fn append(&self, events: &[NewEvent], durability: Durability) -> Result<Vec<u64>, LogError> {
        // Copied before the lock is taken.
        self.append_owned(events.to_vec(), durability)
    }

    fn append_owned(
        &self,
        events: Vec<NewEvent>,
        _durability: Durability,
    ) -> Result<Vec<u64>, LogError> {
        Ok(self.lock()?.append(events))
    }

    fn durable_commit_blocks(&self) -> bool {
        false
    }

    fn flush(&self) -> Result<(), LogError> {
        Ok(())
    }

    fn events(&self) -> Result<Vec<Event>, LogError> {
        Ok(self.lock()?.events.clone())
    }

    fn events_for_call(&self, call_id: &str) -> Result<Vec<Event>, LogError> {
        Ok(self.lock()?.events_for_call(call_id))
    }

    fn pending_calls(&self) -> Result<Vec<String>, LogError> {
        Ok(self.lock()?.pending_calls())
    }

    fn recover(&self) -> Result<Recovery, LogError> {
        let mut log = self.lock()?;
        let recovered = log.pending_calls();
        if recovered.is_empty() {
            return Ok(Recovery::default());
        }
        log.append(recovery_events(&recovered));
        Ok(Recovery { recovered })
    }
}

/// The in-memory log: the same events, index and pending set as the redb tables.
#[derive(Debug, Default)]
struct MemLog {
    events: Vec<Event>,
    by_call: HashMap<String, Vec<usize>>,
    pending: HashMap<String, u64>,
}

impl MemLog {
    fn append(&mut self, events: Vec<NewEvent>) -> Vec<u64> {
        let at_unix_ms = now_unix_ms();
        let mut seqs = Vec::with_capacity(events.len());
        for e in events {
            let seq = self.events.len() as u64 + 1;
            match e.kind {
                EventKind::ToolIntent => {
                    self.pending.insert(e.call_id.clone(), seq);
                }
                EventKind::ToolResult => {
                    self.pending.remove(&e.call_id);
                }
                _ => {}
            }
            self.by_call
                .entry(e.call_id.clone())
                .or_default()
                .push(self.events.len());
            self.events.push(Event {
                seq,
                call_id: e.call_id,
                kind: e.kind,
                at_unix_ms,
                payload: e.payload,
            });
            seqs.push(seq);
        }
        seqs
    }

    fn events_for_call(&self, call_id: &str) -> Vec<Event> {
        self.by_call
            .get(call_id)
            .map(|ix| {
                ix.iter()
                    .filter_map(|&i| self.events.get(i).cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn pending_calls(&self) -> Vec<String> {
        let mut p: Vec<(u64, String)> = self.pending.iter().map(|(c, s)| (*s, c.clone())).collect();
        p.sort();
        p.into_iter().map(|(_, c)| c).collect()
    }
}
