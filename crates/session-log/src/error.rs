//! [`LogError`], the one error type of this crate, and the translation of redb's errors
//! into it.
//!
//! This module owns the wording users see. It must not let a redb type escape: the
//! conversions are private functions, not `From` impls, so that they stay out of the
//! public API.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::holder::Holder;
use crate::tables::FORMAT_VERSION;

/// Why the session log could not be opened, read or written.
///
/// Every variant displays as one line that says what happened and, where it helps, what
/// to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The log is open for writing elsewhere (by another process, or by another
    /// [`SessionLog`] of this process), and stayed so for as long as the open waited.
    ///
    /// [`SessionLog`]: crate::SessionLog
    #[error(
        "session log {} is in use by another toolhost: {}{}",
        path.display(),
        holder_text(holder.as_ref()),
        waited_text(*waited)
    )]
    Locked {
        /// The log file.
        path: PathBuf,
        /// Who holds it, as the holder file of its state directory says; `None` when
        /// there is none (the holder is opening or closing, or does not write one).
        holder: Option<Holder>,
        /// How long the open waited for it ([`Duration::ZERO`]: it did not wait).
        waited: Duration,
    },
    /// The file exists but is not a redb database. It was left exactly as it was.
    #[error(
        "{} is not a toolhost session log (not a redb database); it was left untouched",
        path.display()
    )]
    NotADatabase {
        /// The file.
        path: PathBuf,
    },
    /// The file was written by a newer toolhost whose format this build cannot read.
    #[error(
        "session log written by a newer toolhost (format {found}, this build reads up to {supported})"
    )]
    NewerFormat {
        /// The format version found in the file.
        found: u64,
        /// The newest format this build reads ([`FORMAT_VERSION`]).
        supported: u64,
    },
    /// The state directory or the log file cannot be created or written.
    #[error("state directory {} is not writable: {detail}", path.display())]
    NotWritable {
        /// The directory or file that could not be written.
        path: PathBuf,
        /// What the operating system said.
        detail: String,
    },
    /// An I/O operation on the storage failed (including injected faults). After such an
    /// error on a write, this [`SessionLog`](crate::SessionLog) refuses further use; reopen
    /// the log, which recovers the last durable state.
    #[error("session log storage failed: {0}")]
    Storage(String),
    /// The log was opened read-only
    /// ([`SessionLog::open_read_only`](crate::SessionLog::open_read_only)): it cannot be
    /// appended to or recovered. Nothing was written.
    #[error(
        "session log {} was opened read-only (to read it beside a running toolhost); it cannot be written",
        path.display()
    )]
    ReadOnly {
        /// The log file.
        path: PathBuf,
    },
    /// The state directory or the log file cannot be read.
    #[error("session log {} cannot be read: {detail}", path.display())]
    NotReadable {
        /// The directory or file that could not be read.
        path: PathBuf,
        /// What the operating system said.
        detail: String,
    },
    /// The log's last writer stopped without closing it (it was killed or crashed), and
    /// no writer has it open now: its database needs a repair that a read-only open does
    /// not make. Opening it for writing once ([`SessionLog::open`](crate::SessionLog::open),
    /// `toolhost recover`) repairs it; that alone resolves no call.
    #[error(
        "session log {} was not closed by its last writer and none has it open now; a read-only open cannot repair it: open it for writing once (e.g. `toolhost recover`)",
        path.display()
    )]
    NeedsRepair {
        /// The log file.
        path: PathBuf,
    },
    /// The caller asked for something the log does not store (nothing was written).
    #[error("invalid append: {0}")]
    Invalid(String),
    /// A replica of a shared log (the PostgreSQL engine) lost its lease: another replica
    /// or `toolhost recover` declared it dead and resolved its unfinished calls as
    /// `TOOL_OUTCOME_UNKNOWN`, so it may not write to the log any more (fencing). Nothing
    /// was written; restart the replica.
    #[error(
        "replica {replica:?} lost its lease: its unfinished calls were recovered as TOOL_OUTCOME_UNKNOWN by another replica, so it may not write to the session log any more; restart it"
    )]
    Fenced {
        /// The replica's identity.
        replica: String,
    },
    /// The file is a redb database but its content is not what this crate wrote.
    #[error("session log is corrupt: {0}")]
    Corrupt(String),
}

impl LogError {
    /// The error for a log file at `path` that is locked, found without waiting and before
    /// its holder is known.
    pub(crate) fn locked(path: PathBuf) -> Self {
        LogError::Locked {
            path,
            holder: None,
            waited: Duration::ZERO,
        }
    }

    /// The error for a file whose format version is `found` (> [`FORMAT_VERSION`]).
    pub(crate) fn newer_format(found: u64) -> Self {
        LogError::NewerFormat {
            found,
            supported: FORMAT_VERSION,
        }
    }
}

/// Translates an error of redb (any of its error types converts into `redb::Error`).
pub(crate) fn from_redb(err: impl Into<redb::Error>) -> LogError {
    match err.into() {
        redb::Error::Corrupted(msg) => LogError::Corrupt(msg),
        redb::Error::UpgradeRequired(v) => LogError::Corrupt(format!(
            "the redb file format {v} is older than this build of redb reads"
        )),
        redb::Error::Io(e) => LogError::Storage(e.to_string()),
        redb::Error::PreviousIo => LogError::Storage(
            "an earlier write failed; reopen the log to recover its last durable state".to_string(),
        ),
        redb::Error::RepairAborted => {
            LogError::Corrupt("the database needed a repair that did not complete".to_string())
        }
        other => LogError::Storage(other.to_string()),
    }
}

/// Translates an error of redb while opening the storage at `path`: this is where "not a
/// database" and "already open" are told apart from other failures.
pub(crate) fn from_redb_open(err: redb::DatabaseError, path: PathBuf) -> LogError {
    match err {
        redb::DatabaseError::DatabaseAlreadyOpen | redb::DatabaseError::LockProtocolMismatch => {
            LogError::locked(path)
        }
        // redb reports a magic-number mismatch (checked before anything is written) as an
        // I/O error of kind InvalidData.
        redb::DatabaseError::Storage(redb::StorageError::Io(e))
            if e.kind() == io::ErrorKind::InvalidData =>
        {
            LogError::NotADatabase { path }
        }
        other => from_redb(other),
    }
}

/// Translates an I/O error of the file system for `path` while opening.
pub(crate) fn from_open_io(err: &io::Error, path: PathBuf) -> LogError {
    match err.kind() {
        io::ErrorKind::PermissionDenied
        | io::ErrorKind::ReadOnlyFilesystem
        | io::ErrorKind::NotADirectory
        | io::ErrorKind::AlreadyExists
        | io::ErrorKind::IsADirectory
        | io::ErrorKind::StorageFull => LogError::NotWritable {
            path,
            detail: err.to_string(),
        },
        _ => LogError::Storage(format!("{}: {err}", path.display())),
    }
}

/// Who holds a locked log, for [`LogError::Locked`].
fn holder_text(holder: Option<&Holder>) -> String {
    match holder {
        Some(holder) => holder.to_string(),
        None => "held by a process that left no holder file (another toolhost opening or \
                 closing it, an older toolhost, or another open in this process)"
            .to_string(),
    }
}

/// How long an open waited, for [`LogError::Locked`].
fn waited_text(waited: Duration) -> String {
    if waited.is_zero() {
        String::new()
    } else {
        format!("; gave up after waiting {:.1} s", waited.as_secs_f64())
    }
}
