//! The exclusivity gate: only tools that declare themselves
//! concurrency-safe overlap; every other body runs alone (DESIGN.md §1).
//!
//! Every body passes this gate right before it starts, whatever its origin
//! (a `Host::call`, a batch, an MCP request), so exclusivity holds across
//! concurrent callers, not only inside one batch. A concurrency-safe body
//! shares the gate with other safe bodies; any other body holds it alone.
//! The lock is fair (first come, first served), so a waiting exclusive call
//! is not starved by a stream of safe ones. A host rebuilt from another
//! (hot reload) shares the gate, so that calls in flight on the old host
//! and calls on the new one exclude each other too.
//!
//! A body its call gave up on (stuck in a host system call past its
//! deadline or cancellation, or past its call being dropped by its caller,
//! see `runtime::invoke`) still runs, so it keeps
//! its pass until it stops: an exclusive body never overlaps one that was
//! abandoned. While such a pass is held, a call it would block is refused
//! at once rather than left waiting for a body that may never return.

use crate::sandbox::state::Interrupt;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{Notify, OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

/// The host-wide read/write gate in front of every body.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    lock: Arc<RwLock<()>>,
    stuck: Arc<Stuck>,
}

/// The passes held by abandoned bodies.
#[derive(Debug, Default)]
struct Stuck {
    /// Held by concurrency-safe bodies.
    shared: AtomicUsize,
    /// Held by bodies that run alone.
    alone: AtomicUsize,
    /// Told when a body is abandoned with its pass.
    changed: Notify,
}

impl Stuck {
    /// Why a body that is (or is not) concurrency-safe cannot pass while
    /// abandoned bodies hold theirs, if it cannot.
    fn blocks(&self, concurrency_safe: bool) -> Option<String> {
        let alone = self.alone.load(Ordering::SeqCst);
        let shared = self.shared.load(Ordering::SeqCst);
        let blocking = if concurrency_safe {
            alone
        } else {
            alone + shared
        };
        (blocking > 0).then(|| {
            format!(
                "{blocking} earlier calls were abandoned while blocked in a host system call \
                 and still hold the exclusivity gate this call needs (a body that is not \
                 concurrency-safe never overlaps another); calls that need it are refused \
                 until those return"
            )
        })
    }

    fn counter(&self, alone: bool) -> &AtomicUsize {
        if alone { &self.alone } else { &self.shared }
    }
}

/// Why a body did not get through the gate.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The call was cancelled while it waited.
    Cancelled,
    /// Abandoned bodies hold what the body needs (the message says so).
    Stuck(String),
}

/// Held while a body runs; dropping it lets the next body in.
#[derive(Debug)]
pub(crate) struct Pass {
    #[allow(dead_code, reason = "held for its drop")]
    guard: Guard,
    stuck: Arc<Stuck>,
}

#[derive(Debug)]
enum Guard {
    /// A concurrency-safe body, beside other safe bodies.
    Shared(#[allow(dead_code, reason = "held for its drop")] OwnedRwLockReadGuard<()>),
    /// A body that runs alone.
    Alone(#[allow(dead_code, reason = "held for its drop")] OwnedRwLockWriteGuard<()>),
}

impl Pass {
    /// The pass of a body its call gave up on: kept (with the call's own
    /// handle on it) until the returned value is dropped when the body stops,
    /// and counted meanwhile, so that calls it blocks are refused.
    pub(crate) fn abandoned(self: Arc<Self>) -> AbandonedPass {
        let alone = matches!(self.guard, Guard::Alone(_));
        let now = self.stuck.counter(alone).fetch_add(1, Ordering::SeqCst) + 1;
        // An operator sees why calls are refused: until this body stops,
        // an exclusive one refuses every body, a concurrency-safe one every
        // exclusive body.
        tracing::warn!(
            exclusive = alone,
            abandoned = now,
            "a tool body was abandoned while it keeps running (stuck in a host call); it holds \
             the gate until it stops and calls it blocks are refused meanwhile"
        );
        self.stuck.changed.notify_waiters();
        AbandonedPass { pass: self, alone }
    }
}

/// A pass held for an abandoned body until the body stops.
pub(crate) struct AbandonedPass {
    pass: Arc<Pass>,
    alone: bool,
}

impl Drop for AbandonedPass {
    fn drop(&mut self) {
        self.pass
            .stuck
            .counter(self.alone)
            .fetch_sub(1, Ordering::SeqCst);
        tracing::info!(
            exclusive = self.alone,
            "an abandoned tool body stopped; the gate it held is free"
        );
    }
}

impl Gate {
    /// Why a body that is (or is not) concurrency-safe would be refused at
    /// the gate now, if it would: abandoned bodies hold the gate in a way
    /// that keeps it out. The pipeline asks before approval and intent, so
    /// that nobody approves a call that cannot run; [`Gate::enter`] checks
    /// again.
    pub(crate) fn refuses(&self, concurrency_safe: bool) -> Option<String> {
        self.stuck.blocks(concurrency_safe)
    }

    /// Waits until a body that is (or is not) concurrency-safe may start.
    /// Refused when the call is cancelled while it waits, or when abandoned
    /// bodies hold the gate in a way that keeps this one out (checked again
    /// whenever a body is abandoned while this one waits).
    pub(crate) async fn enter(
        &self,
        concurrency_safe: bool,
        interrupt: &Interrupt,
    ) -> Result<Pass, Refused> {
        loop {
            let mut changed = pin!(self.stuck.changed.notified());
            changed.as_mut().enable();
            if let Some(why) = self.stuck.blocks(concurrency_safe) {
                return Err(Refused::Stuck(why));
            }
            let lock = self.lock.clone();
            let guard = async move {
                if concurrency_safe {
                    Guard::Shared(lock.read_owned().await)
                } else {
                    Guard::Alone(lock.write_owned().await)
                }
            };
            tokio::select! {
                biased;
                () = interrupt.cancelled() => return Err(Refused::Cancelled),
                guard = guard => {
                    return Ok(Pass {
                        guard,
                        stuck: self.stuck.clone(),
                    });
                }
                () = &mut changed => {}
            }
        }
    }
}
