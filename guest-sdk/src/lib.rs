//! # toolhost-guest: write a toolhost tool in Rust
//!
//! A tool is a type that implements [`Tool`]: typed arguments (deriving
//! `Deserialize` and `JsonSchema`), a typed output, and a `run` function. The
//! [`export_tools!`] macro turns one or more tools into the exports of a WASI
//! component (`toolhost:tool/tool`). The SDK derives the JSON Schemas from the
//! types ([`schema_for`]: draft 2020-12, only its standard `format`s, integer
//! widths as `minimum`/`maximum`), parses the arguments, serialises the
//! output and maps errors.
//!
//! ```no_run
//! use toolhost_guest::{JsonSchema, Deserialize, Serialize, Tool, ToolError, SandboxMode};
//!
//! /// Arguments of `shout`.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct Args {
//!     /// The text to shout.
//!     text: String,
//! }
//!
//! #[derive(Serialize, JsonSchema)]
//! struct Output {
//!     shouted: String,
//! }
//!
//! struct Shout;
//!
//! impl Tool for Shout {
//!     const NAME: &'static str = "shout";
//!     const DESCRIPTION: &'static str = "Returns the text in upper case.";
//!     const MIN_MODE: SandboxMode = SandboxMode::None;
//!     type Args = Args;
//!     type Output = Output;
//!
//!     fn run(args: Args) -> Result<Output, ToolError> {
//!         Ok(Output { shouted: args.text.to_uppercase() })
//!     }
//! }
//!
//! toolhost_guest::export_tools!(Shout);
//! ```
//!
//! Build it with `cargo build --target wasm32-wasip2 --release` in a crate of
//! type `cdylib`: the `.wasm` file is a component that `toolhost` loads.
//!
//! Paths in arguments are relative to the workspace: the host preopens the
//! workspace as the current directory (in modes that have one), so
//! `std::fs::read("src/lib.rs")` reads the workspace's file.

#![warn(missing_docs)]

/// The bindings generated from `wit/`. Tool authors rarely need them
/// directly; [`export_tools!`] uses them.
#[allow(missing_docs, clippy::all, unsafe_op_in_unsafe_fn)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "tool-provider",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "toolhost_guest::bindings",
    });
}

mod schema;

use bindings::exports::toolhost::tool::tool as wit_tool;
pub use bindings::toolhost::tool::types::{SandboxMode, SideEffect};
pub use schema::{STANDARD_FORMATS, output_schema_for, schema_for};
pub use schemars::{self, JsonSchema};
pub use serde::{self, Deserialize, Serialize, de::DeserializeOwned};
pub use serde_json;

/// One block of content for the client. Text is what every host shows the
/// model; images, audio and resources travel through the `content`
/// interface of `toolhost:tool@0.1.1` (a host of 0.1.0 does not load a tool
/// that returns them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// An image: its bytes and MIME type (`image/png`, ...).
    Image {
        /// The raw bytes.
        data: Vec<u8>,
        /// The MIME type.
        mime_type: String,
    },
    /// Audio: its bytes and MIME type (`audio/wav`, ...).
    Audio {
        /// The raw bytes.
        data: Vec<u8>,
        /// The MIME type.
        mime_type: String,
    },
    /// A link to a resource the client may read.
    ResourceLink {
        /// The resource's URI.
        uri: String,
        /// A short name.
        name: String,
        /// What it is.
        description: Option<String>,
        /// Its MIME type.
        mime_type: Option<String>,
    },
    /// A text resource, embedded.
    ResourceText {
        /// The resource's URI.
        uri: String,
        /// Its MIME type.
        mime_type: Option<String>,
        /// Its text.
        text: String,
    },
    /// A binary resource, embedded.
    ResourceBlob {
        /// The resource's URI.
        uri: String,
        /// Its MIME type.
        mime_type: Option<String>,
        /// Its bytes.
        data: Vec<u8>,
    },
}

impl Content {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Content::Text(text.into())
    }

    /// An image block.
    pub fn image(data: impl Into<Vec<u8>>, mime_type: impl Into<String>) -> Self {
        Content::Image {
            data: data.into(),
            mime_type: mime_type.into(),
        }
    }

    /// An audio block.
    pub fn audio(data: impl Into<Vec<u8>>, mime_type: impl Into<String>) -> Self {
        Content::Audio {
            data: data.into(),
            mime_type: mime_type.into(),
        }
    }

    /// The block for the `content` interface.
    fn into_block(self) -> bindings::toolhost::tool::content::Block {
        use bindings::toolhost::tool::content as c;
        match self {
            Content::Text(t) => c::Block::Text(t),
            Content::Image { data, mime_type } => c::Block::Image(c::Media { data, mime_type }),
            Content::Audio { data, mime_type } => c::Block::Audio(c::Media { data, mime_type }),
            Content::ResourceLink {
                uri,
                name,
                description,
                mime_type,
            } => c::Block::ResourceLink(c::ResourceLink {
                uri,
                name,
                description,
                mime_type,
            }),
            Content::ResourceText {
                uri,
                mime_type,
                text,
            } => c::Block::Embedded(c::EmbeddedResource {
                uri,
                mime_type,
                contents: c::ResourceContents::Text(text),
            }),
            Content::ResourceBlob {
                uri,
                mime_type,
                data,
            } => c::Block::Embedded(c::EmbeddedResource {
                uri,
                mime_type,
                contents: c::ResourceContents::Blob(data),
            }),
        }
    }
}

/// Lowers `content` for the host: all text, as the returned list (what a
/// host of 0.1.0 reads); otherwise every block attached in order through
/// the `content` interface, and an empty list.
fn lower_content(
    content: Vec<Content>,
) -> Result<Vec<bindings::toolhost::tool::types::ContentBlock>, ToolError> {
    if content.iter().all(|c| matches!(c, Content::Text(_))) {
        return Ok(content
            .into_iter()
            .filter_map(|c| match c {
                Content::Text(t) => Some(bindings::toolhost::tool::types::ContentBlock::Text(t)),
                _ => None,
            })
            .collect());
    }
    for block in content {
        bindings::toolhost::tool::content::attach(&block.into_block())
            .map_err(|e| ToolError::new("content", e))?;
    }
    Ok(Vec::new())
}

/// A failure that the tool reports to the model (not a crash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    /// Short machine-readable code, such as `not-found`.
    pub code: String,
    /// A message the model can act on.
    pub message: String,
}

impl ToolError {
    /// A tool error with a code and a message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ToolError {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ToolError {}

impl From<std::io::Error> for ToolError {
    fn from(err: std::io::Error) -> Self {
        use std::io::ErrorKind;
        let code = match err.kind() {
            ErrorKind::NotFound => "not-found",
            ErrorKind::PermissionDenied => "permission-denied",
            ErrorKind::AlreadyExists => "already-exists",
            ErrorKind::InvalidInput | ErrorKind::InvalidFilename => "invalid-path",
            ErrorKind::IsADirectory => "is-a-directory",
            ErrorKind::NotADirectory => "not-a-directory",
            ErrorKind::ReadOnlyFilesystem => "read-only",
            _ => "io",
        };
        ToolError::new(code, err.to_string())
    }
}

/// A tool: its description, its typed arguments and output, and its body.
///
/// The associated constants fill the tool's descriptor; the defaults are the
/// most conservative values (no concurrency, not idempotent, no side effect,
/// mode `none`). Declare what the tool really needs: the host refuses to run
/// a tool in a mode narrower than `MIN_MODE`.
pub trait Tool {
    /// The tool's name (`[a-zA-Z][a-zA-Z0-9_-]{0,63}`).
    const NAME: &'static str;
    /// What the tool does, for the model.
    const DESCRIPTION: &'static str;
    /// The narrowest sandbox mode the tool can work in. A mode that writes
    /// (`WorkspaceWrite`, `DangerFullAccess`) needs `SIDE_EFFECT` `Write` or
    /// `External`, or the tool does not build.
    const MIN_MODE: SandboxMode = SandboxMode::None;
    /// The strongest effect a call may have. It also bounds what a call is
    /// granted: a tool that declares `None` or `Read` runs at most read-only,
    /// and only one that declares `External` is granted any network.
    const SIDE_EFFECT: SideEffect = SideEffect::None;
    /// Whether several calls may run at the same time.
    const CONCURRENCY_SAFE: bool = false;
    /// Whether repeating a call has the same effect as making it once.
    const IDEMPOTENT: bool = false;

    /// The arguments; their JSON Schema becomes the tool's input schema.
    type Args: DeserializeOwned + JsonSchema;
    /// The canonical output; its JSON Schema becomes the output schema.
    type Output: Serialize + JsonSchema;

    /// The tool's body.
    fn run(args: Self::Args) -> Result<Self::Output, ToolError>;

    /// What the model reads. Defaults to the canonical output as JSON text.
    fn content(output: &Self::Output) -> Vec<Content> {
        match serde_json::to_string(output) {
            Ok(text) => vec![Content::Text(text)],
            Err(_) => Vec::new(),
        }
    }

    /// Optional data for a user interface.
    fn meta(_output: &Self::Output) -> Option<serde_json::Value> {
        None
    }
}

/// The descriptor of `T`, as `describe` returns it.
#[doc(hidden)]
pub fn descriptor<T: Tool>() -> bindings::toolhost::tool::types::ToolDescriptor {
    // The host runs a tool that declares `None` or `Read` at most read-only and
    // refuses to load one whose minimum mode writes: fail the build instead.
    const {
        assert!(
            !matches!(
                T::MIN_MODE,
                SandboxMode::WorkspaceWrite | SandboxMode::DangerFullAccess
            ) || matches!(T::SIDE_EFFECT, SideEffect::Write | SideEffect::External),
            "a tool whose MIN_MODE writes must declare SIDE_EFFECT Write or External"
        )
    };
    let input = schema_for::<T::Args>();
    let output = schema::output_schema_for::<T::Output>();
    bindings::toolhost::tool::types::ToolDescriptor {
        name: T::NAME.to_string(),
        description: T::DESCRIPTION.to_string(),
        input_schema: serde_json::to_string(&input).unwrap_or_default(),
        output_schema: serde_json::to_string(&output).ok(),
        concurrency_safe: T::CONCURRENCY_SAFE,
        side_effect: T::SIDE_EFFECT,
        idempotent: T::IDEMPOTENT,
        min_mode: T::MIN_MODE,
    }
}

/// Parses `args`, runs `T`, and lowers the result for the host.
#[doc(hidden)]
pub fn invoke<T: Tool>(
    args: &str,
) -> Result<bindings::toolhost::tool::types::ToolOutput, bindings::toolhost::tool::types::ToolError>
{
    let parsed: T::Args = serde_json::from_str(args).map_err(|e| {
        to_wit_error(ToolError::new(
            "invalid-args",
            format!("arguments do not match {}: {e}", T::NAME),
        ))
    })?;
    enter_initial_cwd();
    let output = T::run(parsed).map_err(to_wit_error)?;
    let canonical = serde_json::to_string(&output).map_err(|e| {
        to_wit_error(ToolError::new(
            "serialize",
            format!("output is not JSON: {e}"),
        ))
    })?;
    let content = lower_content(T::content(&output)).map_err(to_wit_error)?;
    let meta = T::meta(&output).map(|m| m.to_string());
    Ok(bindings::toolhost::tool::types::ToolOutput {
        canonical,
        content,
        meta,
    })
}

/// Makes relative paths resolve against the directory the host starts the
/// tool in: the workspace in `danger-full-access`, where the host root is
/// preopened as `/` and the host sets `PWD` to the workspace. In the other
/// modes the workspace itself is the preopened root and there is no `PWD`.
fn enter_initial_cwd() {
    if let Some(cwd) = std::env::var_os("PWD") {
        let _ = std::env::set_current_dir(cwd);
    }
}

/// The error `invoke` returns for a name the component does not offer.
#[doc(hidden)]
pub fn unknown_tool(name: &str) -> bindings::toolhost::tool::types::ToolError {
    to_wit_error(ToolError::new(
        "unknown-tool",
        format!("this component has no tool named {name:?}"),
    ))
}

fn to_wit_error(err: ToolError) -> bindings::toolhost::tool::types::ToolError {
    bindings::toolhost::tool::types::ToolError {
        code: err.code,
        message: err.message,
    }
}

#[doc(hidden)]
pub use wit_tool::Guest as __Guest;

/// Exports one or more [`Tool`]s as the component's `toolhost:tool/tool`.
///
/// Use it once per crate, at the crate root: `export_tools!(ReadFile);`
#[macro_export]
macro_rules! export_tools {
    ($($tool:ty),+ $(,)?) => {
        #[doc(hidden)]
        struct __ToolhostComponent;

        impl $crate::__Guest for __ToolhostComponent {
            fn describe() -> ::std::vec::Vec<$crate::bindings::toolhost::tool::types::ToolDescriptor> {
                ::std::vec![$($crate::descriptor::<$tool>()),+]
            }

            fn invoke(
                name: ::std::string::String,
                args: ::std::string::String,
            ) -> ::std::result::Result<
                $crate::bindings::toolhost::tool::types::ToolOutput,
                $crate::bindings::toolhost::tool::types::ToolError,
            > {
                $(
                    if name == <$tool as $crate::Tool>::NAME {
                        return $crate::invoke::<$tool>(&args);
                    }
                )+
                ::std::result::Result::Err($crate::unknown_tool(&name))
            }
        }

        $crate::bindings::export!(__ToolhostComponent with_types_in $crate::bindings);
    };
}

#[cfg(feature = "http")]
pub mod http;

/// Structured logging to the host's log (never to the model).
pub mod log {
    use crate::bindings::toolhost::tool::host::{self, LogLevel};

    /// Logs at info level.
    pub fn info(message: &str) {
        host::log(LogLevel::Info, message, None);
    }

    /// Logs at warn level.
    pub fn warn(message: &str) {
        host::log(LogLevel::Warn, message, None);
    }

    /// Logs at error level.
    pub fn error(message: &str) {
        host::log(LogLevel::Error, message, None);
    }

    /// Logs at debug level, with extra JSON fields.
    pub fn debug_with(message: &str, fields: &serde_json::Value) {
        host::log(LogLevel::Debug, message, Some(&fields.to_string()));
    }
}

/// Reports progress of the current call to the host.
pub fn progress(done: u64, total: Option<u64>, message: Option<&str>) {
    bindings::toolhost::tool::host::progress(done, total, message);
}
