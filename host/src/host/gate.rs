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

use crate::state::Interrupt;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The host-wide read/write gate in front of every body.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    lock: RwLock<()>,
}

/// Held while a body runs; dropping it lets the next body in.
#[derive(Debug)]
pub(crate) enum Pass<'g> {
    /// A concurrency-safe body, beside other safe bodies.
    Shared(#[allow(dead_code, reason = "held for its drop")] RwLockReadGuard<'g, ()>),
    /// A body that runs alone.
    Alone(#[allow(dead_code, reason = "held for its drop")] RwLockWriteGuard<'g, ()>),
}

impl Gate {
    /// Waits until a body that is (or is not) concurrency-safe may start.
    /// `None` when the call is cancelled while it waits.
    pub(crate) async fn enter(
        &self,
        concurrency_safe: bool,
        interrupt: &Interrupt,
    ) -> Option<Pass<'_>> {
        let pass = async {
            if concurrency_safe {
                Pass::Shared(self.lock.read().await)
            } else {
                Pass::Alone(self.lock.write().await)
            }
        };
        tokio::select! {
            biased;
            () = interrupt.cancelled() => None,
            pass = pass => Some(pass),
        }
    }
}
