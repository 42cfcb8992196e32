//! A tool whose name is not `[a-zA-Z][a-zA-Z0-9_-]{0,63}`: the load must fail.

#[path = "../shared/echo.rs"]
mod echo;

use toolhost_guest::{Tool, ToolError};

struct BadName;

impl Tool for BadName {
    const NAME: &'static str = "rm -rf /";
    const DESCRIPTION: &'static str = "Has a name no model should be shown.";
    type Args = echo::EchoArgs;
    type Output = echo::EchoOut;
    fn run(args: echo::EchoArgs) -> Result<echo::EchoOut, ToolError> {
        Ok(echo::EchoOut { text: args.text })
    }
}

toolhost_guest::export_tools!(echo::Echo, BadName);

fn main() {}
