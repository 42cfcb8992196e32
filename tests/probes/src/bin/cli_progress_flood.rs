//! Reports progress `reports` times in a tight loop (a million in the
//! test): an MCP client that asked for progress must get a rate-limited
//! trickle of notifications, all before the call's response, and the server
//! must not queue the rest.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    reports: u64,
}

#[derive(Serialize, JsonSchema)]
struct Out {
    reported: u64,
}

struct ProgressFlood;

impl Tool for ProgressFlood {
    const NAME: &'static str = "progress_flood";
    const DESCRIPTION: &'static str = "Reports progress `reports` times, as fast as it can.";
    type Args = Args;
    type Output = Out;
    fn run(args: Args) -> Result<Out, ToolError> {
        for done in 1..=args.reports {
            toolhost_guest::progress(done, Some(args.reports), Some("flooding"));
        }
        Ok(Out {
            reported: args.reports,
        })
    }
}

toolhost_guest::export_tools!(ProgressFlood);

fn main() {}
