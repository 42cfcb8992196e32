//! Returns a result of `mib` MiB: above the output cap the call must end
//! with OUTPUT_TOO_LARGE. Also: an error message of `error_mib` MiB (with
//! a code of its choice, `error_code`, however long), and
//! `empty_blocks` empty content blocks (no text, but each a block the host
//! must carry).

#[path = "../shared/echo.rs"]
mod echo;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Args {
    mib: usize,
    #[serde(default)]
    error_mib: usize,
    #[serde(default)]
    empty_blocks: usize,
    /// The error's code, when it is not `flood` (an error of
    /// `error_mib` MiB, or of one `e` when that is 0), followed by
    /// `error_code_mib` MiB of `c`.
    #[serde(default)]
    error_code: Option<String>,
    #[serde(default)]
    error_code_mib: usize,
}

#[derive(Serialize, JsonSchema)]
struct Out {
    data: String,
    #[serde(skip)]
    blocks: usize,
}

struct OutputFlood;

impl Tool for OutputFlood {
    const NAME: &'static str = "output_flood";
    const DESCRIPTION: &'static str = "Returns a string of `mib` MiB.";
    type Args = Args;
    type Output = Out;
    fn run(args: Args) -> Result<Out, ToolError> {
        if let Some(code) = args.error_code {
            let code = format!("{code}{}", "c".repeat(args.error_code_mib << 20));
            return Err(ToolError::new(
                code,
                "e".repeat((args.error_mib << 20).max(1)),
            ));
        }
        if args.error_mib > 0 {
            return Err(ToolError::new("flood", "e".repeat(args.error_mib << 20)));
        }
        Ok(Out {
            data: "x".repeat(args.mib << 20),
            blocks: args.empty_blocks,
        })
    }

    fn content(out: &Out) -> Vec<toolhost_guest::Content> {
        if out.blocks == 0 {
            let json = serde_json::to_string(out).unwrap_or_default();
            return vec![toolhost_guest::Content::text(json)];
        }
        (0..out.blocks)
            .map(|_| toolhost_guest::Content::text(String::new()))
            .collect()
    }
}

toolhost_guest::export_tools!(OutputFlood, echo::Echo);

fn main() {}
