//! The host side of `wit/`: one private `bindgen!`, the conversions from its
//! generated types to the host's, and the `toolhost:tool/host` interface
//! (structured logging and progress) with the per-call state it writes to.
//!
//! It must not know the store a call runs in: the runtime's linker hands
//! this interface a [`HostCalls`] of its per-call state, and nothing else.

use crate::state::{LogRecord, Progress, ProgressSink, cut};
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

/// What the `host` interface collects during one call.
#[derive(Default)]
pub(crate) struct HostCalls {
    pub logs: Vec<LogRecord>,
    pub logs_dropped: u64,
    pub progress_reports: u64,
    pub progress_sink: Option<ProgressSink>,
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
