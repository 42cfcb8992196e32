//! A hostile guest that tries to learn a host-held credential from what it
//! can observe of responses: it sends each of its guesses in turn (the
//! request's body, which the test's servers reflect in their own ways) and
//! reports everything it saw of each response: the head, the size of each
//! read, the body, the trailers, the error, and when each came. The test
//! compares what a right guess (a prefix of the secret) and a wrong one
//! showed; a mask that leaks makes them differ.

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
    /// `http://host:port/path`, POSTed each guess as its body.
    url: String,
    /// The guesses, tried in turn: round `r` tries them in order when `r`
    /// is even, in reverse when it is odd (so that neither always goes
    /// first).
    guesses: Vec<String>,
    /// How many rounds.
    rounds: u32,
    /// The most bytes one read asks for.
    read: u64,
    /// Keep each body (in `body`); otherwise only its length.
    #[serde(default)]
    keep_body: bool,
}

/// What the guest saw of one response.
#[derive(Serialize, JsonSchema)]
struct Seen {
    /// Which guess (an index of `guesses`).
    guess: usize,
    status: Option<u16>,
    /// The head's fields, in order, as `name: value`.
    headers: Vec<String>,
    /// Each read's size, in order, zero-sized ones too.
    reads: Vec<u64>,
    body_len: u64,
    body: Option<String>,
    /// The trailers' fields as `name: value`, if the body had trailers.
    trailers: Option<Vec<String>>,
    /// The error that ended the request or its body, if any.
    error: Option<String>,
    /// Nanoseconds from `handle` to the head, from the head to the first
    /// read that gave bytes, and from `handle` to the body's end.
    head_ns: u64,
    first_ns: u64,
    end_ns: u64,
}

#[derive(Serialize, JsonSchema)]
struct Out {
    seen: Vec<Seen>,
}

struct Oracle;

impl Tool for Oracle {
    const NAME: &'static str = "oracle";
    const DESCRIPTION: &'static str =
        "POSTs each guess in turn and reports everything it saw of each response.";
    const SIDE_EFFECT: toolhost_guest::SideEffect = toolhost_guest::SideEffect::External;
    type Args = Args;
    type Output = Out;
    fn run(args: Args) -> Result<Out, ToolError> {
        http::run(&args)
            .map(|seen| Out { seen })
            .map_err(|e| ToolError::new("probe", e))
    }
}

toolhost_guest::export_tools!(Oracle);

#[cfg(target_os = "wasi")]
mod http {
    use super::{Args, Seen};
    use wasip2::clocks::monotonic_clock;
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{
        Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme,
    };
    use wasip2::io::streams::StreamError;

    fn fields(f: &Fields) -> Vec<String> {
        f.entries()
            .into_iter()
            .map(|(n, v)| format!("{n}: {}", String::from_utf8_lossy(&v)))
            .collect()
    }

    fn request(url: &str, body: &[u8]) -> Result<OutgoingRequest, String> {
        let rest = url.strip_prefix("http://").ok_or("not an http:// URL")?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let length = body.len().to_string().into_bytes();
        let head = Fields::from_list(&[("content-length".to_string(), length)])
            .map_err(|e| format!("fields: {e:?}"))?;
        let request = OutgoingRequest::new(head);
        request.set_method(&Method::Post).map_err(|()| "method")?;
        request
            .set_scheme(Some(&Scheme::Http))
            .map_err(|()| "scheme")?;
        request
            .set_authority(Some(authority))
            .map_err(|()| "authority")?;
        request
            .set_path_with_query(Some(path))
            .map_err(|()| "path")?;
        let outgoing = request.body().map_err(|()| "body")?;
        {
            let stream = outgoing.write().map_err(|()| "body stream")?;
            for chunk in body.chunks(4096) {
                stream
                    .blocking_write_and_flush(chunk)
                    .map_err(|e| format!("write: {e:?}"))?;
            }
        }
        OutgoingBody::finish(outgoing, None).map_err(|e| format!("finish: {e:?}"))?;
        Ok(request)
    }

    fn try_once(args: &Args, guess: usize) -> Result<Seen, String> {
        let mut seen = Seen {
            guess,
            status: None,
            headers: Vec::new(),
            reads: Vec::new(),
            body_len: 0,
            body: None,
            trailers: None,
            error: None,
            head_ns: 0,
            first_ns: 0,
            end_ns: 0,
        };
        let started = monotonic_clock::now();
        let since = |t: u64| t.saturating_sub(started);
        let r = request(&args.url, args.guesses[guess].as_bytes())?;
        let future = match outgoing_handler::handle(r, None) {
            Ok(f) => f,
            Err(e) => {
                seen.error = Some(format!("{e:?}"));
                seen.end_ns = since(monotonic_clock::now());
                return Ok(seen);
            }
        };
        future.subscribe().block();
        let response = match future.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(e))) => {
                seen.error = Some(format!("{e:?}"));
                seen.end_ns = since(monotonic_clock::now());
                return Ok(seen);
            }
            other => return Err(format!("no response: {}", other.is_some())),
        };
        let head = monotonic_clock::now();
        seen.head_ns = since(head);
        seen.status = Some(response.status());
        seen.headers = fields(&response.headers());
        let body = response.consume().map_err(|()| "consume")?;
        let mut bytes = Vec::new();
        {
            let stream = body.stream().map_err(|()| "stream")?;
            loop {
                stream.subscribe().block();
                match stream.read(args.read) {
                    Ok(chunk) => {
                        if !chunk.is_empty() && seen.first_ns == 0 {
                            seen.first_ns = monotonic_clock::now().saturating_sub(head);
                        }
                        seen.reads.push(chunk.len() as u64);
                        bytes.extend_from_slice(&chunk);
                    }
                    Err(StreamError::Closed) => break,
                    Err(StreamError::LastOperationFailed(e)) => {
                        seen.error = Some(e.to_debug_string());
                        break;
                    }
                }
            }
        }
        if seen.error.is_none() {
            let trailers = IncomingBody::finish(body);
            trailers.subscribe().block();
            match trailers.get() {
                Some(Ok(Ok(Some(t)))) => seen.trailers = Some(fields(&t)),
                Some(Ok(Ok(None))) => {}
                Some(Ok(Err(e))) => seen.error = Some(format!("trailers: {e:?}")),
                other => return Err(format!("no trailers: {}", other.is_some())),
            }
        }
        seen.end_ns = since(monotonic_clock::now());
        seen.body_len = bytes.len() as u64;
        if args.keep_body {
            seen.body = Some(String::from_utf8_lossy(&bytes).into_owned());
        }
        Ok(seen)
    }

    pub fn run(args: &Args) -> Result<Vec<Seen>, String> {
        let n = args.guesses.len();
        let mut seen = Vec::new();
        for round in 0..args.rounds {
            for i in 0..n {
                let guess = if round % 2 == 0 { i } else { n - 1 - i };
                seen.push(try_once(args, guess)?);
            }
        }
        Ok(seen)
    }
}

#[cfg(not(target_os = "wasi"))]
mod http {
    use super::{Args, Seen};

    pub fn run(_: &Args) -> Result<Vec<Seen>, String> {
        Err("wasi only".into())
    }
}
fn main() {}
