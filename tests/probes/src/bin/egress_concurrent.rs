//! A guest that sends every HTTP URL it is given (`GET`, through
//! `wasi:http/outgoing-handler.handle`) before it waits for any answer,
//! then waits until the last one's response is in, and reports each
//! request as answered or still pending. `handle` must not wait for the
//! network: a request to a server that never answers, sent first, must not
//! hold back the requests sent after it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// `http://host:port/path` URLs, sent in this order.
    http: Vec<String>,
}

#[derive(Serialize, JsonSchema)]
struct Out {
    /// Per URL, in order: `status N`, `error ...` or `pending`.
    outcomes: Vec<String>,
}

struct Concurrent;

impl Tool for Concurrent {
    const NAME: &'static str = "concurrent";
    const DESCRIPTION: &'static str =
        "Sends every URL before waiting; waits for the last; reports each.";
    const SIDE_EFFECT: toolhost_guest::SideEffect = toolhost_guest::SideEffect::External;
    type Args = Args;
    type Output = Out;
    fn run(args: Args) -> Result<Out, ToolError> {
        http::run(&args.http)
            .map(|outcomes| Out { outcomes })
            .map_err(|e| ToolError::new("probe", e))
    }
}

toolhost_guest::export_tools!(Concurrent);

#[cfg(target_os = "wasi")]
mod http {
    use wasip2::http::outgoing_handler::{self, FutureIncomingResponse};
    use wasip2::http::types::{Fields, OutgoingRequest, Scheme};

    fn send(url: &str) -> Result<FutureIncomingResponse, String> {
        let rest = url.strip_prefix("http://").ok_or("not an http:// URL")?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let request = OutgoingRequest::new(Fields::new());
        request
            .set_scheme(Some(&Scheme::Http))
            .map_err(|()| "scheme")?;
        request
            .set_authority(Some(authority))
            .map_err(|()| "authority")?;
        request
            .set_path_with_query(Some(path))
            .map_err(|()| "path")?;
        outgoing_handler::handle(request, None).map_err(|e| format!("handle: {e:?}"))
    }

    pub fn run(urls: &[String]) -> Result<Vec<String>, String> {
        let sent = urls
            .iter()
            .map(|u| send(u))
            .collect::<Result<Vec<_>, _>>()?;
        let last = sent.last().ok_or("no URL")?;
        last.subscribe().block();
        Ok(sent
            .iter()
            .map(|f| match f.get() {
                Some(Ok(Ok(response))) => format!("status {}", response.status()),
                Some(Ok(Err(e))) => format!("error {e:?}"),
                Some(Err(())) => "error taken".to_string(),
                None => "pending".to_string(),
            })
            .collect())
    }
}

#[cfg(not(target_os = "wasi"))]
mod http {
    pub fn run(_: &[String]) -> Result<Vec<String>, String> {
        Err("native".into())
    }
}

fn main() {}
