//! Recurses without end (through a function pointer, so the compiler
//! cannot turn it into a loop): the stack overflow must end with TRAP.

#[path = "../shared/echo.rs"]
mod echo;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Args {}

#[derive(Serialize, JsonSchema)]
struct Out {
    sum: u64,
}

#[inline(never)]
fn down(n: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    let next: fn(u64) -> u64 = std::hint::black_box(down);
    next(n - 1).wrapping_add(n)
}

struct DeepRecursion;

impl Tool for DeepRecursion {
    const NAME: &'static str = "deep_recursion";
    const DESCRIPTION: &'static str = "Recurses u64::MAX levels deep.";
    type Args = Args;
    type Output = Out;
    fn run(_: Args) -> Result<Out, ToolError> {
        Ok(Out {
            sum: down(std::hint::black_box(u64::MAX)),
        })
    }
}

toolhost_guest::export_tools!(DeepRecursion, echo::Echo);

fn main() {}
