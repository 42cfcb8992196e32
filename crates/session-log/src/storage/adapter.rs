//! The adapter from [`Storage`] to redb's `StorageBackend`. Private: it is the only
//! place where a [`Storage`] meets redb.
//!
//! redb's lock methods keep their default (`Unsupported`), which redb accepts in its
//! `ExclusiveWriter` mode, the mode of every log opened over a [`Storage`]. Exclusion
//! between processes is the job of the storage itself:
//! [`FileStorage`](super::FileStorage) takes an exclusive file lock when it opens. (The
//! database of a state directory is not opened through this adapter: it uses redb's own
//! file backend, whose byte-range locks redb's `SingleWriter` mode needs, so that readers
//! can share the file with the writer.)

use std::fmt;
use std::io;

use super::Storage;

/// A [`Storage`] as redb's `StorageBackend`.
pub(crate) struct Backend<S>(pub(crate) S);

impl<S: Storage> fmt::Debug for Backend<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend")
            .field("path", &self.0.path())
            .finish_non_exhaustive()
    }
}

impl<S: Storage> redb::StorageBackend for Backend<S> {
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.0.read(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write(offset, data)
    }

    fn close(&self) -> io::Result<()> {
        self.0.close()
    }
}
