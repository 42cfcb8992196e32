//! Loading a component: check that the bytes are a component, compile them
//! through the compile cache, link them against the host's interfaces (the
//! world check), count what instantiating them creates, and ask a tool
//! component to describe its tools.
//!
//! Loading decides nothing about calls. The only guest code it runs is
//! `describe`, in a store of mode `none` under [`DESCRIBE_DEADLINE`]. It
//! never writes a descriptor the component did not return and validate.

use crate::sandbox::bindings::ToolProviderPre;
use crate::sandbox::cache::{Cached, CompileCache};
use crate::sandbox::engine::PROPOSALS_OFF;
use crate::sandbox::invoke::{Invoker, race};
use crate::sandbox::spec::{Limits, SandboxSpec};
use crate::sandbox::store::{CallState, Footprint, StoreBuilder};
use crate::sandbox::world::wrong_world_detail;
use crate::tools::descriptor::Descriptor;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use toolhost_core::SandboxMode;
use wasmparser::{Validator, WasmFeatures};
use wasmtime::component::{Component, InstancePre, Linker};

/// How long `describe` may run when a component is loaded.
pub const DESCRIBE_DEADLINE: Duration = Duration::from_secs(5);

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
    /// The component (or core module) failed to compile or validate.
    #[error("{file} is not a valid {kind}: {detail}")]
    Invalid {
        /// The file.
        file: String,
        /// `component` or `module`.
        kind: &'static str,
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
    /// A program given to `toolhost exec` is not a WASI command: a
    /// component without `wasi:cli/run`, or that imports what the host does
    /// not provide; a core module without `_start`, or that imports more
    /// than `wasi_snapshot_preview1`.
    #[error("{file} is not a WASI command program: {detail}")]
    NotCommand {
        /// The file.
        file: String,
        /// Why.
        detail: String,
    },
    /// A core module given to `toolhost exec` is a WASI reactor: it exports
    /// `_initialize` and no `_start`.
    #[error(
        "{0} is a WASI reactor (it exports `_initialize` but no `_start`): a library for a host to call, not a program to run; build it as a command (a binary with `main`)"
    )]
    Reactor(String),
    /// The module or component needs WebAssembly proposals this runtime
    /// does not enable.
    #[error("{file} needs {proposals}, which this runtime (wasmtime 48) does not support")]
    Unsupported {
        /// The file.
        file: String,
        /// The proposals it needs that are off, by name, joined with "and".
        proposals: String,
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

/// The largest WebAssembly file the host reads (512 MiB): five times
/// CPython compiled to WASI. A larger file is refused before it is read.
pub const MAX_WASM_FILE_BYTES: u64 = 512 << 20;

/// Why a WebAssembly file was not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WasmFileError {
    /// The file could not be opened or read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The path names a directory, a device, a pipe or a socket.
    #[error("not a regular file")]
    NotAFile,
    /// The file is larger than [`MAX_WASM_FILE_BYTES`].
    #[error("larger than {MAX_WASM_FILE_BYTES} bytes, the most the host reads")]
    TooLarge,
}

/// Reads the component or module at `path`: a regular file (a link to one
/// is followed) of at most [`MAX_WASM_FILE_BYTES`]. A device, a pipe or a
/// file that is too large (or grows past the limit while it is read) is
/// refused, never read without end.
///
/// # Errors
///
/// Why the file was not read.
pub fn read_wasm_file(path: &std::path::Path) -> Result<Vec<u8>, WasmFileError> {
    use std::io::Read;
    // Opened without waiting: opening a named pipe for reading would wait for
    // a writer. The handle's own type is checked, not the path's (which could
    // be swapped in between); reads of a regular file never wait anyway.
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
    }
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(WasmFileError::NotAFile);
    }
    if meta.len() > MAX_WASM_FILE_BYTES {
        return Err(WasmFileError::TooLarge);
    }
    // The size is known: one allocation. The limit holds while reading too.
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_WASM_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_WASM_FILE_BYTES {
        return Err(WasmFileError::TooLarge);
    }
    Ok(bytes)
}

/// A component compiled and linked, ready to instantiate per call.
pub struct LoadedComponent {
    /// Where it came from (a path or `embedded:NAME`).
    pub source: String,
    /// SHA-256 of the component bytes (hex).
    pub sha256: String,
    pub(crate) pre: ToolProviderPre<CallState>,
    /// What instantiating it creates, when that could be counted.
    pub(crate) needs: Option<Footprint>,
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

/// A component compiled and linked against the host's interfaces, before
/// anyone looked for its exports.
pub(crate) struct Linked {
    /// The compiled component, its hash and whether the cache had it.
    pub cached: Cached,
    /// The component linked against the host's interfaces.
    pub pre: InstancePre<CallState>,
    /// What instantiating it creates, when that could be counted.
    pub needs: Option<Footprint>,
}

/// The linkers and the compile cache of one runtime.
pub(crate) struct Loader {
    linker: Linker<CallState>,
    module_linker: wasmtime::Linker<CallState>,
    cache: CompileCache,
}

impl Loader {
    pub(crate) fn new(
        linker: Linker<CallState>,
        module_linker: wasmtime::Linker<CallState>,
        cache: CompileCache,
    ) -> Loader {
        Loader {
            linker,
            module_linker,
            cache,
        }
    }

    /// The core module linker (WASI preview 1 programs).
    pub(crate) fn module_linker(&self) -> &wasmtime::Linker<CallState> {
        &self.module_linker
    }

    /// The compile cache.
    pub(crate) fn cache(&self) -> &CompileCache {
        &self.cache
    }

    /// Checks that `bytes` are a component, compiles it (or loads it from
    /// the cache) and links it against the host's imports. Tools and
    /// command programs (`toolhost exec`) share this step; each then looks
    /// for its own exports.
    pub(crate) fn link(&self, source: &str, bytes: &[u8]) -> Result<Linked, LoadError> {
        if !bytes.starts_with(b"\0asm") {
            return Err(LoadError::NotWasm(source.to_string()));
        }
        if wasmparser::Parser::is_core_wasm(bytes) {
            return Err(LoadError::CoreModule(source.to_string()));
        }
        if !wasmparser::Parser::is_component(bytes) {
            return Err(LoadError::NotWasm(source.to_string()));
        }
        self.link_component_as(source, bytes, |file, detail, component| {
            LoadError::WrongWorld {
                file,
                detail: wrong_world_detail(&detail, component, self.linker.engine(), bytes),
            }
        })
    }

    /// Compiles (or loads from the cache) and links the component `bytes`;
    /// an import the host does not provide is `wrong_world(file, detail)`.
    pub(crate) fn link_component(
        &self,
        source: &str,
        bytes: &[u8],
        wrong_world: impl Fn(String, String) -> LoadError,
    ) -> Result<Linked, LoadError> {
        self.link_component_as(source, bytes, |file, detail, _| wrong_world(file, detail))
    }

    /// [`Loader::link_component`], whose `wrong_world` also gets the
    /// compiled component (to say what it exports).
    fn link_component_as(
        &self,
        source: &str,
        bytes: &[u8],
        wrong_world: impl Fn(String, String, &Component) -> LoadError,
    ) -> Result<Linked, LoadError> {
        let cached = self
            .cache
            .load_hashed(self.linker.engine(), bytes)
            .map_err(|e| compile_error(source, "component", bytes, &e))?;
        let pre = self
            .linker
            .instantiate_pre(&cached.compiled)
            .map_err(|e| wrong_world(source.to_string(), format!("{e:#}"), &cached.compiled))?;
        let needs = footprint(&cached.compiled, bytes);
        Ok(Linked { cached, pre, needs })
    }

    /// Compiles (or loads from the cache) and links `bytes` as a tool
    /// component, then asks it to describe its tools. With
    /// `cached_descriptors`, a component loaded from the compile cache
    /// takes its descriptors from the cache too, when they are there.
    pub(crate) async fn load(
        &self,
        invoker: &Invoker,
        source: &str,
        bytes: &[u8],
        cached_descriptors: bool,
    ) -> Result<(Arc<LoadedComponent>, Vec<Descriptor>), LoadError> {
        let Linked {
            cached:
                Cached {
                    compiled: component,
                    sha256,
                    hit,
                },
            pre,
            needs,
        } = self.link(source, bytes)?;
        let imports = component
            .component_type()
            .imports(self.linker.engine())
            .map(|(name, _)| name.to_string())
            .collect();
        let pre = ToolProviderPre::new(pre).map_err(|e| LoadError::WrongWorld {
            file: source.to_string(),
            detail: wrong_world_detail(&format!("{e:#}"), &component, self.linker.engine(), bytes),
        })?;
        let loaded = Arc::new(LoadedComponent {
            source: source.to_string(),
            sha256,
            pre,
            needs,
            imports,
        });
        if hit
            && cached_descriptors
            && let Some(descriptors) = self.cache.read_descriptors(&loaded.sha256)
        {
            return Ok((loaded, descriptors));
        }
        let descriptors = describe(invoker, &loaded).await?;
        self.cache.write_descriptors(&loaded.sha256, &descriptors);
        Ok((loaded, descriptors))
    }
}

/// Runs the component's `describe` in a fresh store (mode `none`,
/// [`DESCRIBE_DEADLINE`]) and validates every descriptor it returns.
async fn describe(
    invoker: &Invoker,
    component: &LoadedComponent,
) -> Result<Vec<Descriptor>, LoadError> {
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
        network: Default::default(),
    };
    let mut run = invoker
        .store(&StoreBuilder::new(&spec))
        .map_err(|(_, m)| err(m))?;
    let (deadline, interrupt) = run.deadline();
    let store = &mut run.store;
    let raced = race(
        async {
            store.data().admit(component.needs.as_ref())?;
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
    let raw = match run.finish(raced) {
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

/// What instantiating `component` (compiled from `bytes`) creates, counted
/// as wasmtime counts it against a store's limits, or `None` when that
/// cannot be counted from the binary.
fn footprint(component: &Component, bytes: &[u8]) -> Option<Footprint> {
    let resources = component.resources_required()?;
    Some(Footprint {
        instances: core_instances(bytes)?,
        memories: usize::try_from(resources.num_memories).ok()?,
        tables: usize::try_from(resources.num_tables).ok()?,
    })
}

/// A component being read by [`core_instances`].
struct Frame {
    /// Core instances instantiating it creates (`None`: not known).
    count: Option<usize>,
    /// The same for each component of its component index space.
    components: Vec<Option<usize>>,
}

impl Frame {
    fn new() -> Frame {
        Frame {
            count: Some(0),
            components: Vec::new(),
        }
    }

    fn add(&mut self, n: Option<usize>) {
        self.count = self.count.zip(n).and_then(|(a, b)| a.checked_add(b));
    }

    fn component(&self, index: u32) -> Option<usize> {
        self.components
            .get(usize::try_from(index).ok()?)
            .copied()
            .flatten()
    }
}

/// How many core instances instantiating the component `bytes` creates, at
/// least: one per core `instantiate` (an instance made of exports is not
/// one), in the component and in each nested component as often as it is
/// instantiated. wasmtime counts one per core module it instantiates; that
/// is exactly this number unless the component lowers a function that one
/// of its own components lifts, for which wasmtime instantiates adapter
/// modules of its own. `None` when a component it instantiates is not
/// defined in the binary (imported, or an export of an instance), or the
/// bytes do not parse.
fn core_instances(bytes: &[u8]) -> Option<usize> {
    use wasmparser::{
        Chunk, ComponentAlias, ComponentExternalKind, ComponentInstance, ComponentOuterAliasKind,
        ComponentTypeRef, Instance, Parser, Payload,
    };
    // The enclosing components of the one being read, innermost last.
    let mut outer: Vec<(Parser, Frame)> = Vec::new();
    let mut parser = Parser::new(0);
    let mut frame = Frame::new();
    let mut data = bytes;
    loop {
        let payload = match parser.parse(data, true).ok()? {
            Chunk::Parsed { consumed, payload } => {
                data = data.get(consumed..)?;
                payload
            }
            Chunk::NeedMoreData(_) => return None,
        };
        match payload {
            // A nested module's sections follow its header: skip them, so
            // that the parser resumes after the module.
            Payload::ModuleSection {
                unchecked_range, ..
            } => data = data.get(unchecked_range.len()..)?,
            // A nested component's sections are read by its own parser.
            Payload::ComponentSection { parser: nested, .. } => {
                outer.push((
                    std::mem::replace(&mut parser, nested),
                    std::mem::replace(&mut frame, Frame::new()),
                ));
            }
            Payload::InstanceSection(reader) => {
                for instance in reader {
                    if let Instance::Instantiate { .. } = instance.ok()? {
                        frame.add(Some(1));
                    }
                }
            }
            Payload::ComponentInstanceSection(reader) => {
                for instance in reader {
                    if let ComponentInstance::Instantiate {
                        component_index, ..
                    } = instance.ok()?
                    {
                        frame.add(frame.component(component_index));
                    }
                }
            }
            Payload::ComponentImportSection(reader) => {
                for import in reader {
                    if let ComponentTypeRef::Component(_) = import.ok()?.ty {
                        frame.components.push(None);
                    }
                }
            }
            Payload::ComponentExportSection(reader) => {
                for export in reader {
                    let export = export.ok()?;
                    if export.kind == ComponentExternalKind::Component {
                        frame.components.push(frame.component(export.index));
                    }
                }
            }
            Payload::ComponentAliasSection(reader) => {
                for alias in reader {
                    match alias.ok()? {
                        ComponentAlias::InstanceExport {
                            kind: ComponentExternalKind::Component,
                            ..
                        } => frame.components.push(None),
                        ComponentAlias::Outer {
                            kind: ComponentOuterAliasKind::Component,
                            count,
                            index,
                        } => {
                            let count = usize::try_from(count).ok()?;
                            let n = match count {
                                0 => frame.component(index),
                                _ => outer
                                    .len()
                                    .checked_sub(count)
                                    .and_then(|i| outer.get(i))
                                    .and_then(|(_, f)| f.component(index)),
                            };
                            frame.components.push(n);
                        }
                        _ => {}
                    }
                }
            }
            Payload::End(_) => match outer.pop() {
                Some((p, f)) => {
                    let nested = std::mem::replace(&mut frame, f).count;
                    parser = p;
                    frame.components.push(nested);
                }
                None => return frame.count,
            },
            _ => {}
        }
    }
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

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
