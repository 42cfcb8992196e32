//! Records of egress: [`EgressRecord`] (one request as it goes in the
//! receipt and the session log) and [`redact_url`], which drops what a
//! record must not keep from a URL (userinfo, query, fragment).
//!
//! A record carries no header and no body, so it cannot carry a credential;
//! the URL's query is dropped because keys are often passed there. The path
//! is kept as the guest sent it. Its `error` is an error's message (never a
//! header's value); the host redacts the credentials it attaches from it,
//! as from the URL, before a record is written anywhere.

use crate::decision::Refusal;
use crate::grant::GrantRef;
use crate::request::{MAX_RECORDED_PATH, Request};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// The `error` of an admitted request's record until it starts (a request
/// exchanged in place starts when the guest first waits for its response
/// or asks for it; one in a task of its own, when its task first runs).
pub const NOT_SENT: &str = "not sent: it had not started when its call ended";

/// The `error` of a request's record from its start until its response's
/// head (or its failure): what stays when the exchange was dropped first.
pub const NO_RESPONSE: &str =
    "no response: the guest stopped waiting for it, or its call ended, first";

/// How a request ended at the policy level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum EgressOutcome {
    /// Allowed by this grant without asking.
    Allowed {
        /// The grant, as [`GrantRef`] displays.
        rule: String,
    },
    /// Allowed by this `ask` grant after an approval.
    Approved {
        /// The grant, as [`GrantRef`] displays.
        rule: String,
    },
    /// Refused before any connection.
    Refused {
        /// The stable code ([`Refusal::code`]).
        code: String,
        /// The message.
        reason: String,
    },
}

/// One request, for the receipt and the session log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressRecord {
    /// The HTTP method (`None` for sockets).
    pub method: Option<String>,
    /// `scheme://host:port/path`, without userinfo, query or fragment.
    pub url: String,
    /// The grant that allowed it, or why it was refused.
    #[serde(flatten)]
    pub outcome: EgressOutcome,
    /// The response status, when one came.
    pub status: Option<u16>,
    /// Response bytes received.
    pub bytes_in: u64,
    /// Request bytes sent.
    pub bytes_out: u64,
    /// Milliseconds from the request's start to the end of its response
    /// (as far as the guest read it) or its failure; 0 when it never
    /// started or was dropped before its response's head.
    pub ms: u64,
    /// Why an allowed request failed (its connection, a timeout, a limit,
    /// its body), that it got no response (`no response: ...`: dropped
    /// before its head came, by the guest or its call's end), or that it
    /// was never sent (`not sent: ...`: not started when its call ended).
    /// Absent when its response came and its body, as far as it was read,
    /// did not fail; and for refusals, whose reason says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Cow<'static, str>>,
}

impl EgressRecord {
    /// A record of an allowed request (counters at zero; fill them in as the
    /// request runs). `approved` tells an `ask` grant approved from an
    /// `allow` grant.
    pub fn allowed(request: &Request, path: &str, rule: &GrantRef, approved: bool) -> EgressRecord {
        let rule = rule.to_string();
        let outcome = if approved {
            EgressOutcome::Approved { rule }
        } else {
            EgressOutcome::Allowed { rule }
        };
        EgressRecord::new(request, path, outcome)
    }

    /// A record of a refused request.
    pub fn refused(request: &Request, path: &str, refusal: &Refusal) -> EgressRecord {
        EgressRecord::refused_with(request, path, refusal.code(), refusal.to_string())
    }

    /// A record of a request refused with `code` (a [`Refusal::code`], or
    /// the host's own: a per-call limit, a method it never sends) and
    /// `reason`.
    pub fn refused_with(request: &Request, path: &str, code: &str, reason: String) -> EgressRecord {
        EgressRecord::new(
            request,
            path,
            EgressOutcome::Refused {
                code: code.to_string(),
                reason,
            },
        )
    }

    /// A record of a request refused before it could be read as one (its
    /// scheme not HTTP, its URL or its method malformed): `method` and
    /// `url` as the guest gave them, bounded, the URL without userinfo or
    /// query.
    pub fn unreadable(method: &str, url: &str, code: &str, reason: String) -> EgressRecord {
        EgressRecord {
            method: Some(bounded(method, MAX_METHOD_BYTES).into_owned()),
            url: bounded(&redact_url(url), MAX_RECORDED_PATH).into_owned(),
            outcome: EgressOutcome::Refused {
                code: code.to_string(),
                reason,
            },
            status: None,
            bytes_in: 0,
            bytes_out: 0,
            ms: 0,
            error: None,
        }
    }

    fn new(request: &Request, path: &str, outcome: EgressOutcome) -> EgressRecord {
        EgressRecord {
            method: request
                .method
                .as_deref()
                .map(|m| bounded(m, MAX_METHOD_BYTES).into_owned()),
            url: request.url_without_query(path),
            outcome,
            status: None,
            bytes_in: 0,
            bytes_out: 0,
            ms: 0,
            error: None,
        }
    }
}

/// The longest method a request may have, in bytes (the standard ones and
/// WebDAV's are at most 17): the host refuses a longer one before anything
/// else, and records keep at most this much of any.
pub const MAX_METHOD_BYTES: usize = 32;

/// `text`, or its first `max` bytes (at a character boundary) and how many
/// more there were: what a record keeps of text a guest chose.
pub fn bounded(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!(
        "{}...[{} more bytes]",
        &text[..end],
        text.len() - end
    ))
}

/// Cuts `s` at the first `?` or `#`.
pub(crate) fn strip_query(s: &str) -> &str {
    s.find(['?', '#']).map_or(s, |i| &s[..i])
}

/// A URL without userinfo, query and fragment:
/// `https://user:pw@api.example.com/v1?key=x#f` becomes
/// `https://api.example.com/v1`. Works on any text (never panics); text
/// without `://` only loses its query and fragment.
pub fn redact_url(url: &str) -> String {
    let url = strip_query(url);
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    format!("{scheme}://{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a guest chose is kept bounded in a record: a long method, a
    /// long URL that could not be read as a request.
    #[test]
    fn records_keep_a_bounded_method_and_url() {
        let method = "A".repeat(1 << 20);
        let url = format!("ws://user:pw@h/{}?key=x", "p".repeat(1 << 20));
        let r = EgressRecord::unreadable(&method, &url, "unsupported_scheme", "why".into());
        let m = r.method.unwrap_or_default();
        assert!(m.starts_with(&"A".repeat(MAX_METHOD_BYTES)), "{m}");
        assert!(m.len() < 64, "{m}");
        assert!(r.url.starts_with("ws://h/ppp"), "{}", r.url);
        assert!(r.url.len() < MAX_RECORDED_PATH + 64, "{}", r.url.len());
        assert!(!r.url.contains("user") && !r.url.contains("key"));
        assert_eq!(bounded("été", 2), "é...[3 more bytes]");
    }

    #[test]
    fn urls_lose_userinfo_query_and_fragment() {
        let cases = [
            (
                "https://user:pw@api.example.com/v1?key=x#f",
                "https://api.example.com/v1",
            ),
            ("http://a@b@host:8080/p", "http://host:8080/p"),
            ("https://h/p?x@y", "https://h/p"),
            ("https://h?q", "https://h"),
            ("no scheme?x", "no scheme"),
            ("", ""),
            ("https://tok@h", "https://h"),
            ("https://user:pw\\@host/x", "https://host/x"),
        ];
        for (input, want) in cases {
            assert_eq!(redact_url(input), want, "{input}");
        }
    }
}
