//! A tool whose input schema is a valid JSON Schema but not of an object
//! (`type: "string"`): MCP clients send arguments as an object, and refuse
//! a tool list whose input schema says otherwise, so the load must fail.

use toolhost_guest::bindings::exports::toolhost::tool::tool::Guest;
use toolhost_guest::bindings::toolhost::tool::types::{
    SandboxMode, SideEffect, ToolDescriptor, ToolError, ToolOutput,
};

struct Probe;

impl Guest for Probe {
    fn describe() -> Vec<ToolDescriptor> {
        vec![ToolDescriptor {
            name: "string_args".into(),
            description: "Declares a string as its arguments.".into(),
            input_schema: "{\"type\": \"string\"}".into(),
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
