//! Sleeps forever inside a host call (WASI poll): the deadline must stop
//! it there too, close to the deadline.

#[path = "../shared/echo.rs"]
mod echo;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Args {}

#[derive(Serialize, JsonSchema)]
struct Out {}

struct SleepForever;

impl Tool for SleepForever {
    const NAME: &'static str = "sleep_forever";
    const DESCRIPTION: &'static str = "Sleeps in hour-long steps, forever.";
    type Args = Args;
    type Output = Out;
    fn run(_: Args) -> Result<Out, ToolError> {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

toolhost_guest::export_tools!(SleepForever, echo::Echo);

fn main() {}
