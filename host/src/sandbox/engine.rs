//! The engine every call shares: its configuration (epoch interruption,
//! fuel, the pooling instance allocator) and the thread that advances its
//! epoch.
//!
//! Fixed when the runtime is built. This module configures; it links
//! nothing, compiles nothing and builds no store.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wasmparser::WasmFeatures;
use wasmtime::{Config, Engine};

/// How often the engine's epoch advances. Deadlines and cancellation are
/// observed within about one tick while the guest computes.
pub const EPOCH_TICK: Duration = Duration::from_millis(2);

/// The pool's largest memory: calls cannot ask for more than this.
pub(crate) const POOL_MAX_MEMORY: usize = 1 << 30;

/// The pool's largest table, in elements.
const POOL_MAX_TABLE_ELEMENTS: usize = 100_000;

/// The pool's largest core instance context, in bytes.
const POOL_MAX_CORE_INSTANCE_SIZE: usize = 8 << 20;

/// How much of a freed linear memory or table the pool keeps resident
/// (reset in place) when the kernel can tell it which pages were touched.
const KEEP_RESIDENT: usize = 1 << 20;

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
            cache_dir: crate::sandbox::cache::default_cache_dir(),
            unmetered_for_benchmarks: false,
        }
    }
}

/// WebAssembly proposals this runtime does not enable, each with the name a
/// user knows it by. wasmtime 48 leaves them off by default (the component
/// model's async ABI because toolhost builds wasmtime without its
/// `component-model-async` feature: see the workspace's Cargo.toml); [`config`]
/// turns each off explicitly as well, so that a module that needs one is
/// known to be refused for it, and loading can name it (see
/// `runtime::program`). Every proposal of WebAssembly 3.0 (exception
/// handling with `try_table`, GC, tail calls, memory64, relaxed SIMD,
/// threads, ...) stays on.
pub(crate) const PROPOSALS_OFF: &[(WasmFeatures, &str)] = &[
    (
        WasmFeatures::LEGACY_EXCEPTIONS,
        "legacy exception handling (the `try`/`catch`/`rethrow`/`delegate` instructions of the \
         proposal's first version; wasmtime supports the standard one, with `try_table`)",
    ),
    (WasmFeatures::STACK_SWITCHING, "stack switching"),
    (
        WasmFeatures::SHARED_EVERYTHING_THREADS,
        "shared-everything threads",
    ),
    (WasmFeatures::CUSTOM_PAGE_SIZES, "custom page sizes"),
    (WasmFeatures::WIDE_ARITHMETIC, "wide arithmetic"),
    (WasmFeatures::MEMORY_CONTROL, "memory control"),
    (
        WasmFeatures::CM_ASYNC
            .union(WasmFeatures::CM_ASYNC_STACKFUL)
            .union(WasmFeatures::CM_MORE_ASYNC_BUILTINS)
            .union(WasmFeatures::CM_THREADING)
            .union(WasmFeatures::CM_ERROR_CONTEXT),
        "the component model's async ABI (`async` lifts and lowers, streams and futures, \
         as WASI 0.3 uses them; WASI 0.2 components do not need it)",
    ),
];

/// The engine configuration for `options`: component model, epoch
/// interruption (always on outside the benchmarks), fuel when asked,
/// [`PROPOSALS_OFF`] off, and the pooling allocator sized for
/// `max_concurrent_calls`.
pub(crate) fn config(options: &RuntimeOptions) -> Config {
    let mut config = Config::new();
    config.epoch_interruption(!options.unmetered_for_benchmarks);
    config.consume_fuel(options.fuel);
    config.wasm_component_model(true);
    // Off whatever features the build turns on: with concurrency support,
    // every call into and out of a guest keeps a task record (see the
    // workspace's Cargo.toml), and no toolhost guest uses the async ABI.
    config.concurrency_support(false);
    for (feature, _) in PROPOSALS_OFF {
        config.wasm_features(*feature, false);
    }
    if options.pooling {
        let n = options.max_concurrent_calls.max(1);
        let mut pool = wasmtime::PoolingAllocationConfig::default();
        pool.total_component_instances(n)
            .total_core_instances(n * 8)
            .total_memories(n * 2)
            .total_tables(n * 8)
            .max_memory_size(POOL_MAX_MEMORY)
            // Sized for an interpreter run as a program-backed tool:
            // CPython compiled to WASI has a 47 157-element function table
            // and a 1.5 MiB instance context (a VMFuncRef for each function
            // that table holds). The call's own limits (`Limits`, 100 000
            // table elements by default) still apply within these.
            .table_elements(POOL_MAX_TABLE_ELEMENTS)
            .max_core_instance_size(POOL_MAX_CORE_INSTANCE_SIZE)
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
    config
}

/// The thread that advances an engine's epoch every [`EPOCH_TICK`]. It
/// stops when this handle is dropped (or the engine is gone), so whatever
/// may still run guest code must hold it: a guest whose epoch no longer
/// advances can no longer be stopped at its deadline.
pub(crate) struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    /// Starts ticking `engine`'s epoch on a thread of its own.
    pub(crate) fn start(engine: &Engine) -> std::io::Result<EpochTicker> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("toolhost-epoch".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })?;
        Ok(EpochTicker { stop })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
