//! The checks that call the tool, each in the tool's own minimum mode capped
//! at [`WIDEST_CHECK_MODE`], in a throwaway workspace with no network:
//! arguments the schema refuses are refused before the body
//! (`invalid-args:NAME`); each declared example runs and satisfies the
//! output schema (`example:NAME[i]`); a tool without examples is told how
//! to declare them (`examples:NAME`); and the body runs with an argument
//! object generated from the input schema (`generated:NAME`), where it may
//! refuse the arguments with its own error but must not trap, time out or
//! break its output schema.

use super::generate::{invalid_args, valid_args};
use super::{Report, Verdict, WIDEST_CHECK_MODE};
use crate::pipeline::{CallRequest, Host};
use crate::result::CallResult;
use crate::tools::registry::RegisteredTool;
use crate::tools::toolchain::Toolchain;
use serde_json::Value;
use std::collections::BTreeSet;
use toolhost_core::{ErrorCode, SandboxMode, SideEffect};

/// Every call check of one tool.
pub(super) async fn check_calls(
    report: &mut Report,
    host: &Host,
    tool: &RegisteredTool,
    toolchain: Toolchain,
) {
    let d = &tool.descriptor;
    // The tool's own mode, capped: it never picks its own grants here.
    let mode = d.min_mode.min(WIDEST_CHECK_MODE);
    let generated = generated_args(tool);
    check_invalid_args(report, host, tool, generated.as_ref().ok(), mode).await;
    let examples = d
        .input_schema
        .get("examples")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if examples.is_empty() {
        report.push(
            format!("examples:{}", d.name),
            Verdict::Warn,
            format!(
                "the input schema declares no examples, so the body runs only with generated \
                 arguments, none its author chose; declare some: {} ({})",
                toolchain.examples_hint(),
                toolchain.guide()
            ),
        );
    }
    if d.min_mode > WIDEST_CHECK_MODE {
        skip_wide(report, tool, !examples.is_empty());
        return;
    }
    // The destinations the calls tried to reach: conformance grants no
    // network, so each attempt was refused before any connection, and is
    // what the tool will ask a policy for.
    let mut asks: BTreeSet<String> = BTreeSet::new();
    for (i, example) in examples.iter().enumerate() {
        let r = host
            .call(CallRequest::new(&d.name, example.clone()).mode(mode))
            .await;
        let (verdict, detail) = judge(&r, tool, mode, Ran::Example, &mut asks);
        report.push_ran(format!("example:{}[{i}]", d.name), verdict, detail, mode);
    }
    check_generated(report, host, tool, generated, mode, &mut asks).await;
    if !asks.is_empty() {
        report.push(
            format!("network:{}", d.name),
            Verdict::Warn,
            format!(
                "its calls ask for {}: a policy must grant these (`[network] allow` or `ask`, or a rule's `network`) for such calls to reach them",
                asks.into_iter().collect::<Vec<_>>().join(", ")
            ),
        );
    }
}

/// The rows of a tool whose minimum mode is wider than conformance runs
/// anything in: neither its examples nor generated arguments run.
fn skip_wide(report: &mut Report, tool: &RegisteredTool, has_examples: bool) {
    let d = &tool.descriptor;
    let not_run = format!(
        "needs {}; conformance runs a checked tool's calls in a throwaway workspace, never wider than {WIDEST_CHECK_MODE}",
        d.min_mode
    );
    if has_examples {
        report.push(
            format!("examples:{}", d.name),
            Verdict::Warn,
            format!("examples not run: {not_run}"),
        );
    }
    report.push(
        format!("generated:{}", d.name),
        Verdict::Warn,
        format!("the body was not run with generated arguments: {not_run}"),
    );
}

/// An object generated from the input schema that the host's own validator
/// accepts, or why there is none.
fn generated_args(tool: &RegisteredTool) -> Result<Value, String> {
    let args = valid_args(&tool.descriptor.input_schema)?;
    tool.validate_args(&args).map_err(|e| {
        format!("the generator made {args}, which the schema refuses ({e}); it handles required properties, types, enums, const, bounds, lengths and simple patterns")
    })?;
    Ok(args)
}

/// `generated:NAME`: the body run with the generated object.
async fn check_generated(
    report: &mut Report,
    host: &Host,
    tool: &RegisteredTool,
    generated: Result<Value, String>,
    mode: SandboxMode,
    asks: &mut BTreeSet<String>,
) {
    let name = &tool.descriptor.name;
    let row = format!("generated:{name}");
    let args = match generated {
        Ok(args) => args,
        Err(why) => {
            report.push(
                row,
                Verdict::Warn,
                format!(
                    "no argument object could be generated from the input schema, so the body ran only with the examples (if any): {why}"
                ),
            );
            return;
        }
    };
    let r = host
        .call(CallRequest::new(name, args.clone()).mode(mode))
        .await;
    let (verdict, detail) = judge(&r, tool, mode, Ran::Generated(&args), asks);
    report.push_ran(row, verdict, detail, mode);
}

/// `invalid-args:NAME`: a value the schema refuses (one generated from the
/// valid object first, else a few fixed probes) is refused with
/// `INVALID_ARGS` before the body.
async fn check_invalid_args(
    report: &mut Report,
    host: &Host,
    tool: &RegisteredTool,
    valid: Option<&Value>,
    mode: SandboxMode,
) {
    let d = &tool.descriptor;
    let row = format!("invalid-args:{}", d.name);
    let Some((bad, what)) = invalid_value(tool, valid) else {
        report.push(
            row,
            Verdict::Warn,
            "the input schema accepts every value; nothing to refuse",
        );
        return;
    };
    let r = host
        .call(CallRequest::new(&d.name, bad.clone()).mode(mode))
        .await;
    if r.code() == Some(ErrorCode::InvalidArgs) && r.receipt.mode.is_none() {
        report.push_ran(
            row,
            Verdict::Pass,
            format!("{bad} ({what}) refused with INVALID_ARGS before the body"),
            mode,
        );
    } else {
        report.push_ran(
            row,
            Verdict::Fail,
            format!(
                "{bad} ({what}) was not refused before the body: {:?}",
                r.code()
            ),
            mode,
        );
    }
}

/// A value the tool's input schema refuses: the generated object changed
/// in one place, else one of a few probes.
fn invalid_value(tool: &RegisteredTool, valid: Option<&Value>) -> Option<(Value, String)> {
    let derived = valid
        .map(|v| invalid_args(&tool.descriptor.input_schema, v))
        .unwrap_or_default();
    let probes = [
        serde_json::json!([]),
        serde_json::json!(42),
        serde_json::json!("not an object"),
        serde_json::json!(null),
        serde_json::json!({ "__toolhost_conformance_unexpected__": true }),
    ]
    .into_iter()
    .map(|p| (p, "a probe".to_string()));
    derived
        .into_iter()
        .map(|(v, what)| (v, format!("generated: {what}")))
        .chain(probes)
        .find(|(c, _)| tool.validate_args(c).is_err())
}

/// What a call's arguments were.
enum Ran<'a> {
    /// One of the schema's examples: every error fails it.
    Example,
    /// Generated: the tool may refuse them with its own error.
    Generated(&'a Value),
}

/// The verdict and detail of a call, and the destinations it wanted
/// (added to `asks`).
fn judge(
    r: &CallResult,
    tool: &RegisteredTool,
    mode: SandboxMode,
    ran: Ran<'_>,
    asks: &mut BTreeSet<String>,
) -> (Verdict, String) {
    let wanted = destinations(&r.receipt.network);
    asks.extend(wanted.iter().cloned());
    let with = match ran {
        Ran::Example => String::new(),
        Ran::Generated(args) => format!(" with generated arguments {args}"),
    };
    let side_effect = tool.descriptor.side_effect;
    match &r.error {
        // A tool that does not declare `external` is granted no network by
        // any policy: the call can never run.
        _ if !wanted.is_empty() && side_effect != SideEffect::External => (
            Verdict::Fail,
            format!(
                "ran in {mode}{with} and tried to reach {}, but the tool declares side effect {side_effect}: only tools that declare `external` are granted network, whatever the policy",
                wanted.join(", "),
            ),
        ),
        None => (
            Verdict::Pass,
            format!(
                "ran in {mode} (throwaway workspace, no network){with}, and its output satisfies the output schema"
            ),
        ),
        // Refused network, not a broken contract: say what a policy must
        // grant for the call to run.
        Some(e) if !wanted.is_empty() => (
            Verdict::Warn,
            format!(
                "ran in {mode}{with} without network and ended {}: it needs {}; grant it in the policy's [network] (or a rule's network) to run this call",
                e.code,
                wanted.join(", ")
            ),
        ),
        // Generated arguments are not the author's: the tool may refuse
        // them, in its own words.
        Some(e) if e.code == ErrorCode::ToolError && matches!(ran, Ran::Generated(_)) => (
            Verdict::Pass,
            format!(
                "ran in {mode}{with} and refused them with its own error ({}), as a tool may refuse arguments its schema allows; it did not trap",
                e.message
            ),
        ),
        Some(e) => (
            Verdict::Fail,
            format!("ran in {mode}{with}: {}: {}", e.code, e.message),
        ),
    }
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
