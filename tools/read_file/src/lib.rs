//! `read_file {path}`: returns the text of a file in the workspace.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{SandboxMode, SideEffect, Tool, ToolError};

/// Arguments of `read_file`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Path of the file, relative to the workspace.
    pub path: String,
}

/// The file's text.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The path as given.
    pub path: String,
    /// The file's content (UTF-8).
    pub content: String,
    /// Size in bytes.
    pub bytes: u64,
}

/// The `read_file` tool.
pub struct ReadFile;

impl Tool for ReadFile {
    const NAME: &'static str = "read_file";
    const DESCRIPTION: &'static str = "Reads a UTF-8 text file in the workspace and returns its content. `path` is relative to the workspace.";
    const MIN_MODE: SandboxMode = SandboxMode::ReadOnly;
    const SIDE_EFFECT: SideEffect = SideEffect::Read;
    const CONCURRENCY_SAFE: bool = true;
    const IDEMPOTENT: bool = true;
    type Args = Args;
    type Output = Output;

    fn run(args: Args) -> Result<Output, ToolError> {
        let bytes = std::fs::read(&args.path)?;
        let content = String::from_utf8(bytes)
            .map_err(|_| ToolError::new("not-text", format!("{} is not UTF-8 text", args.path)))?;
        Ok(Output {
            bytes: content.len() as u64,
            path: args.path,
            content,
        })
    }

    fn content(output: &Output) -> Vec<toolhost_guest::Content> {
        vec![toolhost_guest::Content::text(output.content.clone())]
    }
}

toolhost_guest::export_tools!(ReadFile);
