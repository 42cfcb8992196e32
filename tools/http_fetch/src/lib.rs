//! `http_fetch {url, method?, headers?, body?, max_body_bytes?, response_headers?}`:
//! one HTTP GET or POST through the host's governed egress.
//!
//! The host decides the request against the call's network grants
//! (`[network]` in the policy); without a grant it fails with
//! `HTTP-request-denied`, and the tool returns that code as its error.
//! Credentials are attached by the host, never seen here. Redirects are not
//! followed: a 3xx comes back with its `location` header.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use toolhost_guest::http::{HttpRequest, send};
use toolhost_guest::{SandboxMode, SideEffect, Tool, ToolError};

/// The largest body this tool returns (1 MiB).
const MAX_BODY: usize = 1 << 20;
/// The body returned when the call does not say (64 KiB).
const DEFAULT_BODY: usize = 64 << 10;

/// The methods this tool sends.
#[derive(Deserialize, JsonSchema, Clone, Copy, Default)]
pub enum Method {
    /// `GET` (the default).
    #[default]
    #[serde(rename = "GET")]
    Get,
    /// `POST`, with `body`.
    #[serde(rename = "POST")]
    Post,
}

/// Arguments of `http_fetch`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({"url": "https://example.com/"}))]
pub struct Args {
    /// An absolute `http://` or `https://` URL.
    pub url: String,
    /// `GET` (default) or `POST`.
    #[serde(default)]
    pub method: Method,
    /// Request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The request body (text), for `POST`.
    pub body: Option<String>,
    /// At most this many body bytes are returned (default 65536, at most
    /// 1048576); a longer body is cut and `truncated` is set.
    pub max_body_bytes: Option<u32>,
    /// Response headers to return (lower case); default: content-type,
    /// content-length, location, etag, last-modified.
    pub response_headers: Option<Vec<String>>,
}

/// The response.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The status code.
    pub status: u16,
    /// The selected response headers (values joined with `, `).
    pub headers: BTreeMap<String, String>,
    /// The body as text (invalid UTF-8 replaced), at most `max_body_bytes`.
    pub body: String,
    /// True when the body was cut.
    pub truncated: bool,
}

/// The `http_fetch` tool.
pub struct HttpFetch;

impl Tool for HttpFetch {
    const NAME: &'static str = "http_fetch";
    const DESCRIPTION: &'static str = "Sends one HTTP GET or POST and returns the status, selected headers and the body as text (capped). Only hosts the policy grants are reachable; redirects are not followed.";
    const MIN_MODE: SandboxMode = SandboxMode::None;
    const SIDE_EFFECT: SideEffect = SideEffect::External;
    const CONCURRENCY_SAFE: bool = true;
    type Args = Args;
    type Output = Output;

    fn run(args: Args) -> Result<Output, ToolError> {
        let max = args
            .max_body_bytes
            .map_or(DEFAULT_BODY, |m| m as usize)
            .min(MAX_BODY);
        let (method, body) = match args.method {
            Method::Get => ("GET", None),
            Method::Post => ("POST", Some(args.body.unwrap_or_default().into_bytes())),
        };
        let request = HttpRequest {
            method: method.to_string(),
            url: args.url,
            headers: args.headers.into_iter().collect(),
            body,
        };
        let response = send(&request, max).map_err(|f| ToolError::new(&f.code, f.message))?;
        let wanted: Vec<String> = args
            .response_headers
            .unwrap_or_else(|| {
                [
                    "content-type",
                    "content-length",
                    "location",
                    "etag",
                    "last-modified",
                ]
                .map(String::from)
                .to_vec()
            })
            .into_iter()
            .map(|h| h.to_ascii_lowercase())
            .collect();
        let mut headers: BTreeMap<String, String> = BTreeMap::new();
        for (name, value) in &response.headers {
            let name = name.to_ascii_lowercase();
            if wanted.contains(&name) {
                let value = String::from_utf8_lossy(value).into_owned();
                headers
                    .entry(name)
                    .and_modify(|v| {
                        v.push_str(", ");
                        v.push_str(&value);
                    })
                    .or_insert(value);
            }
        }
        Ok(Output {
            status: response.status,
            headers,
            // Valid UTF-8 (the usual body) is taken as it is, checked a
            // word at a time; only an invalid one is copied, replaced.
            body: String::from_utf8(response.body)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            truncated: response.truncated,
        })
    }

    fn content(output: &Output) -> Vec<toolhost_guest::Content> {
        vec![toolhost_guest::Content::text(format!(
            "HTTP {}{}\n\n{}",
            output.status,
            if output.truncated {
                " (body truncated)"
            } else {
                ""
            },
            output.body
        ))]
    }
}

toolhost_guest::export_tools!(HttpFetch);
