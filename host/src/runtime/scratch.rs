//! The scratch directory of a `workspace-write` call: an empty directory of
//! its own under `TMPDIR`, shown to the guest as `/tmp`.
//!
//! Creating and removing a directory is not free on a journaling file
//! system (on ext4 about 40 µs for `mkdir` and 100 µs for `rmdir`, more
//! than the rest of a no-op call), while most calls never touch their
//! `/tmp`. So a directory that a call left exactly as it got it (empty, and
//! with the same times, size and link count) is kept for a later call
//! instead of being removed; every other one is removed when its call ends,
//! as before. A later call can see from a kept directory's times that it
//! is older than the call, but nothing of what an earlier call did. A kept
//! directory is checked again before it is handed out, since a call whose
//! workspace contains `TMPDIR` could have written into it meanwhile.
//!
//! At most [`MAX_IDLE`] directories are kept; they are removed when the
//! runtime is dropped (a killed process leaves them behind, empty).

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// The most untouched scratch directories kept for later calls.
pub(crate) const MAX_IDLE: usize = 8;

/// What the kept directories are checked against: everything a call could
/// change about an empty directory and a later call could see. The access
/// time is in it because a guest may set it (`set-times`) to any value,
/// and where the clock behind `ctime` is coarse (kernels before 6.13,
/// network file systems) that leaves `ctime` as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    mode: u32,
    atime: (i64, i64),
    mtime: (i64, i64),
    ctime: (i64, i64),
    size: u64,
    blocks: u64,
    nlink: u64,
}

impl Stamp {
    /// `path`'s stamp, if it is still the empty directory it was; `None`
    /// when it is gone, changed into something else, or not empty.
    #[cfg(unix)]
    fn of_empty(path: &Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        // A file created and left within the same clock tick as the
        // directory's last change leaves its times alone; its entry does
        // not. Listed first, so that this listing's own update of the
        // access time (once, under `relatime`) is in the stamp below.
        if std::fs::read_dir(path).ok()?.next().is_some() {
            return None;
        }
        let m = std::fs::symlink_metadata(path).ok()?;
        if !m.is_dir() {
            return None;
        }
        Some(Stamp {
            ino: m.ino(),
            mode: m.mode(),
            atime: (m.atime(), m.atime_nsec()),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            size: m.size(),
            blocks: m.blocks(),
            nlink: m.nlink(),
        })
    }

    /// Elsewhere no directory is ever kept.
    #[cfg(not(unix))]
    fn of_empty(_path: &Path) -> Option<Stamp> {
        None
    }
}

/// A directory kept for a later call, with the stamp it had when created.
struct Idle {
    dir: tempfile::TempDir,
    stamp: Stamp,
}

/// The runtime's kept scratch directories.
#[derive(Default)]
pub(crate) struct ScratchPool {
    idle: Mutex<Vec<Idle>>,
}

impl ScratchPool {
    /// A scratch directory for one call: a kept one that is still untouched,
    /// or a new one.
    pub(crate) fn take(self: &Arc<Self>) -> io::Result<Scratch> {
        loop {
            let kept = self.lock().pop();
            let Some(Idle { dir, stamp }) = kept else {
                break;
            };
            if Stamp::of_empty(dir.path()) == Some(stamp) {
                return Ok(self.hand_out(dir, Some(stamp)));
            }
            // Changed while it was kept: removed here (by its drop).
        }
        let dir = tempfile::Builder::new()
            .prefix("toolhost-scratch-")
            .tempdir()?;
        let stamp = Stamp::of_empty(dir.path());
        Ok(self.hand_out(dir, stamp))
    }

    /// How many directories are kept now.
    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        self.lock().len()
    }

    fn hand_out(self: &Arc<Self>, dir: tempfile::TempDir, stamp: Option<Stamp>) -> Scratch {
        Scratch {
            dir: Some(dir),
            stamp,
            pool: Arc::downgrade(self),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        // The list stays consistent whatever panicked while holding it.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One call's scratch directory. When dropped (after the call's store, so
/// nothing of the guest holds it open), it goes back to its pool if the call
/// left it untouched and the pool has room, and is removed otherwise.
pub(crate) struct Scratch {
    dir: Option<tempfile::TempDir>,
    /// What it looked like when handed out; `None`: never kept.
    stamp: Option<Stamp>,
    pool: Weak<ScratchPool>,
}

impl Scratch {
    /// Its host path.
    pub(crate) fn path(&self) -> &Path {
        match &self.dir {
            Some(dir) => dir.path(),
            // Only `drop` takes the directory.
            None => Path::new(""),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let (Some(dir), Some(stamp), Some(pool)) =
            (self.dir.take(), self.stamp, self.pool.upgrade())
        else {
            return;
        };
        if Stamp::of_empty(dir.path()) != Some(stamp) {
            return;
        }
        let mut idle = pool.lock();
        if idle.len() < MAX_IDLE {
            idle.push(Idle { dir, stamp });
        }
    }
}

#[cfg(all(test, unix))]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn take(pool: &Arc<ScratchPool>) -> (Scratch, PathBuf) {
        let s = pool.take().expect("a scratch directory");
        let p = s.path().to_path_buf();
        (s, p)
    }

    #[test]
    fn an_untouched_directory_is_kept_and_handed_out_again() {
        let pool = Arc::new(ScratchPool::default());
        let (s, first) = take(&pool);
        drop(s);
        assert!(first.is_dir());
        assert_eq!(pool.idle(), 1);
        let (s, again) = take(&pool);
        assert_eq!(again, first);
        assert_eq!(pool.idle(), 0);
        drop(s);
        drop(pool);
        assert!(!first.exists(), "a kept directory outlived its pool");
    }

    #[test]
    fn a_directory_written_to_is_removed_even_if_emptied_again() {
        let pool = Arc::new(ScratchPool::default());
        // Left with a file in it.
        let (s, dir) = take(&pool);
        std::fs::write(dir.join("f"), "x").unwrap();
        drop(s);
        assert!(!dir.exists());
        assert_eq!(pool.idle(), 0);
        // A subdirectory made and removed: the same entries, other times.
        let (s, dir) = take(&pool);
        let before = std::fs::metadata(&dir).unwrap();
        // Not synchronisation: the directory's times must move past the
        // clock tick (a few ms) they were set in.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::create_dir(dir.join("d")).unwrap();
        std::fs::remove_dir(dir.join("d")).unwrap();
        let after = std::fs::metadata(&dir).unwrap();
        assert_ne!(before.modified().unwrap(), after.modified().unwrap());
        drop(s);
        assert!(!dir.exists(), "a directory a call changed was kept");
        assert_eq!(pool.idle(), 0);
    }

    /// Only the access time set (what `set-times` lets a guest do to its
    /// `/tmp`): not kept, whatever the clock behind `ctime` does.
    #[test]
    fn a_directory_whose_access_time_was_set_is_removed() {
        let pool = Arc::new(ScratchPool::default());
        let (s, dir) = take(&pool);
        let before = Stamp::of_empty(&dir).unwrap();
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(12_345);
        let times = std::fs::FileTimes::new().set_accessed(when);
        std::fs::File::open(&dir).unwrap().set_times(times).unwrap();
        // The stamp sees the access time itself, not only the `ctime` that
        // a fine-grained clock moves with it. (Its own listing may have
        // moved an access time this old to now: different all the same.)
        let after = Stamp::of_empty(&dir).unwrap();
        assert_ne!(before.atime, after.atime);
        drop(s);
        assert!(
            !dir.exists(),
            "a directory whose access time was set was kept"
        );
        assert_eq!(pool.idle(), 0);
    }

    #[test]
    fn a_kept_directory_changed_meanwhile_is_not_handed_out() {
        let pool = Arc::new(ScratchPool::default());
        let (s, dir) = take(&pool);
        drop(s);
        assert_eq!(pool.idle(), 1);
        // Someone else (a call whose workspace holds TMPDIR) plants a file.
        std::fs::write(dir.join("planted"), "x").unwrap();
        let (s, fresh) = take(&pool);
        assert_ne!(fresh, dir);
        assert!(!dir.exists(), "the changed directory was not removed");
        assert_eq!(std::fs::read_dir(&fresh).unwrap().count(), 0);
        drop(s);
    }

    #[test]
    fn at_most_max_idle_are_kept() {
        let pool = Arc::new(ScratchPool::default());
        let held: Vec<_> = (0..MAX_IDLE + 3).map(|_| take(&pool)).collect();
        let paths: Vec<_> = held.iter().map(|(_, p)| p.clone()).collect();
        drop(held);
        assert_eq!(pool.idle(), MAX_IDLE);
        let left = paths.iter().filter(|p| p.exists()).count();
        assert_eq!(left, MAX_IDLE);
    }
}
