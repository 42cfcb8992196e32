//! `ticker {file}`: appends a line to `file` in the workspace every 20 ms,
//! forever. Cancelling the call must really stop it: the file stops growing.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use toolhost_guest::{SandboxMode, SideEffect, Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    file: String,
}

#[derive(Serialize, JsonSchema)]
struct Out {
    ticks: u64,
}

struct Ticker;

impl Tool for Ticker {
    const NAME: &'static str = "ticker";
    const DESCRIPTION: &'static str = "Appends a line to `file` every 20 ms until stopped.";
    const MIN_MODE: SandboxMode = SandboxMode::WorkspaceWrite;
    const SIDE_EFFECT: SideEffect = SideEffect::Write;
    type Args = Args;
    type Output = Out;
    fn run(args: Args) -> Result<Out, ToolError> {
        let mut ticks = 0u64;
        loop {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&args.file)?;
            writeln!(f, "tick {ticks}")?;
            drop(f);
            ticks += 1;
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

toolhost_guest::export_tools!(Ticker);

fn main() {}
