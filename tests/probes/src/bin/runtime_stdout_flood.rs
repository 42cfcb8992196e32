//! Writes 100 MiB to stdout and 1 MiB to stderr: captured output is
//! bounded and never traps, and the receipt counts every byte.

#[path = "../shared/echo.rs"]
mod echo;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Args {}

#[derive(Serialize, JsonSchema)]
struct Out {
    written: u64,
}

struct StdoutFlood;

impl Tool for StdoutFlood {
    const NAME: &'static str = "stdout_flood";
    const DESCRIPTION: &'static str = "Writes 100 MiB to stdout and 1 MiB to stderr.";
    type Args = Args;
    type Output = Out;
    fn run(_: Args) -> Result<Out, ToolError> {
        let chunk = vec![b'o'; 64 << 10];
        let mut out = std::io::stdout().lock();
        for _ in 0..1600 {
            out.write_all(&chunk)?;
        }
        out.flush()?;
        let mut err = std::io::stderr().lock();
        for _ in 0..16 {
            err.write_all(&chunk)?;
        }
        Ok(Out {
            written: 1600 * chunk.len() as u64,
        })
    }
}

toolhost_guest::export_tools!(StdoutFlood, echo::Echo);

fn main() {}
