//! `describe` panics: the load must fail with a describe error naming the
//! trap, and the host must not panic.

use toolhost_guest::bindings::exports::toolhost::tool::tool::Guest;
use toolhost_guest::bindings::toolhost::tool::types::{ToolDescriptor, ToolError, ToolOutput};

struct Probe;

impl Guest for Probe {
    fn describe() -> Vec<ToolDescriptor> {
        panic!("describe panicked on purpose");
    }

    fn invoke(_name: String, _args: String) -> Result<ToolOutput, ToolError> {
        Err(ToolError {
            code: "none".into(),
            message: "unreachable".into(),
        })
    }
}

toolhost_guest::bindings::export!(Probe with_types_in toolhost_guest::bindings);

fn main() {}
