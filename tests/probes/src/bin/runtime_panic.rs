//! A tool that panics: the call must end with TRAP and the host stay healthy.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Args {}

#[derive(Serialize, JsonSchema)]
struct Out {}

struct Panic;

impl Tool for Panic {
    const NAME: &'static str = "panic";
    const DESCRIPTION: &'static str = "Panics.";
    type Args = Args;
    type Output = Out;
    fn run(_: Args) -> Result<Out, ToolError> {
        panic!("probe panicked on purpose");
    }
}

toolhost_guest::export_tools!(Panic);

fn main() {}
