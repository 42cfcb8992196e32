//! [`FileStorage`]: the log file on disk.
//!
//! This is the only module that reaches the real file system for the database file
//! (ambient authority). It must not create directories; [`SessionLog::open`] does that.
//!
//! [`SessionLog::open`]: crate::SessionLog::open

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::Storage;
use crate::error::{LogError, from_open_io};

/// A log file, opened read-write and locked exclusively for as long as it is open.
///
/// The lock is an advisory whole-file lock (`flock`), held by this open file: a second
/// [`FileStorage::open`] of the same file fails with [`LogError::Locked`], whether it comes
/// from another process or from this one.
#[derive(Debug)]
pub struct FileStorage {
    file: File,
    path: PathBuf,
}

impl FileStorage {
    /// Opens (creating if missing) the file at `path` and locks it.
    ///
    /// Nothing is written to the file here.
    ///
    /// # Ambient Authority
    ///
    /// Opens `path` in the process's file system namespace.
    ///
    /// # Errors
    ///
    /// [`LogError::Locked`] if the file is locked by another open;
    /// [`LogError::NotWritable`] if it cannot be opened for writing;
    /// [`LogError::Storage`] for other I/O failures.
    pub fn open(path: &Path) -> Result<FileStorage, LogError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| from_open_io(&e, path.to_path_buf()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(LogError::locked(path.to_path_buf())),
            Err(TryLockError::Error(e)) => {
                return Err(LogError::Storage(format!(
                    "cannot lock {}: {e}",
                    path.display()
                )));
            }
        }
        Ok(FileStorage {
            file,
            path: path.to_path_buf(),
        })
    }
}

impl Storage for FileStorage {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(out, offset)
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn path(&self) -> Option<&Path> {
        Some(&self.path)
    }

    fn close(&self) -> io::Result<()> {
        self.file.unlock()
    }
}
