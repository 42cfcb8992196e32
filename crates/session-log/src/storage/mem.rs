//! [`MemStorage`]: an in-memory storage that models what survives power loss, for crash
//! tests. It must stay an honest model: only bytes that a successful `sync_data` covered
//! are durable.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use super::Storage;

/// One unsynced change, kept in issue order so that a crash can keep any prefix of them.
#[derive(Debug, Clone)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Images {
    /// What reads see: every write so far.
    current: Vec<u8>,
    /// What survives power loss: the state at the last successful `sync_data`.
    durable: Vec<u8>,
    /// The changes since the last `sync_data`, in order.
    pending: Vec<Pending>,
}

fn apply(image: &mut Vec<u8>, op: &Pending) -> io::Result<()> {
    match op {
        Pending::SetLen(len) => {
            let len = usize::try_from(*len).map_err(io::Error::other)?;
            image.resize(len, 0);
        }
        Pending::Write { offset, data } => {
            let start = usize::try_from(*offset).map_err(io::Error::other)?;
            let end = start
                .checked_add(data.len())
                .filter(|end| *end <= image.len())
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::UnexpectedEof, "write past the end")
                })?;
            image[start..end].copy_from_slice(data);
        }
    }
    Ok(())
}

/// A storage in memory with a model of durability.
///
/// It keeps two images: the current bytes (what reads see) and the durable bytes (the
/// state at the last successful [`Storage::sync_data`]), plus the ordered list of changes
/// in between. [`crash`](MemStorage::crash) returns what a power loss would leave: the
/// durable image. [`crash_keeping`](MemStorage::crash_keeping) keeps a prefix of the
/// unsynced changes, as if the device had written some of them back before power went.
/// [`process_exit`](MemStorage::process_exit) returns the current bytes, as when only the
/// process dies and the operating system keeps its page cache.
///
/// Clones share the same bytes. There is no locking: do not open two logs over it.
#[derive(Debug, Clone, Default)]
pub struct MemStorage {
    images: Arc<Mutex<Images>>,
}

impl MemStorage {
    /// An empty storage.
    pub fn new() -> Self {
        MemStorage::default()
    }

    /// A storage holding `bytes`, all of them durable.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        MemStorage {
            images: Arc::new(Mutex::new(Images {
                current: bytes.clone(),
                durable: bytes,
                pending: Vec::new(),
            })),
        }
    }

    fn images(&self) -> MutexGuard<'_, Images> {
        // A panic while holding the lock leaves the images consistent (each change is
        // applied whole or not at all), so a poisoned lock is read through.
        self.images
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The current bytes.
    pub fn current_bytes(&self) -> Vec<u8> {
        self.images().current.clone()
    }

    /// The bytes that would survive power loss now.
    pub fn durable_bytes(&self) -> Vec<u8> {
        self.images().durable.clone()
    }

    /// How many changes were made since the last successful `sync_data`.
    pub fn unsynced_changes(&self) -> usize {
        self.images().pending.len()
    }

    /// A new, independent storage holding what power loss would leave now.
    pub fn crash(&self) -> MemStorage {
        MemStorage::from_bytes(self.durable_bytes())
    }

    /// A new, independent storage holding the durable image plus the first `kept` unsynced
    /// changes (all of them if `kept` is larger).
    ///
    /// # Errors
    ///
    /// Fails only if a kept change cannot be applied (a write beyond the length it had).
    pub fn crash_keeping(&self, kept: usize) -> io::Result<MemStorage> {
        self.crash_keeping_if(|i| i < kept)
    }

    /// A new, independent storage holding the durable image plus the unsynced changes
    /// whose index (in issue order, from 0) `keep` accepts: a device that reordered its
    /// write-back and lost the others.
    ///
    /// # Errors
    ///
    /// Fails only if a kept change cannot be applied (a write beyond the length it had).
    pub fn crash_keeping_if(&self, keep: impl Fn(usize) -> bool) -> io::Result<MemStorage> {
        let images = self.images();
        let mut image = images.durable.clone();
        for (i, op) in images.pending.iter().enumerate() {
            if keep(i) {
                apply(&mut image, op)?;
            }
        }
        Ok(MemStorage::from_bytes(image))
    }

    /// A new, independent storage holding the current bytes: the process died, the
    /// operating system did not.
    pub fn process_exit(&self) -> MemStorage {
        MemStorage::from_bytes(self.current_bytes())
    }
}

impl Storage for MemStorage {
    fn len(&self) -> io::Result<u64> {
        u64::try_from(self.images().current.len()).map_err(io::Error::other)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let images = self.images();
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start
            .checked_add(out.len())
            .filter(|end| *end <= images.current.len())
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"))?;
        out.copy_from_slice(&images.current[start..end]);
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut images = self.images();
        let op = Pending::Write {
            offset,
            data: data.to_vec(),
        };
        apply(&mut images.current, &op)?;
        images.pending.push(op);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut images = self.images();
        let op = Pending::SetLen(len);
        apply(&mut images.current, &op)?;
        images.pending.push(op);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut images = self.images();
        let pending = std::mem::take(&mut images.pending);
        for op in &pending {
            apply(&mut images.durable, op)?;
        }
        Ok(())
    }
}
