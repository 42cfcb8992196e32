//! The after-call record ([`AfterCall`]): exactly one per call, on every
//! path (success, every refusal, abort before dispatch, the body's errors),
//! with the call's duration; and the delivery of these records to
//! observers, off the call's path.
//!
//! The same record is written twice: into the call's `tool/result` event
//! (its `audit` field: duration, principal, scope) and, after that commit,
//! handed to every [`Observer`]. Observers are fire-and-forget and bounded:
//! each has its own thread and a queue of at most
//! [`DEFAULT_OBSERVER_QUEUE`] records (see
//! [`HostBuilder::observer_queue`](crate::HostBuilder::observer_queue)); a
//! record that finds the queue full is dropped and counted
//! ([`Host::observer_drops`](crate::Host::observer_drops)), never waited
//! for. A panic in an observer is caught and the observer goes on with the
//! next record. So a slow, stuck or panicking observer changes no result,
//! delays no call and grows no memory beyond its queue.
//!
//! Known limit: records still queued when the host is dropped are delivered
//! by the observer's thread, which outlives the host until its queue is
//! empty; a process that exits first loses them.

use crate::hooks::Observer;
use crate::result::{CallResult, Status};
use serde::Serialize;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::{Duration, Instant};
use toolhost_core::ErrorCode;

/// How many after-call records each observer's queue holds by default.
pub const DEFAULT_OBSERVER_QUEUE: usize = 1024;

/// One call's after-call record: who asked, what happened, how long it took.
#[derive(Debug, Clone, Serialize)]
pub struct AfterCall {
    /// The call's id.
    pub call_id: String,
    /// The tool, as called.
    pub tool: String,
    /// Who asked (the local principal when the caller named nobody).
    pub principal: String,
    /// The scope the call came from; `None` is the global scope.
    pub scope: Option<String>,
    /// `ok` or `error`.
    pub status: Status,
    /// The stable code of a refusal or failure.
    pub code: Option<ErrorCode>,
    /// From the call entering the pipeline to its result being committed
    /// (approval waits and, in a batch, waits for earlier calls included).
    #[serde(rename = "duration_us", serialize_with = "micros")]
    pub duration: Duration,
    /// The final result, as the caller gets it.
    #[serde(skip)]
    pub result: CallResult,
}

fn micros<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Where and when a call started: what its after-call record needs besides
/// the result.
#[derive(Debug, Clone)]
pub(crate) struct CallStart {
    pub(crate) at: Instant,
    pub(crate) principal: String,
    pub(crate) scope: Option<String>,
}

impl CallStart {
    pub(crate) fn new(principal: Option<&str>, scope: Option<&str>) -> CallStart {
        CallStart {
            at: Instant::now(),
            principal: principal
                .unwrap_or(toolhost_policy::LOCAL_PRINCIPAL)
                .to_string(),
            scope: scope.map(str::to_string),
        }
    }

    /// What the `tool/result` event of `result` carries as `audit`.
    pub(crate) fn audit_json(&self, duration: Duration) -> serde_json::Value {
        serde_json::json!({
            "duration_us": u64::try_from(duration.as_micros()).unwrap_or(u64::MAX),
            "principal": self.principal,
            "scope": self.scope,
        })
    }

    /// The after-call record of `result`, which took `duration`.
    pub(crate) fn record(&self, result: &CallResult, duration: Duration) -> AfterCall {
        AfterCall {
            call_id: result.call_id.clone(),
            tool: result.tool.clone(),
            principal: self.principal.clone(),
            scope: self.scope.clone(),
            status: result.status,
            code: result.code(),
            duration,
            result: result.clone(),
        }
    }
}

/// One thread and one bounded queue per observer.
pub(crate) struct Observers {
    queues: Vec<SyncSender<Arc<AfterCall>>>,
    dropped: Arc<AtomicU64>,
}

impl Observers {
    /// Starts a thread for each observer, each with a queue of `capacity`
    /// records (at least one). An observer whose thread cannot be started
    /// is left out, with an error in the log.
    pub(crate) fn start(observers: Vec<Box<dyn Observer>>, capacity: usize) -> Observers {
        let mut queues = Vec::with_capacity(observers.len());
        for (i, observer) in observers.into_iter().enumerate() {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Arc<AfterCall>>(capacity.max(1));
            let spawned = std::thread::Builder::new()
                .name(format!("toolhost-observer-{i}"))
                .spawn(move || {
                    for record in rx {
                        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
                            observer.after_call(&record)
                        }));
                    }
                });
            match spawned {
                Ok(_) => queues.push(tx),
                Err(e) => {
                    tracing::error!(observer = i, error = %e, "cannot start an observer's thread; it sees nothing")
                }
            }
        }
        Observers {
            queues,
            dropped: Arc::default(),
        }
    }

    /// True when there is an observer to hand records to.
    pub(crate) fn any(&self) -> bool {
        !self.queues.is_empty()
    }

    /// Hands `record` to every observer without waiting: a full queue drops
    /// it (counted).
    pub(crate) fn deliver(&self, record: AfterCall) {
        if self.queues.is_empty() {
            return;
        }
        let record = Arc::new(record);
        for q in &self.queues {
            match q.try_send(record.clone()) {
                Ok(()) => {}
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                    let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                    // Said once per power of two, so a stuck observer cannot
                    // flood the host's own log either.
                    if n.is_power_of_two() {
                        tracing::warn!(
                            dropped = n,
                            "an observer is not keeping up; after-call records are dropped"
                        );
                    }
                }
            }
        }
    }

    /// Records dropped so far (over all observers).
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}
