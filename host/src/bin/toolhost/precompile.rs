//! `toolhost precompile DIR...`: every tool of the directories (or files)
//! compiled into the compile cache, and its descriptors cached, ahead of
//! `serve`: the first load of a tool compiles it (seconds for an
//! interpreter-based Python or JavaScript tool), every later load of the
//! same bytes, by any command, maps the cached code.
//!
//! Each tool is loaded on its own, in turn, as a host build loads it, and
//! the cache's counters tell what that load did: compiled, or already
//! cached. A tool that does not load is reported with its reason, and the
//! command exits 1.

use crate::args::PrecompileArgs;
use crate::host::{ToolFile, tools_dir_entries};
use anyhow::{Result, anyhow, bail};
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;
use toolhost::{HostBuilder, Runtime, RuntimeOptions};

/// What loading one tool source did.
#[derive(Serialize)]
struct Warmed {
    /// The file.
    source: String,
    /// `compiled`, `cached` or `failed`.
    outcome: &'static str,
    /// The tools it offers, or why it failed.
    detail: String,
    /// How long the load took, in seconds.
    seconds: f64,
}

/// Compiles every tool of the given directories and files into the cache.
pub(crate) async fn precompile(a: PrecompileArgs) -> Result<ExitCode> {
    let mut options = RuntimeOptions {
        fuel: a.fuel,
        ..RuntimeOptions::default()
    };
    if let Some(c) = &a.cache {
        options.cache_dir = Some(c.clone());
    }
    let runtime = Arc::new(Runtime::new(options).map_err(|e| anyhow!("{e}"))?);
    let Some(cache) = runtime.cache_dir().map(Path::to_path_buf) else {
        bail!(
            "no usable compile cache (see the warning above, or set --cache DIR or TOOLHOST_CACHE_DIR): nothing precompiled would be kept"
        );
    };
    let workspace = tempfile::tempdir()
        .map_err(|e| anyhow!("cannot make a temporary workspace in TMPDIR: {e}"))?;
    let mut results = Vec::new();
    for path in &a.paths {
        for file in sources_of(path)? {
            results.push(warm(&runtime, &file, workspace.path()).await);
        }
    }
    print(&results, &cache, a.json)?;
    Ok(if results.iter().any(|r| r.outcome == "failed") {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The tool sources of a directory, or the file itself.
fn sources_of(path: &Path) -> Result<Vec<ToolFile>> {
    if path.is_dir() {
        return tools_dir_entries(path);
    }
    let manifest = path
        .to_str()
        .is_some_and(|s| s.ends_with(toolhost::manifest::MANIFEST_SUFFIX));
    Ok(vec![if manifest {
        ToolFile::Manifest(path.to_path_buf())
    } else {
        ToolFile::Component(path.to_path_buf())
    }])
}

/// Loads one source as a host build does, and tells from the cache's
/// counters whether that compiled it.
async fn warm(runtime: &Arc<Runtime>, file: &ToolFile, workspace: &Path) -> Warmed {
    let mut b = HostBuilder::new();
    b.runtime(runtime.clone()).workspace(workspace);
    let path = match file {
        ToolFile::Manifest(m) => {
            b.program_tool_file(m);
            m
        }
        ToolFile::Component(c) => {
            b.tool_file(c);
            c
        }
    };
    let compiles = || runtime.cache_stats().compiles.load(Ordering::Relaxed);
    let before = compiles();
    let started = Instant::now();
    let built = b.build().await;
    let seconds = started.elapsed().as_secs_f64();
    let source = path.display().to_string();
    match built {
        Ok(host) => {
            let names: Vec<String> = host
                .tools(None)
                .iter()
                .map(|t| t.descriptor.name.clone())
                .collect();
            Warmed {
                source,
                outcome: if compiles() > before {
                    "compiled"
                } else {
                    "cached"
                },
                detail: names.join(", "),
                seconds,
            }
        }
        Err(e) => Warmed {
            source,
            outcome: "failed",
            detail: e.to_string(),
            seconds,
        },
    }
}

/// The report: one line per source and a summary, or one JSON array.
fn print(results: &[Warmed], cache: &Path, json: bool) -> Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(results)?);
        return Ok(());
    }
    outln!("compile cache {}", cache.display());
    for r in results {
        let outcome = match r.outcome {
            "compiled" => "compiled",
            "cached" => "already cached",
            _ => "FAILED",
        };
        outln!(
            "  {outcome:<15} {} ({:.1} s): {}",
            r.source,
            r.seconds,
            toolhost::runtime::printable(&r.detail)
        );
    }
    let count = |o: &str| results.iter().filter(|r| r.outcome == o).count();
    outln!(
        "{}: {} compiled, {} already cached, {} failed",
        toolhost::conformance::counted(results.len(), "tool source"),
        count("compiled"),
        count("cached"),
        count("failed")
    );
    Ok(())
}
