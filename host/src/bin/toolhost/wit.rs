//! `toolhost wit DIR`: the WIT contract of toolhost tools (the repository's
//! `wit/`, embedded in the binary) written into a directory, so that a tool
//! project builds against the contract of the host it targets, not against
//! a path into a checkout.

use crate::args::WitArgs;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The files of the repository's `wit/`: (file name, text). A file added
/// there is listed here too (a test compares the two).
pub(crate) const WIT_FILES: &[(&str, &str)] =
    &[("tool.wit", include_str!("../../../../wit/tool.wit"))];

/// Writes the WIT files into the directory and names each one.
pub(crate) fn wit(a: WitArgs) -> Result<ExitCode> {
    for path in write_wit(&a.dir)? {
        outln!("wrote {}", path.display());
    }
    outln!("the contract: {}", package());
    Ok(ExitCode::SUCCESS)
}

/// Writes [`WIT_FILES`] into `dir`, which is created (with its parents)
/// when missing; a file of the same name is replaced, others are left
/// alone. Returns the paths written.
pub(crate) fn write_wit(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::with_capacity(WIT_FILES.len());
    for (name, text) in WIT_FILES {
        let path = dir.join(name);
        replace_file(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// Writes `text` to a temporary file beside `path` and renames it into
/// place: a reader never sees half a contract.
fn replace_file(path: &Path, text: &str) -> std::io::Result<()> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// The WIT package the files declare (`toolhost:tool@0.1.1`).
pub(crate) fn package() -> &'static str {
    WIT_FILES
        .iter()
        .flat_map(|(_, text)| text.lines())
        .find_map(|line| line.strip_prefix("package "))
        .map_or("toolhost:tool", |p| p.trim_end_matches(';').trim())
}
