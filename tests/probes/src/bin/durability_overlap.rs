//! Two tools that detect overlapping bodies with a marker file in the
//! workspace: a body creates `overlap.marker` with `create_new`, sleeps, and
//! removes it; if the marker already exists another body is running at the
//! same time, and the call fails with "overlap detected".
//!
//! `overlap` is not concurrency-safe, so the host must never run two at once.
//! `overlap_unsafe` is the same body declared concurrency-safe (and sleeping
//! longer), so a batch of them must detect the overlap: that proves the
//! detector works.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::ErrorKind;
use toolhost_guest::{SandboxMode, SideEffect, Tool, ToolError};

const MARKER: &str = "overlap.marker";

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {}

#[derive(Serialize, JsonSchema)]
struct Out {
    slept_ms: u64,
}

fn exclusive_body(ms: u64) -> Result<Out, ToolError> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(MARKER)
    {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            return Err(ToolError::new(
                "overlap",
                "overlap detected: another body holds the marker",
            ));
        }
        Err(e) => return Err(e.into()),
    }
    std::thread::sleep(std::time::Duration::from_millis(ms));
    std::fs::remove_file(MARKER)?;
    Ok(Out { slept_ms: ms })
}

struct Overlap;

impl Tool for Overlap {
    const NAME: &'static str = "overlap";
    const DESCRIPTION: &'static str =
        "Fails with \"overlap detected\" if another call runs at the same time.";
    const MIN_MODE: SandboxMode = SandboxMode::WorkspaceWrite;
    const SIDE_EFFECT: SideEffect = SideEffect::Write;
    type Args = Args;
    type Output = Out;
    fn run(_: Args) -> Result<Out, ToolError> {
        exclusive_body(30)
    }
}

struct OverlapUnsafe;

impl Tool for OverlapUnsafe {
    const NAME: &'static str = "overlap_unsafe";
    const DESCRIPTION: &'static str = "The overlap detector, wrongly declared concurrency-safe.";
    const MIN_MODE: SandboxMode = SandboxMode::WorkspaceWrite;
    const SIDE_EFFECT: SideEffect = SideEffect::Write;
    const CONCURRENCY_SAFE: bool = true;
    type Args = Args;
    type Output = Out;
    fn run(_: Args) -> Result<Out, ToolError> {
        exclusive_body(150)
    }
}

toolhost_guest::export_tools!(Overlap, OverlapUnsafe);

fn main() {}
