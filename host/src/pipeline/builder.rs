//! [`HostBuilder`]: everything a [`Host`] is made of, checked and loaded at
//! once. Loading every component, checking names and scopes, opening (and
//! recovering) the session log and refusing a state directory inside the
//! workspace happen here; nothing is half-applied.

use super::gate::Gate;
use super::rate::RateLimiter;
use super::{Host, HostError};
use crate::approval::{Approver, NoApprover};
use crate::egress::{Egress, SharedResolver};
use crate::hooks::{Observer, PostExecuteHook};
use crate::pipeline::record::Recorder;
use crate::sandbox::spec::Limits;
use crate::sandbox::{LoadError, Runtime, RuntimeOptions};
use crate::tools::registry::{RegisteredTool, Registry, RegistryError, ScopeSpec};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use toolhost_log::SessionLog;
use toolhost_policy::{Guard, Guards, Policy};

enum Source {
    Path(PathBuf),
    Bytes(String, Vec<u8>),
    /// A program-backed tool's manifest (`NAME.tool.toml`).
    Manifest(PathBuf),
}

/// Builds a [`Host`]. Defaults deny everything they can:
///
/// | setting | default |
/// |---|---|
/// | tools | none |
/// | policy | [`Policy::default`]: mode `read-only`, allow, approval ask |
/// | approver | none (every `ask` ends `APPROVAL_UNAVAILABLE`) |
/// | session log | in memory (not durable) |
/// | workspace | the current directory |
/// | limits | [`Limits::default`] |
pub struct HostBuilder {
    sources: Vec<(Option<String>, Source)>,
    scopes: Vec<(String, ScopeSpec)>,
    policy: Policy,
    guards: Vec<Box<dyn Guard>>,
    approver: Box<dyn Approver>,
    post_hooks: Vec<Box<dyn PostExecuteHook>>,
    args_hooks: Vec<Box<dyn crate::hooks::ArgsHook>>,
    observers: Vec<Box<dyn Observer>>,
    observer_queue: usize,
    announcer: Option<crate::approval::announce::Announcer>,
    log: Option<Arc<SessionLog>>,
    state_dir: Option<PathBuf>,
    workspace: Option<PathBuf>,
    limits: Limits,
    runtime: Option<Arc<Runtime>>,
    runtime_options: RuntimeOptions,
    gate: Option<Arc<Gate>>,
    resolver: Option<SharedResolver>,
    rate: Option<Arc<RateLimiter>>,
    /// Set by the first successful or failed `build`: the configuration
    /// has been moved out, and a second build would silently lose it.
    built: bool,
}

impl Default for HostBuilder {
    fn default() -> Self {
        HostBuilder::new()
    }
}

impl HostBuilder {
    /// A builder with the defaults above.
    pub fn new() -> Self {
        HostBuilder {
            sources: Vec::new(),
            scopes: Vec::new(),
            policy: Policy::default(),
            guards: Vec::new(),
            approver: Box::new(NoApprover),
            post_hooks: Vec::new(),
            args_hooks: Vec::new(),
            observers: Vec::new(),
            observer_queue: crate::pipeline::audit::DEFAULT_OBSERVER_QUEUE,
            announcer: None,
            log: None,
            state_dir: None,
            workspace: None,
            limits: Limits::default(),
            runtime: None,
            runtime_options: RuntimeOptions::default(),
            gate: None,
            resolver: None,
            rate: None,
            built: false,
        }
    }

    /// Loads the tools of a component file (global scope).
    pub fn tool_file(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.sources.push((None, Source::Path(path.into())));
        self
    }

    /// Loads a program-backed tool from its manifest, `NAME.tool.toml`
    /// (global scope). The program is compiled through the compile cache.
    pub fn program_tool_file(&mut self, manifest: impl Into<PathBuf>) -> &mut Self {
        self.sources.push((None, Source::Manifest(manifest.into())));
        self
    }

    /// Loads the tools of a component given as bytes (global scope).
    pub fn tool_bytes(&mut self, name: impl Into<String>, bytes: Vec<u8>) -> &mut Self {
        self.sources.push((None, Source::Bytes(name.into(), bytes)));
        self
    }

    /// Loads the example tools embedded in this binary.
    pub fn embedded_tools(&mut self) -> &mut Self {
        for (name, bytes) in crate::tools::embedded::EMBEDDED_TOOLS {
            self.sources.push((
                None,
                Source::Bytes(format!("embedded:{name}"), bytes.to_vec()),
            ));
        }
        self
    }

    /// Declares a scope (parents before children).
    pub fn scope(&mut self, name: impl Into<String>, spec: ScopeSpec) -> &mut Self {
        self.scopes.push((name.into(), spec));
        self
    }

    /// Loads a component file whose tools belong to `scope` only.
    pub fn scoped_tool_file(
        &mut self,
        scope: impl Into<String>,
        path: impl Into<PathBuf>,
    ) -> &mut Self {
        self.sources
            .push((Some(scope.into()), Source::Path(path.into())));
        self
    }

    /// Sets the policy.
    pub fn policy(&mut self, policy: Policy) -> &mut Self {
        self.policy = policy;
        self
    }

    /// Adds a custom guard (after the policy file's guards).
    pub fn guard(&mut self, guard: Box<dyn Guard>) -> &mut Self {
        self.guards.push(guard);
        self
    }

    /// Sets the approver.
    pub fn approver(&mut self, approver: Box<dyn Approver>) -> &mut Self {
        self.approver = approver;
        self
    }

    /// Adds a post-execute hook (after the policy file's rules).
    pub fn post_execute(&mut self, hook: Box<dyn PostExecuteHook>) -> &mut Self {
        self.post_hooks.push(hook);
        self
    }

    /// Adds an argument hook (after the policy's `[[patches]]`).
    pub fn args_hook(&mut self, hook: Box<dyn crate::hooks::ArgsHook>) -> &mut Self {
        self.args_hooks.push(hook);
        self
    }

    /// Adds an observer: it gets every call's after-call record on its own
    /// thread (see [`Observer`]).
    pub fn observer(&mut self, observer: Box<dyn Observer>) -> &mut Self {
        self.observers.push(observer);
        self
    }

    /// How many after-call records each observer's queue holds (default
    /// [`DEFAULT_OBSERVER_QUEUE`](crate::runtime::DEFAULT_OBSERVER_QUEUE); at least
    /// one). Records that find it full are dropped and counted.
    pub fn observer_queue(&mut self, records: usize) -> &mut Self {
        self.observer_queue = records;
        self
    }

    /// Uses a durable session log in `dir` (a redb file and its intent journal).
    /// Without a state directory or a [`session_log`](Self::session_log), the log is
    /// kept in memory ([`SessionLog::in_memory`]): nothing survives the process, and the
    /// oldest finished calls are forgotten past about 64 MiB of events.
    pub fn state_dir(&mut self, dir: impl Into<PathBuf>) -> &mut Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// Uses an already open session log.
    pub fn session_log(&mut self, log: Arc<SessionLog>) -> &mut Self {
        self.log = Some(log);
        self
    }

    /// Sets the workspace.
    pub fn workspace(&mut self, dir: impl Into<PathBuf>) -> &mut Self {
        self.workspace = Some(dir.into());
        self
    }

    /// Sets the limits of every call.
    pub fn limits(&mut self, limits: Limits) -> &mut Self {
        self.limits = limits;
        self
    }

    /// Shares an existing runtime (engine, cache) instead of building one.
    pub fn runtime(&mut self, runtime: Arc<Runtime>) -> &mut Self {
        self.runtime = Some(runtime);
        self
    }

    /// Sets the options of the runtime this builder creates.
    pub fn runtime_options(&mut self, options: RuntimeOptions) -> &mut Self {
        self.runtime_options = options;
        self
    }

    /// Resolves the host names of network requests with `resolver` instead
    /// of the system's (for tests: map names to any address without
    /// touching the machine's files). Every address it returns is still
    /// checked.
    pub fn resolver(&mut self, resolver: SharedResolver) -> &mut Self {
        self.resolver = Some(resolver);
        self
    }

    /// Builds the host as the successor of `previous` (a reload with a new
    /// tool set): it shares `previous`'s runtime (engine and compile cache),
    /// session log and exclusivity gate, so that calls still in flight on
    /// `previous` and calls on the new host record into one log and exclude
    /// each other as calls of one host do.
    pub fn successor_of(&mut self, previous: &Host) -> &mut Self {
        self.runtime = Some(previous.runtime.clone());
        self.log = Some(previous.recorder.log().clone());
        self.gate = Some(previous.gate.clone());
        self.rate = Some(previous.rate.clone());
        self.announcer = Some(previous.announcer.clone());
        self
    }

    /// Loads every component, checks names and scopes, opens the log.
    /// Nothing is half-applied: any error fails the whole build.
    ///
    /// A builder builds once: its configuration (approver, hooks, guards)
    /// moves into the host. A second `build` fails with
    /// [`HostError::AlreadyBuilt`] instead of returning a host that silently
    /// lacks it.
    pub async fn build(&mut self) -> Result<Host, HostError> {
        if std::mem::replace(&mut self.built, true) {
            return Err(HostError::AlreadyBuilt);
        }
        let workspace = self.take_workspace()?;
        let egress = self.load_egress(&workspace)?;
        let runtime = match self.runtime.take() {
            Some(r) => r,
            None => Arc::new(Runtime::new(self.runtime_options.clone())?),
        };
        if let Some(dir) = runtime.cache().configured_dir() {
            check_outside_workspace(
                dir,
                &workspace,
                Inside::Resolved,
                "compile cache",
                "rewrite the code the host runs natively",
                "use --cache (or TOOLHOST_CACHE_DIR) outside the workspace",
            )?;
        }
        let registry = self.load_tools(&runtime, &workspace).await?;
        let log = self.open_log(&workspace)?;
        let mut guards = Guards::from_policy(&self.policy);
        for g in std::mem::take(&mut self.guards) {
            guards.push(g);
        }
        let rate = match self.rate.take() {
            Some(previous) => RateLimiter::successor(&previous, self.policy.rate_limits().clone()),
            None => RateLimiter::new(self.policy.rate_limits().clone()),
        };
        Ok(Host {
            rate,
            runtime,
            registry,
            policy: std::mem::take(&mut self.policy),
            guards,
            approver: std::mem::replace(&mut self.approver, Box::new(NoApprover)),
            post_hooks: std::mem::take(&mut self.post_hooks),
            args_hooks: std::mem::take(&mut self.args_hooks),
            observers: crate::pipeline::audit::Observers::start(
                std::mem::take(&mut self.observers),
                self.observer_queue,
            ),
            announcer: self.announcer.take().unwrap_or_default(),
            recorder: Recorder::new(log),
            workspace,
            limits: self.limits.clone(),
            session: session_id(),
            next_call: AtomicU64::new(1),
            gate: self.gate.take().unwrap_or_default(),
            egress,
        })
    }

    /// The workspace: as set, or the current directory; canonical.
    fn take_workspace(&mut self) -> Result<PathBuf, HostError> {
        let workspace = match self.workspace.take() {
            Some(w) => w,
            None => {
                std::env::current_dir().map_err(|_| HostError::Workspace(PathBuf::from(".")))?
            }
        };
        if !workspace.is_dir() {
            return Err(HostError::Workspace(workspace));
        }
        workspace
            .canonicalize()
            .map_err(|_| HostError::Workspace(workspace.clone()))
    }

    /// The network grants, with their secrets and CA roots read now, so
    /// that a missing one stops the host instead of failing a call later.
    fn load_egress(&mut self, workspace: &Path) -> Result<Option<Arc<Egress>>, HostError> {
        let network = self.policy.network();
        // Neither may be where a tool could write it (a workspace-write
        // call would plant a root or a token) or read it (a read-only
        // call would read the token).
        if let Some(ca) = network.ca_file() {
            check_outside_workspace(
                ca,
                workspace,
                Inside::ByName,
                "network.ca_file",
                "plant a root that every TLS connection would trust",
                "keep it outside the workspace",
            )?;
        }
        for (i, c) in network.credentials().iter().enumerate() {
            if let toolhost_policy::egress::SecretSource::File(file) = c.source() {
                check_outside_workspace(
                    file,
                    workspace,
                    Inside::ByName,
                    &format!("credentials[{i}].value_file"),
                    "read the secret or replace it",
                    "keep it outside the workspace",
                )?;
            }
        }
        // Built when `[network]` or a rule grants anything (the rules' grants
        // are the calls' own, under `[network]`'s limits, or the defaults).
        let rules: Vec<_> = self.policy.rule_grants().collect();
        Ok(if network.is_enabled() || !rules.is_empty() {
            let egress =
                Egress::load(network, &rules, self.resolver.take()).map_err(HostError::Network)?;
            Some(Arc::new(egress))
        } else {
            None
        })
    }

    /// Every component loaded and registered: global tools first, then
    /// each scope in declaration order with its own tools.
    async fn load_tools(
        &mut self,
        runtime: &Arc<Runtime>,
        workspace: &Path,
    ) -> Result<Registry, HostError> {
        // Global tools first, then each scope in declaration order with its
        // own tools, so that a restriction is checked against exactly what
        // the scope inherits.
        let mut registry = Registry::new();
        let sources = std::mem::take(&mut self.sources);
        let scopes = std::mem::take(&mut self.scopes);
        for (name, _) in sources
            .iter()
            .filter_map(|(s, src)| s.as_ref().map(|s| (s, src)))
        {
            if !scopes.iter().any(|(n, _)| n == name) {
                return Err(HostError::Registry(
                    crate::tools::registry::RegistryError::BadScope {
                        scope: name.clone(),
                        detail: "tools are registered for a scope that is not declared".into(),
                    },
                ));
            }
        }
        // Every component is loaded at once (they are independent: on
        // several cores the loads overlap), then registered in order, so
        // that errors and collisions are reported as a sequential load would.
        let loaded = load_all(runtime, sources).await;
        let (global, mut scoped): (Vec<_>, Vec<_>) =
            loaded.into_iter().partition(|(s, _)| s.is_none());
        let offers = offers(&global);
        for (_, component) in global {
            register(&mut registry, None, component?, workspace)
                .map_err(|e| every_source(e, &offers))?;
        }
        for (name, spec) in scopes {
            registry.add_scope(&name, spec)?;
            let (own, rest): (Vec<_>, Vec<_>) = scoped
                .into_iter()
                .partition(|(s, _)| s.as_deref() == Some(name.as_str()));
            scoped = rest;
            for (_, component) in own {
                register(&mut registry, Some(&name), component?, workspace)?;
            }
        }
        Ok(registry)
    }

    /// The session log: as given, opened (and recovered) in the state
    /// directory, or in memory.
    fn open_log(&mut self, workspace: &Path) -> Result<Arc<SessionLog>, HostError> {
        Ok(match (self.log.take(), self.state_dir.take()) {
            (Some(log), _) => log,
            (None, Some(dir)) => {
                check_outside_workspace(
                    &dir,
                    workspace,
                    Inside::Resolved,
                    "state directory",
                    "rewrite the session log",
                    "use --state outside the workspace",
                )?;
                let log = SessionLog::open(&dir).map_err(|e| HostError::Log(e.to_string()))?;
                // Recovery on open: a call whose intent is durable but whose
                // result is not ends as TOOL_OUTCOME_UNKNOWN, never re-run.
                let recovered = log.recover().map_err(|e| HostError::Log(e.to_string()))?;
                if !recovered.recovered.is_empty() {
                    tracing::warn!(calls = ?recovered.recovered, "recovered calls with an unknown outcome");
                }
                Arc::new(log)
            }
            (None, None) => {
                Arc::new(SessionLog::in_memory().map_err(|e| HostError::Log(e.to_string()))?)
            }
        })
    }
}

/// A loaded source: a component (where it came from, the component, its
/// tools) or a program-backed tool.
enum Loaded {
    Component(
        String,
        Arc<crate::sandbox::LoadedComponent>,
        Vec<crate::tools::descriptor::Descriptor>,
    ),
    Program(Arc<crate::tools::program_tool::ProgramTool>),
}

/// Loads every source concurrently (one task each) and returns the results
/// in the order of `sources`, each with its scope.
async fn load_all(
    runtime: &Arc<Runtime>,
    sources: Vec<(Option<String>, Source)>,
) -> Vec<(Option<String>, Result<Loaded, HostError>)> {
    let tasks: Vec<_> = sources
        .into_iter()
        .map(|(scope, source)| {
            let runtime = runtime.clone();
            let task = tokio::spawn(async move {
                let (label, bytes) = match source {
                    Source::Path(p) => {
                        // Up to `MAX_WASM_FILE_BYTES`: off the async workers.
                        let path = p.display().to_string();
                        let bytes =
                            tokio::task::spawn_blocking(move || crate::sandbox::read_wasm_file(&p))
                                .await
                                .map_err(|e| {
                                    LoadError::Runtime(format!("reading a component failed: {e}"))
                                })?
                                .map_err(|e| LoadError::Read {
                                    path: path.clone(),
                                    detail: e.to_string(),
                                })?;
                        (path, bytes)
                    }
                    Source::Bytes(label, bytes) => (label, bytes),
                    Source::Manifest(p) => {
                        // Compiling a large program takes a while: off the
                        // async workers.
                        let tool = tokio::task::spawn_blocking(move || {
                            crate::tools::program_tool::ProgramTool::load(&runtime, &p)
                        })
                        .await
                        .map_err(|e| {
                            LoadError::Runtime(format!("loading a program tool failed: {e}"))
                        })??;
                        return Ok(Loaded::Program(Arc::new(tool)));
                    }
                };
                let (component, descriptors) = runtime.load(&label, &bytes).await?;
                Ok::<Loaded, HostError>(Loaded::Component(label, component, descriptors))
            });
            (scope, task)
        })
        .collect();
    let mut loaded = Vec::with_capacity(tasks.len());
    for (scope, task) in tasks {
        let result = task.await.unwrap_or_else(|e| {
            Err(HostError::Load(LoadError::Runtime(format!(
                "loading a component failed: {e}"
            ))))
        });
        loaded.push((scope, result));
    }
    loaded
}

/// Each tool name the loaded sources offer, with its source (a program
/// tool's manifest), in load order.
fn offers(loaded: &[(Option<String>, Result<Loaded, HostError>)]) -> Vec<(String, String)> {
    let mut offers = Vec::new();
    for (_, source) in loaded {
        match source {
            Ok(Loaded::Component(label, _, descriptors)) => {
                offers.extend(descriptors.iter().map(|d| (d.name.clone(), label.clone())));
            }
            Ok(Loaded::Program(program)) => offers.push((
                program.manifest.descriptor.name.clone(),
                program.manifest.path.display().to_string(),
            )),
            Err(_) => {}
        }
    }
    offers
}

/// A collision of two sources widened to every source that offers the
/// name, so that all of them are named at once.
fn every_source(e: HostError, offers: &[(String, String)]) -> HostError {
    let HostError::Registry(RegistryError::Collision { name, .. }) = &e else {
        return e;
    };
    let sources: Vec<String> = offers
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, s)| s.clone())
        .collect();
    if sources.len() <= 2 {
        return e;
    }
    HostError::Registry(RegistryError::Clash {
        name: name.clone(),
        sources,
    })
}

/// Registers the tools of one loaded source globally or in `scope`. A
/// program tool whose manifest or program is inside the workspace is
/// refused: calls could rewrite the code it runs, and what it declares, from
/// its next load on (`wasm` may name any path).
fn register(
    registry: &mut Registry,
    scope: Option<&str>,
    loaded: Loaded,
    workspace: &Path,
) -> Result<(), HostError> {
    let (label, component, descriptors) = match loaded {
        Loaded::Component(label, component, descriptors) => (label, component, descriptors),
        Loaded::Program(program) => {
            let label = program.manifest.path.display().to_string();
            for (what, path) in [
                ("manifest", &program.manifest.path),
                ("program", &program.manifest.wasm),
            ] {
                check_outside_workspace(
                    path,
                    workspace,
                    Inside::ByName,
                    &format!("the {what} of {label},"),
                    "rewrite the code it runs and what it is granted from its next load on",
                    "keep program tools outside the workspace",
                )?;
            }
            let tool = RegisteredTool::program(program)
                .map_err(|e| HostError::Descriptor(format!("{label}: {e}")))?;
            match scope {
                None => registry.add_global(tool)?,
                Some(s) => registry.add_scoped(s, tool)?,
            }
            return Ok(());
        }
    };
    let mut seen = std::collections::BTreeSet::new();
    for d in descriptors {
        if !seen.insert(d.name.clone()) {
            return Err(HostError::Descriptor(format!(
                "{label}: describe lists tool {:?} twice",
                d.name
            )));
        }
        let tool = RegisteredTool::new(d, component.clone())
            .map_err(|e| HostError::Descriptor(format!("{label}: {e}")))?;
        match scope {
            None => registry.add_global(tool)?,
            Some(s) => registry.add_scoped(s, tool)?,
        }
    }
    Ok(())
}

/// How a path is found inside the workspace.
#[derive(Clone, Copy)]
enum Inside {
    /// By where it resolves to: for a directory the host creates and
    /// writes (the state directory, the compile cache).
    Resolved,
    /// Also by every name on the way to it, a link a call could re-point
    /// ([`inside_workspace`](crate::sandbox::spec::inside_workspace), as for
    /// policy files and program tools): for a file the policy names that
    /// the host reads (a CA file, a secret).
    ByName,
}

/// Refuses `path` (the host's `what`) inside the workspace, where tools
/// could `could` (any call may be escalated to a mode that writes the
/// workspace); `remedy` says what to do instead. The state directory
/// holds the session log, the record of what tools did; the compile cache
/// holds code the host maps and runs natively (its checksums catch
/// accidents, not a writer who can rewrite them too).
fn check_outside_workspace(
    path: &Path,
    workspace: &Path,
    how: Inside,
    what: &str,
    could: &str,
    remedy: &str,
) -> Result<(), HostError> {
    let found = match how {
        Inside::Resolved => crate::sandbox::spec::resolved_inside(path, workspace),
        Inside::ByName => crate::sandbox::spec::inside_workspace(path, workspace),
    };
    match found {
        Some(found) => Err(HostError::UnsafeState(format!(
            "{what} {} is inside the workspace {}, where tools could {could}; {remedy}",
            found.display(),
            workspace.display()
        ))),
        None => Ok(()),
    }
}

fn session_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{:x}{:04x}",
        (nanos as u64) & 0xffff_ffff_ffff,
        std::process::id() & 0xffff
    )
}
