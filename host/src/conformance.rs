//! `toolhost conformance TOOL.wasm`: checks a third-party tool component
//! against the contract before anyone trusts it.
//!
//! Each check is a row of a report: the component is of the right world;
//! `describe` returns valid descriptors with valid JSON Schemas; names are
//! unique and well-formed; schema-invalid arguments are refused by the host
//! before the body runs; declared examples (the input schema's `examples`)
//! run and satisfy the output schema; and a capability report compares the
//! component's imports with what its declared mode and side effect allow.
//!
//! The checked component is untrusted: it never chooses its own grants.
//! Every call it gets here runs in a throwaway workspace (a temporary
//! directory, never the user's workspace or the host root), in its declared
//! minimum mode but never wider than [`WIDEST_CHECK_MODE`](crate::conformance::WIDEST_CHECK_MODE), with no network
//! and a short deadline ([`CHECK_DEADLINE`](crate::conformance::CHECK_DEADLINE)). A tool whose minimum mode is
//! wider gets a warning row instead of running its examples.

use crate::pipeline::{CallRequest, HostBuilder};
use crate::sandbox::spec::Limits;
use crate::sandbox::{Runtime, RuntimeOptions};
use crate::tools::is_valid_name;
use crate::tools::registry::RegisteredTool;
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use toolhost_core::{ErrorCode, SandboxMode};

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
    /// The rows, in the order they ran.
    pub checks: Vec<Check>,
}

impl Report {
    /// True when no row failed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.verdict != Verdict::Fail)
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
    let mut report = Report {
        component: source.to_string(),
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
        format!("{} tool(s): {}", descriptors.len(), names(&descriptors)),
    );

    // Names: well-formed (checked by load) and unique.
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

    // Schemas compile.
    let mut tools = Vec::new();
    for d in &descriptors {
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

    // Capabilities: imports against the declared mode and side effect.
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
    for d in &descriptors {
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

    // Calls: invalid args are refused before the body; examples run.
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
        let d = &t.descriptor;
        // The tool's own mode, capped: it never picks its own grants here.
        let mode = d.min_mode.min(WIDEST_CHECK_MODE);
        let row = format!("invalid-args:{}", d.name);
        match invalid_args_for(t) {
            None => report.push(
                row,
                Verdict::Warn,
                "the input schema accepts every value; nothing to refuse",
            ),
            Some(bad) => {
                let r = host
                    .call(CallRequest::new(&d.name, bad.clone()).mode(mode))
                    .await;
                if r.code() == Some(ErrorCode::InvalidArgs) && r.receipt.mode.is_none() {
                    report.push_ran(
                        row,
                        Verdict::Pass,
                        format!("{bad} refused with INVALID_ARGS before the body"),
                        mode,
                    );
                } else {
                    report.push_ran(
                        row,
                        Verdict::Fail,
                        format!("{bad} was not refused before the body: {:?}", r.code()),
                        mode,
                    );
                }
            }
        }
        let examples = d
            .input_schema
            .get("examples")
            .and_then(|e| e.as_array())
            .cloned()
            .unwrap_or_default();
        if d.min_mode > WIDEST_CHECK_MODE {
            if !examples.is_empty() {
                report.push(
                    format!("examples:{}", d.name),
                    Verdict::Warn,
                    format!(
                        "examples not run: needs {}; conformance runs a checked tool's calls in a throwaway workspace, never wider than {WIDEST_CHECK_MODE}",
                        d.min_mode
                    ),
                );
            }
            continue;
        }
        // The destinations the examples tried to reach: conformance grants
        // no network, so each attempt was refused before any connection,
        // and is what the tool will ask a policy for.
        let mut asks: BTreeSet<String> = BTreeSet::new();
        for (i, example) in examples.iter().enumerate() {
            let row = format!("example:{}[{i}]", d.name);
            let r = host
                .call(CallRequest::new(&d.name, example.clone()).mode(mode))
                .await;
            let wanted = destinations(&r.receipt.network);
            asks.extend(wanted.iter().cloned());
            match &r.error {
                // A tool that does not declare `external` is granted no
                // network by any policy: the example can never run.
                _ if !wanted.is_empty() && d.side_effect != toolhost_core::SideEffect::External => report
                    .push_ran(
                        row,
                        Verdict::Fail,
                        format!(
                            "ran in {mode} and tried to reach {}, but the tool declares side effect {}: only tools that declare `external` are granted network, whatever the policy",
                            wanted.join(", "),
                            d.side_effect
                        ),
                        mode,
                    ),
                None => report.push_ran(
                    row,
                    Verdict::Pass,
                    format!(
                        "ran in {mode} (throwaway workspace, no network), and its output satisfies the output schema"
                    ),
                    mode,
                ),
                // Refused network, not a broken contract: say what a policy
                // must grant for the example to run.
                Some(e) if !wanted.is_empty() => report.push_ran(
                    row,
                    Verdict::Warn,
                    format!(
                        "ran in {mode} without network and ended {}: it needs {}; grant it in the policy's [network] (or a rule's network) to run this example",
                        e.code,
                        wanted.join(", ")
                    ),
                    mode,
                ),
                Some(e) => report.push_ran(
                    row,
                    Verdict::Fail,
                    format!("ran in {mode}: {}: {}", e.code, e.message),
                    mode,
                ),
            }
        }
        if !asks.is_empty() {
            report.push(
                format!("network:{}", d.name),
                Verdict::Warn,
                format!(
                    "its examples ask for {}: a policy must grant these (`[network] allow` or `ask`, or a rule's `network`) for such calls to reach them",
                    asks.into_iter().collect::<Vec<_>>().join(", ")
                ),
            );
        }
    }
    report
}

/// The destinations of a call's network records refused for want of what
/// a policy gives ([`LIFTABLE_CODES`](toolhost_egress::LIFTABLE_CODES)), each as `METHOD scheme://host:port` (`connect`
/// for a socket), in order, once.
fn destinations(records: &[toolhost_egress::EgressRecord]) -> Vec<String> {
    let mut seen = Vec::new();
    for record in records {
        let toolhost_egress::EgressOutcome::Refused { code, .. } = &record.outcome else {
            continue;
        };
        if !toolhost_egress::LIFTABLE_CODES.contains(&code.as_str()) {
            continue;
        }
        let origin = origin(&record.url);
        let method = record.method.as_deref().unwrap_or("connect");
        let entry = format!("{method} {origin}");
        if !seen.contains(&entry) {
            seen.push(entry);
        }
    }
    seen
}

/// `scheme://host:port` of a recorded `scheme://host:port/path`.
fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(slash) => &url[..after_scheme + slash],
        None => url,
    }
}

fn names(descriptors: &[crate::tools::Descriptor]) -> String {
    descriptors
        .iter()
        .map(|d| d.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A value the tool's input schema rejects, if one of a few probes is.
fn invalid_args_for(tool: &RegisteredTool) -> Option<serde_json::Value> {
    let candidates = [
        serde_json::json!([]),
        serde_json::json!(42),
        serde_json::json!("not an object"),
        serde_json::json!(null),
        serde_json::json!({ "__toolhost_conformance_unexpected__": true }),
    ];
    candidates
        .into_iter()
        .find(|c| tool.validate_args(c).is_err())
}

/// A runtime for one-off checks: no fuel, a small pool, the default cache.
pub fn runtime_for_checks() -> Result<Arc<Runtime>, crate::sandbox::LoadError> {
    Runtime::new(RuntimeOptions {
        max_concurrent_calls: 4,
        ..RuntimeOptions::default()
    })
    .map(Arc::new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolhost_egress::EgressRecord;

    fn refused(method: &str, url: &str, code: &str) -> EgressRecord {
        EgressRecord::unreadable(method, url, code, String::new())
    }

    /// Only what a grant could lift is reported as a destination to
    /// grant: not a malformed request, a method the host never sends, or
    /// a limit.
    #[test]
    fn only_refusals_a_grant_lifts_are_destinations() {
        let records = [
            refused("GET", "https://api.example.com:443/v1", "network_off"),
            refused("GET", "https://api.example.com:443/v2", "host_not_granted"),
            refused("GET", "ftp://h/f", "unsupported_scheme"),
            refused("TRACE", "https://api.example.com:443/", "method_refused"),
            refused("GET", "://h/x", "invalid_url"),
            refused("POST", "https://b.example.com:443/", "limit_reached"),
            refused("POST", "https://c.example.com:443/x", "approval_required"),
        ];
        assert_eq!(
            destinations(&records),
            [
                "GET https://api.example.com:443",
                "POST https://c.example.com:443"
            ]
        );
    }
}
