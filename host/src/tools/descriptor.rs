//! What the host knows about a tool: its validated descriptor, and the
//! content blocks of results.

use serde::{Deserialize, Serialize};
use toolhost_core::SandboxMode;
pub use toolhost_core::SideEffect;

/// The longest tool name.
pub const MAX_NAME_LEN: usize = 64;

/// A tool's descriptor, validated when its component was loaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Descriptor {
    /// The tool's name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON Schema of its arguments.
    pub input_schema: serde_json::Value,
    /// The JSON Schema of its canonical output, when declared.
    pub output_schema: Option<serde_json::Value>,
    /// Whether calls may overlap.
    pub concurrency_safe: bool,
    /// The strongest effect a call may have.
    pub side_effect: SideEffect,
    /// Whether repeating a call is harmless.
    pub idempotent: bool,
    /// The narrowest mode the tool can work in.
    pub min_mode: SandboxMode,
}

/// True when `name` is a well-formed tool name: 1 to 64 characters of
/// `[a-zA-Z0-9_-]`, starting with a letter.
pub fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && name.len() <= MAX_NAME_LEN
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The longest description a tool may declare. It goes to every client's
/// `tools/list` and into every model's context.
pub(crate) const MAX_DESCRIPTION_BYTES: usize = 16 * 1024;

/// The most bytes a tool's input and output schemas may take together.
pub(crate) const MAX_SCHEMA_BYTES: usize = 256 * 1024;

impl Descriptor {
    /// This descriptor as clients are shown it (MCP `tools/list`, `toolhost
    /// list --json`): its schemas keep only the `format`s JSON Schema 2020-12
    /// defines, a machine integer width (`uint64`, ...) becoming the
    /// `minimum`/`maximum` it implies. Calls and results are validated
    /// against these schemas too, so what clients are told is what holds.
    pub fn for_clients(&self) -> Descriptor {
        Descriptor {
            input_schema: super::schema::with_standard_formats(&self.input_schema),
            output_schema: self
                .output_schema
                .as_ref()
                .map(super::schema::with_standard_formats),
            ..self.clone()
        }
    }

    /// What every descriptor must satisfy: a valid name and schemas that
    /// are JSON objects (or booleans). Checked on `describe`'s answer and
    /// again on descriptors read back from the compile cache.
    pub(crate) fn check(&self) -> Result<(), String> {
        check_name(&self.name)?;
        if self.description.len() > MAX_DESCRIPTION_BYTES {
            return Err(format!(
                "tool {}: its description is {} bytes; at most {MAX_DESCRIPTION_BYTES}",
                self.name,
                self.description.len()
            ));
        }
        let schema_bytes = serde_json::to_vec(&self.input_schema).map_or(0, |v| v.len())
            + self
                .output_schema
                .as_ref()
                .and_then(|s| serde_json::to_vec(s).ok())
                .map_or(0, |v| v.len());
        if schema_bytes > MAX_SCHEMA_BYTES {
            return Err(format!(
                "tool {}: its schemas are {schema_bytes} bytes; at most {MAX_SCHEMA_BYTES}",
                self.name
            ));
        }
        let schema_ok = |v: &serde_json::Value| v.is_object() || v.is_boolean();
        if !schema_ok(&self.input_schema) {
            return Err(format!(
                "tool {}: input schema must be a JSON object",
                self.name
            ));
        }
        // Arguments are an object (MCP sends them so, and its clients refuse
        // a tool list whose input schema says otherwise).
        let object_type = |t: &serde_json::Value| match t {
            serde_json::Value::String(t) => t == "object",
            serde_json::Value::Array(ts) => ts.iter().any(|t| t == "object"),
            _ => true,
        };
        if self
            .input_schema
            .get("type")
            .is_some_and(|t| !object_type(t))
        {
            return Err(format!(
                "tool {}: input schema must describe an object (`type: \"object\"`): a tool takes named arguments",
                self.name
            ));
        }
        if self.output_schema.as_ref().is_some_and(|v| !schema_ok(v)) {
            return Err(format!(
                "tool {}: output schema must be a JSON object",
                self.name
            ));
        }
        if self.min_mode > self.side_effect.widest_mode() {
            return Err(format!(
                "tool {}: needs mode {} but declares side effect {}, which runs at most {}; a tool that writes declares side effect write (or external)",
                self.name,
                self.min_mode,
                self.side_effect,
                self.side_effect.widest_mode()
            ));
        }
        Ok(())
    }
}

pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if is_valid_name(name) {
        return Ok(());
    }
    Err(format!(
        "tool name {:?} is not valid (1-64 characters of [a-zA-Z0-9_-], starting with a letter)",
        truncate(name)
    ))
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

/// One block of model-visible content, serialised as MCP shapes it:
/// `{"type":"text","text"}`, `{"type":"image","data","mimeType"}` (data in
/// base64), `{"type":"audio",...}`, `{"type":"resource_link","uri","name",...}`
/// and `{"type":"resource","resource":{"uri","mimeType","text"|"blob"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentItem {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    Image {
        /// The bytes, in base64.
        data: String,
        /// The MIME type.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// Audio.
    Audio {
        /// The bytes, in base64.
        data: String,
        /// The MIME type.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// A link to a resource.
    ResourceLink {
        /// The resource's URI.
        uri: String,
        /// Its name.
        name: String,
        /// What it is.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        description: Option<String>,
        /// Its MIME type.
        #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none", default)]
        mime_type: Option<String>,
    },
    /// A resource whose contents travel with the result.
    Resource {
        /// The resource.
        resource: EmbeddedResource,
    },
}

/// The contents of an embedded resource: `text`, or `blob` (base64).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmbeddedResource {
    /// The resource's URI.
    pub uri: String,
    /// Its MIME type.
    #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none", default)]
    pub mime_type: Option<String>,
    /// Its text, for a text resource.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub text: Option<String>,
    /// Its bytes in base64, for a binary resource.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub blob: Option<String>,
}

impl ContentItem {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentItem::Text { text: text.into() }
    }

    /// The block's text: a text block's, or an embedded text resource's;
    /// empty for images, audio, links and binary resources.
    pub fn as_text(&self) -> &str {
        match self {
            ContentItem::Text { text } => text,
            ContentItem::Resource {
                resource:
                    EmbeddedResource {
                        text: Some(text), ..
                    },
            } => text,
            _ => "",
        }
    }

    /// The block's text for the policy's text rules (redaction, caps,
    /// blocking), when it has some: text blocks and embedded text resources.
    pub fn text_mut(&mut self) -> Option<&mut String> {
        match self {
            ContentItem::Text { text } => Some(text),
            ContentItem::Resource {
                resource:
                    EmbeddedResource {
                        text: Some(text), ..
                    },
            } => Some(text),
            _ => None,
        }
    }

    /// How many bytes the block carries (for the output cap).
    pub(crate) fn size(&self) -> usize {
        match self {
            ContentItem::Text { text } => text.len(),
            ContentItem::Image { data, mime_type } | ContentItem::Audio { data, mime_type } => {
                data.len() + mime_type.len()
            }
            ContentItem::ResourceLink {
                uri,
                name,
                description,
                mime_type,
            } => {
                uri.len()
                    + name.len()
                    + description.as_ref().map_or(0, String::len)
                    + mime_type.as_ref().map_or(0, String::len)
            }
            ContentItem::Resource { resource: r } => {
                r.uri.len()
                    + r.mime_type.as_ref().map_or(0, String::len)
                    + r.text.as_ref().map_or(0, String::len)
                    + r.blob.as_ref().map_or(0, String::len)
            }
        }
    }
}
