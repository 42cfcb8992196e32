//! Per-call state: what one `Store` owns for the length of one call.
//!
//! A fresh `CallState` (WASI context, resource table, limiter, host-interface
//! buffers) is built for every call and dropped with the store; nothing in it
//! outlives the call, so no call can see another's files, output or logs.

use crate::bindings::HostCalls;
use crate::output::CapturedOutput;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use toolhost_core::ErrorCode;
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

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

/// Enforces the memory, table and instance limits of one call and records
/// what it saw (peak memory, whether a limit was hit).
pub(crate) struct Limiter {
    pub max_memory: usize,
    pub max_table_elements: usize,
    pub max_instances: usize,
    pub peak_memory: usize,
    pub hit: Option<&'static str>,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_memory || maximum.is_some_and(|m| desired > m) {
            self.hit = Some("memory");
            return Ok(false);
        }
        // Memories only grow; the peak is the largest size allowed so far.
        self.peak_memory = self.peak_memory.max(desired).max(current);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_table_elements || maximum.is_some_and(|m| desired > m) {
            self.hit = Some("table");
            return Ok(false);
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.max_instances
    }

    fn tables(&self) -> usize {
        self.max_instances.saturating_mul(4)
    }

    fn memories(&self) -> usize {
        self.max_instances.saturating_mul(2)
    }
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

/// Everything one `Store` holds.
pub(crate) struct CallState {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub limiter: Limiter,
    pub host: HostCalls,
    pub stdout: CapturedOutput,
    pub stderr: CapturedOutput,
    pub deadline: Instant,
    pub interrupt: Interrupt,
    /// Set by the epoch callback when it stops the guest, so the error can be
    /// classified without guessing from the trap.
    pub stopped_by: Option<ErrorCode>,
    pub denied: Arc<std::sync::Mutex<Vec<String>>>,
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
