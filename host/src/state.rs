//! What a caller and a running call exchange: the interrupt that cancels
//! it, the progress reports and log records it sends back, and the one
//! function that shortens text.
//!
//! Plain types, no wasmtime: the store a call runs in (and what it holds)
//! belongs to `runtime::store`, the `host` interface that fills these in to
//! `bindings`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// One structured log record written by a tool through `host.log`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LogRecord {
    /// `trace`, `debug`, `info`, `warn` or `error`.
    pub level: &'static str,
    /// The message (cut to 4096 bytes).
    pub message: String,
    /// Extra fields, when the tool gave valid JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<serde_json::Value>,
}

/// A progress report from a tool.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Progress {
    /// Work done so far.
    pub done: u64,
    /// Expected end value of `done`, when known.
    pub total: Option<u64>,
    /// A short message.
    pub message: Option<String>,
}

/// Receives progress reports while a call runs (e.g. to forward them to an
/// MCP client). Called on the thread running the guest: keep it cheap.
pub type ProgressSink = Arc<dyn Fn(&Progress) + Send + Sync>;

/// `s` cut to at most `max` bytes (on a character boundary), with `…`
/// appended when something was cut. The one place that shortens text.
pub(crate) fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Why the runtime interrupted a guest.
#[derive(Clone, Default)]
pub struct Interrupt {
    cancelled: Arc<AtomicBool>,
}

impl Interrupt {
    /// Requests cancellation; the guest is interrupted at its next epoch
    /// check or host call.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    /// True once cancellation was requested.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
}
