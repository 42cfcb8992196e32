//! `toolhost conformance TOOL.wasm`: checks a third-party tool component
//! against the contract before anyone trusts it.
//!
//! Each check is a row of a report: the component is of the right world;
//! `describe` returns valid descriptors with valid JSON Schemas; names are
//! unique and well-formed; schema-invalid arguments are refused by the host
//! before the body runs; declared examples (the input schema's `examples`)
//! run and satisfy the output schema; the body runs with an argument object
//! generated from the input schema (`generate`), and must not trap on it;
//! and a capability report compares the component's imports with what its
//! declared mode and side effect allow. Advice (how to declare examples,
//! which guide to read) is phrased for the toolchain that made the
//! component (its `producers` sections, read by `tools::toolchain`).
//!
//! The calls are in `calls`, the argument generator in `generate` (with
//! `pattern`, a string that matches a schema's `pattern`).
//!
//! The checked component is untrusted: it never chooses its own grants.
//! Every call it gets here runs in a throwaway workspace (a temporary
//! directory, never the user's workspace or the host root), in its declared
//! minimum mode but never wider than [`WIDEST_CHECK_MODE`](crate::conformance::WIDEST_CHECK_MODE), with no network
//! and a short deadline ([`CHECK_DEADLINE`](crate::conformance::CHECK_DEADLINE)). A tool whose minimum mode is
//! wider gets a warning row instead of running its examples.

mod calls;
mod generate;
mod pattern;

use crate::pipeline::HostBuilder;
use crate::sandbox::spec::Limits;
use crate::sandbox::{LoadedComponent, Runtime, RuntimeOptions};
use crate::tools::is_valid_name;
use crate::tools::registry::RegisteredTool;
use crate::tools::toolchain::Toolchain;
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use toolhost_core::SandboxMode;

/// The widest mode a checked tool's calls run in. `danger-full-access`
/// would preopen the host root read-write for a tool nobody trusts yet.
pub const WIDEST_CHECK_MODE: SandboxMode = SandboxMode::WorkspaceWrite;

/// The deadline of every call the checks make.
pub const CHECK_DEADLINE: Duration = Duration::from_secs(5);

/// The verdict of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The check passed.
    Pass,
    /// The check failed: the tool does not conform.
    Fail,
    /// Worth knowing; does not fail the report.
    Warn,
}

/// One row of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked (`world`, `describe`, `names`, `invalid-args:NAME`, ...).
    pub check: String,
    /// Pass, fail or warn.
    pub verdict: Verdict,
    /// What was found.
    pub detail: String,
    /// The sandbox mode the check's call ran in, for checks that ran a call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<SandboxMode>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The component checked.
    pub component: String,
    /// The toolchain that made it, as its metadata says (its advice is
    /// phrased for that toolchain).
    pub made_with: &'static str,
    /// The rows, in the order they ran.
    pub checks: Vec<Check>,
}

impl Report {
    /// True when no row failed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.verdict != Verdict::Fail)
    }

    /// How many rows have this verdict.
    pub fn count(&self, verdict: Verdict) -> usize {
        self.checks.iter().filter(|c| c.verdict == verdict).count()
    }

    fn push(&mut self, check: impl Into<String>, verdict: Verdict, detail: impl Into<String>) {
        self.checks.push(Check {
            check: check.into(),
            verdict,
            detail: detail.into(),
            mode: None,
        });
    }

    /// A row for a check that ran a call in `mode`.
    fn push_ran(
        &mut self,
        check: impl Into<String>,
        verdict: Verdict,
        detail: impl Into<String>,
        mode: SandboxMode,
    ) {
        self.push(check, verdict, detail);
        if let Some(last) = self.checks.last_mut() {
            last.mode = Some(mode);
        }
    }
}

/// Interfaces that reach the network. The host links them; only a policy's
/// grants (`[network]`, a rule's `network`) open them (no sandbox mode
/// does), and never its name lookups, so under
/// conformance a call that uses them fails inside the tool.
const NETWORK_IMPORTS: &[&str] = &["wasi:sockets/", "wasi:http/"];

/// Runs every check on the component `bytes` (named `source` in the report).
pub async fn check_component(runtime: Arc<Runtime>, source: &str, bytes: &[u8]) -> Report {
    let toolchain = Toolchain::of(bytes);
    let mut report = Report {
        component: source.to_string(),
        made_with: toolchain.name(),
        checks: Vec::new(),
    };
    // World and describe.
    let (component, descriptors) = match runtime.load_and_describe(source, bytes).await {
        Ok(x) => x,
        Err(e) => {
            report.push("world+describe", Verdict::Fail, e.to_string());
            return report;
        }
    };
    report.push(
        "world",
        Verdict::Pass,
        "exports toolhost:tool/tool and links against the host's imports",
    );
    report.push(
        "describe",
        Verdict::Pass,
        format!(
            "{}: {}",
            counted(descriptors.len(), "tool"),
            names(&descriptors)
        ),
    );
    check_names(&mut report, &descriptors);
    let tools = check_schemas(&mut report, &descriptors, &component);
    check_capabilities(&mut report, &descriptors, &component);

    // Calls: invalid args are refused before the body; examples and
    // generated arguments run.
    let Ok(workspace) = tempfile::tempdir() else {
        report.push(
            "calls",
            Verdict::Fail,
            "cannot create a temporary workspace",
        );
        return report;
    };
    let mut b = HostBuilder::new();
    b.runtime(runtime.clone())
        .tool_bytes(source.to_string(), bytes.to_vec())
        .workspace(workspace.path())
        .limits(Limits {
            deadline: CHECK_DEADLINE,
            ..Limits::default()
        });
    let host = match b.build().await {
        Ok(h) => h,
        Err(e) => {
            report.push(
                "calls",
                Verdict::Fail,
                format!("the host refuses the component: {e}"),
            );
            return report;
        }
    };
    for t in &tools {
        calls::check_calls(&mut report, &host, t, toolchain).await;
    }
    report
}

/// `n` and `what`, plural when `n` is not 1 ("1 tool", "3 tools").
pub fn counted(n: usize, what: &str) -> String {
    match n {
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    }
}

/// Names: well-formed (checked by load) and unique.
fn check_names(report: &mut Report, descriptors: &[crate::tools::Descriptor]) {
    let mut seen = BTreeSet::new();
    let dupes: Vec<_> = descriptors
        .iter()
        .filter(|d| !seen.insert(d.name.clone()))
        .map(|d| d.name.clone())
        .collect();
    let bad: Vec<_> = descriptors
        .iter()
        .filter(|d| !is_valid_name(&d.name))
        .map(|d| d.name.clone())
        .collect();
    if dupes.is_empty() && bad.is_empty() {
        report.push("names", Verdict::Pass, "unique and well-formed");
    } else {
        report.push(
            "names",
            Verdict::Fail,
            format!("duplicates: {dupes:?}; malformed: {bad:?}"),
        );
    }
}

/// Schemas compile: the tools whose schemas do.
fn check_schemas(
    report: &mut Report,
    descriptors: &[crate::tools::Descriptor],
    component: &Arc<LoadedComponent>,
) -> Vec<RegisteredTool> {
    let mut tools = Vec::new();
    for d in descriptors {
        match RegisteredTool::new(d.clone(), component.clone()) {
            Ok(t) => {
                report.push(
                    format!("schemas:{}", d.name),
                    Verdict::Pass,
                    "input and output schemas are valid JSON Schemas",
                );
                tools.push(t);
            }
            Err(e) => report.push(format!("schemas:{}", d.name), Verdict::Fail, e),
        }
    }
    tools
}

/// Capabilities: imports against the declared mode and side effect.
fn check_capabilities(
    report: &mut Report,
    descriptors: &[crate::tools::Descriptor],
    component: &LoadedComponent,
) {
    let network: Vec<_> = component
        .imports
        .iter()
        .filter(|i| NETWORK_IMPORTS.iter().any(|n| i.starts_with(n)))
        .cloned()
        .collect();
    let fs = component
        .imports
        .iter()
        .any(|i| i.starts_with("wasi:filesystem/"));
    for d in descriptors {
        let row = format!("capabilities:{}", d.name);
        // An import the host never grants is not a contract violation:
        // toolchains import whole interfaces (every componentize-py
        // component imports all of wasi:sockets). Say what will happen.
        if network.is_empty() {
            report.push(
                row,
                Verdict::Pass,
                format!(
                    "minimum mode {}, side effect {}; imports filesystem: {fs}; no network imports",
                    d.min_mode, d.side_effect
                ),
            );
        } else {
            report.push(
                row,
                Verdict::Warn,
                format!(
                    "minimum mode {}, side effect {}; imports {}: only a policy's grants ([network], a rule's network) open them (no sandbox mode does; name lookup through wasi:sockets never), so without one a call that uses them fails inside the tool with the interface's own error (toolchains such as componentize-py import these interfaces whether or not the tool uses them)",
                    d.min_mode,
                    d.side_effect,
                    network.join(", ")
                ),
            );
        }
    }
}

fn names(descriptors: &[crate::tools::Descriptor]) -> String {
    descriptors
        .iter()
        .map(|d| d.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A runtime for one-off checks: no fuel, a small pool, the default cache.
pub fn runtime_for_checks() -> Result<Arc<Runtime>, crate::sandbox::LoadError> {
    Runtime::new(RuntimeOptions {
        max_concurrent_calls: 4,
        ..RuntimeOptions::default()
    })
    .map(Arc::new)
}
