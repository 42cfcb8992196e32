//! `list_dir {path}`: lists the entries of a directory in the workspace.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{SandboxMode, SideEffect, Tool, ToolError};

/// Arguments of `list_dir`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Directory, relative to the workspace (`.` for the workspace itself).
    pub path: String,
}

/// One directory entry.
#[derive(Serialize, JsonSchema)]
pub struct Entry {
    /// The entry's file name.
    pub name: String,
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: String,
    /// Size in bytes (files only).
    pub bytes: Option<u64>,
}

/// The entries, sorted by name.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The path as given.
    pub path: String,
    /// The entries.
    pub entries: Vec<Entry>,
}

/// The `list_dir` tool.
pub struct ListDir;

impl Tool for ListDir {
    const NAME: &'static str = "list_dir";
    const DESCRIPTION: &'static str =
        "Lists a directory in the workspace: name, kind and size of each entry, sorted by name.";
    const MIN_MODE: SandboxMode = SandboxMode::ReadOnly;
    const SIDE_EFFECT: SideEffect = SideEffect::Read;
    const CONCURRENCY_SAFE: bool = true;
    const IDEMPOTENT: bool = true;
    type Args = Args;
    type Output = Output;

    fn run(args: Args) -> Result<Output, ToolError> {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(&args.path)? {
            let entry = entry?;
            let file_type = entry.file_type()?;
            let kind = if file_type.is_symlink() {
                "symlink"
            } else if file_type.is_dir() {
                "dir"
            } else if file_type.is_file() {
                "file"
            } else {
                "other"
            };
            let bytes = if file_type.is_file() {
                entry.metadata().ok().map(|m| m.len())
            } else {
                None
            };
            entries.push(Entry {
                name: entry.file_name().to_string_lossy().into_owned(),
                kind: kind.to_string(),
                bytes,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Output {
            path: args.path,
            entries,
        })
    }

    fn content(output: &Output) -> Vec<toolhost_guest::Content> {
        let mut text = String::new();
        for e in &output.entries {
            let suffix = if e.kind == "dir" { "/" } else { "" };
            text.push_str(&format!("{}{}\n", e.name, suffix));
        }
        vec![toolhost_guest::Content::text(text)]
    }
}

toolhost_guest::export_tools!(ListDir);
