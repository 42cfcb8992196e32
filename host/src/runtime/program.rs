//! Loading a program for `toolhost exec`: a WASI command component (it
//! exports `wasi:cli/run`) or a WASI preview 1 command module (it exports
//! `_start`), compiled through the compile cache and linked against the
//! sets `runtime::link` decides; and saying why a program cannot run: a
//! reactor, a wrong world, or WebAssembly proposals this runtime does not
//! enable.
//!
//! Loading runs no guest code and decides nothing about what a run may
//! reach: that is the sandbox spec's, in the store of the run.

#![cfg_attr(
    not(feature = "cli"),
    allow(dead_code, reason = "only `toolhost exec` runs programs")
)]

use crate::cache::Cached;
use crate::runtime::engine::PROPOSALS_OFF;
use crate::runtime::load::{LoadError, Loader};
use crate::runtime::store::{CallState, Footprint};
use wasmparser::{Validator, WasmFeatures};
use wasmtime::{ExternType, InstancePre, Module, UnknownImportError};
use wasmtime_wasi::p2::bindings::CommandPre;

/// The export a WASI command module is started by.
pub(crate) const START: &str = "_start";
/// The export a WASI reactor module is initialised by.
const INITIALIZE: &str = "_initialize";

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
}

impl Loader {
    /// Compiles (or loads from the cache) and links the program `bytes`, a
    /// command component or a preview 1 command module.
    pub(crate) fn link_program(&self, source: &str, bytes: &[u8]) -> Result<Program, LoadError> {
        if !bytes.starts_with(b"\0asm") {
            return Err(LoadError::NotWasm(source.to_string()));
        }
        if wasmparser::Parser::is_core_wasm(bytes) {
            return self.link_module(source, bytes);
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
    fn link_module(&self, source: &str, bytes: &[u8]) -> Result<Program, LoadError> {
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
        match module.get_export(START) {
            Some(ExternType::Func(f)) if f.params().len() == 0 && f.results().len() == 0 => {}
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
        Ok(Program::Module { pre, needs })
    }
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

/// The error of a component or module (`kind`) that did not compile:
/// [`LoadError::Unsupported`] naming the proposals it needs that this
/// runtime does not enable, else [`LoadError::Invalid`] with wasmtime's
/// reason.
pub(crate) fn compile_error(
    source: &str,
    kind: &'static str,
    bytes: &[u8],
    e: &wasmtime::Error,
) -> LoadError {
    let needed = proposals_needed(bytes);
    if needed.is_empty() {
        return LoadError::Invalid {
            file: source.to_string(),
            kind,
            detail: format!("{e:#}"),
        };
    }
    LoadError::Unsupported {
        file: source.to_string(),
        proposals: needed.join(" and "),
    }
}

/// The proposals of [`PROPOSALS_OFF`] that `bytes` needs: those without
/// which it does not validate while it validates with every proposal on.
/// Empty when it validates without any of them, or not even with all.
pub(crate) fn proposals_needed(bytes: &[u8]) -> Vec<&'static str> {
    let validates = |features: WasmFeatures| {
        Validator::new_with_features(features)
            .validate_all(bytes)
            .is_ok()
    };
    if !validates(WasmFeatures::all()) {
        return Vec::new();
    }
    PROPOSALS_OFF
        .iter()
        .filter(|(feature, _)| !validates(WasmFeatures::all().difference(*feature)))
        .map(|(_, name)| *name)
        .collect()
}
