//! `fetch`: sends a GET to its `url`, while declaring side effect `none`.
//! The `contract::contract_undeclared_network` test checks that
//! `toolhost conformance` fails its example: no policy grants network to a
//! tool that does not declare `external`, so the example can never run.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::http::{HttpRequest, send};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({"url": "https://example.com/"}))]
struct Args {
    url: String,
}

#[derive(Serialize, JsonSchema)]
struct Out {
    status: u16,
}

struct Fetch;

impl Tool for Fetch {
    const NAME: &'static str = "fetch";
    const DESCRIPTION: &'static str = "Sends a GET to `url` (declaring no side effect).";
    type Args = Args;
    type Output = Out;
    fn run(args: Args) -> Result<Out, ToolError> {
        let request = HttpRequest {
            method: "GET".to_string(),
            url: args.url,
            headers: Vec::new(),
            body: None,
        };
        let response = send(&request, 1024).map_err(|f| ToolError::new(&f.code, f.message))?;
        Ok(Out {
            status: response.status,
        })
    }
}

toolhost_guest::export_tools!(Fetch);

fn main() {}
