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
//! runtime is dropped.
//!
//! A runtime's scratch directories live in one directory of its own under
//! `TMPDIR` (its home, `toolhost-scratch-*`), which holds `.owner`, a file
//! the runtime keeps locked (`flock`) while it lives. A process that is
//! killed cannot remove its home; the next runtime to make one removes
//! every home whose `.owner` it can lock, since no live runtime holds it.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// How a runtime's home under `TMPDIR` is named (then random characters).
const HOME_PREFIX: &str = "toolhost-scratch-";
/// The file in a home that its runtime keeps locked.
const OWNER: &str = ".owner";

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

/// A runtime's directory under `TMPDIR`: its scratch directories, and
/// `.owner`, locked while it lives.
struct Home {
    /// Removed (with everything in it) before the lock is let go.
    dir: tempfile::TempDir,
    _owner: File,
}

impl Home {
    /// Makes a home in `base`, its `.owner` locked before it has that name
    /// (so that no sweep ever finds it unlocked), then removes the homes
    /// of runtimes that are gone.
    fn create(base: &Path) -> io::Result<Home> {
        let dir = tempfile::Builder::new()
            .prefix(HOME_PREFIX)
            .tempdir_in(base)?;
        // Only this user may look inside: what tools write to `/tmp` is
        // theirs (the directory is made with the umask's permissions, and
        // holds nothing yet).
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        }
        let pending = dir.path().join(".owner.new");
        let owner = File::create(&pending)?;
        owner.lock()?;
        std::fs::rename(&pending, dir.path().join(OWNER))?;
        sweep(base, dir.path());
        Ok(Home { dir, _owner: owner })
    }
}

/// Removes every home in `base` but `mine` whose `.owner` can be locked:
/// its runtime is gone (killed, so its own drop never ran). Homes without
/// an `.owner` (being made, or of another user) are left alone.
fn sweep(base: &Path, mine: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let ours = entry.file_name().to_string_lossy().starts_with(HOME_PREFIX);
        if !ours || path == mine {
            continue;
        }
        let Ok(owner) = File::open(path.join(OWNER)) else {
            continue;
        };
        if owner.try_lock().is_ok() {
            // Still locked by this sweep while it removes (does not follow
            // the symbolic links a guest may have left in it).
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// The runtime's scratch directories: those kept for later calls, in its
/// home (made at the first call that needs one).
pub(crate) struct ScratchPool {
    idle: Mutex<Vec<Idle>>,
    /// Dropped after `idle`.
    home: Mutex<Option<Home>>,
    /// The last workspace [`ScratchPool::check_outside`] checked, and why
    /// the home would be inside it (if it would).
    checked: Mutex<Option<(PathBuf, Option<String>)>>,
    base: PathBuf,
}

impl Default for ScratchPool {
    /// A pool whose home will be under `TMPDIR`.
    fn default() -> Self {
        ScratchPool::in_dir(std::env::temp_dir())
    }
}

impl ScratchPool {
    /// A pool whose home will be in `base`.
    pub(crate) fn in_dir(base: PathBuf) -> Self {
        ScratchPool {
            idle: Mutex::default(),
            home: Mutex::default(),
            checked: Mutex::default(),
            base,
        }
    }

    /// Fails when the home would be inside `workspace` (which a call
    /// granted writes to it, or another call, could then reach): checked
    /// once per workspace, the answer kept.
    pub(crate) fn check_outside(&self, workspace: &Path) -> Result<(), String> {
        let mut checked = self.checked.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((ws, inside)) = checked.as_ref()
            && ws == workspace
        {
            return inside.clone().map_or(Ok(()), Err);
        }
        // Compared through the workspace's real path (a relative one, or
        // one through a link, would otherwise never contain the base).
        let real = workspace
            .canonicalize()
            .unwrap_or_else(|_| workspace.to_path_buf());
        let inside = crate::sandbox::spec::resolved_inside(&self.base, &real).map(|at| {
            format!(
                "the scratch directories' home {} (TMPDIR) is inside the workspace, where calls \
                 could reach each other's scratch directories; set TMPDIR outside the workspace",
                at.display()
            )
        });
        *checked = Some((workspace.to_path_buf(), inside.clone()));
        inside.map_or(Ok(()), Err)
    }

    /// The home's path, made (and the homes of gone runtimes removed) the
    /// first time.
    fn home(&self) -> io::Result<PathBuf> {
        let mut home = self.home.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(home) = home.as_ref() {
            return Ok(home.dir.path().to_path_buf());
        }
        let made = Home::create(&self.base)?;
        let path = made.dir.path().to_path_buf();
        *home = Some(made);
        Ok(path)
    }

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
            .prefix("call-")
            .tempdir_in(self.home()?)?;
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

#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on a set-up error"
)]
#[cfg(unix)]
#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A pool whose home is in a directory of the test's own.
    fn pool() -> (tempfile::TempDir, Arc<ScratchPool>) {
        let base = tempfile::tempdir().unwrap();
        let pool = Arc::new(ScratchPool::in_dir(base.path().to_path_buf()));
        (base, pool)
    }

    /// A home as a runtime makes it, with something a guest left in it; its
    /// `.owner` comes back open and locked when `alive`.
    fn other_home(base: &Path, name: &str, alive: bool) -> (PathBuf, Option<File>) {
        let home = base.join(format!("{HOME_PREFIX}{name}"));
        std::fs::create_dir_all(home.join("call-x")).unwrap();
        std::fs::write(home.join("call-x/left.txt"), "x").unwrap();
        // A link out of the home, as a guest may leave in its `/tmp`.
        let outside = base.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep.txt"), "keep").unwrap();
        std::os::unix::fs::symlink(&outside, home.join("call-x/out")).unwrap();
        let owner = File::create(home.join(OWNER)).unwrap();
        if alive {
            owner.lock().unwrap();
            return (home, Some(owner));
        }
        (home, None)
    }

    /// The home inside the workspace is seen through whatever path names
    /// the workspace: here a link to it, which as a plain prefix never
    /// contains the home's real path.
    #[test]
    fn a_home_inside_the_workspace_is_seen_through_a_link_to_it() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        std::fs::create_dir_all(ws.join("tmp")).unwrap();
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&ws, &link).unwrap();
        let pool = ScratchPool::in_dir(ws.join("tmp"));
        assert!(pool.check_outside(&link).is_err());
        assert!(pool.check_outside(&ws).is_err());
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        assert!(pool.check_outside(&elsewhere).is_ok());
    }

    /// A killed runtime's home (its `.owner` not locked) is removed by the
    /// next runtime that makes one, and only what is in it; a live
    /// runtime's home, and a directory without `.owner`, are left alone.
    #[test]
    fn homes_of_gone_runtimes_are_removed_and_live_ones_are_not() {
        let (base, pool) = pool();
        let (dead, _) = other_home(base.path(), "dead", false);
        let (live, _lock) = other_home(base.path(), "live", true);
        let old = base.path().join(format!("{HOME_PREFIX}old"));
        std::fs::create_dir(&old).unwrap();
        let unrelated = base.path().join("unrelated");
        std::fs::create_dir(&unrelated).unwrap();
        std::fs::write(unrelated.join(OWNER), "").unwrap();

        let (s, dir) = take(&pool);
        assert!(!dead.exists(), "the home of a gone runtime was left");
        assert!(base.path().join("outside/keep.txt").is_file());
        assert!(live.join("call-x/left.txt").is_file());
        assert!(old.is_dir() && unrelated.is_dir());
        let home = dir.parent().unwrap().to_path_buf();
        assert!(home.join(OWNER).is_file());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&home).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "the home is open to other users");
        // Its own home is locked while the pool lives: another sweep
        // leaves it alone.
        sweep(base.path(), base.path());
        assert!(home.is_dir());
        drop(s);
        drop(pool);
        assert!(!home.exists(), "a pool's home outlived it");
    }

    fn take(pool: &Arc<ScratchPool>) -> (Scratch, PathBuf) {
        let s = pool.take().expect("a scratch directory");
        let p = s.path().to_path_buf();
        (s, p)
    }

    #[test]
    fn an_untouched_directory_is_kept_and_handed_out_again() {
        let (_base, pool) = pool();
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
        let (_base, pool) = pool();
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
        let (_base, pool) = pool();
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
        let (_base, pool) = pool();
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
        let (_base, pool) = pool();
        let held: Vec<_> = (0..MAX_IDLE + 3).map(|_| take(&pool)).collect();
        let paths: Vec<_> = held.iter().map(|(_, p)| p.clone()).collect();
        drop(held);
        assert_eq!(pool.idle(), MAX_IDLE);
        let left = paths.iter().filter(|p| p.exists()).count();
        assert_eq!(left, MAX_IDLE);
    }
}
