//! The Wasm runtime: one shared `Engine`, components compiled once (through
//! the compile cache) and pre-instantiated, and a fresh `Store` per call.
//!
//! This module runs a tool body and classifies how it ended. It decides
//! nothing about whether a call may run: that is the orchestrator's job, and
//! by the time [`Runtime::invoke`] is called every check has passed.

use crate::bindings::{ContentBlock, HostCalls, ToolProvider, ToolProviderPre};
use crate::cache::{Cached, CompileCache};
use crate::sandbox::{self, Limits, SandboxSpec};
use crate::state::{CallState, Interrupt, Limiter, ProgressSink};
use crate::tool::{ContentItem, Descriptor};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use toolhost_core::{ErrorCode, SandboxMode};
use wasmtime::component::Linker;
use wasmtime::{Config, Engine, Store, Trap, UpdateDeadline};

/// How often the engine's epoch advances. Deadlines and cancellation are
/// observed within about one tick while the guest computes.
pub const EPOCH_TICK: Duration = Duration::from_millis(2);

/// How long `describe` may run when a component is loaded.
pub const DESCRIBE_DEADLINE: Duration = Duration::from_secs(5);

/// Engine-wide settings, fixed when the runtime is built.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Meter fuel (needed for `Limits::fuel`). Costs some speed on every call.
    pub fuel: bool,
    /// Use the pooling instance allocator.
    pub pooling: bool,
    /// Most calls that can run at the same time (pool size).
    pub max_concurrent_calls: u32,
    /// The compile cache directory; `None` disables the disk cache.
    pub cache_dir: Option<PathBuf>,
    /// Turns epoch interruption off. Only the benchmarks do this, to measure
    /// what it costs: without it a CPU-bound guest cannot be stopped at its
    /// deadline, so never turn it off in a host that runs calls.
    #[doc(hidden)]
    pub unmetered_for_benchmarks: bool,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            fuel: false,
            pooling: true,
            max_concurrent_calls: 64,
            cache_dir: crate::cache::default_cache_dir(),
            unmetered_for_benchmarks: false,
        }
    }
}

/// Errors loading a component.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {path}: {detail}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        detail: String,
    },
    /// The bytes are not WebAssembly at all.
    #[error("{0} is not a WebAssembly file")]
    NotWasm(String),
    /// A core module where a component is expected.
    #[error(
        "{0} is a core WebAssembly module, not a component (build it for wasm32-wasip2, or wrap it with `wasm-tools component new`)"
    )]
    CoreModule(String),
    /// The component failed to compile or validate.
    #[error("{file} is not a valid component: {detail}")]
    Invalid {
        /// The file.
        file: String,
        /// Why.
        detail: String,
    },
    /// The component does not implement the `toolhost:tool/tool-provider` world.
    #[error("{file} does not implement the toolhost:tool/tool-provider world: {detail}")]
    WrongWorld {
        /// The file.
        file: String,
        /// Why.
        detail: String,
    },
    /// `describe` trapped, timed out or returned unusable descriptors.
    #[error("{file}: describe failed: {detail}")]
    Describe {
        /// The file.
        file: String,
        /// Why.
        detail: String,
    },
    /// The runtime could not be set up.
    #[error("runtime: {0}")]
    Runtime(String),
}

/// A component compiled and linked, ready to instantiate per call.
pub struct LoadedComponent {
    /// Where it came from (a path or `embedded:NAME`).
    pub source: String,
    /// SHA-256 of the component bytes (hex).
    pub sha256: String,
    pub(crate) pre: ToolProviderPre<CallState>,
    /// The component's imports (`namespace:package/interface@version`).
    pub imports: Vec<String>,
}

impl std::fmt::Debug for LoadedComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedComponent")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// The raw outcome of running a body.
#[derive(Debug)]
pub enum BodyOutcome {
    /// The tool returned a result.
    Ok {
        /// The canonical JSON value.
        canonical: serde_json::Value,
        /// Model-visible content.
        content: Vec<ContentItem>,
        /// UI metadata.
        meta: Option<serde_json::Value>,
    },
    /// The call failed with a stable code.
    Err {
        /// The code.
        code: ErrorCode,
        /// A message the model can act on.
        message: String,
    },
}

/// What the runtime measured during a body.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Receipt {
    /// Wall time of the body, in microseconds.
    pub wall_us: u64,
    /// Fuel consumed, when metered.
    pub fuel_used: Option<u64>,
    /// Largest linear memory the guest reached, in bytes.
    pub peak_memory_bytes: u64,
    /// The sandbox mode the body ran in.
    pub mode: Option<SandboxMode>,
    /// Bytes the guest wrote to stdout (kept or dropped).
    pub stdout_bytes: u64,
    /// Bytes the guest wrote to stderr (kept or dropped).
    pub stderr_bytes: u64,
    /// Log records the tool wrote through the host interface.
    pub logs: Vec<crate::state::LogRecord>,
    /// Progress reports received.
    pub progress_reports: u64,
    /// Capability attempts the host refused and observed.
    pub denied: Vec<String>,
}

/// One engine, its linker and compile cache, and the epoch ticker.
pub struct Runtime {
    engine: Engine,
    linker: Linker<CallState>,
    cache: CompileCache,
    options: RuntimeOptions,
    ticker_stop: Arc<AtomicBool>,
    /// Bodies abandoned in a host system call whose threads have not
    /// returned yet (see [`Runtime::invoke`]).
    abandoned: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::SeqCst);
    }
}

/// The pool's largest memory: calls cannot ask for more than this.
const POOL_MAX_MEMORY: usize = 1 << 30;

/// How long after its deadline (or cancellation) a body stuck in a host
/// file system call is abandoned.
pub const STUCK_GRACE: Duration = Duration::from_millis(100);

/// How much of a freed linear memory or table the pool keeps resident
/// (reset in place) when the kernel can tell it which pages were touched.
const KEEP_RESIDENT: usize = 1 << 20;

impl Runtime {
    /// Builds the engine (epoch interruption always on) and starts the
    /// epoch ticker.
    pub fn new(options: RuntimeOptions) -> Result<Runtime, LoadError> {
        let mut config = Config::new();
        config.epoch_interruption(!options.unmetered_for_benchmarks);
        config.consume_fuel(options.fuel);
        config.wasm_component_model(true);
        if options.pooling {
            let n = options.max_concurrent_calls.max(1);
            let mut pool = wasmtime::PoolingAllocationConfig::default();
            pool.total_component_instances(n)
                .total_core_instances(n * 8)
                .total_memories(n * 2)
                .total_tables(n * 8)
                .max_memory_size(POOL_MAX_MEMORY)
                .max_memories_per_component(4)
                .max_tables_per_component(16)
                .max_core_instances_per_component(32);
            if wasmtime::PoolingAllocationConfig::is_pagemap_scan_available() {
                // Reset a freed memory or table by scanning for the pages the
                // instance touched and restoring only those (up to the kept
                // size) instead of `madvise`-ing them away: the next call on
                // the slot then takes no page faults for them. Measured: the
                // instantiation p50 from 25 to 16 us in the same process.
                // Without the scan, keeping memory resident means a blind
                // `memset` and was measured slower, so it is not kept then.
                pool.pagemap_scan(wasmtime::Enabled::Yes)
                    .linear_memory_keep_resident(KEEP_RESIDENT)
                    .table_keep_resident(KEEP_RESIDENT);
            }
            config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
        }
        let engine = Engine::new(&config).map_err(|e| LoadError::Runtime(e.to_string()))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| LoadError::Runtime(e.to_string()))?;
        ToolProvider::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |s: &mut CallState| &mut s.host,
        )
        .map_err(|e| LoadError::Runtime(e.to_string()))?;
        let ticker_stop = Arc::new(AtomicBool::new(false));
        let stop = ticker_stop.clone();
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("toolhost-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(|e| LoadError::Runtime(format!("cannot start the epoch thread: {e}")))?;
        let cache = CompileCache::new(&engine, options.cache_dir.clone());
        Ok(Runtime {
            engine,
            linker,
            cache,
            options,
            ticker_stop,
            abandoned: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The compile cache.
    pub fn cache(&self) -> &CompileCache {
        &self.cache
    }

    /// The options the runtime was built with.
    pub fn options(&self) -> &RuntimeOptions {
        &self.options
    }

    /// Checks that `bytes` are a component, compiles it (or loads it from the
    /// cache) and links it against the host's imports. Tools and command
    /// programs (`toolhost exec`) share this step; each then looks for its
    /// own exports. Also returns the component's SHA-256 (hex) and whether
    /// it came from the compile cache.
    pub(crate) fn link(
        &self,
        source: &str,
        bytes: &[u8],
    ) -> Result<(Cached, wasmtime::component::InstancePre<CallState>), LoadError> {
        if !bytes.starts_with(b"\0asm") {
            return Err(LoadError::NotWasm(source.to_string()));
        }
        if wasmparser::Parser::is_core_wasm(bytes) {
            return Err(LoadError::CoreModule(source.to_string()));
        }
        if !wasmparser::Parser::is_component(bytes) {
            return Err(LoadError::NotWasm(source.to_string()));
        }
        let cached =
            self.cache
                .load_hashed(&self.engine, bytes)
                .map_err(|e| LoadError::Invalid {
                    file: source.to_string(),
                    detail: format!("{e:#}"),
                })?;
        let pre = self
            .linker
            .instantiate_pre(&cached.component)
            .map_err(|e| LoadError::WrongWorld {
                file: source.to_string(),
                detail: format!("{e:#}"),
            })?;
        Ok((cached, pre))
    }

    /// Compiles (or loads from the cache) and links `bytes`, then asks the
    /// component to describe its tools. A component loaded from the compile
    /// cache takes its descriptors from the cache too, when they are there.
    pub async fn load(
        &self,
        source: &str,
        bytes: &[u8],
    ) -> Result<(Arc<LoadedComponent>, Vec<Descriptor>), LoadError> {
        self.load_with(source, bytes, true).await
    }

    /// As [`Runtime::load`], but always runs `describe` (the conformance
    /// checks judge the component's own answer, not a cached one).
    pub async fn load_and_describe(
        &self,
        source: &str,
        bytes: &[u8],
    ) -> Result<(Arc<LoadedComponent>, Vec<Descriptor>), LoadError> {
        self.load_with(source, bytes, false).await
    }

    async fn load_with(
        &self,
        source: &str,
        bytes: &[u8],
        cached_descriptors: bool,
    ) -> Result<(Arc<LoadedComponent>, Vec<Descriptor>), LoadError> {
        let (
            Cached {
                component,
                sha256,
                hit,
            },
            instance_pre,
        ) = self.link(source, bytes)?;
        let imports = component
            .component_type()
            .imports(&self.engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let pre = ToolProviderPre::new(instance_pre).map_err(|e| LoadError::WrongWorld {
            file: source.to_string(),
            detail: format!("{e:#}"),
        })?;
        let loaded = Arc::new(LoadedComponent {
            source: source.to_string(),
            sha256,
            pre,
            imports,
        });
        if hit
            && cached_descriptors
            && let Some(descriptors) = self.cache.read_descriptors(&loaded.sha256)
        {
            return Ok((loaded, descriptors));
        }
        let descriptors = self.describe(&loaded).await?;
        self.cache.write_descriptors(&loaded.sha256, &descriptors);
        Ok((loaded, descriptors))
    }

    async fn describe(&self, component: &LoadedComponent) -> Result<Vec<Descriptor>, LoadError> {
        let err = |detail: String| LoadError::Describe {
            file: component.source.clone(),
            detail,
        };
        let spec = SandboxSpec {
            mode: SandboxMode::None,
            workspace: PathBuf::from("/"),
            limits: Limits {
                deadline: DESCRIBE_DEADLINE,
                ..Limits::default()
            },
        };
        let mut run = self
            .prepare(&spec, Interrupt::default(), None)
            .map_err(|(_, m)| err(m))?;
        let (deadline, interrupt) = run.deadline();
        let store = &mut run.store;
        let raced = race(
            async {
                let bindings = component.pre.instantiate_async(&mut *store).await?;
                bindings
                    .toolhost_tool_tool()
                    .call_describe(&mut *store)
                    .await
            },
            deadline,
            &interrupt,
        )
        .await;
        let result = run.finish(raced);
        let raw = match result {
            Ok(d) => d,
            Err((code, message)) => return Err(err(format!("{code}: {message}"))),
        };
        if raw.is_empty() {
            return Err(err("the component offers no tools".into()));
        }
        raw.into_iter()
            .map(|d| Descriptor::from_wit(d).map_err(&err))
            .collect()
    }

    /// Builds a fresh store and instantiates `component` in it, without
    /// calling anything: what the benchmarks time as "instantiation".
    #[doc(hidden)]
    pub async fn bench_instantiate(&self, component: &LoadedComponent) -> Result<(), String> {
        let spec = SandboxSpec {
            mode: SandboxMode::None,
            workspace: PathBuf::from("/"),
            limits: Limits::default(),
        };
        let mut run = self
            .prepare(&spec, Interrupt::default(), None)
            .map_err(|(_, m)| m)?;
        component
            .pre
            .instantiate_async(&mut run.store)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Runs the body of `tool` once, in a fresh store built for `spec`.
    ///
    /// A body with file system access (any mode but `none`) runs on its own
    /// blocking thread, where its file operations are done in place instead
    /// of each being handed to tokio's blocking pool and back (one hand-off
    /// per call instead of one per operation; `read_file` of 4 KiB: about
    /// 4x faster). The deadline and cancellation still hold: they are raced
    /// on that thread as everywhere else, and a body stuck in a host file
    /// system call (a FIFO without a writer, a hung network mount), which
    /// nothing can interrupt, is abandoned [`STUCK_GRACE`] after its
    /// deadline or cancellation: the call ends `TIMEOUT` or `CANCELLED`
    /// then, and the thread and its instance are released when the system
    /// call returns.
    ///
    /// Each abandoned body holds an instance slot of the pool until then. So
    /// that they cannot take the whole pool, once half of it
    /// ([`Runtime::abandon_limit`]) is held by abandoned bodies, calls with
    /// file system access are refused `SANDBOX_UNAVAILABLE` before their
    /// body starts, until some of those bodies return; calls in mode `none`
    /// keep the other half. (The check and the abandonment are not one
    /// atomic step: calls already running when the limit is reached may
    /// still be abandoned, at most the pool's size in all.)
    pub async fn invoke(
        self: &Arc<Self>,
        component: &Arc<LoadedComponent>,
        tool: &str,
        args_json: &str,
        spec: &SandboxSpec,
        interrupt: Interrupt,
        progress: Option<ProgressSink>,
    ) -> (BodyOutcome, Receipt) {
        if spec.mode == SandboxMode::None {
            return self
                .invoke_here(component, tool, args_json, spec, interrupt, progress, false)
                .await;
        }
        let started = Instant::now();
        // The call ends without its body's result (refused, or abandoned).
        let stuck = |code: ErrorCode, message: &str| {
            let receipt = Receipt {
                wall_us: started.elapsed().as_micros() as u64,
                mode: Some(spec.mode),
                ..Receipt::default()
            };
            (
                BodyOutcome::Err {
                    code,
                    message: message.to_string(),
                },
                receipt,
            )
        };
        let abandoned = self.abandoned.load(Ordering::SeqCst);
        if abandoned >= self.abandon_limit() {
            return stuck(
                ErrorCode::SandboxUnavailable,
                &format!(
                    "{abandoned} earlier calls are still blocked in host file system calls \
                     (abandoned after their deadline or cancellation) and hold half of the \
                     instance pool; calls with file system access are refused until they return"
                ),
            );
        }
        let (runtime, component) = (self.clone(), component.clone());
        let (tool, args_json, body_spec) = (tool.to_string(), args_json.to_string(), spec.clone());
        let body_interrupt = interrupt.clone();
        let handle = tokio::runtime::Handle::current();
        let mut body = tokio::task::spawn_blocking(move || {
            handle.block_on(runtime.invoke_here(
                &component,
                &tool,
                &args_json,
                &body_spec,
                body_interrupt,
                progress,
                true,
            ))
        });
        let backstop = tokio::time::Instant::now() + spec.limits.deadline + STUCK_GRACE;
        let ended = tokio::select! {
            biased;
            joined = &mut body => return joined.unwrap_or_else(|e| stuck(
                ErrorCode::Trap,
                &format!("the thread running the tool failed: {e}"),
            )),
            _ = tokio::time::sleep_until(backstop) => stuck(
                ErrorCode::Timeout,
                "the tool exceeded its deadline while blocked in a host file system call; \
                 the call was abandoned",
            ),
            _ = async {
                wait_cancelled(&interrupt).await;
                tokio::time::sleep(STUCK_GRACE).await;
            } => stuck(
                ErrorCode::Cancelled,
                "the call was cancelled while the tool was blocked in a host file system \
                 call; the call was abandoned",
            ),
        };
        // Abandoned: counted until its thread returns.
        let abandoned = self.abandoned.clone();
        abandoned.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let _ = body.await;
            abandoned.fetch_sub(1, Ordering::SeqCst);
        });
        ended
    }

    /// Bodies abandoned in a host system call (see [`Runtime::invoke`])
    /// whose threads have not returned yet.
    pub fn abandoned_bodies(&self) -> usize {
        self.abandoned.load(Ordering::SeqCst)
    }

    /// How many abandoned bodies make [`Runtime::invoke`] refuse calls with
    /// file system access: half the pool, at least one.
    pub fn abandon_limit(&self) -> usize {
        (self.options.max_concurrent_calls as usize / 2).max(1)
    }

    /// [`Runtime::invoke`] on the current thread; `blocking` lets the
    /// guest's file operations block it.
    #[allow(clippy::too_many_arguments)]
    async fn invoke_here(
        &self,
        component: &LoadedComponent,
        tool: &str,
        args_json: &str,
        spec: &SandboxSpec,
        interrupt: Interrupt,
        progress: Option<ProgressSink>,
        blocking: bool,
    ) -> (BodyOutcome, Receipt) {
        let started = Instant::now();
        let mut run = match self.prepare_with(spec, interrupt, progress, None, blocking) {
            Ok(run) => run,
            Err((code, message)) => {
                return (BodyOutcome::Err { code, message }, Receipt::default());
            }
        };
        let (deadline, interrupt) = run.deadline();
        let store = &mut run.store;
        let raced = race(
            async {
                let bindings = component.pre.instantiate_async(&mut *store).await?;
                bindings
                    .toolhost_tool_tool()
                    .call_invoke(&mut *store, tool, args_json)
                    .await
            },
            deadline,
            &interrupt,
        )
        .await;
        let result = run.finish(raced);
        let max_output = spec.limits.max_output;
        let outcome = match result {
            Err((code, message)) => BodyOutcome::Err { code, message },
            Ok(Err(e)) => BodyOutcome::Err {
                code: ErrorCode::ToolError,
                message: format!("{}: {}", e.code, e.message),
            },
            Ok(Ok(out)) => lift_output(out, max_output),
        };
        let mut receipt = run.receipt(spec.mode, self.options.fuel);
        receipt.wall_us = started.elapsed().as_micros() as u64;
        (outcome, receipt)
    }

    pub(crate) fn prepare(
        &self,
        spec: &SandboxSpec,
        interrupt: Interrupt,
        progress: Option<ProgressSink>,
    ) -> Result<Run, (ErrorCode, String)> {
        self.prepare_with(spec, interrupt, progress, None, false)
    }

    /// Builds the store of one call. `blocking`: the guest's file
    /// operations run on the current thread (only on a thread of its own,
    /// see [`Runtime::invoke`]).
    pub(crate) fn prepare_with(
        &self,
        spec: &SandboxSpec,
        interrupt: Interrupt,
        progress: Option<ProgressSink>,
        command: Option<&[String]>,
        blocking: bool,
    ) -> Result<Run, (ErrorCode, String)> {
        if spec.limits.max_memory > POOL_MAX_MEMORY && self.options.pooling {
            return Err((
                ErrorCode::SandboxUnavailable,
                format!(
                    "memory limit {} exceeds the pool's {} bytes",
                    spec.limits.max_memory, POOL_MAX_MEMORY
                ),
            ));
        }
        if spec.limits.fuel.is_some() && !self.options.fuel {
            return Err((
                ErrorCode::SandboxUnavailable,
                "a fuel budget was requested but this runtime does not meter fuel".into(),
            ));
        }
        let built = sandbox::build_wasi(spec, command, blocking)
            .map_err(|e| (ErrorCode::SandboxUnavailable, e.to_string()))?;
        let state = CallState {
            wasi: built.wasi,
            table: wasmtime::component::ResourceTable::new(),
            limiter: Limiter {
                max_memory: spec.limits.max_memory,
                max_table_elements: spec.limits.max_table_elements,
                max_instances: spec.limits.max_instances,
                peak_memory: 0,
                hit: None,
            },
            host: HostCalls {
                progress_sink: progress,
                ..HostCalls::default()
            },
            stdout: built.stdout,
            stderr: built.stderr,
            deadline: Instant::now() + spec.limits.deadline,
            interrupt,
            stopped_by: None,
            denied: built.denied,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        if self.options.fuel {
            let fuel = spec.limits.fuel.unwrap_or(u64::MAX);
            store
                .set_fuel(fuel)
                .map_err(|e| (ErrorCode::SandboxUnavailable, e.to_string()))?;
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
            // cancellation/deadline select in `drive` stays responsive.
            Ok(UpdateDeadline::Yield(1))
        });
        Ok(Run {
            store,
            fuel_budget: spec.limits.fuel.unwrap_or(u64::MAX),
            _scratch: built.scratch,
        })
    }
}

/// One prepared store and what must live as long as it.
pub(crate) struct Run {
    pub(crate) store: Store<CallState>,
    fuel_budget: u64,
    _scratch: Option<tempfile::TempDir>,
}

impl Run {
    /// Turns the raced outcome of a body into a result, classifying
    /// failures. Called after the body's future is gone: the body has
    /// stopped (completed, trapped, or dropped while it waited in a host
    /// call).
    pub(crate) fn finish<R>(
        &mut self,
        raced: Option<wasmtime::Result<R>>,
    ) -> Result<R, (ErrorCode, String)> {
        let state = self.store.data_mut();
        match raced {
            Some(Ok(r)) => Ok(r),
            Some(Err(e)) => Err(classify(&e, state)),
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

    pub(crate) fn deadline(&self) -> (tokio::time::Instant, Interrupt) {
        let state = self.store.data();
        (
            tokio::time::Instant::from_std(state.deadline),
            state.interrupt.clone(),
        )
    }

    pub(crate) fn receipt(&self, mode: SandboxMode, metered: bool) -> Receipt {
        let state = self.store.data();
        let fuel_used = if metered {
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
            peak_memory_bytes: state.limiter.peak_memory as u64,
            mode: Some(mode),
            stdout_bytes: state.stdout.total_bytes(),
            stderr_bytes: state.stderr.total_bytes(),
            logs: state.host.logs.clone(),
            progress_reports: state.host.progress_reports,
            denied: state.denied.lock().map(|d| d.clone()).unwrap_or_default(),
        }
    }
}

/// Runs `body` until it ends, the deadline passes or the call is cancelled.
/// `None` means the body was stopped from outside while it waited in a host
/// call (a CPU-bound guest is stopped by the epoch callback instead, and
/// ends with an error). When this returns, the future has been dropped.
pub(crate) async fn race<R>(
    body: impl std::future::Future<Output = wasmtime::Result<R>>,
    deadline: tokio::time::Instant,
    interrupt: &Interrupt,
) -> Option<wasmtime::Result<R>> {
    tokio::select! {
        biased;
        r = body => Some(r),
        _ = tokio::time::sleep_until(deadline) => None,
        _ = wait_cancelled(interrupt) => None,
    }
}

async fn wait_cancelled(interrupt: &Interrupt) {
    while !interrupt.is_cancelled() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn stop_message(code: ErrorCode) -> String {
    match code {
        ErrorCode::Cancelled => "the call was cancelled; the tool was stopped".into(),
        _ => "the call ran past its deadline and was stopped".into(),
    }
}

/// Maps how a body failed to a stable code and a message.
fn classify(err: &wasmtime::Error, state: &CallState) -> (ErrorCode, String) {
    if let Some(code) = state.stopped_by {
        return (code, stop_message(code));
    }
    let trap = err.downcast_ref::<Trap>().copied();
    if trap == Some(Trap::OutOfFuel) {
        return (
            ErrorCode::OutOfFuel,
            "the call used up its fuel budget".into(),
        );
    }
    // Limits wasmtime enforces itself (instance, table and memory counts)
    // fail instantiation with this error rather than a trap.
    let text = format!("{err:#}");
    if trap.is_none() && text.contains("resource limit exceeded") {
        return (
            ErrorCode::MemoryLimit,
            format!("the tool needs more resources than the call allows: {text}"),
        );
    }
    if let Some(what) = state.limiter.hit {
        return (
            ErrorCode::MemoryLimit,
            format!(
                "the tool tried to grow its {what} past the limit ({} bytes of memory)",
                state.limiter.max_memory
            ),
        );
    }
    let (stderr, _) = state.stderr.snapshot();
    let tail: String = stderr
        .lines()
        .rev()
        .take(5)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    let what = match trap {
        Some(t) => t.to_string(),
        None => format!("{err:#}"),
    };
    let message = if tail.is_empty() {
        format!("the tool trapped: {what}")
    } else {
        format!("the tool trapped: {what}\n{tail}")
    };
    (ErrorCode::Trap, message)
}

fn lift_output(out: crate::bindings::ToolOutput, max_output: usize) -> BodyOutcome {
    let size = out.canonical.len()
        + out.meta.as_ref().map_or(0, |m| m.len())
        + out
            .content
            .iter()
            .map(|ContentBlock::Text(t)| t.len())
            .sum::<usize>();
    if size > max_output {
        return BodyOutcome::Err {
            code: ErrorCode::OutputTooLarge,
            message: format!("the result is {size} bytes; the limit is {max_output}"),
        };
    }
    let canonical = match serde_json::from_str(&out.canonical) {
        Ok(v) => v,
        Err(e) => {
            return BodyOutcome::Err {
                code: ErrorCode::OutputInvalid,
                message: format!("the canonical output is not JSON: {e}"),
            };
        }
    };
    let meta = match out.meta.as_deref().map(serde_json::from_str).transpose() {
        Ok(m) => m,
        Err(e) => {
            return BodyOutcome::Err {
                code: ErrorCode::OutputInvalid,
                message: format!("meta is not JSON: {e}"),
            };
        }
    };
    let content = out
        .content
        .into_iter()
        .map(|ContentBlock::Text(text)| ContentItem::text(text))
        .collect();
    BodyOutcome::Ok {
        canonical,
        content,
        meta,
    }
}
