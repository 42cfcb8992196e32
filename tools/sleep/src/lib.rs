//! `sleep {ms}`: waits, reporting progress; a diagnostic for timeouts and cancellation.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

/// Arguments of `sleep`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// How long to sleep, in milliseconds.
    pub ms: u64,
}

/// How long the tool slept.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// Milliseconds slept.
    pub slept_ms: u64,
}

/// The `sleep` tool.
pub struct Sleep;

impl Tool for Sleep {
    const NAME: &'static str = "sleep";
    const DESCRIPTION: &'static str = "Sleeps for `ms` milliseconds, reporting progress about every 100 ms. A diagnostic tool for timeouts and cancellation.";
    const CONCURRENCY_SAFE: bool = true;
    const IDEMPOTENT: bool = true;
    type Args = Args;
    type Output = Output;

    fn run(args: Args) -> Result<Output, ToolError> {
        let step = 100u64;
        let mut done = 0u64;
        while done < args.ms {
            let chunk = step.min(args.ms - done);
            std::thread::sleep(std::time::Duration::from_millis(chunk));
            done += chunk;
            toolhost_guest::progress(done, Some(args.ms), None);
        }
        Ok(Output { slept_ms: done })
    }
}

toolhost_guest::export_tools!(Sleep);
