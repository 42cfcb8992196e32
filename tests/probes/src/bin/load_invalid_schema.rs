//! A tool whose input schema is JSON but not a valid JSON Schema (`type` must be a string or an array): the load must fail.

use toolhost_guest::bindings::exports::toolhost::tool::tool::Guest;
use toolhost_guest::bindings::toolhost::tool::types::{
    SandboxMode, SideEffect, ToolDescriptor, ToolError, ToolOutput,
};

struct Probe;

impl Guest for Probe {
    fn describe() -> Vec<ToolDescriptor> {
        vec![ToolDescriptor {
            name: "bad_schema".into(),
            description: "Declares a broken input schema.".into(),
            input_schema: "{\"type\": 42}".into(),
            output_schema: None,
            concurrency_safe: false,
            side_effect: SideEffect::None,
            idempotent: false,
            min_mode: SandboxMode::None,
        }]
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
