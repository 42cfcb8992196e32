//! A tool whose schemas carry the machine-type formats other schema
//! generators emit (`uint64`, `int32`, `double`, ...) at every depth, as a
//! third-party tool may: clients must be shown only JSON Schema 2020-12
//! formats (written by hand, because the guest SDK no longer emits them).

use toolhost_guest::bindings::exports::toolhost::tool::tool::Guest;
use toolhost_guest::bindings::toolhost::tool::types::{
    ContentBlock, SandboxMode, SideEffect, ToolDescriptor, ToolError, ToolOutput,
};

const INPUT_SCHEMA: &str = r##"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "count": {"type": "integer", "format": "uint64", "minimum": 0},
    "offset": {"type": "integer", "format": "int32"},
    "ratio": {"type": ["number", "null"], "format": "double"},
    "when": {"type": "string", "format": "date-time"},
    "format": {"type": "string", "format": "uint8"},
    "ids": {"type": "array", "items": {"type": "integer", "format": "uint16"}},
    "pair": {"type": "array", "prefixItems": [{"type": "number", "format": "float"}]},
    "choice": {"anyOf": [{"$ref": "#/$defs/Small"}, {"type": "null"}]}
  },
  "additionalProperties": {"type": "integer", "format": "int64"},
  "$defs": {
    "Small": {"type": "integer", "format": "uint", "minimum": 0}
  }
}"##;

const OUTPUT_SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "total": {"type": "integer", "format": "uint64"},
    "nested": {"type": "object", "properties": {"x": {"type": "integer", "format": "int128"}}}
  }
}"#;

struct Probe;

impl Guest for Probe {
    fn describe() -> Vec<ToolDescriptor> {
        vec![ToolDescriptor {
            name: "machine_formats".into(),
            description: "Declares machine-type formats in its schemas.".into(),
            input_schema: INPUT_SCHEMA.into(),
            output_schema: Some(OUTPUT_SCHEMA.into()),
            concurrency_safe: false,
            side_effect: SideEffect::None,
            idempotent: true,
            min_mode: SandboxMode::None,
        }]
    }

    fn invoke(_name: String, _args: String) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput {
            canonical: r#"{"total":1}"#.into(),
            content: vec![ContentBlock::Text("1".into())],
            meta: None,
        })
    }
}

toolhost_guest::bindings::export!(Probe with_types_in toolhost_guest::bindings);

fn main() {}
