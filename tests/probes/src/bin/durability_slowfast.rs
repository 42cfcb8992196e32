//! `delay {ms, tag}`: a concurrency-safe tool that sleeps `ms` and returns
//! `tag`, to check that a batch overlaps bodies yet commits results in call
//! order.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    ms: u64,
    tag: String,
}

#[derive(Serialize, JsonSchema)]
struct Out {
    tag: String,
}

struct Delay;

impl Tool for Delay {
    const NAME: &'static str = "delay";
    const DESCRIPTION: &'static str = "Sleeps `ms` milliseconds and returns `tag`.";
    const CONCURRENCY_SAFE: bool = true;
    type Args = Args;
    type Output = Out;
    fn run(args: Args) -> Result<Out, ToolError> {
        std::thread::sleep(std::time::Duration::from_millis(args.ms));
        Ok(Out { tag: args.tag })
    }
}

toolhost_guest::export_tools!(Delay);

fn main() {}
