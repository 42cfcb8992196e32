//! The store of one call, under every limit it runs under (those are
//! defined in `limits`).
//!
//! [`StoreBuilder`] turns a call's [`SandboxSpec`] into a configured
//! [`Store`]: the WASI context (from `sandbox::wasi`), the deadline (epoch
//! callback), fuel, the memory and table growth limits (the resource
//! limiter), the instance, memory and table counts (checked against the
//! component's [`Footprint`] before it is instantiated), the stdout and
//! stderr caps, and the output cap. A fresh [`CallState`] is built for
//! every call and dropped with the store; nothing in it outlives the call,
//! so no call can see another's files, output or logs.
//!
//! This module decides nothing about whether a call may run, and runs no
//! guest code: it prepares the store, and turns what the store saw into a
//! result and a [`Receipt`] once the body has stopped.

use crate::egress::call::CallNet;
use crate::egress::http::GovernedHooks;
use crate::sandbox::bindings::{ContentBlock, HostCalls, ToolOutput};
use crate::sandbox::classify::{Seen, classify, stop_message};
use crate::sandbox::engine::{POOL_MAX_MEMORY, RuntimeOptions};
use crate::sandbox::limits::{
    LimitHit, Limiter, MAX_CONTENT_BLOCKS, MAX_FIELDS_BYTES, MAX_RESOURCES, transfer_cap,
};
use crate::sandbox::output::{CapturedOutput, PassthroughOutput};
use crate::sandbox::scratch::{Scratch, ScratchPool};
use crate::sandbox::spec::{CommandSpec, SandboxSpec};
use crate::sandbox::state::{Interrupt, LogRecord, ProgressSink};
use crate::sandbox::wasi::build_wasi;
use crate::tools::descriptor::ContentItem;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use toolhost_core::{ErrorCode, SandboxMode};
use toolhost_egress::EgressRecord;
use wasmtime::{Engine, ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// What a content block counts toward the output cap beside its text.
pub(crate) const BLOCK_OVERHEAD: usize = 32;

/// Everything one `Store` holds.
pub(crate) struct CallState {
    /// The call's WASI context and resource table. A preview 1 context
    /// wraps the same context components use (its preview 1 descriptor
    /// table is built only when a core module first asks for it), so one
    /// context serves both kinds of program. wasi:http shares its table.
    pub wasi: WasiP1Ctx,
    pub http: WasiHttpCtx,
    /// The wasi:http hooks: every request is decided and sent through the
    /// call's network grant (`egress::http`).
    pub http_hooks: GovernedHooks,
    pub limiter: Limiter,
    pub host: HostCalls,
    pub stdout: CapturedOutput,
    pub stderr: CapturedOutput,
    pub deadline: Instant,
    pub interrupt: Interrupt,
    /// Set by the epoch callback when it stops the guest, so the error can be
    /// classified without guessing from the trap.
    pub stopped_by: Option<ErrorCode>,
    /// The call's network state (grant, limits, records).
    pub net: Arc<CallNet>,
    /// Where the guest's `host.call` frames go (code mode); `None`: no host.
    pub door: Option<super::door::Door>,
}

impl crate::egress::http::HasCallNet for CallState {
    fn call_net(&self) -> &Arc<CallNet> {
        &self.net
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        self.wasi.ctx()
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        // One resource table for both: wasi:http's bodies are wasi:io
        // streams and pollables.
        let WasiCtxView { table, .. } = self.wasi.ctx();
        WasiHttpCtxView {
            ctx: &mut self.http,
            table,
            hooks: &mut self.http_hooks,
        }
    }
}

impl CallState {
    /// The call's WASI context, as the preview 1 functions use it.
    pub(crate) fn p1(&mut self) -> &mut WasiP1Ctx {
        &mut self.wasi
    }

    /// Checks that instantiating a component of footprint `needs` stays
    /// within the call's instance, memory and table counts. Called in the
    /// body, just before instantiating, so that a refusal is classified and
    /// receipted like any other end of a body. wasmtime enforces the same
    /// limits on its own count, but reports them untyped: a component this
    /// check lets through that wasmtime still refuses (one whose footprint
    /// is `None`, or with adapter instances the binary does not show) ends
    /// `TRAP` with wasmtime's message.
    pub(crate) fn admit(&self, needs: Option<&Footprint>) -> Result<(), LimitHit> {
        let Some(needs) = needs else {
            return Ok(());
        };
        let l = &self.limiter;
        if needs.instances > l.instances() {
            return Err(LimitHit::Instances {
                needed: needs.instances,
                limit: l.instances(),
            });
        }
        if needs.memories > l.memories() {
            return Err(LimitHit::Memories {
                needed: needs.memories,
                limit: l.memories(),
            });
        }
        if needs.tables > l.tables() {
            return Err(LimitHit::Tables {
                needed: needs.tables,
                limit: l.tables(),
            });
        }
        Ok(())
    }
}

/// What instantiating a component creates, as wasmtime counts it against a
/// store's limits: core instances (at least this many: see
/// `runtime::load`), and the linear memories and tables they define
/// (imported ones are not new).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Footprint {
    pub instances: usize,
    pub memories: usize,
    pub tables: usize,
}

/// What the runtime measured during a body.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Receipt {
    /// Wall time of the body, in microseconds.
    pub wall_us: u64,
    /// Fuel consumed, when metered.
    pub fuel_used: Option<u64>,
    /// Linear memory the guest held at its peak, all its memories
    /// together, in bytes.
    pub peak_memory_bytes: u64,
    /// The sandbox mode the body ran in.
    pub mode: Option<SandboxMode>,
    /// Bytes the guest wrote to stdout (kept or dropped).
    pub stdout_bytes: u64,
    /// Bytes the guest wrote to stderr (kept or dropped).
    pub stderr_bytes: u64,
    /// Log records the tool wrote through the host interface.
    pub logs: Vec<LogRecord>,
    /// Progress reports received.
    pub progress_reports: u64,
    /// Capability attempts the host refused and observed.
    pub denied: Vec<String>,
    /// Every network request and connection the guest attempted, allowed
    /// or refused (method, URL without query, the grant or the refusal,
    /// status, bytes, milliseconds). Never a header or a body.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<EgressRecord>,
    /// Network records not kept: a call keeps at most 256 (refusals do not
    /// count against `max_requests`, so their number is otherwise unbounded).
    #[serde(skip_serializing_if = "is_zero")]
    pub network_dropped: u64,
    /// The calls the body's code made through the host (code mode), in
    /// order: each `{call_id, tool, status, code}` (`code` on an error);
    /// at most the first 1000 (the log has every one, with its parent).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inner_calls: Vec<serde_json::Value>,
    /// Inner calls made past the first 1000, not listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub inner_calls_dropped: u64,
}

impl Receipt {
    /// This receipt with the call's network records and `denied` lines
    /// (`net`'s, closed first: no request starts, and no refusal is filed,
    /// after they are read).
    fn with_network(mut self, net: &CallNet) -> Receipt {
        self.network = net.close();
        self.denied = net.denied();
        self.network_dropped = net.dropped();
        self
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Builds the store of one call.
pub(crate) struct StoreBuilder<'a> {
    spec: &'a SandboxSpec,
    interrupt: Interrupt,
    progress: Option<ProgressSink>,
    command: Option<&'a CommandSpec>,
    blocking: bool,
    witness: Option<&'a NetWitness>,
    door: Option<super::door::Door>,
}

/// What a call still reports of a body whose own receipt it does not get
/// (abandoned in a host system call past its deadline or cancellation, or
/// the call dropped by its caller): the network records and `denied` lines
/// of the body's store, shared with it once it is built. Neither a guest
/// (getting itself abandoned) nor a caller (dropping its call) can keep the
/// requests a body made out of the call's result.
#[derive(Clone, Default)]
pub(crate) struct NetWitness(Arc<Mutex<Witnessed>>);

#[derive(Default)]
enum Witnessed {
    /// The body's store is not built yet.
    #[default]
    Waiting,
    /// The body's network state and its `denied` lines.
    Watching(Arc<CallNet>),
    /// The call gave up on the body: a store built now is refused.
    GaveUp,
}

impl NetWitness {
    /// Shares the store's network and `denied` lines; `false` when the call
    /// has already given up on its body (which must then not run).
    fn watch(&self, net: &Arc<CallNet>) -> bool {
        let Ok(mut w) = self.0.lock() else {
            return false;
        };
        if matches!(*w, Witnessed::GaveUp) {
            return false;
        }
        *w = Witnessed::Watching(net.clone());
        true
    }

    /// The call gives up on its body, which ran in `mode` from `since`:
    /// its receipt, with the records and `denied` lines so far. Closes the
    /// body's network (a request or connection it has not started by now
    /// is never made), and a store not built yet never will be.
    pub(crate) fn receipt(&self, mode: SandboxMode, since: Instant) -> Receipt {
        let receipt = Receipt {
            wall_us: since.elapsed().as_micros() as u64,
            mode: Some(mode),
            ..Receipt::default()
        };
        let watched = match self.0.lock() {
            Ok(mut w) => std::mem::replace(&mut *w, Witnessed::GaveUp),
            Err(_) => return receipt,
        };
        match watched {
            Witnessed::Watching(net) => receipt.with_network(&net),
            _ => receipt,
        }
    }
}

impl<'a> StoreBuilder<'a> {
    /// A store for `spec`: not cancelled, no progress sink, output captured,
    /// file operations handed to tokio's blocking pool.
    pub(crate) fn new(spec: &'a SandboxSpec) -> Self {
        StoreBuilder {
            spec,
            interrupt: Interrupt::default(),
            progress: None,
            command: None,
            blocking: false,
            witness: None,
            door: None,
        }
    }

    /// Cancels the call when `interrupt` is cancelled.
    pub(crate) fn interrupt(&mut self, interrupt: Interrupt) -> &mut Self {
        self.interrupt = interrupt;
        self
    }

    /// Forwards the tool's progress reports to `sink`.
    pub(crate) fn progress(&mut self, sink: Option<ProgressSink>) -> &mut Self {
        self.progress = sink;
        self
    }

    /// Runs a command program (`toolhost exec`): it gets the args,
    /// environment and stdin of `command`, the workspace at its mount
    /// point, and stdout/stderr passed through to the host's (up to the
    /// spec's `max_stdio` bytes each) instead of captured.
    pub(crate) fn command(&mut self, command: &'a CommandSpec) -> &mut Self {
        self.command = Some(command);
        self
    }

    /// Shares the store's network records and `denied` lines with
    /// `witness`, for a call that may end without the body's receipt
    /// (abandoned, or dropped by its caller).
    pub(crate) fn witness(&mut self, witness: &'a NetWitness) -> &mut Self {
        self.witness = Some(witness);
        self
    }

    /// Carries the guest's `host.call` frames through `door`.
    pub(crate) fn door(&mut self, door: Option<super::door::Door>) -> &mut Self {
        self.door = door;
        self
    }

    /// Lets the guest's file operations block the current thread (only for
    /// a body on a thread of its own).
    pub(crate) fn blocking(&mut self, blocking: bool) -> &mut Self {
        self.blocking = blocking;
        self
    }

    /// Builds the store on `engine`, which was configured with `options`.
    /// Fails `SANDBOX_UNAVAILABLE` when a limit cannot be enforced by this
    /// runtime or the WASI context cannot be built.
    pub(crate) fn build(
        &self,
        engine: &Engine,
        options: &RuntimeOptions,
        scratch: &Arc<ScratchPool>,
    ) -> Result<Run, (ErrorCode, String)> {
        let limits = &self.spec.limits;
        if limits.max_memory > POOL_MAX_MEMORY && options.pooling {
            return Err((
                ErrorCode::SandboxUnavailable,
                format!(
                    "memory limit {} exceeds the pool's {} bytes",
                    limits.max_memory, POOL_MAX_MEMORY
                ),
            ));
        }
        if limits.fuel.is_some() && !options.fuel {
            return Err((
                ErrorCode::SandboxUnavailable,
                "a fuel budget was requested but this runtime does not meter fuel".into(),
            ));
        }
        let stdout = CapturedOutput::new(limits.max_stdio);
        let stderr = CapturedOutput::new(limits.max_stdio);
        let deadline = Instant::now() + limits.deadline;
        let net = CallNet::new(self.spec.network.clone(), deadline);
        if let Some(w) = self.witness
            && !w.watch(&net)
        {
            return Err((
                ErrorCode::Cancelled,
                "the call had given up on this body before it started".into(),
            ));
        }
        let built = build_wasi(
            self.spec,
            (&stdout, &stderr),
            self.command,
            self.blocking,
            &net,
            scratch,
        )
        .map_err(|e| (ErrorCode::SandboxUnavailable, e.to_string()))?;
        let mut wasi = built.wasi;
        wasi.ctx().table.set_max_capacity(MAX_RESOURCES);
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(MAX_FIELDS_BYTES);
        let state = CallState {
            wasi,
            http,
            http_hooks: GovernedHooks::new(net.clone()),
            limiter: Limiter::new(limits),
            host: HostCalls {
                progress_sink: self.progress.clone(),
                attach_budget: limits.max_output,
                ..HostCalls::default()
            },
            stdout,
            stderr,
            deadline,
            interrupt: self.interrupt.clone(),
            stopped_by: None,
            net,
            door: self.door.clone(),
        };
        let mut store = Store::new(engine, state);
        store.limiter(|s| &mut s.limiter);
        if options.fuel {
            let fuel = limits.fuel.unwrap_or(u64::MAX);
            store
                .set_fuel(fuel)
                .map_err(|e| (ErrorCode::SandboxUnavailable, e.to_string()))?;
        }
        if self.command.is_none() {
            store.set_hostcall_fuel(transfer_cap(limits.max_output));
        }
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| {
            let state = ctx.data_mut();
            if state.interrupt.is_cancelled() {
                state.stopped_by = Some(ErrorCode::Cancelled);
                return Ok(UpdateDeadline::Interrupt);
            }
            if Instant::now() >= state.deadline {
                state.stopped_by = Some(ErrorCode::Timeout);
                return Ok(UpdateDeadline::Interrupt);
            }
            // Yield so that a CPU-bound guest shares its thread and the
            // deadline and cancellation race stays responsive.
            Ok(UpdateDeadline::Yield(1))
        });
        Ok(Run {
            store,
            fuel_budget: limits.fuel.unwrap_or(u64::MAX),
            metered: options.fuel,
            mode: self.spec.mode,
            max_output: limits.max_output,
            passthrough: built.passthrough,
            _scratch: built.scratch,
        })
    }
}

/// One prepared store and what must live as long as it.
pub(crate) struct Run {
    pub(crate) store: Store<CallState>,
    fuel_budget: u64,
    metered: bool,
    mode: SandboxMode,
    max_output: usize,
    /// A command program's stdout and stderr, passed through.
    passthrough: Option<[PassthroughOutput; 2]>,
    /// Dropped after the store, which holds the guest's descriptors.
    _scratch: Option<Scratch>,
}

impl Run {
    /// Turns the raced outcome of a body (`None`: stopped from outside
    /// while it waited in a host call) into a result, classifying failures.
    /// Called after the body's future is gone: the body has stopped
    /// (completed, trapped, or dropped while it waited in a host call).
    pub(crate) fn finish<R>(
        &mut self,
        raced: Option<wasmtime::Result<R>>,
    ) -> Result<R, (ErrorCode, String)> {
        let transfer_cap = self.store.hostcall_fuel();
        let state = self.store.data_mut();
        match raced {
            Some(Ok(r)) => Ok(r),
            Some(Err(e)) => Err(classify(
                &e,
                &Seen {
                    transfer_cap,
                    max_output: self.max_output,
                    stopped_by: state.stopped_by,
                    limit_hit: state.limiter.hit(),
                    stderr: &state.stderr,
                },
            )),
            None => {
                let code = if state.interrupt.is_cancelled() {
                    ErrorCode::Cancelled
                } else {
                    ErrorCode::Timeout
                };
                state.stopped_by = Some(code);
                Err((code, stop_message(code)))
            }
        }
    }

    /// Fails `OUTPUT_TOO_LARGE` when a command program's stdout or stderr
    /// was cut at its cap (the writes past it failed).
    #[cfg_attr(
        not(feature = "exec"),
        allow(dead_code, reason = "only `toolhost exec` runs a command")
    )]
    pub(crate) fn check_passthrough(&self) -> Result<(), (ErrorCode, String)> {
        for out in self.passthrough.iter().flatten() {
            if let Some(message) = out.refused() {
                return Err((ErrorCode::OutputTooLarge, message));
            }
        }
        Ok(())
    }

    /// Why a memory growth of the guest was refused at the call's limit,
    /// if one was: a guest that handles the refusal (an interpreter's
    /// `MemoryError`) ends normally, but it ended because of the limit.
    pub(crate) fn memory_refused(&self) -> Option<String> {
        match &self.store.data().limiter.hit() {
            Some(hit @ LimitHit::Memory { .. }) => Some(hit.to_string()),
            _ => None,
        }
    }

    /// The call's deadline and interrupt, for racing its body.
    pub(crate) fn deadline(&self) -> (tokio::time::Instant, Interrupt) {
        let state = self.store.data();
        (
            tokio::time::Instant::from_std(state.deadline),
            state.interrupt.clone(),
        )
    }

    /// Fails `OUTPUT_TOO_LARGE` when a tool's result (canonical, content,
    /// attached content and meta together) is above the call's output cap.
    ///
    /// Each content block counts [`BLOCK_OVERHEAD`] bytes beside its text
    /// (an empty block still becomes a value and a JSON object the host
    /// carries), and a result of more than [`MAX_CONTENT_BLOCKS`] blocks is
    /// too large whatever their size.
    pub(crate) fn check_output(&self, out: &ToolOutput) -> Result<(), (ErrorCode, String)> {
        if out.content.len() > MAX_CONTENT_BLOCKS {
            return Err((
                ErrorCode::OutputTooLarge,
                format!(
                    "the result has {} content blocks; the limit is {MAX_CONTENT_BLOCKS}",
                    out.content.len()
                ),
            ));
        }
        let size = out.canonical.len()
            + out.meta.as_ref().map_or(0, |m| m.len())
            + out
                .content
                .iter()
                .map(|ContentBlock::Text(t)| t.len() + BLOCK_OVERHEAD)
                .sum::<usize>()
            + self.store.data().host.attached_bytes;
        if size > self.max_output {
            return Err((
                ErrorCode::OutputTooLarge,
                format!(
                    "the result is {size} bytes; the limit is {}",
                    self.max_output
                ),
            ));
        }
        Ok(())
    }

    /// A tool's error as `code: message`. Its code is kept as a short token;
    /// the message is cut to the call's output cap by the pipeline, after
    /// the credentials are redacted from it (`Host::tool_error`), so that a
    /// cut never leaves part of a secret.
    pub(crate) fn tool_error_text(&self, code: &str, message: &str) -> String {
        // The tool's own code is a short token: at most 64 characters of
        // letters, digits, `_`, `.` and `-` (others become `_`), so that it
        // can neither escape the output cap nor carry text of its own.
        let code: String = code
            .chars()
            .take(64)
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!("{code}: {message}")
    }

    /// The content blocks the call attached through `content.attach`.
    pub(crate) fn take_attached(&mut self) -> Vec<ContentItem> {
        std::mem::take(&mut self.store.data_mut().host.attached)
    }

    /// What the store measured; `wall_us` is left to the caller.
    pub(crate) fn receipt(&self) -> Receipt {
        let state = self.store.data();
        let fuel_used = if self.metered {
            self.store
                .get_fuel()
                .ok()
                .map(|left| self.fuel_budget.saturating_sub(left))
        } else {
            None
        };
        Receipt {
            wall_us: 0,
            fuel_used,
            peak_memory_bytes: state.limiter.memory() as u64,
            mode: Some(self.mode),
            stdout_bytes: state.stdout.total_bytes(),
            stderr_bytes: state.stderr.total_bytes(),
            logs: state.host.logs.clone(),
            progress_reports: state.host.progress_reports,
            ..Receipt::default()
        }
        .with_network(&state.net)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net() -> Arc<CallNet> {
        CallNet::new(
            crate::egress::NetworkGrant::none(),
            Instant::now() + std::time::Duration::from_secs(60),
        )
    }

    /// A call that gives up on its body takes the body's records and
    /// `denied` lines so far and closes its network; a body whose store
    /// is built only after that is refused, so that no network of it goes
    /// unread.
    #[test]
    fn a_witness_takes_the_records_and_refuses_a_late_store() {
        let net = net();
        let witness = NetWitness::default();
        assert!(witness.watch(&net));
        let peer: std::net::SocketAddr = ([127, 0, 0, 1], 9).into();
        assert!(!net.check_socket(peer, wasmtime_wasi::sockets::SocketAddrUse::TcpConnect));
        let receipt = witness.receipt(SandboxMode::None, Instant::now());
        assert_eq!(receipt.network.len(), 1);
        assert_eq!(receipt.denied.len(), 1, "{:?}", receipt.denied);
        // Closed: the body's later attempts are neither made nor filed.
        assert!(!net.check_socket(peer, wasmtime_wasi::sockets::SocketAddrUse::TcpConnect));
        assert_eq!(net.close().len(), 1);

        let late = NetWitness::default();
        late.receipt(SandboxMode::None, Instant::now());
        let net = self::net();
        assert!(!late.watch(&net), "a store built after the call gave up");
    }
}
