//! The delivery of after-call records ([`AfterCall`], defined next to the
//! [`Observer`] trait in `hooks.rs`: exactly one per call, on every path,
//! with the call's duration) to observers, off the call's path.
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

use crate::hooks::{AfterCall, Observer};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};

/// How many after-call records each observer's queue holds by default.
pub const DEFAULT_OBSERVER_QUEUE: usize = 1024;

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
