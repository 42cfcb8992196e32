//! `grep {pattern, path}`: regex search over the files under a directory.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{SandboxMode, SideEffect, Tool, ToolError};

/// The most matches one call returns.
const MAX_MATCHES: usize = 1000;

/// Arguments of `grep`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// A regular expression (Rust `regex` syntax).
    pub pattern: String,
    /// A file or directory, relative to the workspace; directories are searched recursively.
    pub path: String,
}

/// One matching line.
#[derive(Serialize, JsonSchema)]
pub struct Match {
    /// File path, relative to the workspace.
    pub path: String,
    /// Line number, from 1.
    pub line: u64,
    /// The line's text.
    pub text: String,
}

/// The matches, in path order.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// Matching lines (at most 1000).
    pub matches: Vec<Match>,
    /// True when the search stopped at the limit.
    pub truncated: bool,
}

/// The `grep` tool.
pub struct Grep;

impl Tool for Grep {
    const NAME: &'static str = "grep";
    const DESCRIPTION: &'static str = "Searches the files under `path` (relative to the workspace) for lines matching the regular expression `pattern`. Skips files that are not UTF-8 text.";
    const MIN_MODE: SandboxMode = SandboxMode::ReadOnly;
    const SIDE_EFFECT: SideEffect = SideEffect::Read;
    const CONCURRENCY_SAFE: bool = true;
    const IDEMPOTENT: bool = true;
    type Args = Args;
    type Output = Output;

    fn run(args: Args) -> Result<Output, ToolError> {
        let re = regex::Regex::new(&args.pattern)
            .map_err(|e| ToolError::new("invalid-pattern", e.to_string()))?;
        let mut out = Output {
            matches: Vec::new(),
            truncated: false,
        };
        let root = std::path::PathBuf::from(&args.path);
        let mut stack = vec![root];
        while let Some(path) = stack.pop() {
            let meta = std::fs::symlink_metadata(&path)?;
            if meta.is_dir() {
                let mut children: Vec<_> = std::fs::read_dir(&path)?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .collect();
                children.sort();
                stack.extend(children.into_iter().rev());
            } else if meta.is_file() {
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue;
                };
                for (i, line) in text.lines().enumerate() {
                    if re.is_match(line) {
                        if out.matches.len() == MAX_MATCHES {
                            out.truncated = true;
                            return Ok(out);
                        }
                        out.matches.push(Match {
                            path: path.to_string_lossy().into_owned(),
                            line: i as u64 + 1,
                            text: line.to_string(),
                        });
                    }
                }
            }
        }
        Ok(out)
    }

    fn content(output: &Output) -> Vec<toolhost_guest::Content> {
        let mut text = String::new();
        for m in &output.matches {
            text.push_str(&format!("{}:{}:{}\n", m.path, m.line, m.text));
        }
        if output.truncated {
            text.push_str("(stopped at 1000 matches)\n");
        }
        if output.matches.is_empty() {
            text.push_str("no matches\n");
        }
        vec![toolhost_guest::Content::text(text)]
    }
}

toolhost_guest::export_tools!(Grep);
