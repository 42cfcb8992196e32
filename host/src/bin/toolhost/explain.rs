//! `toolhost explain`: what a call would meet, layer by layer; runs nothing.

use crate::args::ExplainArgs;
use crate::host::build_host_with;
use anyhow::{Result, anyhow};
use std::process::ExitCode;
use toolhost::{Answer, CallRequest, Explanation};

/// `toolhost explain`: the call's way through the pipeline up to the
/// approver, without running it. Uses an in-memory log, so it works beside
/// a server that holds the state directory.
pub(crate) async fn explain(a: ExplainArgs) -> Result<ExitCode> {
    let log = toolhost::log::SessionLog::in_memory().map_err(|e| anyhow!("{e}"))?;
    let host = build_host_with(&a.host, None, true, true, |b| {
        b.session_log(std::sync::Arc::new(log));
    })
    .await?;
    let mut request = CallRequest {
        tool: a.tool.clone(),
        args: a.args.clone(),
        scope: a.host.scope.clone(),
        mode: a.host.mode,
        principal: a.host.principal.clone(),
        ..CallRequest::default()
    };
    if let Some(mode) = a.escalate {
        request = request.escalate(mode, a.justification.clone().unwrap_or_default());
    }
    let e = host.explain(&request);
    if a.json {
        outln!("{}", serde_json::to_string(&e)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_explanation(&e);
    Ok(ExitCode::SUCCESS)
}

/// Prints an explanation for a terminal: the call, its patches, each
/// layer's view, the guards and the answer.
fn print_explanation(e: &Explanation) {
    outln!(
        "{} as {} (scope {}, mode {})",
        e.tool,
        e.principal,
        e.scope.as_deref().unwrap_or("global"),
        e.mode
    );
    for p in &e.patches {
        outln!("  patch     {p}");
    }
    for l in &e.layers {
        let get = |k: &str| l.get(k).and_then(|v| v.as_str()).unwrap_or("");
        let seen = match l.get("hidden_by").and_then(|v| v.as_str()) {
            None => "visible".to_string(),
            Some(rule) => format!("HIDDEN by {rule}"),
        };
        let decision = match get("decision") {
            "" => "no opinion".to_string(),
            d => format!("{d} ({})", get("rule")),
        };
        outln!("  {:<28} {seen}; {decision}", get("layer"));
        if let Some(reason) = l.get("reason").and_then(|v| v.as_str()) {
            outln!("  {:<28}   reason: {reason}", "");
        }
        if let Some(g) = l.get("guard").filter(|g| !g.is_null()) {
            outln!("  {:<28}   guard denies: {g}", "");
        }
    }
    match &e.guard {
        Some(g) => outln!("  {:<28} {g}", "guards"),
        None if !e.layers.is_empty() => outln!("  {:<28} pass", "guards"),
        None => {}
    }
    match &e.answer {
        Answer::Allow => outln!("answer: allow (nobody is asked)"),
        Answer::Ask { reason, approver } => {
            outln!("answer: ask approver {approver}: {reason}")
        }
        Answer::Refused { code, message } => {
            outln!("answer: refused {code}: {message}")
        }
    }
}
