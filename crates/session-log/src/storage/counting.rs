//! [`CountingStorage`]: a pass-through storage that counts fsyncs and writes, so tests
//! can assert the durability cost of each operation. It must not change behaviour.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Storage;

/// A shared handle to the counters of a [`CountingStorage`]; it stays valid after the
/// storage moved into a [`SessionLog`](crate::SessionLog).
#[derive(Debug, Clone, Default)]
pub struct SyncCounter {
    syncs: Arc<AtomicU64>,
    writes: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    grows: Arc<AtomicU64>,
}

impl SyncCounter {
    /// How many [`Storage::sync_data`] calls succeeded so far.
    pub fn fsyncs(&self) -> u64 {
        self.syncs.load(Ordering::SeqCst)
    }

    /// How many [`Storage::write`] calls succeeded so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// How many bytes the successful [`Storage::write`] calls wrote so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes.load(Ordering::SeqCst)
    }

    /// How many [`Storage::set_len`] calls grew the storage so far. redb syncs once
    /// after each growth (before a header can name the new length), so a commit that
    /// grows the file costs one more fsync.
    pub fn grows(&self) -> u64 {
        self.grows.load(Ordering::SeqCst)
    }
}

/// Wraps a storage and counts its successful `sync_data` and `write` calls.
#[derive(Debug)]
pub struct CountingStorage<S> {
    inner: S,
    counter: SyncCounter,
}

impl<S: Storage> CountingStorage<S> {
    /// Wraps `inner` with counters starting at zero.
    pub fn new(inner: S) -> Self {
        CountingStorage {
            inner,
            counter: SyncCounter::default(),
        }
    }

    /// A handle to the counters.
    pub fn counter(&self) -> SyncCounter {
        self.counter.clone()
    }
}

impl<S: Storage> Storage for CountingStorage<S> {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.inner.read(offset, out)
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.inner.write(offset, data)?;
        self.counter.writes.fetch_add(1, Ordering::SeqCst);
        self.counter
            .bytes
            .fetch_add(data.len() as u64, Ordering::SeqCst);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let before = self.inner.len()?;
        self.inner.set_len(len)?;
        if len > before {
            self.counter.grows.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()?;
        self.counter.syncs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn path(&self) -> Option<&Path> {
        self.inner.path()
    }

    fn close(&self) -> io::Result<()> {
        self.inner.close()
    }
}
