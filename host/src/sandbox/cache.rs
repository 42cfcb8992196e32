//! On-disk compile cache: compiled components (and the core modules of
//! `toolhost exec`) keyed by their hash, their kind and the engine
//! configuration, so a second load does not compile.
//!
//! An entry is `<key>.cwasm` plus `<key>.sum` (the CRC-32 of the artifact),
//! and `<key>.desc` (the component's validated tool descriptors, with their
//! CRC-32 on the first line), so that a load from the cache need not run
//! `describe`. An entry is trusted only when its checksum matches: a
//! truncated, edited or half-written entry is recompiled (or described) and
//! replaced, never deserialised. Writes
//! go to a temporary file that is renamed into place, so readers never see a
//! partial entry. The checksum detects accidents (torn writes, bit rot), not
//! tampering: whoever can write the cache directory can write a matching
//! sum, and an entry is machine code the host runs. So the directory must be
//! as private as the host binary, and the host checks that it is: it creates
//! it open to its user only (0700), and uses a directory only when the
//! host's user owns it and nobody else may write to it; otherwise it warns
//! and compiles without a disk cache. Entries are opened without following
//! symbolic links. The key is content-addressed with SHA-256, so one
//! component cannot be made to collide with another's entry.

use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use wasmtime::component::Component;
use wasmtime::{Engine, Module};

use crate::tools::descriptor::Descriptor;

/// The layout of an entry (files and checksums). Part of the key, so that an
/// entry of another layout is a miss, not a corrupt entry. 1: SHA-256 sums;
/// 2: CRC-32 sums; 3: plus the descriptor file.
const CACHE_FORMAT: u32 = 3;

/// Counters of what the cache did; tests and benchmarks read them.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Components compiled by Cranelift.
    pub compiles: AtomicU64,
    /// Components loaded from a valid cache entry.
    pub hits: AtomicU64,
    /// Entries (artifacts or descriptor files) found corrupt and replaced.
    pub corrupt: AtomicU64,
    /// Components whose descriptors came from the cache (no `describe`).
    pub descriptor_hits: AtomicU64,
}

/// What the cache compiles: a component, or a core module. Each kind has
/// its own keys, so that an entry of one is never read as the other.
pub trait Artifact: Sized {
    /// Appended to the key of an entry of this kind (components have none,
    /// so that their keys are those of before core modules were cached).
    const KEY_SUFFIX: &'static str;

    /// Compiles `bytes` with `engine` into an artifact.
    fn precompile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Vec<u8>>;

    /// Loads an artifact made by [`Artifact::precompile`].
    ///
    /// # Safety
    ///
    /// `artifact` must come from [`Artifact::precompile`] of this kind, on a
    /// compatible engine (see `wasmtime::Module::deserialize`).
    unsafe fn deserialize(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Self>;

    /// Loads an artifact from a file made by [`Artifact::precompile`].
    ///
    /// # Safety
    ///
    /// As [`Artifact::deserialize`], and the file must not change while it
    /// is mapped.
    unsafe fn deserialize_file(engine: &Engine, path: &Path) -> wasmtime::Result<Self>;
}

impl Artifact for Component {
    const KEY_SUFFIX: &'static str = "";

    fn precompile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Vec<u8>> {
        engine.precompile_component(bytes)
    }

    unsafe fn deserialize(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Self> {
        // SAFETY: the caller's contract.
        unsafe { Component::deserialize(engine, artifact) }
    }

    unsafe fn deserialize_file(engine: &Engine, path: &Path) -> wasmtime::Result<Self> {
        // SAFETY: the caller's contract.
        unsafe { Component::deserialize_file(engine, path) }
    }
}

impl Artifact for Module {
    const KEY_SUFFIX: &'static str = "-module";

    fn precompile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Vec<u8>> {
        engine.precompile_module(bytes)
    }

    unsafe fn deserialize(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Self> {
        // SAFETY: the caller's contract.
        unsafe { Module::deserialize(engine, artifact) }
    }

    unsafe fn deserialize_file(engine: &Engine, path: &Path) -> wasmtime::Result<Self> {
        // SAFETY: the caller's contract.
        unsafe { Module::deserialize_file(engine, path) }
    }
}

/// A component (or core module) from [`CompileCache::load_hashed`].
pub struct Cached<A = Component> {
    /// The compiled component or module.
    pub compiled: A,
    /// The SHA-256 of the component bytes (hex).
    pub sha256: String,
    /// Whether it came from a valid cache entry (no compile).
    pub hit: bool,
}

/// The compile cache of one engine configuration.
#[derive(Debug)]
pub struct CompileCache {
    dir: Option<PathBuf>,
    /// `dir` resolved (no symbolic links), once it passed [`private_dir`]
    /// (checked once, on first use); `None` when it did not.
    dir_ok: std::sync::OnceLock<Option<PathBuf>>,
    engine_key: String,
    stats: CacheStats,
}

/// Creates `dir` (0700) if it is missing, then checks that the host's user
/// owns it and that nobody else may write to it: an entry is machine code
/// the host runs, and whoever can write the directory could plant one.
fn private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        return Err(format!("cannot create it: {e}"));
    }
    let meta = std::fs::metadata(dir).map_err(|e| format!("cannot read it: {e}"))?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_dir() {
        return Err("it is not a directory".into());
    }
    if meta.uid() != me {
        return Err(format!(
            "it belongs to user {}, not to this process's user {me}",
            meta.uid()
        ));
    }
    // Its own, but open to others (made under a loose umask, say): made
    // private, as the host would have made it.
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| {
            format!(
                "others may write to it (mode {:o}) and it cannot be made private: {e}",
                meta.mode() & 0o7777
            )
        })?;
    }
    // Nor may others replace it: every directory on its way must be root's
    // or this user's, and not writable by others without the sticky bit
    // (which `/tmp` has), else they could rename it away and put their own
    // in its place.
    let resolved = dir
        .canonicalize()
        .map_err(|e| format!("cannot resolve it: {e}"))?;
    for parent in resolved.ancestors().skip(1) {
        let meta = std::fs::metadata(parent)
            .map_err(|e| format!("cannot read {}: {e}", parent.display()))?;
        if meta.uid() != 0 && meta.uid() != me {
            return Err(format!(
                "others may replace it: {} belongs to user {}",
                parent.display(),
                meta.uid()
            ));
        }
        if others_may_write(&meta) && meta.mode() & 0o1000 == 0 {
            return Err(format!(
                "others may replace it: {} is writable by others without the sticky bit (mode {:o})",
                parent.display(),
                meta.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

/// Whether users other than this process's may write to a directory: anyone
/// (o+w), or a group other than the process's own (g+w). A group write bit
/// for the user's own group (one group per user, as Debian makes them, with
/// umask 002) is taken as the user's.
fn others_may_write(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    meta.mode() & 0o002 != 0
        || (meta.mode() & 0o020 != 0 && meta.gid() != rustix::process::getegid().as_raw())
}

impl CompileCache {
    /// The directory as configured (not checked, maybe not made yet).
    pub(crate) fn configured_dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The directory entries are kept in, if any, and only once it has
    /// passed [`private_dir`] (an unsafe one is warned about once and not
    /// used: the cache then compiles every time).
    ///
    /// The directory is resolved once, when it is checked, and used by
    /// that resolved path from then on: a symbolic link on the way to it
    /// that changes later cannot move the cache (into a workspace, say).
    pub(crate) fn dir(&self) -> Option<&Path> {
        let dir = self.dir.as_deref()?;
        self.dir_ok
            .get_or_init(|| {
                match private_dir(dir).and_then(|()| {
                    dir.canonicalize()
                        .map_err(|e| format!("cannot resolve it: {e}"))
                }) {
                    Ok(resolved) => Some(resolved),
                    Err(why) => {
                        tracing::warn!(
                            dir = %dir.display(),
                            "not using the compile cache directory: {why}; compiling without a disk cache"
                        );
                        None
                    }
                }
            })
            .as_deref()
    }

    pub fn new(engine: &Engine, dir: Option<PathBuf>) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let engine_key = format!("{:016x}", h.finish());
        CompileCache {
            dir,
            dir_ok: std::sync::OnceLock::new(),
            engine_key,
            stats: CacheStats::default(),
        }
    }

    /// What the cache did so far.
    pub fn stats(&self) -> &CacheStats {
        &self.stats
    }

    /// The cache key of a component whose SHA-256 (hex) is `sha256`.
    fn key(&self, sha256: &str) -> String {
        self.key_of::<Component>(sha256)
    }

    /// The cache key of an artifact of kind `A` whose SHA-256 (hex) is
    /// `sha256`.
    fn key_of<A: Artifact>(&self, sha256: &str) -> String {
        format!(
            "{}-{}-{}-f{CACHE_FORMAT}{}",
            sha256.get(..32).unwrap_or(sha256),
            self.engine_key,
            env!("CARGO_PKG_VERSION"),
            A::KEY_SUFFIX
        )
    }

    /// Loads the component (or, with `A = Module`, the core module) `bytes`
    /// from the cache, or compiles and caches it; also returns its SHA-256
    /// (hex), computed once for both the key and the caller, and whether
    /// the entry was a hit.
    pub fn load_hashed<A: Artifact>(
        &self,
        engine: &Engine,
        bytes: &[u8],
    ) -> wasmtime::Result<Cached<A>> {
        let sha256 = hex::encode(Sha256::digest(bytes));
        let key = self.key_of::<A>(&sha256);
        if let Some(dir) = self.dir()
            && let Some(compiled) = self.read_entry::<A>(engine, dir, &key)
        {
            self.stats.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Cached {
                compiled,
                sha256,
                hit: true,
            });
        }
        self.stats.compiles.fetch_add(1, Ordering::Relaxed);
        let serialized = A::precompile(engine, bytes)?;
        // The entry is written first and the artifact loaded from it, as a
        // later hit would be: the code is then mapped from the file instead
        // of held in a second copy in memory (hundreds of MB for an
        // interpreter). Without a cache, or when that fails, it is loaded
        // from the bytes in memory.
        if let Some(dir) = self.dir() {
            match write_entry(dir, &key, &serialized) {
                Ok(()) => {
                    if let Some(compiled) = self.read_entry::<A>(engine, dir, &key) {
                        return Ok(Cached {
                            compiled,
                            sha256,
                            hit: false,
                        });
                    }
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot write the compile cache");
                }
            }
        }
        // SAFETY: the bytes were produced just now by this engine's
        // `precompile` of the same kind; nothing else has touched them.
        let compiled = unsafe { A::deserialize(engine, &serialized)? };
        Ok(Cached {
            compiled,
            sha256,
            hit: false,
        })
    }

    /// The descriptors cached for the component whose SHA-256 is `sha256`,
    /// if a whole, valid entry holds them.
    pub(crate) fn read_descriptors(&self, sha256: &str) -> Option<Vec<Descriptor>> {
        let dir = self.dir()?;
        let key = self.key(sha256);
        let text = std::fs::read_to_string(dir.join(format!("{key}.desc"))).ok()?;
        let valid = text
            .split_once('\n')
            .filter(|(sum, json)| checksum(json.as_bytes()) == *sum)
            .and_then(|(_, json)| serde_json::from_str::<Vec<Descriptor>>(json).ok())
            .filter(|d| !d.is_empty() && d.iter().all(|d| d.check().is_ok()));
        if valid.is_none() {
            self.stats.corrupt.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(key, "corrupt cached descriptors; describing again");
        } else {
            self.stats.descriptor_hits.fetch_add(1, Ordering::Relaxed);
        }
        valid
    }

    /// Caches the descriptors `describe` returned for the component whose
    /// SHA-256 is `sha256` (best effort: a failure is logged).
    pub(crate) fn write_descriptors(&self, sha256: &str, descriptors: &[Descriptor]) {
        let Some(dir) = self.dir() else {
            return;
        };
        let written = serde_json::to_string(descriptors)
            .map_err(std::io::Error::other)
            .and_then(|json| {
                let text = format!("{}\n{json}", checksum(json.as_bytes()));
                persist(dir, &format!("{}.desc", self.key(sha256)), text.as_bytes())
            });
        if let Err(e) = written {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot cache descriptors");
        }
    }

    fn read_entry<A: Artifact>(&self, engine: &Engine, dir: &Path, key: &str) -> Option<A> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join(format!("{key}.cwasm"));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .ok()?;
        // SAFETY: entries are only ever replaced by rename, never edited in
        // place, so the mapped file does not change while it is mapped; and
        // the cache directory is as trusted as the host binary (see the
        // module documentation). Mapping avoids copying the artifact just to
        // check it.
        let artifact = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        let sum = std::fs::read_to_string(dir.join(format!("{key}.sum"))).ok()?;
        if checksum(&artifact) != sum.trim() {
            self.stats.corrupt.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(key, "corrupt compile cache entry; recompiling");
            return None;
        }
        // SAFETY: the artifact is byte-for-byte what this host wrote after
        // `precompile` of this kind (its checksum matches the sum written
        // with it, the key names the kind, and entries are only ever
        // replaced by rename, never edited in place), and wasmtime itself
        // checks the engine compatibility header and the artifact's kind.
        // The file is mapped rather than copied into new executable memory.
        match unsafe { A::deserialize_file(engine, &path) } {
            Ok(c) => Some(c),
            Err(e) => {
                self.stats.corrupt.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(key, error = %e, "unusable compile cache entry; recompiling");
                None
            }
        }
    }
}

fn write_entry(dir: &Path, key: &str, artifact: &[u8]) -> std::io::Result<()> {
    let sum = checksum(artifact);
    persist(dir, &format!("{key}.cwasm"), artifact)?;
    persist(dir, &format!("{key}.sum"), sum.as_bytes())
}

/// Writes `data` to `dir/name` through a temporary file renamed into place,
/// so that readers see the old file or the whole new one.
fn persist(dir: &Path, name: &str, data: &[u8]) -> std::io::Result<()> {
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, data)?;
    tmp.persist(dir.join(name)).map_err(|e| e.error)?;
    Ok(())
}

/// The checksum written beside an artifact.
fn checksum(artifact: &[u8]) -> String {
    format!("crc32:{:08x}", crc32fast::hash(artifact))
}

/// The default cache directory: `$TOOLHOST_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/toolhost`, else `$HOME/.cache/toolhost`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("TOOLHOST_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("toolhost"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("toolhost"))
}

#[allow(clippy::unwrap_used, reason = "tests fail loudly on a set-up error")]
#[cfg(test)]
mod tests {
    use super::*;

    /// A cache directory others may replace (under a directory they may
    /// write) is not used: nothing is read from it and nothing is written.
    /// The user's own directory that is open to others is made private; a
    /// private one is used.
    #[test]
    fn a_directory_others_may_write_is_not_used() {
        use std::os::unix::fs::PermissionsExt;
        let engine = Engine::default();
        let empty_module = b"\0asm\x01\0\0\0";
        // The user's own directory, open to others: made private, then used.
        let loose = tempfile::tempdir().unwrap();
        std::fs::set_permissions(loose.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let cache = CompileCache::new(&engine, Some(loose.path().to_path_buf()));
        assert!(cache.dir().is_some());
        let mode = std::fs::metadata(loose.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");

        // Private itself, but under a directory others may write (no
        // sticky bit): they could swap it. Not used either.
        let open_parent = tempfile::tempdir().unwrap();
        std::fs::set_permissions(open_parent.path(), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        let under = CompileCache::new(&engine, Some(open_parent.path().join("cache")));
        assert!(under.dir().is_none());
        for _ in 0..2 {
            let got = under.load_hashed::<Module>(&engine, empty_module).unwrap();
            assert!(!got.hit);
        }
        let cache_dir = open_parent.path().join("cache");
        assert_eq!(std::fs::read_dir(&cache_dir).unwrap().count(), 0);

        let private = tempfile::tempdir().unwrap();
        let inner = private.path().join("made");
        let cache = CompileCache::new(&engine, Some(inner.clone()));
        assert!(
            !cache
                .load_hashed::<Module>(&engine, empty_module)
                .unwrap()
                .hit
        );
        assert!(
            cache
                .load_hashed::<Module>(&engine, empty_module)
                .unwrap()
                .hit
        );
        let mode = std::fs::metadata(&inner).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    }

    /// A component and a core module never share an entry, even for the
    /// same hash; component keys are those of before modules were cached.
    #[test]
    fn keys_differ_by_kind() {
        let engine = Engine::default();
        let cache = CompileCache::new(&engine, None);
        let sha = "ab".repeat(32);
        let component = cache.key_of::<Component>(&sha);
        let module = cache.key_of::<Module>(&sha);
        assert_ne!(component, module);
        assert_eq!(component, cache.key(&sha));
        assert!(component.ends_with(&format!("-f{CACHE_FORMAT}")));
    }
}
