//! `toolhost list`: the tools, their descriptions and schemas; runs no call.

use crate::args::ListArgs;
use crate::host::{add_tools_dir, load_policy};
use anyhow::{Context, Result, anyhow};
use std::path::Path;
use std::process::ExitCode;
use toolhost::{HostBuilder, RegisteredTool};

/// Loads the tools as the flags say and prints those `--principal` sees.
pub(crate) async fn list(a: ListArgs) -> Result<ExitCode> {
    let mut b = HostBuilder::new();
    if a.paths.is_empty() {
        b.embedded_tools();
    }
    for p in &a.paths {
        if p.is_dir() {
            add_tools_dir(&mut b, p)?;
        } else if p
            .to_str()
            .is_some_and(|s| s.ends_with(toolhost::manifest::MANIFEST_SUFFIX))
        {
            b.program_tool_file(p);
        } else {
            b.tool_file(p);
        }
    }
    // Listing runs no call: unless one is given, an empty directory of its
    // own is the workspace (TMPDIR itself could hold the compile cache,
    // which may not be inside the workspace).
    let temporary;
    let workspace: &Path = match &a.workspace {
        Some(dir) => dir,
        None => {
            temporary = tempfile::tempdir().with_context(|| {
                format!(
                    "cannot make a temporary workspace in {} (TMPDIR); set TMPDIR to a \
                     writable directory, or pass --workspace DIR",
                    std::env::temp_dir().display()
                )
            })?;
            temporary.path()
        }
    };
    b.workspace(workspace);
    b.policy(load_policy(a.policy.as_deref())?);
    let host = b.build().await.map_err(|e| anyhow!("{e}"))?;
    let tools = host.tools_for(None, a.principal.as_deref(), None);
    print_tools(&tools, &a)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the tools: as a provider's declarations, as JSON, or one line each.
fn print_tools(tools: &[&RegisteredTool], a: &ListArgs) -> Result<()> {
    if let Some(provider) = a.schema_for {
        let all: Vec<_> = tools
            .iter()
            .map(|t| toolhost::schemas::provider_tool(provider, &t.descriptor))
            .collect();
        outln!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    if a.json {
        let all: Vec<_> = tools
            .iter()
            .map(|t| {
                let mut v = serde_json::to_value(t.descriptor.for_clients()).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("source".into(), t.source().into());
                    o.insert("imports".into(), t.imports().into());
                }
                v
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        for t in tools {
            let d = &t.descriptor;
            // The description is the tool's own text: its control
            // characters are shown escaped, so it cannot drive the terminal
            // or add rows of its own.
            let description = toolhost::runtime::printable(&d.description);
            outln!("{:<12} {:<16} {}", d.name, d.min_mode, description);
        }
    }
    Ok(())
}
