//! `write_file {path, content}`: creates or replaces a file in the workspace.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{SandboxMode, SideEffect, Tool, ToolError};

/// Arguments of `write_file`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Path of the file, relative to the workspace. Parent directories must exist.
    pub path: String,
    /// The new content of the file (UTF-8 text).
    pub content: String,
}

/// What was written.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The path as given.
    pub path: String,
    /// Bytes written.
    pub bytes: u64,
}

/// The `write_file` tool.
pub struct WriteFile;

impl Tool for WriteFile {
    const NAME: &'static str = "write_file";
    const DESCRIPTION: &'static str = "Creates or replaces a text file in the workspace with `content`. `path` is relative to the workspace.";
    const MIN_MODE: SandboxMode = SandboxMode::WorkspaceWrite;
    const SIDE_EFFECT: SideEffect = SideEffect::Write;
    const IDEMPOTENT: bool = true;
    type Args = Args;
    type Output = Output;

    fn run(args: Args) -> Result<Output, ToolError> {
        std::fs::write(&args.path, args.content.as_bytes())?;
        Ok(Output {
            bytes: args.content.len() as u64,
            path: args.path,
        })
    }

    fn content(output: &Output) -> Vec<toolhost_guest::Content> {
        vec![toolhost_guest::Content::text(format!(
            "wrote {} bytes to {}",
            output.bytes, output.path
        ))]
    }
}

toolhost_guest::export_tools!(WriteFile);
