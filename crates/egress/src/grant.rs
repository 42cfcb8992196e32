//! Grants: [`Grant`] (one `scheme://host[:port]` pattern with optional
//! methods), its parts [`Scheme`] and [`HostPattern`], and [`GrantRef`], the
//! way a decision names the grant that matched.
//!
//! A grant is precise by construction: one scheme, one port (explicit, or the
//! scheme's default), one host (an exact name, a wildcard subdomain, or one
//! IP address in canonical form). There is no grant for "any host", nor of
//! an unspecified address ([`AddrClass::Unspecified`](crate::AddrClass::Unspecified)):
//! a connection to `0.0.0.0` or `::` goes to this host, to whatever listens
//! there.

use crate::addr::{AddrRisk, unspecified};
use crate::error::{GrantError, HostError, UrlError};
use crate::host::{DomainName, Host, Parsed, parse_host};
use crate::request::Request;
use serde::Serialize;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// What a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// `http` (wasi:http), default port 80.
    Http,
    /// `https` (wasi:http, TLS in the host), default port 443.
    Https,
    /// `tcp` (wasi:sockets), no default port.
    Tcp,
    /// `udp` (wasi:sockets), no default port.
    Udp,
}

impl Scheme {
    /// Every scheme.
    pub const ALL: [Scheme; 4] = [Scheme::Http, Scheme::Https, Scheme::Tcp, Scheme::Udp];

    /// The name as written in URLs and grants.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
            Scheme::Tcp => "tcp",
            Scheme::Udp => "udp",
        }
    }

    /// The default port (80 for http, 443 for https; none for sockets).
    pub fn default_port(self) -> Option<u16> {
        match self {
            Scheme::Http => Some(80),
            Scheme::Https => Some(443),
            Scheme::Tcp | Scheme::Udp => None,
        }
    }

    /// True for http and https, whose requests have methods.
    pub fn is_http(self) -> bool {
        matches!(self, Scheme::Http | Scheme::Https)
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scheme {
    type Err = UrlError;

    /// Case-insensitive, as URL schemes are.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scheme::ALL
            .into_iter()
            .find(|sc| sc.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UrlError::UnknownScheme {
                scheme: s.to_string(),
            })
    }
}

/// The host part of a grant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// Exactly this name.
    Exact(DomainName),
    /// Any strict subdomain of this name, at any depth (`*.example.com`
    /// matches `a.example.com` and `a.b.example.com`, not `example.com`),
    /// but none under a public suffix below it (`*.amazonaws.com` does not
    /// match `bucket.s3.amazonaws.com`: `s3.amazonaws.com` is one, and the
    /// names under it are their registrants').
    Wildcard(DomainName),
    /// Exactly this address (and, for the address checks, the one way to
    /// unlock a refused address).
    Ip(IpAddr),
}

impl HostPattern {
    /// True when a request to `host` is covered. Names match names and
    /// addresses match addresses: a name grant never covers an address
    /// literal, whatever the name resolves to.
    pub fn matches(&self, host: &Host) -> bool {
        match (self, host) {
            (HostPattern::Exact(g), Host::Name(n)) => g == n,
            (HostPattern::Wildcard(parent), Host::Name(n)) => {
                n.is_strict_subdomain_of(parent) && !under_a_suffix_below(n, parent)
            }
            (HostPattern::Ip(g), Host::Ip(a)) => g == a,
            _ => false,
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(n) => write!(f, "{n}"),
            HostPattern::Wildcard(n) => write!(f, "*.{n}"),
            HostPattern::Ip(ip) => write!(f, "{}", Host::Ip(*ip)),
        }
    }
}

/// One grant: `scheme://host[:port]` and optionally the HTTP methods it
/// allows (any method when absent).
///
/// Parse it with [`Grant::parse`] or [`Grant::with_methods`]; displays as
/// written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Grant {
    text: String,
    scheme: Scheme,
    host: HostPattern,
    port: u16,
    methods: Option<Vec<String>>,
}

impl Grant {
    /// Parses a pattern, allowing any method: `https://api.example.com`,
    /// `http://*.example.com:8080`, `http://127.0.0.1:3000`,
    /// `https://[2001:db8::1]`, `tcp://db.example.com:5432`. An unspecified
    /// address (`http://0.0.0.0`, `udp://[::]:53`, in any spelling) is
    /// refused ([`GrantError::UnspecifiedAddress`]).
    pub fn parse(pattern: &str) -> Result<Grant, GrantError> {
        Grant::with_methods(pattern, None)
    }

    /// Parses a pattern with an optional list of methods (`Some(["GET"])`).
    /// Methods are HTTP tokens, normalised to upper case; duplicates are
    /// dropped; an empty list is an error (it would never match).
    pub fn with_methods(pattern: &str, methods: Option<&[String]>) -> Result<Grant, GrantError> {
        let entry = || pattern.to_string();
        let (scheme_text, rest) = pattern
            .split_once("://")
            .ok_or_else(|| GrantError::MissingScheme { entry: entry() })?;
        let scheme = scheme_text
            .parse::<Scheme>()
            .map_err(|_| GrantError::UnknownScheme {
                entry: entry(),
                scheme: scheme_text.to_string(),
            })?;
        let end = rest.find(['/', '?', '#', '\\']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let unexpected = |part| GrantError::UnexpectedPart {
            entry: entry(),
            part,
        };
        if authority.contains('@') {
            return Err(unexpected("userinfo"));
        }
        match tail.chars().next() {
            None => {}
            Some('/') if tail == "/" => {}
            Some('/' | '\\') => return Err(unexpected("path")),
            Some('?') => return Err(unexpected("query")),
            Some(_) => return Err(unexpected("fragment")),
        }
        let (host_text, port_text) = split_host_port(authority);
        let host = host_pattern(host_text).map_err(|e| match e {
            PatternError::Host(error) => GrantError::Host {
                entry: entry(),
                error,
            },
            PatternError::BadWildcard => GrantError::BadWildcard { entry: entry() },
            PatternError::TooBroad => GrantError::WildcardTooBroad { entry: entry() },
            PatternError::PublicSuffix(suffix) => GrantError::WildcardOverPublicSuffix {
                entry: entry(),
                suffix,
            },
            PatternError::Unspecified(addr, risk) => GrantError::UnspecifiedAddress {
                entry: entry(),
                addr,
                risk,
            },
        })?;
        let port = match port_text {
            Some(p) => {
                parse_port(p)
                    .filter(|p| *p != 0)
                    .ok_or_else(|| GrantError::InvalidPort {
                        entry: entry(),
                        port: p.to_string(),
                    })?
            }
            None => scheme
                .default_port()
                .ok_or_else(|| GrantError::PortRequired {
                    entry: entry(),
                    scheme: scheme.as_str(),
                })?,
        };
        let methods = match methods {
            None => None,
            Some(_) if !scheme.is_http() => {
                return Err(GrantError::MethodsNotHttp { entry: entry() });
            }
            Some([]) => return Err(GrantError::EmptyMethods { entry: entry() }),
            Some(list) => {
                let mut out: Vec<String> = Vec::with_capacity(list.len());
                for m in list {
                    if !is_token(m) {
                        return Err(GrantError::InvalidMethod {
                            entry: entry(),
                            method: m.clone(),
                        });
                    }
                    let m = m.to_ascii_uppercase();
                    if !out.contains(&m) {
                        out.push(m);
                    }
                }
                Some(out)
            }
        };
        Ok(Grant {
            text: pattern.to_string(),
            scheme,
            host,
            port,
            methods,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The pattern in canonical form, with the port always explicit:
    /// `https://api.example.com:443`.
    pub fn canonical(&self) -> String {
        format!("{}://{}:{}", self.scheme, self.host, self.port)
    }

    /// The pattern in canonical form and, for HTTP, the methods it allows,
    /// as an approval names it: `https://api.example.com:443 (GET, HEAD)`,
    /// `... (any method)`, or `tcp://10.0.0.5:5432` (sockets have none).
    pub fn described(&self) -> String {
        match &self.methods {
            _ if !self.scheme.is_http() => self.canonical(),
            Some(m) => format!("{} ({})", self.canonical(), m.join(", ")),
            None => format!("{} (any method)", self.canonical()),
        }
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host pattern.
    pub fn host(&self) -> &HostPattern {
        &self.host
    }

    /// The port (explicit or the scheme's default).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The methods allowed (upper case), or `None` for any method.
    pub fn methods(&self) -> Option<&[String]> {
        self.methods.as_deref()
    }

    /// True when the grant covers the request's host (not looking at scheme,
    /// port or method).
    pub fn matches_host(&self, host: &Host) -> bool {
        self.host.matches(host)
    }

    /// True when the grant covers the method: any method when the grant
    /// lists none; otherwise the request's method must be one listed
    /// (compared exactly: HTTP methods are case-sensitive, and grants are
    /// normalised to upper case, so `get` is not `GET`).
    pub fn matches_method(&self, method: Option<&str>) -> bool {
        match (&self.methods, method) {
            (None, _) => true,
            (Some(list), Some(m)) => list.iter().any(|g| g == m),
            (Some(_), None) => false,
        }
    }

    /// True when the grant covers the whole request: scheme, host, port and
    /// method.
    pub fn matches(&self, request: &Request) -> bool {
        self.scheme == request.scheme
            && self.port == request.port
            && self.matches_host(&request.host)
            && self.matches_method(request.method.as_deref())
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)?;
        if let Some(methods) = &self.methods {
            write!(f, " ({})", methods.join(", "))?;
        }
        Ok(())
    }
}

impl FromStr for Grant {
    type Err = GrantError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Grant::parse(s)
    }
}

/// Which list of the policy a grant is in. Serialises as a string, as it
/// reads in the file: `allow`, `ask`, or `rules[2].network`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GrantList {
    /// `[network] allow`: requests may go without asking.
    Allow,
    /// `[network] ask`: requests need an approval.
    Ask,
    /// The `network` of the policy file's `[[rules]]` entry at this
    /// 0-based position: `allow` grants of the calls that rule matches
    /// ([`RuleGrants`](crate::RuleGrants)).
    Rule(usize),
}

impl GrantList {
    /// The key in the `[network]` section (`rule` for a rule's grants,
    /// which `Display` and JSON spell `rules[N].network`).
    pub fn as_str(self) -> &'static str {
        match self {
            GrantList::Allow => "allow",
            GrantList::Ask => "ask",
            GrantList::Rule(_) => "rule",
        }
    }
}

impl Serialize for GrantList {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            GrantList::Rule(rule) => serializer.collect_str(&format_args!("rules[{rule}].network")),
            list => serializer.serialize_str(list.as_str()),
        }
    }
}

/// Names a grant of a [`NetworkPolicy`](crate::NetworkPolicy) or of a
/// policy rule ([`RuleGrants`](crate::RuleGrants)): which list, its
/// position there, and its pattern as written.
///
/// Displays as `network.allow[0] "https://api.example.com"`, or for a
/// rule's grant as `rules[2].network[0] "https://api.example.com"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct GrantRef {
    /// The list it is in.
    pub list: GrantList,
    /// Its 0-based position in that list.
    pub index: usize,
    /// The pattern as written.
    pub pattern: String,
}

impl fmt::Display for GrantRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.list {
            GrantList::Rule(rule) => write!(f, "rules[{rule}].network")?,
            list => write!(f, "network.{}", list.as_str())?,
        }
        write!(f, "[{}] {:?}", self.index, self.pattern)
    }
}

/// Splits `host[:port]`, with the host possibly a bracketed IPv6 address.
/// A bare IPv6 address (`::1`) splits wrongly on purpose: its host part then
/// fails to parse with a message about brackets.
pub(crate) fn split_host_port(authority: &str) -> (&str, Option<&str>) {
    if authority.starts_with('[')
        && let Some(close) = authority.find(']')
    {
        let (host, after) = authority.split_at(close + 1);
        return match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            // Junk after the bracket stays in the host, which then fails.
            None if after.is_empty() => (host, None),
            None => (authority, None),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    }
}

/// A port: 1 to 5 ASCII digits (leading zeros allowed), at most 65535.
/// No sign, no spaces.
pub(crate) fn parse_port(s: &str) -> Option<u16> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// An HTTP token (RFC 9110 `tchar`), as methods and header names are.
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'\''
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'`'
                        | b'|'
                        | b'~'
                )
        })
}

enum PatternError {
    Host(HostError),
    BadWildcard,
    TooBroad,
    PublicSuffix(String),
    Unspecified(IpAddr, AddrRisk),
}

/// True when `name`'s public suffix (of the Public Suffix List) is below
/// `parent`: `name` belongs to whoever registered it under that suffix,
/// not to `parent`'s owner.
fn under_a_suffix_below(name: &DomainName, parent: &DomainName) -> bool {
    psl::suffix_str(name.as_str())
        .is_some_and(|suffix| crate::host::is_strict_subdomain(suffix, parent.as_str()))
}

/// The public suffix of the Public Suffix List a wildcard over `name`
/// would cover, if any: `name` itself (`co.uk`, `github.io`,
/// `s3.amazonaws.com`, a name a wildcard rule of the list makes one), or the
/// names under it, when a wildcard rule of the list makes each of them one
/// (`*.kawasaki.jp`). Names under a public suffix belong to whoever
/// registered them.
fn public_suffix_under(name: &DomainName) -> Option<String> {
    let is_suffix =
        |n: &str| psl::suffix(n.as_bytes()).is_some_and(|s| s.as_bytes() == n.as_bytes());
    if is_suffix(name.as_str()) {
        return Some(name.as_str().to_string());
    }
    // A label no exception of the list names stands for any name under it.
    is_suffix(&format!("toolhost-probe.{name}")).then(|| format!("*.{name}"))
}

fn host_pattern(s: &str) -> Result<HostPattern, PatternError> {
    if let Some(suffix) = s.strip_prefix("*.") {
        if suffix.contains('*') {
            return Err(PatternError::BadWildcard);
        }
        return match parse_host(suffix).map_err(PatternError::Host)? {
            Parsed::Name(n) if n.label_count() < 2 => Err(PatternError::TooBroad),
            Parsed::Name(n) => match public_suffix_under(&n) {
                Some(suffix) => Err(PatternError::PublicSuffix(suffix)),
                None => Ok(HostPattern::Wildcard(n)),
            },
            Parsed::Ipv4 { .. } | Parsed::Ipv6(_) => Err(PatternError::BadWildcard),
        };
    }
    if s.contains('*') {
        return Err(PatternError::BadWildcard);
    }
    let refuse_unspecified = |ip: IpAddr| match unspecified(ip) {
        Some(risk) => Err(PatternError::Unspecified(ip, risk)),
        None => Ok(()),
    };
    match Host::parse_canonical(s) {
        Ok(Host::Name(n)) => Ok(HostPattern::Exact(n)),
        Ok(Host::Ip(ip)) => {
            refuse_unspecified(ip)?;
            Ok(HostPattern::Ip(ip))
        }
        // An odd spelling of an unspecified address is refused for what it
        // denotes, not for its spelling (whose fix would be `0.0.0.0`).
        Err(HostError::NonCanonicalIpv4 { host, canonical }) => {
            refuse_unspecified(IpAddr::V4(canonical))?;
            Err(PatternError::Host(HostError::NonCanonicalIpv4 {
                host,
                canonical,
            }))
        }
        Err(e) => Err(PatternError::Host(e)),
    }
}

#[cfg(test)]
impl Grant {
    /// A grant of exactly `addr`, built without the checks of
    /// [`Grant::with_methods`] (no policy can write one of an unspecified
    /// address): for testing the checks that must hold whatever the grants.
    pub(crate) fn of_addr_unchecked(scheme: Scheme, addr: IpAddr, port: u16) -> Grant {
        Grant {
            text: format!("{scheme}://{}:{port}", Host::Ip(addr)),
            scheme,
            host: HostPattern::Ip(addr),
            port,
            methods: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(url: &str, method: Option<&str>) -> Request {
        Request::from_url(url, method).unwrap()
    }

    #[test]
    fn patterns_parse_with_default_ports() {
        let g = Grant::parse("https://API.example.com").unwrap();
        assert_eq!(g.canonical(), "https://api.example.com:443");
        let g = Grant::parse("http://example.com/").unwrap();
        assert_eq!(g.port(), 80);
        let g = Grant::parse("http://[::1]:8080").unwrap();
        assert_eq!(g.canonical(), "http://[::1]:8080");
        let g = Grant::parse("tcp://db.example.com:5432").unwrap();
        assert_eq!(g.scheme(), Scheme::Tcp);
        let g = Grant::parse("http://*.example.com:8080").unwrap();
        assert_eq!(g.canonical(), "http://*.example.com:8080");
        assert_eq!(g.described(), "http://*.example.com:8080 (any method)");
        let socket = Grant::parse("tcp://10.0.0.5:5432").unwrap();
        assert_eq!(socket.described(), "tcp://10.0.0.5:5432");
        // Under a public suffix, one owner's name: a wildcard is accepted
        // (`city.kawasaki.jp` is an exception of the list's rule
        // `*.kawasaki.jp`; `local` is no listed suffix).
        for ok in [
            "https://*.example.co.uk",
            "https://*.someone.github.io",
            "https://*.city.kawasaki.jp",
            "http://*.svc.cluster.local",
        ] {
            let g = Grant::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert!(g.canonical().starts_with(ok), "{ok}: {}", g.canonical());
        }
    }

    #[test]
    fn bad_patterns_name_the_entry() {
        type Check = fn(&GrantError) -> bool;
        let cases: &[(&str, Check)] = &[
            ("example.com", |e| {
                matches!(e, GrantError::MissingScheme { .. })
            }),
            ("ftp://example.com", |e| {
                matches!(e, GrantError::UnknownScheme { .. })
            }),
            ("https://u:p@example.com", |e| {
                matches!(
                    e,
                    GrantError::UnexpectedPart {
                        part: "userinfo",
                        ..
                    }
                )
            }),
            ("https://example.com/api", |e| {
                matches!(e, GrantError::UnexpectedPart { part: "path", .. })
            }),
            ("https://example.com?x", |e| {
                matches!(e, GrantError::UnexpectedPart { part: "query", .. })
            }),
            ("https://example.com#x", |e| {
                matches!(
                    e,
                    GrantError::UnexpectedPart {
                        part: "fragment",
                        ..
                    }
                )
            }),
            ("https://*", |e| matches!(e, GrantError::BadWildcard { .. })),
            ("https://*.com", |e| {
                matches!(e, GrantError::WildcardTooBroad { .. })
            }),
            ("https://a.*.com", |e| {
                matches!(e, GrantError::BadWildcard { .. })
            }),
            (
                "https://*.co.uk",
                |e| matches!(e, GrantError::WildcardOverPublicSuffix { suffix, .. } if suffix == "co.uk"),
            ),
            (
                "https://*.github.io",
                |e| matches!(e, GrantError::WildcardOverPublicSuffix { suffix, .. } if suffix == "github.io"),
            ),
            (
                "https://*.S3.AmazonAWS.com",
                |e| matches!(e, GrantError::WildcardOverPublicSuffix { suffix, .. } if suffix == "s3.amazonaws.com"),
            ),
            // A name the list's wildcard rule `*.kawasaki.jp` makes a suffix,
            // and the rule's own parent: each name under it is one.
            (
                "https://*.foo.kawasaki.jp",
                |e| matches!(e, GrantError::WildcardOverPublicSuffix { suffix, .. } if suffix == "foo.kawasaki.jp"),
            ),
            (
                "https://*.kawasaki.jp",
                |e| matches!(e, GrantError::WildcardOverPublicSuffix { suffix, .. } if suffix == "*.kawasaki.jp"),
            ),
            ("https://*.sch.uk", |e| {
                matches!(e, GrantError::WildcardOverPublicSuffix { .. })
            }),
            ("https://*.xn--55qx5d.cn", |e| {
                matches!(e, GrantError::WildcardOverPublicSuffix { .. })
            }),
            ("https://*foo.example.com", |e| {
                matches!(e, GrantError::BadWildcard { .. })
            }),
            ("https://*.10.0.0.1", |e| {
                matches!(e, GrantError::BadWildcard { .. })
            }),
            ("https://example.com:0", |e| {
                matches!(e, GrantError::InvalidPort { .. })
            }),
            ("https://example.com:65536", |e| {
                matches!(e, GrantError::InvalidPort { .. })
            }),
            ("https://example.com:", |e| {
                matches!(e, GrantError::InvalidPort { .. })
            }),
            ("https://example.com:+80", |e| {
                matches!(e, GrantError::InvalidPort { .. })
            }),
            ("tcp://example.com", |e| {
                matches!(e, GrantError::PortRequired { .. })
            }),
            ("https://127.1", |e| {
                matches!(
                    e,
                    GrantError::Host {
                        error: HostError::NonCanonicalIpv4 { .. },
                        ..
                    }
                )
            }),
            ("https://bücher.de", |e| {
                matches!(
                    e,
                    GrantError::Host {
                        error: HostError::NonAscii { .. },
                        ..
                    }
                )
            }),
            ("https://::1", |e| {
                matches!(
                    e,
                    GrantError::Host {
                        error: HostError::UnbracketedIpv6 { .. },
                        ..
                    }
                )
            }),
            ("https://", |e| {
                matches!(
                    e,
                    GrantError::Host {
                        error: HostError::Empty,
                        ..
                    }
                )
            }),
        ];
        for (entry, check) in cases {
            let err = Grant::parse(entry).unwrap_err();
            assert!(check(&err), "{entry}: {err:?}");
            assert!(err.to_string().contains(&format!("{entry:?}")), "{err}");
        }
    }

    #[test]
    fn methods_are_tokens_in_upper_case() {
        let g = Grant::with_methods(
            "https://example.com",
            Some(&["get".to_string(), "GET".to_string(), "post".to_string()]),
        )
        .unwrap();
        assert_eq!(
            g.methods(),
            Some(&["GET".to_string(), "POST".to_string()][..])
        );
        assert!(matches!(
            Grant::with_methods("https://example.com", Some(&[])),
            Err(GrantError::EmptyMethods { .. })
        ));
        assert!(matches!(
            Grant::with_methods("https://example.com", Some(&["GE T".to_string()])),
            Err(GrantError::InvalidMethod { .. })
        ));
        assert!(matches!(
            Grant::with_methods("tcp://example.com:1", Some(&["GET".to_string()])),
            Err(GrantError::MethodsNotHttp { .. })
        ));
    }

    #[test]
    fn grants_match_scheme_host_port_method() {
        let g = Grant::with_methods("https://*.example.com", Some(&["GET".to_string()])).unwrap();
        assert!(g.matches(&req("https://a.example.com/x", Some("GET"))));
        assert!(g.matches(&req("https://a.b.example.com:443/", Some("GET"))));
        assert!(!g.matches(&req("https://example.com/", Some("GET"))));
        assert!(!g.matches(&req("https://a.example.com/", Some("get"))));
        assert!(!g.matches(&req("https://a.example.com/", Some("POST"))));
        assert!(!g.matches(&req("http://a.example.com/", Some("GET"))));
        assert!(!g.matches(&req("https://a.example.com:8443/", Some("GET"))));
        assert!(!g.matches(&req("https://a.example.com.evil.io/", Some("GET"))));
    }

    /// A wildcard covers the names of its domain's owner, not the names
    /// registered under a public suffix below it.
    #[test]
    fn a_wildcard_stops_at_a_public_suffix_below_it() {
        let g = Grant::parse("https://*.amazonaws.com").unwrap();
        assert!(g.matches(&req("https://console.amazonaws.com/", Some("GET"))));
        assert!(!g.matches(&req("https://bucket.s3.amazonaws.com/", Some("GET"))));
        assert!(!g.matches(&req("https://a.b.s3.amazonaws.com/", Some("GET"))));
        // Under a suffix, the wildcard of one registrant's name covers its
        // names.
        let g = Grant::parse("https://*.someone.github.io").unwrap();
        assert!(g.matches(&req("https://a.someone.github.io/", Some("GET"))));
        assert!(!g.matches(&req("https://other.github.io/", Some("GET"))));
    }

    /// A grant of an unspecified address (`0.0.0.0/8`, `::`, and the IPv6
    /// forms that embed one) is refused, whatever its scheme or spelling:
    /// a connection to `0.0.0.0` or `::` goes to this host, to whatever
    /// listens there. An odd spelling of one is refused for what it
    /// denotes, not for its spelling (whose fix would be the canonical
    /// `0.0.0.0`).
    #[test]
    fn unspecified_addresses_are_never_granted() {
        use crate::addr::{AddrClass, classify};
        for entry in [
            "http://0.0.0.0",
            "https://0.0.0.0:8443",
            "http://0.0.0.0/",
            "HTTP://0.0.0.0:80",
            "http://[::]",
            "http://[::]:8080",
            "tcp://0.0.0.0:80",
            "udp://[::]:53",
            "http://[0:0::0]",
            "http://[0000:0000:0000:0000:0000:0000:0000:0000]",
            "http://[::0.0.0.0]",
            "http://[::ffff:0.0.0.0]",
            "http://[::FFFF:0:0]",
            "http://[::0.1.2.3]",
            "http://[64:ff9b::]",
            "http://[2002::]",
            "http://0.1.2.3",
            "tcp://0.255.255.255:22",
            // Odd spellings.
            "http://0",
            "http://0.0.0.0.",
            "http://0x0",
            "http://00.0.0.0",
            "http://0.0",
            "http://0x0.0",
            "http://0.1",
            "udp://000000:53",
        ] {
            let err = match Grant::parse(entry) {
                Ok(g) => panic!("{entry}: granted as {}", g.canonical()),
                Err(e) => e,
            };
            let GrantError::UnspecifiedAddress { addr, risk, .. } = &err else {
                panic!("{entry}: {err:?}");
            };
            assert_eq!(risk.class, AddrClass::Unspecified, "{entry}");
            assert_eq!(classify(*addr), Some(*risk), "{entry}");
            let text = err.to_string();
            assert!(text.starts_with(&format!("grant {entry:?}: ")), "{text}");
            assert!(text.contains("an unspecified address"), "{entry}: {text}");
        }
        assert_eq!(
            Grant::parse("http://0").unwrap_err().to_string(),
            "grant \"http://0\": 0.0.0.0 is an unspecified address, which no request may \
             reach (a connection to 0.0.0.0 or :: goes to this host itself, to whatever \
             listens here); grant the address the server listens on (http://127.0.0.1:8080 \
             for a local one)"
        );
        assert!(
            Grant::parse("udp://[::ffff:0.0.0.0]:53")
                .unwrap_err()
                .to_string()
                .starts_with(
                    "grant \"udp://[::ffff:0.0.0.0]:53\": [::ffff:0.0.0.0] is IPv4-mapped form \
                     of 0.0.0.0, an unspecified address, which no request may reach"
                )
        );
        let err =
            Grant::with_methods("http://0.0.0.0:8080", Some(&["GET".to_string()])).unwrap_err();
        assert!(err.to_string().contains("an unspecified address"), "{err}");
        // Their neighbours are granted, as addresses, as before.
        for ok in [
            "http://1.0.0.0",
            "http://[::1]",
            "http://[1::]",
            "http://[::ffff:1.2.3.4]",
        ] {
            assert!(Grant::parse(ok).is_ok(), "{ok}");
        }
    }
}
