//! `describe` takes 1.5 s (sleeping in a host call) but finishes well within
//! DESCRIBE_DEADLINE: the component must load and work.

#[path = "../shared/echo.rs"]
mod echo;

use toolhost_guest::bindings::exports::toolhost::tool::tool::Guest;
use toolhost_guest::bindings::toolhost::tool::types::{ToolDescriptor, ToolError, ToolOutput};

struct Probe;

impl Guest for Probe {
    fn describe() -> Vec<ToolDescriptor> {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        vec![toolhost_guest::descriptor::<echo::Echo>()]
    }

    fn invoke(name: String, args: String) -> Result<ToolOutput, ToolError> {
        if name == "echo" {
            toolhost_guest::invoke::<echo::Echo>(&args)
        } else {
            Err(toolhost_guest::unknown_tool(&name))
        }
    }
}

toolhost_guest::bindings::export!(Probe with_types_in toolhost_guest::bindings);

fn main() {}
