//! A guest that drives `wasi:http/outgoing-handler.handle` directly.
//!
//! By default it sends every HTTP URL it is given (`GET`) before it waits
//! for any answer, then waits until the last one's response is in (and a
//! little longer for the first), and reports each request as answered or
//! still pending: `handle` must not wait for the network, so a request to a
//! server that never answers, sent first, must not hold back the requests
//! sent after it.
//!
//! With `sequential`, each request is sent, waited for, its body read (with
//! `read_body`) and everything about it dropped before the next: a guest
//! making many requests in turn. With `get_only`, each request is sent and
//! then only asked for its response (`get`), between sleeps on a timer,
//! never waited on itself. With `never_wait`, each request is sent and
//! dropped, never waited on nor asked for. Every request carries request
//! options when any timeout is given.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[cfg_attr(
    not(target_os = "wasi"),
    expect(dead_code, reason = "read only by the WASI build")
)]
struct Args {
    /// `http://host:port/path` URLs, sent in this order.
    http: Vec<String>,
    /// One request at a time, each dropped before the next.
    #[serde(default)]
    sequential: bool,
    /// Read each response's body to its end (sequential only).
    #[serde(default)]
    read_body: bool,
    /// Never wait on a response: ask for it (`get`) every 10 ms, at most
    /// 500 times.
    #[serde(default)]
    get_only: bool,
    /// Send each request and drop it, never waiting on it nor asking for
    /// it (each outcome is `dropped`).
    #[serde(default)]
    never_wait: bool,
    /// A pause after each part of a body read, in milliseconds (a guest
    /// that works between reads).
    pause_ms: Option<u64>,
    /// The request options' timeouts, in milliseconds.
    connect_timeout_ms: Option<u64>,
    first_byte_timeout_ms: Option<u64>,
    between_bytes_timeout_ms: Option<u64>,
}

#[derive(Serialize, JsonSchema)]
struct Out {
    /// Per URL, in order: `status N` (with `, B bytes` or `, body error
    /// ...` when the body is read), `error ...` or `pending`.
    outcomes: Vec<String>,
}

struct Concurrent;

impl Tool for Concurrent {
    const NAME: &'static str = "concurrent";
    const DESCRIPTION: &'static str =
        "Sends every URL before waiting, or one at a time; reports each.";
    const SIDE_EFFECT: toolhost_guest::SideEffect = toolhost_guest::SideEffect::External;
    type Args = Args;
    type Output = Out;
    fn run(args: Args) -> Result<Out, ToolError> {
        http::run(&args)
            .map(|outcomes| Out { outcomes })
            .map_err(|e| ToolError::new("probe", e))
    }
}

toolhost_guest::export_tools!(Concurrent);

#[cfg(target_os = "wasi")]
mod http {
    use super::Args;
    use wasip2::clocks::monotonic_clock;
    use wasip2::http::outgoing_handler::{self, FutureIncomingResponse};
    use wasip2::http::types::{Fields, OutgoingRequest, RequestOptions, Scheme};
    use wasip2::io::streams::StreamError;

    const MS: u64 = 1_000_000;

    fn options(args: &Args) -> Result<Option<RequestOptions>, String> {
        let timeouts = [
            args.connect_timeout_ms,
            args.first_byte_timeout_ms,
            args.between_bytes_timeout_ms,
        ];
        if timeouts.iter().all(Option::is_none) {
            return Ok(None);
        }
        let o = RequestOptions::new();
        o.set_connect_timeout(args.connect_timeout_ms.map(|t| t * MS))
            .map_err(|()| "connect timeout")?;
        o.set_first_byte_timeout(args.first_byte_timeout_ms.map(|t| t * MS))
            .map_err(|()| "first-byte timeout")?;
        o.set_between_bytes_timeout(args.between_bytes_timeout_ms.map(|t| t * MS))
            .map_err(|()| "between-bytes timeout")?;
        Ok(Some(o))
    }

    fn send(url: &str, args: &Args) -> Result<FutureIncomingResponse, String> {
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
        outgoing_handler::handle(request, options(args)?).map_err(|e| format!("handle: {e:?}"))
    }

    fn outcome(f: &FutureIncomingResponse, read_body: bool, pause_ms: Option<u64>) -> String {
        let response = match f.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(e))) => return format!("error {e:?}"),
            Some(Err(())) => return "error taken".to_string(),
            None => return "pending".to_string(),
        };
        let status = response.status();
        if !read_body {
            return format!("status {status}");
        }
        let Ok(body) = response.consume() else {
            return format!("status {status}, no body");
        };
        let Ok(stream) = body.stream() else {
            return format!("status {status}, no stream");
        };
        let mut bytes = 0;
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => {
                    bytes += chunk.len();
                    if let Some(ms) = pause_ms.filter(|_| !chunk.is_empty()) {
                        monotonic_clock::subscribe_duration(ms * MS).block();
                    }
                }
                Err(StreamError::Closed) => return format!("status {status}, {bytes} bytes"),
                Err(StreamError::LastOperationFailed(e)) => {
                    return format!("status {status}, body error {}", e.to_debug_string());
                }
            }
        }
    }

    pub fn run(args: &Args) -> Result<Vec<String>, String> {
        if args.never_wait {
            return args
                .http
                .iter()
                .map(|u| send(u, args).map(|_| "dropped".to_string()))
                .collect();
        }
        if args.get_only {
            let sent = args
                .http
                .iter()
                .map(|u| send(u, args))
                .collect::<Result<Vec<_>, _>>()?;
            // Each response is asked for until it comes, and not again
            // (a second `get` of a response taken is an error).
            let mut answered = vec![None; sent.len()];
            for _ in 0..500 {
                for (f, a) in sent.iter().zip(answered.iter_mut()) {
                    if a.is_none() {
                        *a = Some(outcome(f, false, None)).filter(|o| o != "pending");
                    }
                }
                if answered.iter().all(Option::is_some) {
                    break;
                }
                monotonic_clock::subscribe_duration(10 * MS).block();
            }
            return Ok(answered
                .into_iter()
                .map(|a| a.unwrap_or_else(|| "pending".to_string()))
                .collect());
        }
        if args.sequential {
            return args
                .http
                .iter()
                .map(|url| {
                    let f = send(url, args)?;
                    f.subscribe().block();
                    Ok(outcome(&f, args.read_body, args.pause_ms))
                })
                .collect();
        }
        let sent = args
            .http
            .iter()
            .map(|u| send(u, args))
            .collect::<Result<Vec<_>, _>>()?;
        let (first, last) = match (sent.first(), sent.last()) {
            (Some(first), Some(last)) => (first, last),
            _ => return Err("no URL".into()),
        };
        last.subscribe().block();
        // A little longer for the first, so that its connection is made
        // before the call ends (it stays pending for a server that never
        // answers).
        let linger = monotonic_clock::subscribe_duration(300 * MS);
        wasip2::io::poll::poll(&[&first.subscribe(), &linger]);
        Ok(sent.iter().map(|f| outcome(f, false, None)).collect())
    }
}

#[cfg(not(target_os = "wasi"))]
mod http {
    pub fn run(_: &super::Args) -> Result<Vec<String>, String> {
        Err("native".into())
    }
}

fn main() {}
