//! Where the log's bytes live: the [`Storage`] trait, the real file ([`FileStorage`]),
//! and, with the `test-storage` feature only, storages for tests that count fsyncs
//! (`CountingStorage`), inject faults (`FailingStorage`), simulate power loss
//! (`MemStorage`) or hold syncs back until writes arrive (`GatedStorage`).
//!
//! This module owns the only code that touches the file system, and the private adapter
//! to redb's `StorageBackend`. It must not interpret the bytes: that is redb's job.

mod adapter;
#[cfg(feature = "test-storage")]
mod counting;
#[cfg(feature = "test-storage")]
mod failing;
mod file;
#[cfg(feature = "test-storage")]
mod gated;
#[cfg(feature = "test-storage")]
mod mem;

use std::io;
use std::path::Path;

pub(crate) use adapter::Backend;
#[cfg(feature = "test-storage")]
pub use counting::{CountingStorage, SyncCounter};
#[cfg(feature = "test-storage")]
pub use failing::{FailingStorage, FaultHandle, Op};
pub use file::FileStorage;
#[cfg(feature = "test-storage")]
pub use gated::{GatedStorage, SyncGate};
#[cfg(feature = "test-storage")]
pub use mem::MemStorage;

/// A flat, growable byte store that the log's database lives in.
///
/// The contract is the one of a file: reads and writes at offsets, a length that
/// [`set_len`](Storage::set_len) changes (new bytes are zero), and
/// [`sync_data`](Storage::sync_data) after which everything written so far survives
/// power loss. Nothing written is durable before `sync_data` returns `Ok`.
///
/// Implementations are shared between threads; each call must be atomic with respect to
/// the others.
#[expect(
    clippy::len_without_is_empty,
    reason = "mirrors the file API; an empty storage is not a special case"
)]
pub trait Storage: Send + Sync + 'static {
    /// The current length in bytes.
    fn len(&self) -> io::Result<u64>;

    /// Fills `out` with the bytes at `offset`. Reading past the end is an error.
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()>;

    /// Writes `data` at `offset` (within the current length).
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()>;

    /// Grows or shrinks the storage to `len` bytes; new bytes are zero.
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// Makes everything written so far durable (`fdatasync` for a file).
    fn sync_data(&self) -> io::Result<()>;

    /// The file behind this storage, if any; used in error messages.
    fn path(&self) -> Option<&Path> {
        None
    }

    /// Releases what the storage holds (such as a file lock). Called once, when the
    /// database closes; no other method is called afterwards.
    fn close(&self) -> io::Result<()> {
        Ok(())
    }
}
