//! `describe` returns an empty list: the load must fail ("offers no tools").

use toolhost_guest::bindings::exports::toolhost::tool::tool::Guest;
use toolhost_guest::bindings::toolhost::tool::types::{ToolDescriptor, ToolError, ToolOutput};

struct Probe;

impl Guest for Probe {
    fn describe() -> Vec<ToolDescriptor> {
        Vec::new()
    }

    fn invoke(_name: String, _args: String) -> Result<ToolOutput, ToolError> {
        Err(ToolError {
            code: "none".into(),
            message: "no tools".into(),
        })
    }
}

toolhost_guest::bindings::export!(Probe with_types_in toolhost_guest::bindings);

fn main() {}
