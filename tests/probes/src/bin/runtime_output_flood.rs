//! Returns a result of `mib` MiB: above the output cap the call must end
//! with OUTPUT_TOO_LARGE.

#[path = "../shared/echo.rs"]
mod echo;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Args {
    mib: usize,
}

#[derive(Serialize, JsonSchema)]
struct Out {
    data: String,
}

struct OutputFlood;

impl Tool for OutputFlood {
    const NAME: &'static str = "output_flood";
    const DESCRIPTION: &'static str = "Returns a string of `mib` MiB.";
    type Args = Args;
    type Output = Out;
    fn run(args: Args) -> Result<Out, ToolError> {
        Ok(Out {
            data: "x".repeat(args.mib << 20),
        })
    }
}

toolhost_guest::export_tools!(OutputFlood, echo::Echo);

fn main() {}
