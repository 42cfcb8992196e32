//! Computes forever: the epoch deadline must stop it (TIMEOUT), close to
//! the deadline, and the host must serve the next call.

#[path = "../shared/echo.rs"]
mod echo;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Args {}

#[derive(Serialize, JsonSchema)]
struct Out {
    n: u64,
}

struct Spin;

impl Tool for Spin {
    const NAME: &'static str = "spin";
    const DESCRIPTION: &'static str = "Loops forever without calling the host.";
    type Args = Args;
    type Output = Out;
    fn run(_: Args) -> Result<Out, ToolError> {
        let mut n = 0u64;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
            if std::hint::black_box(false) {
                return Ok(Out { n });
            }
        }
    }
}

toolhost_guest::export_tools!(Spin, echo::Echo);

fn main() {}
