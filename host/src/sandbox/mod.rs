//! The Wasm runtime: one shared engine, components compiled once (through
//! the compile cache) and pre-instantiated, and a fresh store per call.
//!
//! This module runs tool bodies and classifies how they ended. It decides
//! nothing about whether a call may run: that is the pipeline's job, and
//! running a body is reachable only from inside the crate, after every
//! check of the pipeline has passed. One file per capability:
//!
//! - `engine`: the engine configuration, the pooling allocator and the
//!   epoch thread ([`RuntimeOptions`], [`EPOCH_TICK`]);
//! - `link`: which host interfaces every component, and every core module,
//!   is linked against; `door` and `door_call`: a core module's `host.call`
//!   door, whose frames the pipeline's code mode answers;
//! - `load`: compile through the cache, link, count, `describe`
//!   ([`LoadedComponent`], [`LoadError`], [`DESCRIBE_DEADLINE`]), and
//!   naming the proposals a component or program needs that the engine
//!   does not enable;
//! - `program`: the same for a `toolhost exec` program (a command
//!   component or a preview 1 command module);
//! - `limits`: every limit a call runs under, and the limit it hit;
//! - `store`: the store of one call ([`Receipt`]), with `wasi`, the
//!   call's WASI context per mode (its
//!   network grant is enforced by `egress`), and `scratch`, the scratch
//!   directories of `workspace-write` (an
//!   untouched one is kept for a later call);
//! - `invoke`: running a body, the thread hand-off, the deadline and
//!   cancellation race, abandoned bodies ([`BodyOutcome`], [`STUCK_GRACE`]);
//! - `classify`: how a body ended, by type, as a stable code;
//! - `world`: what a component of the wrong world is told.

pub(crate) mod bindings;
pub(crate) mod cache;
mod classify;
pub(crate) mod door;
mod door_call;
mod engine;
mod invoke;
mod limits;
mod link;
mod load;
pub(crate) mod output;
mod program;
mod scratch;
pub(crate) mod spec;
pub(crate) mod state;
mod store;
mod wasi;
mod world;

pub use self::engine::{EPOCH_TICK, RuntimeOptions};
pub use self::invoke::{BodyOutcome, STUCK_GRACE};
pub use self::load::{
    DESCRIBE_DEADLINE, LoadError, LoadedComponent, MAX_WASM_FILE_BYTES, WasmFileError,
    read_wasm_file,
};
pub use self::store::Receipt;
#[cfg(all(test, feature = "mcp", any(target_os = "linux", target_os = "android")))]
pub(crate) use crate::egress::nosigpipe::with_default_sigpipe;
#[cfg(feature = "mcp")]
pub(crate) use crate::egress::nosigpipe::{Stream, Tcp};

pub(crate) use self::invoke::{OnAbandon, Watch, race};
pub(crate) use self::program::Program;
pub(crate) use self::store::{NetWitness, Run, StoreBuilder};

use self::engine::EpochTicker;
use self::invoke::{Body, Invoker};
use self::load::Loader;
use crate::sandbox::cache::CompileCache;
#[cfg(feature = "bench-internals")]
use crate::sandbox::spec::Limits;
use crate::sandbox::spec::SandboxSpec;
use crate::tools::descriptor::Descriptor;
#[cfg(feature = "bench-internals")]
use std::path::PathBuf;
use std::sync::Arc;
use toolhost_core::ErrorCode;
#[cfg(feature = "bench-internals")]
use toolhost_core::SandboxMode;
use wasmtime::Engine;

/// One engine, its linker and compile cache, and the epoch ticker.
pub struct Runtime {
    loader: Loader,
    invoker: Invoker,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("options", self.options())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Builds the engine (epoch interruption always on) and starts the
    /// epoch ticker.
    pub fn new(options: RuntimeOptions) -> Result<Runtime, LoadError> {
        let engine = Engine::new(&engine::config(&options))
            .map_err(|e| LoadError::Runtime(e.to_string()))?;
        let linker = link::linker(&engine).map_err(|e| LoadError::Runtime(e.to_string()))?;
        let module_linker =
            link::module_linker(&engine).map_err(|e| LoadError::Runtime(e.to_string()))?;
        let ticker = EpochTicker::start(&engine)
            .map_err(|e| LoadError::Runtime(format!("cannot start the epoch thread: {e}")))?;
        let cache = CompileCache::new(&engine, options.cache_dir.clone());
        Ok(Runtime {
            loader: Loader::new(linker, module_linker, cache),
            invoker: Invoker::new(engine, options, ticker),
        })
    }

    /// The compile cache.
    pub(crate) fn cache(&self) -> &CompileCache {
        self.loader.cache()
    }

    /// The options the runtime was built with.
    pub fn options(&self) -> &RuntimeOptions {
        self.invoker.options()
    }

    /// Compiles (or loads from the cache) and links `bytes`, then asks the
    /// component to describe its tools. A component loaded from the compile
    /// cache takes its descriptors from the cache too, when they are there.
    pub(crate) async fn load(
        &self,
        source: &str,
        bytes: &[u8],
    ) -> Result<(Arc<LoadedComponent>, Vec<Descriptor>), LoadError> {
        self.loader.load(&self.invoker, source, bytes, true).await
    }

    /// As [`Runtime::load`], but always runs `describe` (the conformance
    /// checks judge the component's own answer, not a cached one).
    pub(crate) async fn load_and_describe(
        &self,
        source: &str,
        bytes: &[u8],
    ) -> Result<(Arc<LoadedComponent>, Vec<Descriptor>), LoadError> {
        self.loader.load(&self.invoker, source, bytes, false).await
    }

    /// Compiles (or loads from the cache) and links a `toolhost exec`
    /// program: a command component (exports `wasi:cli/run`) or a WASI
    /// preview 1 command module (exports `_start`).
    #[cfg(feature = "exec")]
    pub(crate) fn link_program(&self, source: &str, bytes: &[u8]) -> Result<Program, LoadError> {
        self.loader.link_program(source, bytes)
    }

    /// As [`Runtime::link_program`] for a program-backed tool: a preview 1
    /// reactor exporting `run` is accepted too.
    pub(crate) fn link_tool_program(
        &self,
        source: &str,
        bytes: &[u8],
    ) -> Result<Program, LoadError> {
        self.loader.link_tool_program(source, bytes)
    }

    /// A fresh store built by `builder`.
    pub(crate) fn store(&self, builder: &StoreBuilder<'_>) -> Result<Run, (ErrorCode, String)> {
        self.invoker.store(builder)
    }

    /// What runs bodies (for a program tool's, see
    /// [`Invoker::on_own_thread`]).
    pub(crate) fn invoker(&self) -> &Invoker {
        &self.invoker
    }

    /// Runs the body of `tool` once, in a fresh store built for `spec`.
    /// Only the pipeline calls this, after every check has passed.
    ///
    /// A body with file system access runs on a thread of its own; one
    /// stuck there in a host system call is abandoned [`STUCK_GRACE`] after
    /// its deadline or cancellation, and while abandoned bodies hold half
    /// the pool ([`Runtime::abandon_limit`]) calls with file system access
    /// are refused `SANDBOX_UNAVAILABLE` (the whole rule is on the
    /// `invoke` module's `Invoker::invoke`).
    pub(crate) async fn invoke(
        self: &Arc<Self>,
        component: &Arc<LoadedComponent>,
        tool: &str,
        args_json: &str,
        spec: &SandboxSpec,
        watch: Watch,
    ) -> (BodyOutcome, Receipt) {
        let body = Body {
            pre: &component.pre,
            needs: component.needs.as_ref(),
            tool,
            args_json,
            spec,
        };
        self.invoker.invoke(body, watch).await
    }

    /// Bodies abandoned in a host system call (after their deadline, their
    /// cancellation or their call being dropped, see [`STUCK_GRACE`]) whose
    /// threads have not returned yet.
    pub fn abandoned_bodies(&self) -> usize {
        self.invoker.abandoned()
    }

    /// How many abandoned bodies make the runtime refuse calls with file
    /// system access (`SANDBOX_UNAVAILABLE`): half the pool, at least one.
    pub fn abandon_limit(&self) -> usize {
        self.invoker.abandon_limit()
    }

    /// Why a body with file system access would be refused now, if it
    /// would (see [`Runtime::abandon_limit`]).
    pub(crate) fn refuses_file_access(&self) -> Option<String> {
        self.invoker.refuses_file_access()
    }

    /// What the compile cache did so far (compiles, hits, corrupt entries).
    pub fn cache_stats(&self) -> &crate::sandbox::cache::CacheStats {
        self.cache().stats()
    }

    /// The compile cache's directory, resolved, once it has been checked
    /// and found private; `None` when there is none or it is not used (a
    /// warning said why): then every load compiles.
    pub fn cache_dir(&self) -> Option<&std::path::Path> {
        self.cache().dir()
    }

    /// Loads a component as a host build does: what the benchmarks time as
    /// "load". Only with the `bench-internals` feature.
    #[cfg(feature = "bench-internals")]
    #[doc(hidden)]
    pub async fn bench_load(
        &self,
        source: &str,
        bytes: &[u8],
    ) -> Result<Arc<LoadedComponent>, LoadError> {
        self.load(source, bytes)
            .await
            .map(|(component, _)| component)
    }

    /// Builds a fresh store and instantiates `component` in it, without
    /// calling anything: what the benchmarks time as "instantiation". Only
    /// with the `bench-internals` feature.
    #[cfg(feature = "bench-internals")]
    #[doc(hidden)]
    pub async fn bench_instantiate(&self, component: &LoadedComponent) -> Result<(), String> {
        let spec = SandboxSpec {
            mode: SandboxMode::None,
            workspace: PathBuf::from("/"),
            limits: Limits::default(),
            network: crate::egress::NetworkGrant::none(),
        };
        let mut run = self.store(&StoreBuilder::new(&spec)).map_err(|(_, m)| m)?;
        component
            .pre
            .instantiate_async(&mut run.store)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Runs the body of `tool` as the pipeline's invoke does, but outside the
    /// pipeline, in mode `none` (no file system, no network) with default
    /// limits: what the benchmarks time as "the body alone". No host that
    /// runs calls has a reason to call it: only with the `bench-internals`
    /// feature.
    #[cfg(feature = "bench-internals")]
    #[doc(hidden)]
    pub async fn bench_invoke(
        &self,
        component: &LoadedComponent,
        tool: &str,
        args_json: &str,
    ) -> (BodyOutcome, Receipt) {
        let spec = SandboxSpec {
            mode: SandboxMode::None,
            workspace: PathBuf::from("/"),
            limits: Limits::default(),
            network: crate::egress::NetworkGrant::none(),
        };
        let body = Body {
            pre: &component.pre,
            needs: component.needs.as_ref(),
            tool,
            args_json,
            spec: &spec,
        };
        self.invoker
            .invoke(
                body,
                Watch {
                    interrupt: crate::sandbox::state::Interrupt::default(),
                    progress: None,
                    on_abandon: None,
                    witness: NetWitness::default(),
                },
            )
            .await
    }
}
