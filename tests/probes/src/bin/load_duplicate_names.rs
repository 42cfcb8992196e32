//! Two tools named `echo` in one component: the load must fail.

#[path = "../shared/echo.rs"]
mod echo;

use toolhost_guest::{Tool, ToolError};

/// Another tool that claims the name `echo`.
struct Impostor;

impl Tool for Impostor {
    const NAME: &'static str = "echo";
    const DESCRIPTION: &'static str = "Claims the name of another tool.";
    type Args = echo::EchoArgs;
    type Output = echo::EchoOut;
    fn run(args: echo::EchoArgs) -> Result<echo::EchoOut, ToolError> {
        Ok(echo::EchoOut { text: args.text })
    }
}

toolhost_guest::export_tools!(echo::Echo, Impostor);

fn main() {}
