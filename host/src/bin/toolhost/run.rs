//! `toolhost run`: one governed call, or a batch, and its result printed.

use crate::UsageError;
use crate::args::RunArgs;
use crate::host::{build_host, recover_approvals};
use crate::status::run_status;
use anyhow::{Context, anyhow};
use std::path::Path;
use std::process::ExitCode;
use toolhost::{CallRequest, CallResult, ContentItem, Host, Interrupt};

/// Runs the call (or the batch) and prints its result; the exit status is
/// [`run_status`]'s.
pub(crate) async fn run(a: RunArgs) -> Result<ExitCode, UsageError> {
    let component = a.tool.as_deref().filter(|t| is_component_path(t));
    let host = build_host(&a.host, component).await.map_err(UsageError)?;
    recover_approvals(&a.host).await;
    let interrupt = Interrupt::default();
    let on_ctrl_c = interrupt.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("toolhost: cancelling (waiting for the tool to stop)...");
            on_ctrl_c.cancel();
        }
    });
    if let Some(batch) = &a.batch {
        return run_batch(&host, &a, batch, interrupt).await;
    }
    let name = tool_name(&a, component, &host)?;
    let mut request = CallRequest {
        tool: name,
        args: a.args.clone(),
        scope: a.host.scope.clone(),
        mode: a.host.mode,
        principal: a.host.principal.clone(),
        interrupt: Some(interrupt),
        ..CallRequest::default()
    };
    if let Some(mode) = a.escalate {
        request = request.escalate(mode, a.justification.clone().unwrap_or_default());
    }
    let result = host.call(request).await;
    let flushed = flush_before_printing(&host);
    print_result(&result, a.json);
    Ok(ExitCode::from(run_status(flushed, result.is_ok())))
}

/// The tool to call: the name given, or the one tool a component file
/// offers (`--tool` picks one of several).
fn tool_name(a: &RunArgs, component: Option<&str>, host: &Host) -> Result<String, UsageError> {
    let tool_arg = a.tool.clone().unwrap_or_default();
    Ok(match (component, &a.tool_name) {
        // `--tool` picks a tool inside a component file; beside a tool
        // name it could only contradict it.
        (None, Some(n)) if a.tool.as_ref().is_some_and(|t| t != n) => {
            return Err(UsageError(anyhow!(
                "{tool_arg} is a tool name, and --tool {n} names another; --tool picks a tool inside a .wasm component given as the first argument"
            )));
        }
        (_, Some(n)) => n.clone(),
        (Some(_), None) => {
            let tools = host.tools(a.host.scope.as_deref());
            match tools.as_slice() {
                [one] => one.descriptor.name.clone(),
                many => {
                    let names: Vec<_> = many.iter().map(|t| t.descriptor.name.as_str()).collect();
                    return Err(UsageError(anyhow!(
                        "{tool_arg} offers several tools ({}); pick one with --tool NAME",
                        names.join(", ")
                    )));
                }
            }
        }
        (None, None) => tool_arg,
    })
}

fn is_component_path(tool: &str) -> bool {
    tool.ends_with(".wasm") || Path::new(tool).is_file()
}

/// Flushes the session log before a result is printed; false (and says so
/// on stderr) when that failed: the call's result is then not recorded, and
/// the log will report the call `TOOL_OUTCOME_UNKNOWN`.
fn flush_before_printing(host: &Host) -> bool {
    match host.log().flush() {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "error: the session log could not be flushed ({e}): the result below is not recorded, and the log will report the call TOOL_OUTCOME_UNKNOWN"
            );
            false
        }
    }
}

/// Runs `--batch FILE`'s calls as one step and prints their results.
async fn run_batch(
    host: &Host,
    a: &RunArgs,
    file: &Path,
    interrupt: Interrupt,
) -> Result<ExitCode, UsageError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Item {
        tool: String,
        #[serde(default)]
        args: serde_json::Value,
    }
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read batch file {}", file.display()))
        .map_err(UsageError)?;
    let items: Vec<Item> = serde_json::from_str(&text)
        .with_context(|| {
            format!(
                "{} is not a JSON array of {{\"tool\", \"args\"}} objects",
                file.display()
            )
        })
        .map_err(UsageError)?;
    let requests = items
        .into_iter()
        .map(|i| CallRequest {
            tool: i.tool,
            args: if i.args.is_null() {
                "{}".into()
            } else {
                i.args.to_string()
            },
            scope: a.host.scope.clone(),
            mode: a.host.mode,
            principal: a.host.principal.clone(),
            interrupt: Some(interrupt.clone()),
            ..CallRequest::default()
        })
        .collect();
    let results = host.call_batch(requests).await;
    let flushed = flush_before_printing(host);
    if a.json {
        outln!("{}", serde_json::to_string(&results).unwrap_or_default());
    } else {
        for r in &results {
            print_result(r, false);
        }
    }
    Ok(ExitCode::from(run_status(
        flushed,
        results.iter().all(CallResult::is_ok),
    )))
}

/// Prints a result: the whole of it as JSON, or its content, or its error
/// on stderr.
fn print_result(result: &CallResult, json: bool) {
    if json {
        outln!("{}", serde_json::to_string(result).unwrap_or_default());
        return;
    }
    match &result.error {
        None => {
            for c in &result.content {
                let text = terminal_text(c);
                out!("{text}");
                if !text.ends_with('\n') {
                    outln!();
                }
            }
        }
        Some(e) => eprintln!(
            "error: {}: {} [{} {}]",
            e.code, e.message, result.tool, result.call_id
        ),
    }
}

/// What a terminal shows of one content item: its text, or what it is.
fn terminal_text(c: &ContentItem) -> String {
    match c {
        ContentItem::Text { text } => text.clone(),
        // Media and resources are for clients (`--json`, MCP);
        // a terminal gets what they are.
        ContentItem::Image { mime_type, data } | ContentItem::Audio { mime_type, data } => {
            format!("[{mime_type}, {} bytes in base64; see --json]", data.len())
        }
        ContentItem::ResourceLink { uri, .. } => format!("[link: {uri}]"),
        ContentItem::Resource { resource } => match &resource.text {
            Some(t) => t.clone(),
            None => format!("[resource {}; see --json]", resource.uri),
        },
    }
}
