//! Loading a program for `toolhost exec`: a WASI command component (it
//! exports `wasi:cli/run`) or a WASI preview 1 command module (it exports
//! `_start`), compiled through the compile cache and linked against the
//! sets `sandbox::link` decides; and saying why a program cannot run: a
//! reactor or a wrong world (a program that needs WebAssembly proposals
//! this runtime does not enable is named by `load::compile_error`).
//!
//! Loading runs no guest code and decides nothing about what a run may
//! reach: that is the sandbox spec's, in the store of the run.

use crate::sandbox::cache::Cached;
use crate::sandbox::load::{LoadError, Loader, compile_error};
use crate::sandbox::store::{CallState, Footprint};
use wasmtime::{ExternType, InstancePre, Module, TypedFunc, UnknownImportError};
use wasmtime_wasi::p2::bindings::CommandPre;

/// The export a WASI command module is started by.
pub(crate) const START: &str = "_start";
/// The export a WASI reactor module is initialised by.
const INITIALIZE: &str = "_initialize";
/// The export a reactor that can be run as a program-backed tool is run
/// by, after `_initialize`: no parameters, the exit status as its result.
const RUN: &str = "run";

/// A program linked and ready to instantiate.
pub(crate) enum Program {
    /// A command component: `wasi:cli/run`.
    Component {
        pre: CommandPre<CallState>,
        needs: Option<Footprint>,
    },
    /// A preview 1 command module: `_start`.
    Module {
        pre: InstancePre<CallState>,
        needs: Option<Footprint>,
    },
    /// A preview 1 reactor with a `run` export (program-backed tools
    /// only): `_initialize`, then `run`, whose result is the exit status.
    Reactor {
        pre: InstancePre<CallState>,
        needs: Option<Footprint>,
    },
}

impl Program {
    /// Instantiates the program in `store` and runs it to its end: its exit
    /// status (0 for a normal end; a component's `exit(err)` is 1). An
    /// explicit exit (`proc_exit`, `exit-with-code`, which wasmtime-wasi
    /// raises as an [`wasmtime_wasi::I32Exit`] error) is a normal end with
    /// its status, clamped to 0-255.
    pub(crate) async fn run(&self, store: &mut wasmtime::Store<CallState>) -> wasmtime::Result<u8> {
        match self.run_to_end(store).await {
            Err(e) => match e.downcast_ref::<wasmtime_wasi::I32Exit>() {
                Some(exit) => Ok(u8::try_from(exit.0).unwrap_or(u8::MAX)),
                None => Err(e),
            },
            ended => ended,
        }
    }

    async fn run_to_end(&self, store: &mut wasmtime::Store<CallState>) -> wasmtime::Result<u8> {
        match self {
            Program::Component { pre, needs } => {
                store.data().admit(needs.as_ref())?;
                let command = pre.instantiate_async(&mut *store).await?;
                match command.wasi_cli_run().call_run(&mut *store).await? {
                    Ok(()) => Ok(0),
                    Err(()) => Ok(1),
                }
            }
            Program::Module { pre, needs } => {
                store.data().admit(needs.as_ref())?;
                let instance = pre.instantiate_async(&mut *store).await?;
                let start: TypedFunc<(), ()> = instance.get_typed_func(&mut *store, START)?;
                start.call_async(&mut *store, ()).await?;
                Ok(0)
            }
            Program::Reactor { pre, needs } => {
                store.data().admit(needs.as_ref())?;
                let instance = pre.instantiate_async(&mut *store).await?;
                // Checked at load: absent, or `() -> ()`.
                if let Ok(init) = instance.get_typed_func::<(), ()>(&mut *store, INITIALIZE) {
                    init.call_async(&mut *store, ()).await?;
                }
                let run: TypedFunc<(), i32> = instance.get_typed_func(&mut *store, RUN)?;
                let status = run.call_async(&mut *store, ()).await?;
                Ok(u8::try_from(status).unwrap_or(u8::MAX))
            }
        }
    }
}

impl Loader {
    /// Compiles (or loads from the cache) and links the program `bytes`, a
    /// command component or a preview 1 command module.
    #[cfg_attr(
        not(feature = "exec"),
        allow(dead_code, reason = "only `toolhost exec` runs command programs alone")
    )]
    pub(crate) fn link_program(&self, source: &str, bytes: &[u8]) -> Result<Program, LoadError> {
        self.link_any_program(source, bytes, false)
    }

    /// [`Loader::link_program`] for a program-backed tool: a preview 1
    /// reactor that exports `run` (`() -> i32`) is accepted too.
    pub(crate) fn link_tool_program(
        &self,
        source: &str,
        bytes: &[u8],
    ) -> Result<Program, LoadError> {
        self.link_any_program(source, bytes, true)
    }

    fn link_any_program(
        &self,
        source: &str,
        bytes: &[u8],
        reactors: bool,
    ) -> Result<Program, LoadError> {
        if !bytes.starts_with(b"\0asm") {
            return Err(LoadError::NotWasm(source.to_string()));
        }
        if wasmparser::Parser::is_core_wasm(bytes) {
            return self.link_module(source, bytes, reactors);
        }
        if !wasmparser::Parser::is_component(bytes) {
            return Err(LoadError::NotWasm(source.to_string()));
        }
        let not_command = |file, detail| LoadError::NotCommand { file, detail };
        let linked = self.link_component(source, bytes, not_command)?;
        let pre = CommandPre::new(linked.pre).map_err(|e| LoadError::NotCommand {
            file: source.to_string(),
            detail: format!("it does not export wasi:cli/run ({e:#})"),
        })?;
        Ok(Program::Component {
            pre,
            needs: linked.needs,
        })
    }

    /// [`Loader::link_program`] for a core module.
    fn link_module(
        &self,
        source: &str,
        bytes: &[u8],
        reactors: bool,
    ) -> Result<Program, LoadError> {
        let engine = self.module_linker().engine();
        let cached: Cached<Module> = self
            .cache()
            .load_hashed(engine, bytes)
            .map_err(|e| compile_error(source, "module", bytes, &e))?;
        let module = cached.compiled;
        let not_command = |detail: String| LoadError::NotCommand {
            file: source.to_string(),
            detail,
        };
        let mut reactor = false;
        match module.get_export(START) {
            Some(ty) if without_params_or_results(&ty) => {}
            None if reactors && module.get_export(RUN).is_some() => {
                match module.get_export(RUN) {
                    Some(ExternType::Func(f))
                        if f.params().len() == 0
                            && f.results().len() == 1
                            && f.results().all(|r| matches!(r, wasmtime::ValType::I32)) => {}
                    _ => {
                        return Err(not_command(format!(
                            "its `{RUN}` export is not a function `() -> i32`"
                        )));
                    }
                }
                // A reactor's initialiser must run before `run`: one that
                // cannot be called as such is refused, never skipped.
                if module
                    .get_export(INITIALIZE)
                    .is_some_and(|ty| !without_params_or_results(&ty))
                {
                    return Err(not_command(format!(
                        "its `{INITIALIZE}` export is not a function without parameters and results"
                    )));
                }
                reactor = true;
            }
            Some(_) => {
                return Err(not_command(format!(
                    "its `{START}` export is not a function without parameters and results"
                )));
            }
            None if module.get_export(INITIALIZE).is_some() => {
                return Err(LoadError::Reactor(source.to_string()));
            }
            None => {
                return Err(not_command(format!(
                    "it is a core module without a `{START}` export"
                )));
            }
        }
        let pre = self
            .module_linker()
            .instantiate_pre(&module)
            .map_err(|e| not_command(link_error(&e)))?;
        let resources = module.resources_required();
        let needs = Some(Footprint {
            instances: 1,
            memories: resources.num_memories as usize,
            tables: resources.num_tables as usize,
        });
        if reactor {
            Ok(Program::Reactor { pre, needs })
        } else {
            Ok(Program::Module { pre, needs })
        }
    }
}

/// Whether an export is a function without parameters and results (what
/// `_start` and `_initialize` must be).
fn without_params_or_results(ty: &ExternType) -> bool {
    matches!(ty, ExternType::Func(f) if f.params().len() == 0 && f.results().len() == 0)
}

/// Why linking a core module failed, in the terms of WASI preview 1.
fn link_error(e: &wasmtime::Error) -> String {
    let Some(import) = e.downcast_ref::<UnknownImportError>() else {
        return format!("{e:#}");
    };
    let (module, name) = (import.module(), import.name());
    let hint = match module {
        "wasi_unstable" => {
            " (WASI preview 0, which this host does not link: rebuild for wasm32-wasip1)"
        }
        "wasi" if name == "thread-spawn" => " (wasi-threads, which this host does not link)",
        "wasi_snapshot_preview1" => " (not a WASI preview 1 function)",
        _ => "",
    };
    format!(
        "it imports `{module}::{name}`{hint}; a preview 1 program may import only wasi_snapshot_preview1"
    )
}
