//! [`GatedStorage`]: a pass-through storage whose syncs can be held back until a given
//! number of writes has arrived, so that tests can make concurrent durable appends
//! arrive together (group commit) without relying on timing. It must not change what
//! is stored.

use std::io;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::Storage;

#[derive(Debug, Default)]
struct GateState {
    /// Writes so far.
    writes: u64,
    /// Syncs waiting at the gate now.
    held: u64,
    /// While set, a sync waits until `writes` reaches it.
    open_at: Option<u64>,
    /// How long a held sync waits at most.
    timeout: Duration,
}

/// A shared handle to the gate of a [`GatedStorage`]; it stays valid after the storage
/// moved into a [`SessionLog`](crate::SessionLog).
#[derive(Debug, Clone, Default)]
pub struct SyncGate {
    state: Arc<(Mutex<GateState>, Condvar)>,
}

impl SyncGate {
    /// From now on, every [`Storage::sync_data`] waits until `writes` more
    /// [`Storage::write`] calls have reached the storage. `timeout` bounds each wait, so
    /// that a test whose writes never come fails on what it asserts instead of hanging.
    pub fn hold_syncs_until_writes(&self, writes: u64, timeout: Duration) {
        let (lock, _) = &*self.state;
        let mut state = lock.lock().unwrap_or_else(PoisonError::into_inner);
        state.open_at = Some(state.writes.saturating_add(writes));
        state.timeout = timeout;
    }

    /// Opens the gate: held syncs go on, and later ones do not wait.
    pub fn open(&self) {
        let (lock, cv) = &*self.state;
        let mut state = lock.lock().unwrap_or_else(PoisonError::into_inner);
        state.open_at = None;
        cv.notify_all();
    }

    /// Waits until a sync is held at the gate, for at most `timeout`; returns whether
    /// one is.
    pub fn wait_for_a_held_sync(&self, timeout: Duration) -> bool {
        let (lock, cv) = &*self.state;
        let mut state = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let deadline = Instant::now() + timeout;
        while state.held == 0 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = cv
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    fn wrote(&self) {
        let (lock, cv) = &*self.state;
        let mut state = lock.lock().unwrap_or_else(PoisonError::into_inner);
        state.writes += 1;
        cv.notify_all();
    }

    fn wait(&self) {
        let (lock, cv) = &*self.state;
        let mut state = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let deadline = Instant::now() + state.timeout;
        let holding = state.open_at.is_some();
        if holding {
            state.held += 1;
            cv.notify_all();
        }
        while let Some(open_at) = state.open_at {
            let now = Instant::now();
            if state.writes >= open_at || now >= deadline {
                break;
            }
            state = cv
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if holding {
            state.held -= 1;
        }
    }
}

/// Wraps a storage; its syncs wait at the [`SyncGate`] when it is holding them.
#[derive(Debug)]
pub struct GatedStorage<S> {
    inner: S,
    gate: SyncGate,
}

impl<S: Storage> GatedStorage<S> {
    /// Wraps `inner` with an open gate.
    pub fn new(inner: S) -> Self {
        GatedStorage {
            inner,
            gate: SyncGate::default(),
        }
    }

    /// A handle to the gate.
    pub fn gate(&self) -> SyncGate {
        self.gate.clone()
    }
}

impl<S: Storage> Storage for GatedStorage<S> {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.inner.read(offset, out)
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.inner.write(offset, data)?;
        self.gate.wrote();
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.gate.wait();
        self.inner.sync_data()
    }

    fn path(&self) -> Option<&Path> {
        self.inner.path()
    }

    fn close(&self) -> io::Result<()> {
        self.inner.close()
    }
}
