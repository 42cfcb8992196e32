//! Counts to `n`: with a fuel budget a short count succeeds and reports the
//! fuel used, an endless one ends with OUT_OF_FUEL.

#[path = "../shared/echo.rs"]
mod echo;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Args {
    n: u64,
}

#[derive(Serialize, JsonSchema)]
struct Out {
    sum: u64,
}

struct Count;

impl Tool for Count {
    const NAME: &'static str = "count";
    const DESCRIPTION: &'static str = "Sums 0..n in a loop the compiler cannot remove.";
    type Args = Args;
    type Output = Out;
    fn run(args: Args) -> Result<Out, ToolError> {
        let mut sum = 0u64;
        let mut i = 0u64;
        while i < args.n {
            sum = std::hint::black_box(sum.wrapping_add(i));
            i += 1;
        }
        Ok(Out { sum })
    }
}

toolhost_guest::export_tools!(Count, echo::Echo);

fn main() {}
