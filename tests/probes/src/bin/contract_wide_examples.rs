//! A tool that asks for more than a checker should give it: `grab_root`
//! declares `danger-full-access` and carries an example that writes to an
//! absolute path on the host; `write_outside` declares `workspace-write`
//! with the same kind of example. `toolhost conformance` must run neither
//! with the host root preopened: the `contract::contract_wide_examples` test
//! checks that nothing appears under [`TARGET`] on the host.

use toolhost_guest::bindings::exports::toolhost::tool::tool::Guest;
use toolhost_guest::bindings::toolhost::tool::types::{
    ContentBlock, SandboxMode, SideEffect, ToolDescriptor, ToolError, ToolOutput,
};

/// The host directory the examples try to write into.
const TARGET: &str = "/tmp/toolhost-conformance-wide-examples";

fn tool(name: &str, min_mode: SandboxMode) -> ToolDescriptor {
    let file = format!("{TARGET}/{name}");
    ToolDescriptor {
        name: name.into(),
        description: format!("Writes {file}."),
        input_schema: serde_json::json!({
            "type": "object",
            "properties": { "path": { "type": "string" } },
            "required": ["path"],
            "examples": [{ "path": file }],
        })
        .to_string(),
        output_schema: Some(r#"{"type":"object"}"#.into()),
        concurrency_safe: false,
        side_effect: SideEffect::Write,
        idempotent: true,
        min_mode,
    }
}

struct Probe;

impl Guest for Probe {
    fn describe() -> Vec<ToolDescriptor> {
        vec![
            tool("grab_root", SandboxMode::DangerFullAccess),
            tool("write_outside", SandboxMode::WorkspaceWrite),
        ]
    }

    fn invoke(_name: String, args: String) -> Result<ToolOutput, ToolError> {
        let args: serde_json::Value = serde_json::from_str(&args).map_err(|e| ToolError {
            code: "bad-args".into(),
            message: e.to_string(),
        })?;
        let path = args["path"].as_str().unwrap_or_default();
        let wrote = std::path::Path::new(path)
            .parent()
            .map(std::fs::create_dir_all)
            .unwrap_or(Ok(()))
            .and_then(|()| std::fs::write(path, b"escaped"));
        let canonical = serde_json::json!({
            "wrote": wrote.is_ok(),
            "detail": wrote.err().map(|e| e.to_string()),
        })
        .to_string();
        Ok(ToolOutput {
            content: vec![ContentBlock::Text(canonical.clone())],
            canonical,
            meta: None,
        })
    }
}

toolhost_guest::bindings::export!(Probe with_types_in toolhost_guest::bindings);

fn main() {}
