//! The host side of `wit/`: one private `bindgen!`, the conversions from its
//! generated types to the host's, and the `toolhost:tool/host` interface
//! (structured logging and progress) and `toolhost:tool/content` interface
//! (content beyond text) with the per-call state they write to.
//!
//! The bindings are for `toolhost:tool@0.1.1`; components built against
//! 0.1.0 link too: wasmtime matches `@0.1.0` imports and exports against
//! the `@0.1.1` definitions (semver-compatible names).
//!
//! It must not know the store a call runs in: the runtime's linker hands
//! this interface a [`HostCalls`] of its per-call state, and nothing else.

use crate::sandbox::state::{LogRecord, Progress, ProgressSink, cut};
use crate::tools::descriptor::{ContentItem, Descriptor, EmbeddedResource, check_name};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use toolhost_core::{SandboxMode, SideEffect};

wasmtime::component::bindgen!({
    path: "../wit",
    world: "tool-provider",
    exports: { default: async },
});

pub(crate) use self::exports::toolhost::tool::tool::{ToolDescriptor, ToolOutput};
pub(crate) use self::toolhost::tool::host::LogLevel;
pub(crate) use self::toolhost::tool::types::{
    ContentBlock, SandboxMode as WitMode, SideEffect as WitSideEffect,
};

/// The most log records a call keeps; later ones are counted, not kept.
pub const MAX_LOG_RECORDS: usize = 256;
/// The longest log message kept, in bytes; longer ones are cut.
pub const MAX_LOG_MESSAGE: usize = 4096;

/// The most content blocks one call may attach through `content.attach`.
pub const MAX_ATTACHED_BLOCKS: usize = 64;

/// What the `host` and `content` interfaces collect during one call.
#[derive(Default)]
pub(crate) struct HostCalls {
    pub logs: Vec<LogRecord>,
    pub logs_dropped: u64,
    pub progress_reports: u64,
    pub progress_sink: Option<ProgressSink>,
    /// Blocks attached through `content.attach`, in order.
    pub attached: Vec<ContentItem>,
    /// Their size in bytes (base64 for binary data).
    pub attached_bytes: usize,
    /// The most bytes the call may attach (its output cap).
    pub attach_budget: usize,
}

impl self::toolhost::tool::types::Host for HostCalls {}

impl self::toolhost::tool::host::Host for HostCalls {
    fn log(&mut self, level: LogLevel, message: String, fields: Option<String>) {
        if self.logs.len() >= MAX_LOG_RECORDS {
            self.logs_dropped += 1;
            return;
        }
        let level = match level {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        };
        let message = cut(&message, MAX_LOG_MESSAGE);
        let fields = fields
            .filter(|f| f.len() <= MAX_LOG_MESSAGE)
            .and_then(|f| serde_json::from_str(&f).ok());
        tracing::debug!(target: "toolhost::guest", level, %message, "tool log");
        self.logs.push(LogRecord {
            level,
            message,
            fields,
        });
    }

    fn progress(&mut self, done: u64, total: Option<u64>, message: Option<String>) {
        self.progress_reports += 1;
        if let Some(sink) = &self.progress_sink {
            let message = message.map(|m| cut(&m, MAX_LOG_MESSAGE));
            sink(&Progress {
                done,
                total,
                message,
            });
        }
    }
}

impl self::toolhost::tool::content::Host for HostCalls {
    fn attach(&mut self, block: content::Block) -> Result<(), String> {
        if self.attached.len() >= MAX_ATTACHED_BLOCKS {
            return Err(format!(
                "this call already attached {MAX_ATTACHED_BLOCKS} blocks, the most a call may"
            ));
        }
        let item = lift_block(block)?;
        let size = item.size();
        let total = self.attached_bytes.saturating_add(size);
        if total > self.attach_budget {
            return Err(format!(
                "the attached content would be {total} bytes; the call's output cap is {}",
                self.attach_budget
            ));
        }
        self.attached_bytes = total;
        self.attached.push(item);
        Ok(())
    }
}

use self::toolhost::tool::content;

/// The host's content block for one attached through `content.attach`;
/// an error for a malformed one.
fn lift_block(block: content::Block) -> Result<ContentItem, String> {
    Ok(match block {
        content::Block::Text(text) => ContentItem::text(text),
        content::Block::Image(m) => ContentItem::Image {
            mime_type: mime(&m.mime_type)?,
            data: BASE64.encode(&m.data),
        },
        content::Block::Audio(m) => ContentItem::Audio {
            mime_type: mime(&m.mime_type)?,
            data: BASE64.encode(&m.data),
        },
        content::Block::ResourceLink(l) => {
            if l.name.trim().is_empty() {
                return Err("a resource link needs a name".into());
            }
            ContentItem::ResourceLink {
                uri: uri(&l.uri)?,
                name: l.name,
                description: l.description,
                mime_type: l.mime_type.as_deref().map(mime).transpose()?,
            }
        }
        content::Block::Embedded(r) => {
            let (text, blob) = match r.contents {
                content::ResourceContents::Text(t) => (Some(t), None),
                content::ResourceContents::Blob(b) => (None, Some(BASE64.encode(&b))),
            };
            ContentItem::Resource {
                resource: EmbeddedResource {
                    uri: uri(&r.uri)?,
                    mime_type: r.mime_type.as_deref().map(mime).transpose()?,
                    text,
                    blob,
                },
            }
        }
    })
}

/// The longest MIME type or URI accepted.
const MAX_NAME_BYTES: usize = 8192;

/// `type/subtype[;params]` with token characters, or an error naming it.
fn mime(m: &str) -> Result<String, String> {
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    let (essence, params) = m.split_once(';').unwrap_or((m, ""));
    let ok = m.len() <= 255
        && essence
            .split_once('/')
            .is_some_and(|(t, s)| token(t) && token(s))
        && params.bytes().all(|b| (0x20..0x7f).contains(&b));
    if ok {
        Ok(m.to_string())
    } else {
        Err(format!(
            "{:?} is not a MIME type (type/subtype)",
            cut(m, 80)
        ))
    }
}

/// A URI with a scheme and no spaces or control characters.
fn uri(u: &str) -> Result<String, String> {
    let scheme_ok = u.split_once(':').is_some_and(|(s, _)| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
    });
    if scheme_ok && u.len() <= MAX_NAME_BYTES && !u.bytes().any(|b| b <= b' ' || b == 0x7f) {
        Ok(u.to_string())
    } else {
        Err(format!("{:?} is not a URI (scheme:...)", cut(u, 80)))
    }
}

impl Descriptor {
    /// A descriptor as a component's `describe` returned it, checked (name,
    /// schemas, sizes): the one way a WIT descriptor becomes the host's.
    pub(crate) fn from_wit(d: ToolDescriptor) -> Result<Descriptor, String> {
        check_name(&d.name)?;
        let input_schema: serde_json::Value = serde_json::from_str(&d.input_schema)
            .map_err(|e| format!("tool {}: input schema is not JSON: {e}", d.name))?;
        let output_schema = match d.output_schema.as_deref() {
            None => None,
            Some(s) => Some(
                serde_json::from_str(s)
                    .map_err(|e| format!("tool {}: output schema is not JSON: {e}", d.name))?,
            ),
        };
        let descriptor = Descriptor {
            name: d.name,
            description: d.description,
            input_schema,
            output_schema,
            concurrency_safe: d.concurrency_safe,
            side_effect: side_effect_from_wit(d.side_effect),
            idempotent: d.idempotent,
            min_mode: mode_from_wit(d.min_mode),
        };
        descriptor.check()?;
        Ok(descriptor)
    }
}

/// The host's sandbox mode for a mode named in WIT.
pub(crate) fn mode_from_wit(m: WitMode) -> SandboxMode {
    match m {
        WitMode::None => SandboxMode::None,
        WitMode::ReadOnly => SandboxMode::ReadOnly,
        WitMode::WorkspaceWrite => SandboxMode::WorkspaceWrite,
        WitMode::DangerFullAccess => SandboxMode::DangerFullAccess,
    }
}

/// The host's side-effect class for one named in WIT.
pub(crate) fn side_effect_from_wit(s: WitSideEffect) -> SideEffect {
    match s {
        WitSideEffect::None => SideEffect::None,
        WitSideEffect::Read => SideEffect::Read,
        WitSideEffect::Write => SideEffect::Write,
        WitSideEffect::External => SideEffect::External,
    }
}
