//! A filesystem operation runner shared by the `mode_*` probes: the test
//! sends a list of operations, the probe tries each one and reports what
//! happened, and the host-side test checks the real filesystem afterwards.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::Write as _;

/// One filesystem operation, named by `op`.
#[derive(Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// Reads a file to a string.
    Read { path: String },
    /// Lists a directory (sorted names, comma-separated).
    ReadDir { path: String },
    /// Creates or truncates a file and writes `data`.
    Write { path: String, data: String },
    /// Creates or truncates a file and writes `mib` MiB of `w` with one
    /// write call.
    WriteBig { path: String, mib: usize },
    /// Opens an existing file for appending and writes `data`.
    Append { path: String, data: String },
    /// Creates a new file (fails if it exists).
    CreateNew { path: String },
    /// Creates a directory.
    Mkdir { path: String },
    /// Removes a file.
    RemoveFile { path: String },
    /// Removes an empty directory.
    RemoveDir { path: String },
    /// Renames `from` to `to`.
    Rename { from: String, to: String },
    /// Opens an existing file for writing with the truncate flag.
    Truncate { path: String },
    /// Opens a file for reading, then tries to change its length.
    SetLen { path: String, len: u64 },
    /// Waits until `path` exists (the host creates it to release the probe).
    WaitFor { path: String },
    /// Creates a hard link `to` naming the file at `from`.
    Link { from: String, to: String },
    /// Creates a symbolic link at `link` whose target is `target`.
    Symlink { target: String, link: String },
    /// Reads the target of the symbolic link at `path`.
    ReadLink { path: String },
    /// Stats `path`, following symlinks: `file <len>`, `dir` or `other`.
    Metadata { path: String },
    /// Stats `path` itself, without following a final symlink.
    SymlinkMetadata { path: String },
}

/// The operations to run, in order.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub ops: Vec<Op>,
}

/// What one operation did.
#[derive(Serialize, JsonSchema)]
pub struct Outcome {
    /// True when the operation succeeded.
    pub ok: bool,
    /// The value read (for `read`, `read_dir`), or the error.
    pub detail: String,
}

/// One outcome per operation, in order.
#[derive(Serialize, JsonSchema)]
pub struct Out {
    pub results: Vec<Outcome>,
}

/// Describes what a stat returned, without anything that changes between runs.
fn kind(meta: &std::fs::Metadata) -> String {
    let ft = meta.file_type();
    if ft.is_symlink() {
        "symlink".into()
    } else if ft.is_dir() {
        "dir".into()
    } else if ft.is_file() {
        format!("file {}", meta.len())
    } else {
        "other".into()
    }
}

/// wasi-libc's `symlink`: it resolves `link` against the preopens exactly as
/// every other path operation of `std` does (`std::os::wasi::fs::symlink_path`
/// is unstable).
#[cfg(target_os = "wasi")]
fn symlink(target: &str, link: &str) -> std::io::Result<()> {
    unsafe extern "C" {
        fn symlink(target: *const std::ffi::c_char, link: *const std::ffi::c_char) -> i32;
    }
    let invalid = |_| std::io::Error::from(std::io::ErrorKind::InvalidInput);
    let target = std::ffi::CString::new(target).map_err(invalid)?;
    let link = std::ffi::CString::new(link).map_err(invalid)?;
    // SAFETY: both arguments are NUL-terminated strings that outlive the call.
    if unsafe { symlink(target.as_ptr(), link.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(unix)]
fn symlink(target: &str, link: &str) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

#[cfg(not(any(unix, target_os = "wasi")))]
fn symlink(_target: &str, _link: &str) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

fn apply(op: &Op) -> std::io::Result<String> {
    use std::fs;
    match op {
        Op::Read { path } => fs::read_to_string(path),
        Op::ReadDir { path } => {
            let mut names = fs::read_dir(path)?
                .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect::<std::io::Result<Vec<_>>>()?;
            names.sort();
            Ok(names.join(","))
        }
        Op::Write { path, data } => fs::write(path, data).map(|()| String::new()),
        Op::WriteBig { path, mib } => {
            let mut f = fs::File::create(path)?;
            let data = vec![b'w'; mib << 20];
            // One write: how much of it reaches the host at once is the
            // guest libc's business, not the tool's.
            let n = f.write(&data)?;
            f.write_all(&data[n..])?;
            Ok(n.to_string())
        }
        Op::Append { path, data } => {
            let mut f = fs::OpenOptions::new().append(true).open(path)?;
            f.write_all(data.as_bytes())?;
            Ok(String::new())
        }
        Op::CreateNew { path } => fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map(|_| String::new()),
        Op::Mkdir { path } => fs::create_dir(path).map(|()| String::new()),
        Op::RemoveFile { path } => fs::remove_file(path).map(|()| String::new()),
        Op::RemoveDir { path } => fs::remove_dir(path).map(|()| String::new()),
        Op::Rename { from, to } => fs::rename(from, to).map(|()| String::new()),
        Op::Truncate { path } => fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(path)
            .map(|_| String::new()),
        Op::SetLen { path, len } => fs::File::open(path)?.set_len(*len).map(|()| String::new()),
        Op::WaitFor { path } => {
            while !std::path::Path::new(path).exists() {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Ok(String::new())
        }
        Op::Link { from, to } => fs::hard_link(from, to).map(|()| String::new()),
        Op::Symlink { target, link } => symlink(target, link).map(|()| String::new()),
        Op::ReadLink { path } => fs::read_link(path).map(|p| p.to_string_lossy().into_owned()),
        Op::Metadata { path } => fs::metadata(path).map(|m| kind(&m)),
        Op::SymlinkMetadata { path } => fs::symlink_metadata(path).map(|m| kind(&m)),
    }
}

/// Runs every operation, whatever the earlier ones did.
pub fn run(args: Args) -> Out {
    let results = args
        .ops
        .iter()
        .map(|op| match apply(op) {
            Ok(detail) => Outcome { ok: true, detail },
            Err(e) => Outcome {
                ok: false,
                detail: format!("{:?}: {e}", e.kind()),
            },
        })
        .collect();
    Out { results }
}

/// Declares the probe's `fs` tool with the given narrowest mode, declaring
/// side effect `write` (it creates, renames and removes files) unless told
/// otherwise: a tool that declares `none` or `read` runs at most read-only.
macro_rules! fs_probe {
    ($mode:ident) => {
        fs_probe!($mode, Write);
    };
    ($mode:ident, $effect:ident) => {
        struct Fs;

        impl toolhost_guest::Tool for Fs {
            const NAME: &'static str = "fs";
            const DESCRIPTION: &'static str =
                "Runs filesystem operations and reports what each did.";
            const MIN_MODE: toolhost_guest::SandboxMode = toolhost_guest::SandboxMode::$mode;
            const SIDE_EFFECT: toolhost_guest::SideEffect = toolhost_guest::SideEffect::$effect;
            type Args = fsops::Args;
            type Output = fsops::Out;
            fn run(args: fsops::Args) -> Result<fsops::Out, toolhost_guest::ToolError> {
                Ok(fsops::run(args))
            }
        }

        toolhost_guest::export_tools!(Fs);

        fn main() {}
    };
}
