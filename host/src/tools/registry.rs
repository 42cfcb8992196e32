//! Tools and scopes, and the one visibility resolver that feeds listing,
//! lookup and dispatch.
//!
//! Visibility decides what a model is shown. It is not the security
//! boundary: the orchestrator runs policy and guards for every call that
//! resolves, whatever its origin.

use crate::sandbox::LoadedComponent;
use crate::tools::descriptor::Descriptor;
use crate::tools::program_tool::ProgramTool;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What runs a tool's body.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ToolBody {
    /// A tool component (`toolhost:tool/tool-provider`).
    Component(Arc<LoadedComponent>),
    /// A WASI program made a tool by its manifest.
    Program(Arc<ProgramTool>),
}

/// A loaded tool: its descriptor, what runs its body and its compiled
/// schemas.
#[derive(Clone)]
pub struct RegisteredTool {
    /// The validated descriptor.
    pub descriptor: Descriptor,
    /// What implements it.
    pub body: ToolBody,
    pub(crate) input: Arc<jsonschema::Validator>,
    pub(crate) output: Option<Arc<jsonschema::Validator>>,
}

impl std::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("name", &self.descriptor.name)
            .field("source", &self.source())
            .finish_non_exhaustive()
    }
}

impl RegisteredTool {
    /// Compiles the tool's schemas. An input or output schema that is not a
    /// valid JSON Schema is a load error.
    pub fn new(descriptor: Descriptor, component: Arc<LoadedComponent>) -> Result<Self, String> {
        Self::with_body(descriptor, ToolBody::Component(component))
    }

    /// A program-backed tool, its descriptor from its manifest.
    pub fn program(tool: Arc<ProgramTool>) -> Result<Self, String> {
        Self::with_body(tool.manifest.descriptor.clone(), ToolBody::Program(tool))
    }

    /// The component that implements the tool, unless a program does.
    pub fn component(&self) -> Option<&Arc<LoadedComponent>> {
        match &self.body {
            ToolBody::Component(c) => Some(c),
            ToolBody::Program(_) => None,
        }
    }

    /// Where the tool came from: its component's or its program's path (or
    /// `embedded:NAME`).
    pub fn source(&self) -> &str {
        match &self.body {
            ToolBody::Component(c) => &c.source,
            ToolBody::Program(p) => &p.source,
        }
    }

    /// SHA-256 (hex) of the component's or the program's bytes.
    pub fn sha256(&self) -> &str {
        match &self.body {
            ToolBody::Component(c) => &c.sha256,
            ToolBody::Program(p) => &p.sha256,
        }
    }

    /// What the tool's component imports; a program's imports are not
    /// listed (empty).
    pub fn imports(&self) -> &[String] {
        match &self.body {
            ToolBody::Component(c) => &c.imports,
            ToolBody::Program(_) => &[],
        }
    }

    fn with_body(descriptor: Descriptor, body: ToolBody) -> Result<Self, String> {
        // Validated against the schemas clients are shown (a machine-type
        // format's width kept as bounds): what a client is told is what
        // the host holds calls and results to.
        let shown = descriptor.for_clients();
        let input = compile_schema(&shown.input_schema)
            .map_err(|e| format!("tool {}: invalid input schema: {e}", descriptor.name))?;
        let output = match &shown.output_schema {
            Some(s) => Some(Arc::new(compile_schema(s).map_err(|e| {
                format!("tool {}: invalid output schema: {e}", descriptor.name)
            })?)),
            None => None,
        };
        Ok(RegisteredTool {
            descriptor,
            body,
            input: Arc::new(input),
            output,
        })
    }

    /// Validates `args` against the input schema; the error names the first
    /// failing path.
    pub fn validate_args(&self, args: &serde_json::Value) -> Result<(), String> {
        validate(&self.input, args)
    }

    /// Validates a canonical output against the output schema, if any.
    /// The error says where and which rule failed, without quoting the
    /// output (a message is cut, and a quote could carry part of a secret
    /// past the redaction of the whole).
    pub fn validate_output(&self, canonical: &serde_json::Value) -> Result<(), String> {
        match &self.output {
            Some(v) => first_error(v, canonical).map_or(Ok(()), |e| {
                Err(format!(
                    "at {}: the value breaks the schema's rule at {}",
                    where_in(&e),
                    e.schema_path()
                ))
            }),
            None => Ok(()),
        }
    }
}

/// The most a schema's `pattern` may compile to (each of the regex's
/// program and lazy DFA).
const MAX_PATTERN_BYTES: usize = 1 << 20;

/// Compiles a tool's schema (untrusted: the tool wrote it). Its `pattern`s
/// run on the `regex` crate, whose matching is linear in the input: a
/// backtracking engine would let a pattern such as `^(a|(?=a)a)*$` spend
/// seconds on each string of an argument or a result. A pattern that needs
/// look-around or backreferences is refused with the schema.
fn compile_schema(schema: &serde_json::Value) -> Result<jsonschema::Validator, String> {
    jsonschema::meta::validate(schema).map_err(|e| e.to_string())?;
    jsonschema::options()
        .with_pattern_options(
            jsonschema::PatternOptions::regex()
                .size_limit(MAX_PATTERN_BYTES)
                .dfa_size_limit(MAX_PATTERN_BYTES),
        )
        .build(schema)
        .map_err(|e| e.to_string())
}

/// Validates `value`; on failure, the first error found (with where). Not
/// every error: collecting them all would allocate one per failing item of
/// a hostile array.
fn validate(v: &jsonschema::Validator, value: &serde_json::Value) -> Result<(), String> {
    match first_error(v, value) {
        None => Ok(()),
        // The error quotes the failing value: cut, it may be huge.
        Some(e) => Err(crate::sandbox::state::cut(
            &format!("at {}: {e}", where_in(&e)),
            1024,
        )),
    }
}

/// The first error of `value` against `v`, if it fails (a valid value is
/// told apart first, by the cheaper check).
fn first_error<'a>(
    v: &jsonschema::Validator,
    value: &'a serde_json::Value,
) -> Option<jsonschema::ValidationError<'a>> {
    if v.is_valid(value) {
        return None;
    }
    v.validate(value).err()
}

/// Where in the value an error is (`/` for the whole value).
fn where_in(e: &jsonschema::ValidationError<'_>) -> String {
    let path = e.instance_path().to_string();
    if path.is_empty() {
        "/".to_string()
    } else {
        path
    }
}

/// A named scope (an agent, a sub-agent): its own tools plus a restriction
/// of what it inherits from its parent (or the global set).
#[derive(Debug, Clone, Default)]
pub struct ScopeSpec {
    /// The parent scope; `None` inherits the global tools.
    pub parent: Option<String>,
    /// If set, only these inherited tools are visible.
    pub allow: Option<Vec<String>>,
    /// Inherited tools hidden from this scope.
    pub deny: Vec<String>,
}

/// Configuration errors of the registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Two components offer the same tool name.
    #[error("{}", clash(.name, &[.first, .second]))]
    Collision {
        /// The tool name.
        name: String,
        /// The first component.
        first: String,
        /// The second component.
        second: String,
    },
    /// Two tool names that differ only in case, or in `-` against `_`: to a
    /// model (and to whoever writes a policy) they read as one tool.
    #[error(
        "tool name {name:?} of {second} differs from {other:?} of {first} only in case or in - and _; rename one or load only one"
    )]
    LookAlike {
        /// The name being registered.
        name: String,
        /// The name already registered.
        other: String,
        /// The component of `other`.
        first: String,
        /// The component of `name`.
        second: String,
    },
    /// Several sources (components, manifests, embedded tools) offer the
    /// same tool name: each is named.
    #[error("{}", clash(.name, .sources))]
    Clash {
        /// The tool name.
        name: String,
        /// Every source that offers it, in load order.
        sources: Vec<String>,
    },
    /// A restriction names a tool the scope cannot see.
    #[error("scope {scope:?} restricts {name:?}, which it does not inherit")]
    UnknownRestriction {
        /// The scope.
        scope: String,
        /// The name.
        name: String,
    },
    /// `allow = []` would hide every tool: almost surely a mistake.
    #[error("scope {0:?} has an empty allow list; omit it to inherit everything")]
    EmptyRestriction(String),
    /// A scope names a parent that does not exist, or scopes form a cycle.
    #[error("scope {scope:?}: {detail}")]
    BadScope {
        /// The scope.
        scope: String,
        /// What is wrong.
        detail: String,
    },
}

/// The global tools and the named scopes.
#[derive(Debug, Default, Clone)]
pub struct Registry {
    global: BTreeMap<String, RegisteredTool>,
    /// The global tools' names as a reader takes them ([`folded`]), to the
    /// name: one lookup per new tool instead of a scan of all of them.
    global_folded: std::collections::HashMap<String, String>,
    scopes: BTreeMap<String, (ScopeSpec, BTreeMap<String, RegisteredTool>)>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Adds a global tool; a name already taken is a collision.
    pub fn add_global(&mut self, tool: RegisteredTool) -> Result<(), RegistryError> {
        let name = tool.descriptor.name.clone();
        let folded_name = folded(&name);
        if let Some(other) = self.global_folded.get(&folded_name)
            && other != &name
            && let Some(existing) = self.global.get(other)
        {
            look_alike(existing, &tool)?;
        }
        insert(&mut self.global, tool)?;
        self.global_folded.insert(folded_name, name);
        Ok(())
    }

    /// Declares a scope. Its restrictions are checked against what it
    /// inherits.
    pub fn add_scope(&mut self, name: &str, spec: ScopeSpec) -> Result<(), RegistryError> {
        if spec.allow.as_ref().is_some_and(|a| a.is_empty()) {
            return Err(RegistryError::EmptyRestriction(name.to_string()));
        }
        if let Some(parent) = &spec.parent
            && !self.scopes.contains_key(parent)
        {
            return Err(RegistryError::BadScope {
                scope: name.to_string(),
                detail: format!("parent scope {parent:?} is not declared (declare parents first)"),
            });
        }
        if self.scopes.contains_key(name) {
            return Err(RegistryError::BadScope {
                scope: name.to_string(),
                detail: "declared twice".into(),
            });
        }
        let inherited: BTreeSet<String> = self
            .visible_names(spec.parent.as_deref())
            .into_iter()
            .collect();
        for n in spec.allow.iter().flatten().chain(spec.deny.iter()) {
            if !inherited.contains(n) {
                return Err(RegistryError::UnknownRestriction {
                    scope: name.to_string(),
                    name: n.clone(),
                });
            }
        }
        self.scopes
            .insert(name.to_string(), (spec, BTreeMap::new()));
        Ok(())
    }

    /// Registers a tool of a scope's own. It may not shadow a tool the scope
    /// can already see.
    pub fn add_scoped(&mut self, scope: &str, tool: RegisteredTool) -> Result<(), RegistryError> {
        let parent = match self.scopes.get(scope) {
            Some((spec, _)) => spec.parent.clone(),
            None => {
                return Err(RegistryError::BadScope {
                    scope: scope.to_string(),
                    detail: "not declared".into(),
                });
            }
        };
        if let Some(existing) = self.resolve_in(parent.as_deref(), &tool.descriptor.name) {
            return Err(RegistryError::Collision {
                name: tool.descriptor.name.clone(),
                first: existing.source().to_string(),
                second: tool.source().to_string(),
            });
        }
        // A scope's own tools are few; what it sees, checked one by one.
        for seen in self.visible(parent.as_deref()) {
            look_alike(seen, &tool)?;
        }
        if let Some((_, own)) = self.scopes.get(scope) {
            for seen in own.values() {
                look_alike(seen, &tool)?;
            }
        }
        match self.scopes.get_mut(scope) {
            Some((_, own)) => insert(own, tool),
            None => Ok(()),
        }
    }

    /// True when `scope` is declared (`None`, the global scope, always is).
    pub fn has_scope(&self, scope: Option<&str>) -> bool {
        scope.is_none_or(|s| self.scopes.contains_key(s))
    }

    /// `scope` and its parents, outermost first (empty for the global
    /// scope): the agent layers of a policy apply along this chain.
    pub fn scope_chain(&self, scope: Option<&str>) -> Vec<String> {
        let mut chain = Vec::new();
        let mut next = scope.map(str::to_string);
        while let Some(s) = next {
            // Parents are declared before children, so this ends; the
            // length check guards against a cycle all the same.
            if chain.contains(&s) || chain.len() > self.scopes.len() {
                break;
            }
            next = self
                .scopes
                .get(&s)
                .and_then(|(spec, _)| spec.parent.clone());
            chain.push(s);
        }
        chain.reverse();
        chain
    }

    /// The one visibility resolver: the tool `name` as seen from `scope`.
    pub fn resolve(&self, scope: Option<&str>, name: &str) -> Option<&RegisteredTool> {
        self.resolve_in(scope, name)
    }

    fn resolve_in(&self, scope: Option<&str>, name: &str) -> Option<&RegisteredTool> {
        let Some(scope) = scope else {
            return self.global.get(name);
        };
        let (spec, own) = self.scopes.get(scope)?;
        if let Some(t) = own.get(name) {
            return Some(t);
        }
        if spec.deny.iter().any(|d| d == name) {
            return None;
        }
        if let Some(allow) = &spec.allow
            && !allow.iter().any(|a| a == name)
        {
            return None;
        }
        self.resolve_in(spec.parent.as_deref(), name)
    }

    /// Names visible from `scope`, sorted. Listing uses this, and so does
    /// every check of a restriction; both go through [`Registry::resolve`].
    pub fn visible_names(&self, scope: Option<&str>) -> Vec<String> {
        let mut all: BTreeSet<&String> = self.global.keys().collect();
        for (_, own) in self.scopes.values() {
            all.extend(own.keys());
        }
        all.into_iter()
            .filter(|n| self.resolve_in(scope, n).is_some())
            .cloned()
            .collect()
    }

    /// The tools visible from `scope`, sorted by name.
    pub fn visible(&self, scope: Option<&str>) -> Vec<&RegisteredTool> {
        self.visible_names(scope)
            .iter()
            .filter_map(|n| self.resolve_in(scope, n))
            .collect()
    }
}

fn insert(
    map: &mut BTreeMap<String, RegisteredTool>,
    tool: RegisteredTool,
) -> Result<(), RegistryError> {
    if let Some(existing) = map.get(&tool.descriptor.name) {
        return Err(RegistryError::Collision {
            name: tool.descriptor.name.clone(),
            first: existing.source().to_string(),
            second: tool.source().to_string(),
        });
    }
    map.insert(tool.descriptor.name.clone(), tool);
    Ok(())
}

/// What a clash of one tool name between `sources` is told: each source,
/// and the ways out.
fn clash(name: &str, sources: &[impl AsRef<str>]) -> String {
    let listed: Vec<&str> = sources.iter().map(AsRef::as_ref).collect();
    let embedded = listed.iter().any(|s| s.starts_with("embedded:"));
    let (head, last) = listed.split_at(listed.len().saturating_sub(1));
    let all = match head {
        [] => last.join(""),
        _ => format!("{} and {}", head.join(", "), last.join("")),
    };
    let each = if listed.len() == 2 { "both" } else { "each of" };
    format!(
        "tool name {name:?} is offered by {each} {all}, and a host serves each name once; \
         rename the tool in all but one of them (the name its describe returns: Rust's \
         `Tool::NAME`, Python's `@tool(name=...)`, JavaScript's `tool({{ name }})`, a \
         manifest's `name`), or remove the others from the tools directory{}",
        if embedded {
            " (an embedded example tool is left out with `serve --tools-only`)"
        } else {
            ""
        }
    )
}

/// A name as a reader takes it: lower case, `-` read as `_`.
fn folded(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c == '-' {
                '_'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

/// Refuses `tool` when its name reads as `existing`'s without being it.
fn look_alike(existing: &RegisteredTool, tool: &RegisteredTool) -> Result<(), RegistryError> {
    let (a, b) = (&existing.descriptor.name, &tool.descriptor.name);
    if a != b && folded(a) == folded(b) {
        return Err(RegistryError::LookAlike {
            name: b.clone(),
            other: a.clone(),
            first: existing.source().to_string(),
            second: tool.source().to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly on a set-up error")]
mod tests {
    use super::*;
    use serde_json::json;

    /// A tool's schema patterns run on a linear-time engine: one that needs
    /// backtracking (look-around) is refused when the schema is compiled,
    /// and a pattern that is exponential for a backtracking engine still
    /// answers on a long string.
    #[test]
    fn schema_patterns_never_backtrack() {
        let lookaround = json!({"type": "string", "pattern": "^(?:a|(?=a)a)*$"});
        assert!(compile_schema(&lookaround).is_err());
        let nested = compile_schema(&json!({"type": "string", "pattern": "^(a+)+$"})).unwrap();
        let hostile = format!("{}b", "a".repeat(100_000));
        let err = validate(&nested, &json!(hostile)).unwrap_err();
        assert!(err.starts_with("at /: "), "{err}");
        assert!(err.len() <= 1024 + 3, "{}", err.len());
        assert!(validate(&nested, &json!("aaaa")).is_ok());
    }

    /// A value that fails on every item reports the first failure, not all.
    #[test]
    fn validation_reports_the_first_error() {
        let v = compile_schema(&json!({"type": "array", "items": {"type": "string"}})).unwrap();
        let items: Vec<u32> = (0..250_000).collect();
        let err = validate(&v, &json!(items)).unwrap_err();
        assert!(err.starts_with("at /0: "), "{err}");
        assert!(!err.contains("; "), "{err}");
    }
}
