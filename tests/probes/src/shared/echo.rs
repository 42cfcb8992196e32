//! A harmless `echo` tool that the runtime probes export next to their
//! hostile one, to show the host still serves normal calls afterwards.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EchoArgs {
    pub text: String,
}

#[derive(Serialize, JsonSchema)]
pub struct EchoOut {
    pub text: String,
}

/// Returns its argument.
pub struct Echo;

impl Tool for Echo {
    const NAME: &'static str = "echo";
    const DESCRIPTION: &'static str = "Returns `text`.";
    type Args = EchoArgs;
    type Output = EchoOut;
    fn run(args: EchoArgs) -> Result<EchoOut, ToolError> {
        Ok(EchoOut { text: args.text })
    }
}
