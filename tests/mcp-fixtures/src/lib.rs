//! The tools the official MCP conformance suite (`@modelcontextprotocol/
//! conformance`, server scenarios) calls by name, as one component written
//! with the guest SDK: text, an image, audio, an embedded resource, mixed
//! content, log records, progress and a tool error. Each returns what the
//! suite's `SERVER_REQUIREMENTS` describe; the host maps them to MCP.
//!
//! Run by `scripts/mcp-conformance`; the host's tests use it too.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Content, Tool, ToolError};

/// No arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// What a fixture returns as its canonical value.
#[derive(Serialize, JsonSchema)]
pub struct Done {
    /// What the tool did.
    pub done: String,
}

fn done(what: &str) -> Result<Done, ToolError> {
    Ok(Done {
        done: what.to_string(),
    })
}

/// A 1x1 red PNG.
pub const RED_PIXEL_PNG: [u8; 69] = [
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x00, 0x03, 0x01, 0x01, 0x00, 0xc9, 0xfe, 0x92, 0xef, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];

/// A WAV file: 8 kHz, 8-bit mono, `samples` of silence.
pub fn silent_wav(samples: u32) -> Vec<u8> {
    let mut w = Vec::with_capacity(44 + samples as usize);
    w.extend_from_slice(b"RIFF");
    w.extend_from_slice(&(36 + samples).to_le_bytes());
    w.extend_from_slice(b"WAVEfmt ");
    w.extend_from_slice(&16u32.to_le_bytes()); // fmt chunk size
    w.extend_from_slice(&1u16.to_le_bytes()); // PCM
    w.extend_from_slice(&1u16.to_le_bytes()); // mono
    w.extend_from_slice(&8000u32.to_le_bytes()); // sample rate
    w.extend_from_slice(&8000u32.to_le_bytes()); // byte rate
    w.extend_from_slice(&1u16.to_le_bytes()); // block align
    w.extend_from_slice(&8u16.to_le_bytes()); // bits per sample
    w.extend_from_slice(b"data");
    w.extend_from_slice(&samples.to_le_bytes());
    w.resize(44 + samples as usize, 0x80);
    w
}

fn pause() {
    std::thread::sleep(std::time::Duration::from_millis(60));
}

macro_rules! fixture {
    ($ty:ident, $name:literal, $desc:literal, |$out:ident| $content:expr, $run:expr) => {
        #[doc = $desc]
        pub struct $ty;

        impl Tool for $ty {
            const NAME: &'static str = $name;
            const DESCRIPTION: &'static str = $desc;
            const CONCURRENCY_SAFE: bool = true;
            const IDEMPOTENT: bool = true;
            type Args = NoArgs;
            type Output = Done;

            fn run(_args: NoArgs) -> Result<Done, ToolError> {
                $run
            }

            fn content($out: &Done) -> Vec<Content> {
                $content
            }
        }
    };
}

fixture!(
    SimpleText,
    "test_simple_text",
    "Returns one text block.",
    |_o| vec![Content::text("This is a simple text response for testing.")],
    done("text")
);

fixture!(
    ImageContent,
    "test_image_content",
    "Returns a 1x1 red PNG image.",
    |_o| vec![Content::image(RED_PIXEL_PNG.to_vec(), "image/png")],
    done("image")
);

fixture!(
    AudioContent,
    "test_audio_content",
    "Returns a short silent WAV.",
    |_o| vec![Content::audio(silent_wav(80), "audio/wav")],
    done("audio")
);

fixture!(
    EmbeddedResource,
    "test_embedded_resource",
    "Returns an embedded text resource.",
    |_o| vec![Content::ResourceText {
        uri: "test://embedded-resource".into(),
        mime_type: Some("text/plain".into()),
        text: "This is an embedded resource content.".into(),
    }],
    done("resource")
);

fixture!(
    MultipleContentTypes,
    "test_multiple_content_types",
    "Returns text, an image and an embedded JSON resource, in that order.",
    |_o| vec![
        Content::text("Multiple content types test:"),
        Content::image(RED_PIXEL_PNG.to_vec(), "image/png"),
        Content::ResourceText {
            uri: "test://mixed-content-resource".into(),
            mime_type: Some("application/json".into()),
            text: r#"{"test":"data","value":123}"#.into(),
        },
    ],
    done("mixed")
);

fixture!(
    ToolWithLogging,
    "test_tool_with_logging",
    "Writes three log records at info level, about 50 ms apart.",
    |_o| vec![Content::text("Tool with logging executed successfully")],
    {
        toolhost_guest::log::info("Tool execution started");
        pause();
        toolhost_guest::log::info("Tool processing data");
        pause();
        toolhost_guest::log::info("Tool execution completed");
        done("logged")
    }
);

fixture!(
    ToolWithProgress,
    "test_tool_with_progress",
    "Reports progress 0, 50 and 100 of 100, about 50 ms apart.",
    |_o| vec![Content::text("Tool with progress executed successfully")],
    {
        toolhost_guest::progress(0, Some(100), None);
        pause();
        toolhost_guest::progress(50, Some(100), None);
        pause();
        toolhost_guest::progress(100, Some(100), None);
        done("progressed")
    }
);

fixture!(
    ErrorHandling,
    "test_error_handling",
    "Always fails with a tool error (after a warning in the log).",
    |_o| Vec::new(),
    {
        toolhost_guest::log::warn("Failing on purpose");
        Err(ToolError::new(
            "intentional",
            "This tool intentionally returns an error for testing",
        ))
    }
);

/// An address (its schema is `$defs/address`).
#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "address")]
pub struct Address {
    /// The street.
    pub street: Option<String>,
    /// The city.
    pub city: Option<String>,
}

/// Arguments using JSON Schema 2020-12 features: `$defs`, `$ref` and
/// `additionalProperties: false`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SchemaArgs {
    /// A name.
    pub name: Option<String>,
    /// An address.
    pub address: Option<Address>,
}

/// A tool whose input schema uses JSON Schema 2020-12 features.
pub struct JsonSchema202012;

impl Tool for JsonSchema202012 {
    const NAME: &'static str = "json_schema_2020_12_tool";
    const DESCRIPTION: &'static str = "Tool with JSON Schema 2020-12 features";
    const CONCURRENCY_SAFE: bool = true;
    const IDEMPOTENT: bool = true;
    type Args = SchemaArgs;
    type Output = Done;

    fn run(args: SchemaArgs) -> Result<Done, ToolError> {
        let city = args.address.and_then(|a| a.city).unwrap_or_default();
        done(&format!("{} {city}", args.name.unwrap_or_default()))
    }
}

toolhost_guest::export_tools!(
    JsonSchema202012,
    SimpleText,
    ImageContent,
    AudioContent,
    EmbeddedResource,
    MultipleContentTypes,
    ToolWithLogging,
    ToolWithProgress,
    ErrorHandling,
);
