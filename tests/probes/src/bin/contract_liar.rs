//! Tools that break their own contract at call time (they load fine): an
//! output that violates the declared output schema, a canonical output and
//! a meta that are not JSON, and a tool-level error. `honest` keeps its word.

use toolhost_guest::bindings::exports::toolhost::tool::tool::Guest;
use toolhost_guest::bindings::toolhost::tool::types::{
    ContentBlock, SandboxMode, SideEffect, ToolDescriptor, ToolError, ToolOutput,
};

const OUTPUT_SCHEMA: &str = r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}"#;

fn tool(name: &str) -> ToolDescriptor {
    ToolDescriptor {
        name: name.into(),
        description: "Promises `{\"n\": integer}`.".into(),
        input_schema: r#"{"type":"object"}"#.into(),
        output_schema: Some(OUTPUT_SCHEMA.into()),
        concurrency_safe: false,
        side_effect: SideEffect::None,
        idempotent: true,
        min_mode: SandboxMode::None,
    }
}

fn output(canonical: &str, meta: Option<&str>) -> ToolOutput {
    ToolOutput {
        canonical: canonical.into(),
        content: vec![ContentBlock::Text(canonical.into())],
        meta: meta.map(Into::into),
    }
}

struct Probe;

impl Guest for Probe {
    fn describe() -> Vec<ToolDescriptor> {
        [
            "honest",
            "wrong_type",
            "extra_field",
            "not_json",
            "meta_not_json",
            "tool_error",
        ]
        .into_iter()
        .map(tool)
        .collect()
    }

    fn invoke(name: String, _args: String) -> Result<ToolOutput, ToolError> {
        match name.as_str() {
            "honest" => Ok(output(r#"{"n":1}"#, Some(r#"{"ui":"ok"}"#))),
            "wrong_type" => Ok(output(r#"{"n":"one"}"#, None)),
            "extra_field" => Ok(output(r#"{"n":1,"secret":"leak"}"#, None)),
            "not_json" => Ok(output("n = 1", None)),
            "meta_not_json" => Ok(output(r#"{"n":1}"#, Some("{ui: ok"))),
            "tool_error" => Err(ToolError {
                code: "not-found".into(),
                message: "no such widget: 42".into(),
            }),
            _ => Err(ToolError {
                code: "unknown-tool".into(),
                message: name,
            }),
        }
    }
}

toolhost_guest::bindings::export!(Probe with_types_in toolhost_guest::bindings);

fn main() {}
