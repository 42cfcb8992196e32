//! [`FailingStorage`]: a storage that fails on purpose, for fault-injection tests. It
//! must fail only the operations it was told to, and pass everything else through.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Storage;

/// A write-path operation of a [`Storage`], as counted and failed by [`FailingStorage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`Storage::write`].
    Write,
    /// [`Storage::set_len`].
    SetLen,
    /// [`Storage::sync_data`].
    SyncData,
}

impl Op {
    /// All write-path operations.
    pub const ALL: [Op; 3] = [Op::Write, Op::SetLen, Op::SyncData];
}

/// Wraps a storage and, once `after` write-path operations (writes, `set_len`s and
/// `sync_data`s, counted together) have succeeded, fails every later operation whose kind
/// is in its list, with an I/O error. Reads and `len` are never failed.
///
/// A failed operation does not reach the inner storage, so the inner storage holds
/// exactly what a real device would hold if the operation had failed before writing
/// anything.
#[derive(Debug)]
pub struct FailingStorage<S> {
    inner: S,
    fail: Vec<Op>,
    handle: FaultHandle,
}

/// A shared handle to a [`FailingStorage`]: how far it got, and when it starts failing.
/// It stays valid after the storage moved into a [`SessionLog`](crate::SessionLog).
#[derive(Debug, Clone)]
pub struct FaultHandle {
    after: Arc<AtomicU64>,
    done: Arc<AtomicU64>,
}

impl FaultHandle {
    /// How many write-path operations have succeeded.
    pub fn succeeded(&self) -> u64 {
        self.done.load(Ordering::SeqCst)
    }

    /// Fails from the point where `after` write-path operations have succeeded (counted
    /// from the start, not from now). `u64::MAX` never fails.
    pub fn fail_after(&self, after: u64) {
        self.after.store(after, Ordering::SeqCst);
    }

    /// Fails every later operation of the chosen kinds, starting now.
    pub fn fail_from_now(&self) {
        self.fail_after(self.succeeded());
    }
}

impl<S: Storage> FailingStorage<S> {
    /// Fails every operation of a kind in `fail` once `after` write-path operations have
    /// succeeded.
    pub fn new(inner: S, after: u64, fail: &[Op]) -> Self {
        FailingStorage {
            inner,
            fail: fail.to_vec(),
            handle: FaultHandle {
                after: Arc::new(AtomicU64::new(after)),
                done: Arc::new(AtomicU64::new(0)),
            },
        }
    }

    /// Wraps `inner` without failing anything until told to through the handle.
    pub fn healthy(inner: S, fail: &[Op]) -> Self {
        FailingStorage::new(inner, u64::MAX, fail)
    }

    /// A handle to count operations and move the failure point.
    pub fn handle(&self) -> FaultHandle {
        self.handle.clone()
    }

    /// Fails every write-path operation once `after` of them have succeeded.
    pub fn after(inner: S, after: u64) -> Self {
        FailingStorage::new(inner, after, &Op::ALL)
    }

    fn run<T>(&self, op: Op, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let after = self.handle.after.load(Ordering::SeqCst);
        if self.fail.contains(&op) && self.handle.succeeded() >= after {
            return Err(io::Error::other(format!(
                "injected fault: {op:?} after {after} write-path operations"
            )));
        }
        let value = f()?;
        self.handle.done.fetch_add(1, Ordering::SeqCst);
        Ok(value)
    }
}

impl<S: Storage> Storage for FailingStorage<S> {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.inner.read(offset, out)
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.run(Op::Write, || self.inner.write(offset, data))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.run(Op::SetLen, || self.inner.set_len(len))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.run(Op::SyncData, || self.inner.sync_data())
    }

    fn path(&self) -> Option<&Path> {
        self.inner.path()
    }

    fn close(&self) -> io::Result<()> {
        self.inner.close()
    }
}
