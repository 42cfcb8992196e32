//! Abuses the `host` interface: one huge log message, a flood of log
//! records, and a flood of progress reports. The host must bound what it
//! keeps and still complete the call.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// Size of one log message, in bytes (0: none).
    huge_log_bytes: usize,
    /// Number of small log records.
    records: u64,
    /// Number of progress reports.
    progress: u64,
}

#[derive(Serialize, JsonSchema)]
struct Out {
    done: bool,
}

struct Flood;

impl Tool for Flood {
    const NAME: &'static str = "flood";
    const DESCRIPTION: &'static str = "Floods the host interface with logs and progress.";
    type Args = Args;
    type Output = Out;
    fn run(args: Args) -> Result<Out, ToolError> {
        if args.huge_log_bytes > 0 {
            toolhost_guest::log::info(&"L".repeat(args.huge_log_bytes));
        }
        for i in 0..args.records {
            toolhost_guest::log::info(&format!("record {i}"));
        }
        for i in 0..args.progress {
            toolhost_guest::progress(i, Some(args.progress), None);
        }
        Ok(Out { done: true })
    }
}

toolhost_guest::export_tools!(Flood);

fn main() {}
