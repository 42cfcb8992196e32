//! Who holds a state directory ([`Holder`]), and the bounded wait of a second writer.
//!
//! This module owns the `holder` file and the wait. The exclusion itself is a file lock,
//! the intent WAL's (`session.wal`, locked by [`FileStorage`](crate::FileStorage)) and
//! redb's own: the holder file only says who has the state, for the message of
//! [`LogError::Locked`]. A writer writes it once its open has succeeded and removes it
//! when it closes, so it is advisory: it is stale when the process it names has gone (a
//! writer that was killed leaves it behind), and absent for a moment while a writer opens
//! or closes. It must never decide whether a writer may open.
//!
//! Format: one JSON object, `{"pid": 1234, "program": "toolhost serve",
//! "since_unix_ms": 1764756000000}`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::LogError;
use crate::event::now_unix_ms;

/// The name of the holder file inside a state directory.
pub(crate) const HOLDER_NAME: &str = "holder";

/// The name the holder file is written under before it is renamed into place.
const HOLDER_TMP_NAME: &str = "holder.tmp";

/// How often a waiting open tries again.
const POLL: Duration = Duration::from_millis(25);

/// The longest program name kept in the holder file.
const MAX_PROGRAM_CHARS: usize = 200;

/// The process that holds a state directory open for writing, as its holder file says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The process id of the writer.
    pub pid: u32,
    /// Its program and subcommand, e.g. `toolhost serve`.
    pub program: String,
    /// When it opened the log, in milliseconds since the Unix epoch.
    pub since_unix_ms: u64,
    /// The process `pid` no longer existed when this was read: the holder file is stale
    /// (left by a writer that was killed), and whoever holds the state now did not say.
    pub exited: bool,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let since = utc_text(self.since_unix_ms);
        if self.exited {
            return write!(
                f,
                "held by a process that left no holder file (the last one names pid {} ({}), \
                 since {since}, which has exited)",
                self.pid, self.program
            );
        }
        let this = if self.pid == std::process::id() {
            ", this very process"
        } else {
            ""
        };
        write!(
            f,
            "held by pid {} ({}{this}), since {since}",
            self.pid, self.program
        )
    }
}

/// The holder file's content.
#[derive(Serialize, Deserialize)]
struct HolderRecord {
    pid: u32,
    program: String,
    since_unix_ms: u64,
}

/// The holder file a writer keeps while it has the state open; dropping it removes the
/// file.
#[derive(Debug)]
pub(crate) struct HolderFile {
    path: PathBuf,
}

impl HolderFile {
    /// Writes the holder file of `state_dir` for this process (replacing a stale one).
    /// Best effort: the file only names the holder, so a failure to write it is not an
    /// error; a stale file it could not replace is removed.
    pub(crate) fn write(state_dir: &Path) -> HolderFile {
        let path = state_dir.join(HOLDER_NAME);
        let tmp = state_dir.join(HOLDER_TMP_NAME);
        let record = HolderRecord {
            pid: std::process::id(),
            program: program_name(),
            since_unix_ms: now_unix_ms(),
        };
        let written = serde_json::to_vec(&record)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(&path);
        }
        HolderFile { path }
    }
}

impl Drop for HolderFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The holder of `state_dir` as its holder file says, if it has a readable one.
pub(crate) fn read_holder(state_dir: &Path) -> Option<Holder> {
    let bytes = std::fs::read(state_dir.join(HOLDER_NAME)).ok()?;
    let record: HolderRecord = serde_json::from_slice(&bytes).ok()?;
    Some(Holder {
        exited: process_exists(record.pid) == Some(false),
        pid: record.pid,
        program: record.program,
        since_unix_ms: record.since_unix_ms,
    })
}

/// Runs `attempt` until it does not fail with [`LogError::Locked`], for at most `wait`
/// (at least once); then returns that error, naming the holder of `state_dir`.
pub(crate) fn retry_while_locked<T>(
    state_dir: &Path,
    wait: Duration,
    mut attempt: impl FnMut() -> Result<T, LogError>,
) -> Result<T, LogError> {
    let started = Instant::now();
    loop {
        match attempt() {
            Err(LogError::Locked { path, .. }) => {
                let waited = started.elapsed();
                if waited >= wait {
                    return Err(LogError::Locked {
                        path,
                        holder: read_holder(state_dir),
                        waited,
                    });
                }
                std::thread::sleep(POLL.min(wait - waited));
            }
            other => return other,
        }
    }
}

/// Whether process `pid` exists; `None` where that cannot be told (no `/proc`).
fn process_exists(pid: u32) -> Option<bool> {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return None;
    }
    Some(proc.join(pid.to_string()).exists())
}

/// This program's name and subcommand, e.g. `toolhost serve` (the file name of
/// `argv[0]`, and the first argument unless it is an option).
fn program_name() -> String {
    let mut args = std::env::args_os();
    let program = args
        .next()
        .map(|a| {
            let path = Path::new(&a);
            path.file_name()
                .unwrap_or(path.as_os_str())
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_else(|| "unknown program".to_string());
    let name = match args.next() {
        Some(sub) if !sub.to_string_lossy().starts_with('-') => {
            format!("{program} {}", sub.to_string_lossy())
        }
        _ => program,
    };
    name.chars().take(MAX_PROGRAM_CHARS).collect()
}

/// `unix_ms` as a UTC date and time, e.g. `2026-12-03 10:00:00 UTC`.
pub(crate) fn utc_text(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The (year, month, day) of the proleptic Gregorian calendar `days` days after
/// 1970-01-01 (Howard Hinnant's `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly on a set-up error")]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(utc_text(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_text(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_text(1_764_756_061_999), "2025-12-03 10:01:01 UTC");
        assert_eq!(utc_text(4_102_444_799_000), "2099-12-31 23:59:59 UTC");
    }

    #[test]
    fn a_holder_file_names_this_process_and_goes_away_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let file = HolderFile::write(dir.path());
        let holder = read_holder(dir.path()).unwrap();
        assert_eq!(holder.pid, std::process::id());
        assert!(!holder.exited);
        assert!(!holder.program.is_empty());
        assert!(holder.to_string().contains("this very process"), "{holder}");
        drop(file);
        assert!(read_holder(dir.path()).is_none());
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(names.is_empty(), "{names:?}");
    }

    #[test]
    fn a_holder_whose_process_is_gone_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        // Above the largest pid Linux hands out (2^22).
        let gone = 4_194_304 + 17;
        std::fs::write(
            dir.path().join(HOLDER_NAME),
            format!(r#"{{"pid":{gone},"program":"toolhost serve","since_unix_ms":0}}"#),
        )
        .unwrap();
        let holder = read_holder(dir.path()).unwrap();
        if process_exists(1).is_some() {
            assert!(holder.exited);
            assert!(holder.to_string().contains("which has exited"), "{holder}");
        }
        std::fs::write(dir.path().join(HOLDER_NAME), b"not json").unwrap();
        assert!(read_holder(dir.path()).is_none());
    }
}
