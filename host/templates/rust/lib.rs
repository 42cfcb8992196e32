//! `{{name}}`: counts the words and characters of a text. Made by
//! `toolhost new`: replace the body, the types and the description with
//! what your tool does.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
// The SDK re-exports serde_json (and serde and schemars, at its versions).
use toolhost_guest::serde_json::{self, json};
use toolhost_guest::{Content, SandboxMode, SideEffect, Tool, ToolError};

/// The arguments; their JSON Schema is the tool's input schema, and the
/// example in it is what `toolhost conformance` runs.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = json!({"text": "one two three"}))]
pub struct Args {
    /// The text to count.
    pub text: String,
}

/// The canonical result; its JSON Schema is the tool's output schema.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// Runs of non-whitespace.
    pub words: u64,
    /// Unicode scalar values.
    pub chars: u64,
}

/// The tool.
pub struct {{type_name}};

impl Tool for {{type_name}} {
    const NAME: &'static str = "{{name}}";
    const DESCRIPTION: &'static str = "Counts the words and characters of a text.";
    // What it needs and may change: the narrowest mode, the honest effect.
    const MIN_MODE: SandboxMode = SandboxMode::None;
    const SIDE_EFFECT: SideEffect = SideEffect::None;
    // Calls may run at once; repeating one changes nothing more.
    const CONCURRENCY_SAFE: bool = true;
    const IDEMPOTENT: bool = true;
    type Args = Args;
    type Output = Output;

    fn run(args: Args) -> Result<Output, ToolError> {
        let words = args.text.split_whitespace().count();
        let chars = args.text.chars().count();
        Ok(Output {
            words: words as u64,
            chars: chars as u64,
        })
    }

    /// What the model reads (default: the canonical JSON).
    fn content(output: &Output) -> Vec<Content> {
        vec![Content::text(format!(
            "{} words, {} characters",
            output.words, output.chars
        ))]
    }

    /// Data for a user interface, not for the model (default: none).
    fn meta(output: &Output) -> Option<serde_json::Value> {
        Some(json!({"empty": output.words == 0}))
    }
}

toolhost_guest::export_tools!({{type_name}});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_words_and_characters() {
        let out = {{type_name}}::run(Args {
            text: "one two  thrée".into(),
        })
        .unwrap();
        assert_eq!((out.words, out.chars), (3, 14));
        assert_eq!({{type_name}}::content(&out), [Content::text("3 words, 14 characters")]);
    }

    #[test]
    fn the_input_schema_has_an_example() {
        let schema = toolhost_guest::schema_for::<Args>();
        assert_eq!(schema.get("examples"), Some(&json!([{"text": "one two three"}])));
    }
}
