//! The in-memory engine ([`SessionLog::in_memory`](crate::SessionLog::in_memory)): the
//! same events, call index and pending set as the redb tables, in maps.
//!
//! This module owns nothing durable: nothing survives the process and nothing is ever
//! synced, so both durabilities cost the same. It must keep the rules of
//! [`LogEngine`] that do not concern durability exactly as the redb engine does, so that
//! tests and benchmarks on it say something about the real log.
//!
//! Unlike a file, memory is not the place for a record kept forever: a long-running host
//! would grow with every call. The log keeps about a byte budget of events; past it, the
//! oldest finished calls (those with their `tool/result`) are forgotten whole, every
//! event of the call; never one without its result (running, waiting for an approval, or
//! refused and waiting for the rest of its batch). The log reads no payload: whether a
//! call is finished is its events' kinds. (toolhost ends every call it starts with a
//! result, a call its caller dropped too.) Sequence numbers still increase by one per
//! event; a reader sees gaps where forgotten calls were.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use crate::engine::LogEngine;
use crate::error::LogError;
use crate::event::{Event, EventKind, NewEvent, now_unix_ms};
use crate::log::{Durability, SESSION_CALL_ID};
use crate::recovery::{Recovery, recovery_events};

/// How much the in-memory log ([`SessionLog::in_memory`](crate::SessionLog::in_memory))
/// keeps by default: 64 MiB of events, estimated.
pub const DEFAULT_MEMORY_BUDGET: usize = 64 << 20;

/// The in-memory engine.
#[derive(Debug)]
pub(crate) struct MemoryEngine {
    log: Mutex<MemLog>,
}

impl MemoryEngine {
    /// An empty log that keeps about `budget` bytes of events (see [`MemLog`]).
    pub(crate) fn new(budget: usize) -> MemoryEngine {
        MemoryEngine {
            log: Mutex::new(MemLog::new(budget)),
        }
    }

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
        // Sized before the lock is taken.
        let sized = sized(events);
        Ok(self.lock()?.append(sized))
    }

    fn durable_commit_blocks(&self) -> bool {
        false
    }

    fn flush(&self) -> Result<(), LogError> {
        Ok(())
    }

    fn events(&self) -> Result<Vec<Event>, LogError> {
        Ok(self.lock()?.events())
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
        log.append(sized(recovery_events(&recovered)));
        Ok(Recovery { recovered })
    }
}

/// The in-memory log: the same events, index and pending set as the redb tables, with
/// the oldest finished calls forgotten once their events exceed the byte budget.
#[derive(Debug)]
struct MemLog {
    /// The events kept, by sequence number.
    events: BTreeMap<u64, Event>,
    /// Each call's events (sequence numbers, in order) and their estimated size.
    by_call: HashMap<String, CallEvents>,
    /// Call ids in the order of their first kept event: the order they are forgotten in.
    order: VecDeque<String>,
    pending: HashMap<String, u64>,
    /// The sequence number of the next event.
    next_seq: u64,
    /// The estimated size of the events kept.
    bytes: usize,
    /// The most the kept events may take before the oldest finished calls go.
    budget: usize,
}

#[derive(Debug, Default)]
struct CallEvents {
    seqs: Vec<u64>,
    bytes: usize,
    /// The call has its `tool/result` (or its events belong to the session).
    finished: bool,
}

impl MemLog {
    fn new(budget: usize) -> MemLog {
        MemLog {
            events: BTreeMap::new(),
            by_call: HashMap::new(),
            order: VecDeque::new(),
            pending: HashMap::new(),
            next_seq: 1,
            bytes: 0,
            budget,
        }
    }

    /// Appends `events`, each with its [`estimated_size`].
    fn append(&mut self, events: Vec<(NewEvent, usize)>) -> Vec<u64> {
        let at_unix_ms = now_unix_ms();
        let mut seqs = Vec::with_capacity(events.len());
        let first = self.next_seq;
        for (e, size) in events {
            let seq = self.next_seq;
            self.next_seq += 1;
            match e.kind {
                EventKind::ToolIntent => {
                    self.pending.insert(e.call_id.clone(), seq);
                }
                EventKind::ToolResult => {
                    self.pending.remove(&e.call_id);
                }
                _ => {}
            }
            let call = match self.by_call.get_mut(&e.call_id) {
                Some(call) => {
                    if e.call_id == SESSION_CALL_ID {
                        // The session's events are one entry: it goes to the back
                        // with each new one, so that a new event is not forgotten
                        // first for an old one's age (rare: recoveries).
                        self.order.retain(|c| c != SESSION_CALL_ID);
                        self.order.push_back(e.call_id.clone());
                    }
                    call
                }
                None => {
                    self.order.push_back(e.call_id.clone());
                    self.by_call.entry(e.call_id.clone()).or_default()
                }
            };
            call.seqs.push(seq);
            call.bytes += size;
            call.finished |= e.kind == EventKind::ToolResult || e.call_id == SESSION_CALL_ID;
            self.bytes += size;
            self.events.insert(
                seq,
                Event {
                    seq,
                    call_id: e.call_id,
                    kind: e.kind,
                    at_unix_ms,
                    payload: e.payload,
                },
            );
            seqs.push(seq);
        }
        self.forget_beyond_budget(first);
        seqs
    }

    /// Forgets the oldest finished calls (those with a result), whole, until the
    /// events kept fit the budget: never a pending one (recovery needs its intent,
    /// even with a result from an earlier use of its id), and never one with an event
    /// from `first` on (the calls of the append that went over, so that a call's
    /// result can be read back at least until the next append).
    fn forget_beyond_budget(&mut self, first: u64) {
        if self.bytes <= self.budget {
            return;
        }
        let mut held = Vec::new();
        while self.bytes > self.budget {
            let Some(call_id) = self.order.pop_front() else {
                break;
            };
            let pending = self.pending.contains_key(&call_id);
            let forgettable = self.by_call.get(&call_id).is_some_and(|c| {
                !pending && c.finished && c.seqs.last().is_some_and(|&s| s < first)
            });
            if !forgettable {
                held.push(call_id);
                continue;
            }
            if let Some(call) = self.by_call.remove(&call_id) {
                for seq in call.seqs {
                    self.events.remove(&seq);
                }
                self.bytes -= call.bytes;
            }
        }
        for call_id in held.into_iter().rev() {
            self.order.push_front(call_id);
        }
    }

    fn events(&self) -> Vec<Event> {
        self.events.values().cloned().collect()
    }

    fn events_for_call(&self, call_id: &str) -> Vec<Event> {
        self.by_call
            .get(call_id)
            .map(|call| {
                call.seqs
                    .iter()
                    .filter_map(|seq| self.events.get(seq).cloned())
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

/// `events`, each with its [`estimated_size`].
fn sized(events: Vec<NewEvent>) -> Vec<(NewEvent, usize)> {
    events
        .into_iter()
        .map(|e| {
            let size = estimated_size(&e);
            (e, size)
        })
        .collect()
}

/// About how many bytes an event takes in memory: its strings' lengths, and a word or
/// so per value. Counted once, when the event is appended.
fn estimated_size(e: &NewEvent) -> usize {
    const EVENT: usize = 96;
    EVENT + e.call_id.len() + value_size(&e.payload)
}

fn value_size(v: &serde_json::Value) -> usize {
    const VALUE: usize = 32;
    VALUE
        + match v {
            serde_json::Value::String(s) => s.len(),
            serde_json::Value::Array(a) => a.iter().map(value_size).sum(),
            serde_json::Value::Object(o) => o.iter().map(|(k, v)| k.len() + value_size(v)).sum(),
            _ => 0,
        }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(id: &str, kind: EventKind) -> NewEvent {
        let payload = match kind {
            EventKind::ApprovalDecided => json!({"outcome": "cancelled"}),
            _ => json!({}),
        };
        NewEvent::new(id, kind, payload)
    }

    /// Past the budget, a finished call goes; a call without its result stays, whatever
    /// its last event: one its caller gave up on while it waited (decided
    /// `cancelled`: toolhost then ends it with a result of its own), one still waiting
    /// for its decision, one refused and waiting for the rest of its batch, one allowed
    /// and not yet at its intent, and a pending one (even with a result from an earlier
    /// use of its id).
    #[test]
    fn only_finished_calls_are_forgotten() {
        use EventKind::{ApprovalAsked, ApprovalDecided, ToolCall, ToolIntent, ToolResult};
        let mut log = MemLog::new(0);
        let decided = |id: &str, outcome: &str| {
            let mut events: Vec<NewEvent> = [ToolCall, ApprovalAsked]
                .iter()
                .map(|&k| event(id, k))
                .collect();
            events.push(NewEvent::new(
                id,
                ApprovalDecided,
                json!({"outcome": outcome}),
            ));
            sized(events)
        };
        let done = [ToolCall, ApprovalAsked, ApprovalDecided, ToolResult];
        log.append(sized(done.iter().map(|&k| event("done", k)).collect()));
        log.append(decided("dropped", "cancelled"));
        log.append(decided("rejected", "rejected"));
        let waiting = [ToolCall, ApprovalAsked];
        log.append(sized(
            waiting.iter().map(|&k| event("waiting", k)).collect(),
        ));
        let reused = [ToolCall, ToolIntent, ToolResult, ToolIntent];
        log.append(sized(reused.iter().map(|&k| event("reused", k)).collect()));
        log.append(decided("allowed", "allowed-once"));
        // Any append goes over a budget of zero.
        log.append(sized(vec![event("next", ToolCall)]));
        assert!(log.events_for_call("done").is_empty());
        for (id, n) in [
            ("dropped", 3),
            ("rejected", 3),
            ("waiting", 2),
            ("reused", 4),
            ("allowed", 3),
        ] {
            assert_eq!(log.events_for_call(id).len(), n, "{id}");
        }
        assert_eq!(log.pending_calls(), ["reused"]);
        assert_eq!(
            log.events_for_call("next").len(),
            1,
            "the append's own call"
        );
        // The kept calls keep their order: the oldest is still considered first.
        assert_eq!(
            log.order,
            [
                "dropped", "rejected", "waiting", "reused", "allowed", "next"
            ]
        );
        // Their results come: then they go, oldest first.
        log.append(sized(vec![
            event("dropped", ToolResult),
            event("rejected", ToolResult),
        ]));
        log.append(sized(vec![event("next", ToolResult)]));
        assert!(log.events_for_call("dropped").is_empty());
        assert!(log.events_for_call("rejected").is_empty());
    }

    /// The session's events are one entry that moves to the back with each new
    /// event, so an old recovery's entry does not make a new one go first.
    #[test]
    fn a_new_session_event_moves_the_session_entry_to_the_back() {
        let mut log = MemLog::new(usize::MAX);
        log.append(sized(vec![event(
            SESSION_CALL_ID,
            EventKind::SessionRecovered,
        )]));
        log.append(sized(vec![event("a", EventKind::ToolCall)]));
        log.append(sized(vec![event(
            SESSION_CALL_ID,
            EventKind::SessionRecovered,
        )]));
        assert_eq!(log.order, ["a", SESSION_CALL_ID]);
    }
}
