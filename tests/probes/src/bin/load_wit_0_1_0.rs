//! A tool built against `toolhost:tool@0.1.0` (the WIT in `wit-0.1.0/`,
//! without the SDK): a host of 0.1.1 must load it and run it, its imports
//! of `host@0.1.0` (log, progress) included.

wit_bindgen::generate!({
    path: "wit-0.1.0",
    world: "tool-provider",
});

use exports::toolhost::tool::tool::Guest;
use toolhost::tool::host::{self, LogLevel};
use toolhost::tool::types::{
    ContentBlock, SandboxMode, SideEffect, ToolDescriptor, ToolError, ToolOutput,
};

struct Probe;

impl Guest for Probe {
    fn describe() -> Vec<ToolDescriptor> {
        vec![ToolDescriptor {
            name: "legacy_echo".into(),
            description: "Echoes its text; built against toolhost:tool@0.1.0.".into(),
            input_schema:
                r#"{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}"#
                    .into(),
            output_schema: None,
            concurrency_safe: true,
            side_effect: SideEffect::None,
            idempotent: true,
            min_mode: SandboxMode::None,
        }]
    }

    fn invoke(_name: String, args: String) -> Result<ToolOutput, ToolError> {
        host::log(LogLevel::Info, "legacy tool ran", None);
        host::progress(1, Some(1), None);
        Ok(ToolOutput {
            canonical: args.clone(),
            content: vec![ContentBlock::Text(format!("echo {args}"))],
            meta: None,
        })
    }
}

export!(Probe);

fn main() {}
