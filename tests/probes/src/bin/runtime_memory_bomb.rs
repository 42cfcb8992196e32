//! Allocates (and touches) 1 MiB blocks until allocation fails: the call
//! must end with MEMORY_LIMIT, not a generic trap.

#[path = "../shared/echo.rs"]
mod echo;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Args {}

#[derive(Serialize, JsonSchema)]
struct Out {
    blocks: usize,
}

struct MemoryBomb;

impl Tool for MemoryBomb {
    const NAME: &'static str = "memory_bomb";
    const DESCRIPTION: &'static str = "Grows a vector of 1 MiB blocks without end.";
    type Args = Args;
    type Output = Out;
    fn run(_: Args) -> Result<Out, ToolError> {
        let mut blocks: Vec<Vec<u8>> = Vec::new();
        loop {
            blocks.push(std::hint::black_box(vec![0xa5u8; 1 << 20]));
            if std::hint::black_box(blocks.len()) == usize::MAX {
                return Ok(Out {
                    blocks: blocks.len(),
                });
            }
        }
    }
}

toolhost_guest::export_tools!(MemoryBomb, echo::Echo);

fn main() {}
