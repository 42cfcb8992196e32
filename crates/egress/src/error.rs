//! Configuration errors of this crate: [`HostError`] (a host that does not
//! parse), [`GrantError`] (a grant pattern that does not parse), [`UrlError`]
//! (a request URL or authority that does not parse), [`ConfigError`] (a
//! `[network]` or `[[credentials]]` entry that does not load, named by its
//! [`KeyPath`]) and [`LocatedError`] (the same, located by line and column in
//! the file's text).
//!
//! These are stable enums: match on the variant, show the message. Every
//! message names the offending entry. Refusals of requests are not errors;
//! they live in [`crate::decision`].

use crate::addr::AddrRisk;
use crate::host::Host;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

/// A host that does not parse (see [`Host::parse`](crate::Host::parse)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// Nothing where a host should be.
    #[error("empty host")]
    Empty,
    /// Non-ASCII characters. Internationalised names must be written in their
    /// ASCII (punycode, `xn--`) form.
    #[error(
        "host {host:?} is not ASCII: write an internationalised name in its punycode form (xn--...)"
    )]
    NonAscii {
        /// The host as given.
        host: String,
    },
    /// A character no host name may contain.
    #[error("host {host:?} contains {found:?}: a name has only letters, digits, '-', '_' and '.'")]
    InvalidChar {
        /// The host as given.
        host: String,
        /// The first offending character.
        found: char,
    },
    /// `a..b` or a leading dot.
    #[error("host {host:?} has an empty label")]
    EmptyLabel {
        /// The host as given.
        host: String,
    },
    /// A label longer than 63 characters.
    #[error("host {host:?} has a label longer than 63 characters")]
    LabelTooLong {
        /// The host as given.
        host: String,
    },
    /// A name longer than 253 characters.
    #[error("host {host:?} is longer than 253 characters")]
    NameTooLong {
        /// The host as given.
        host: String,
    },
    /// The last label looks like a number but the whole is not an IPv4
    /// address in any spelling (`1.2.3.4.5`, `256.1.1.1`, `example.123`).
    #[error("host {host:?} ends in a number but is not a valid IPv4 address")]
    InvalidIpv4 {
        /// The host as given.
        host: String,
    },
    /// An IPv4 address in configuration that is not written as a dotted quad.
    #[error("host {host:?} denotes {canonical}: write the address as {canonical}")]
    NonCanonicalIpv4 {
        /// The host as given.
        host: String,
        /// The address it denotes.
        canonical: Ipv4Addr,
    },
    /// Brackets that do not hold an IPv6 address.
    #[error("host {host:?} is not a valid bracketed IPv6 address")]
    InvalidIpv6 {
        /// The host as given.
        host: String,
    },
    /// An IPv6 address without brackets.
    #[error("host {host:?} contains ':': an IPv6 address must be in brackets, as [::1]")]
    UnbracketedIpv6 {
        /// The host as given.
        host: String,
    },
    /// An IPv6 zone id (`[fe80::1%eth0]`): never accepted.
    #[error("host {host:?} has an IPv6 zone id, which is not accepted")]
    ZoneId {
        /// The host as given.
        host: String,
    },
    /// An IP address where a name was required.
    #[error("{host:?} is an IP address, not a name")]
    NotAName {
        /// The host as given.
        host: String,
    },
}

/// A grant pattern that does not parse. Every message names the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GrantError {
    /// No `scheme://`.
    #[error(
        "grant {entry:?}: expected scheme://host[:port] (for example \"https://api.example.com\")"
    )]
    MissingScheme {
        /// The entry as written.
        entry: String,
    },
    /// A scheme this crate does not grant.
    #[error("grant {entry:?}: unknown scheme {scheme:?} (expected http, https, tcp or udp)")]
    UnknownScheme {
        /// The entry as written.
        entry: String,
        /// The scheme as written.
        scheme: String,
    },
    /// A part a grant does not have: userinfo, path, query or fragment.
    #[error("grant {entry:?}: a grant names scheme://host[:port] only; remove the {part}")]
    UnexpectedPart {
        /// The entry as written.
        entry: String,
        /// `"userinfo"`, `"path"`, `"query"` or `"fragment"`.
        part: &'static str,
    },
    /// The host does not parse.
    #[error("grant {entry:?}: {error}")]
    Host {
        /// The entry as written.
        entry: String,
        /// Why.
        error: HostError,
    },
    /// `*` alone, `*foo.example.com`, `a.*.example.com`, or a wildcard over
    /// an address.
    #[error(
        "grant {entry:?}: a wildcard is only accepted as the whole first label of a name, as in *.example.com"
    )]
    BadWildcard {
        /// The entry as written.
        entry: String,
    },
    /// `*.com`: a wildcard over a single label.
    #[error(
        "grant {entry:?}: a wildcard needs at least two labels after it (*.example.com, not *.com)"
    )]
    WildcardTooBroad {
        /// The entry as written.
        entry: String,
    },
    /// `*.co.uk`, `*.github.io`: a wildcard over a public suffix (a name
    /// under which anyone may register their own), which would grant the
    /// sites of unrelated owners.
    #[error(
        "grant {entry:?}: {suffix:?} is a public suffix of the Public Suffix List (anyone can have a name under it), so a wildcard over it would grant the sites of unrelated owners; name each host, or a wildcard under a domain you trust (*.example.co.uk)"
    )]
    WildcardOverPublicSuffix {
        /// The entry as written.
        entry: String,
        /// The public suffix the wildcard covers (`*.kawasaki.jp` when each
        /// name under the wildcard's domain is one).
        suffix: String,
    },
    /// An unspecified address (`0.0.0.0/8`, `::`, or an IPv6 form that
    /// embeds one), in any spelling: no request may go to one, whatever
    /// the grants.
    #[error(
        "grant {entry:?}: {} is {risk}, which no request may reach (a connection to 0.0.0.0 or :: goes to this host itself, to whatever listens here); grant the address the server listens on (http://127.0.0.1:8080 for a local one)",
        Host::Ip(*.addr)
    )]
    UnspecifiedAddress {
        /// The entry as written.
        entry: String,
        /// The address its host denotes.
        addr: IpAddr,
        /// What it is ([`AddrClass::Unspecified`](crate::AddrClass::Unspecified),
        /// and the form that embeds it, if any).
        risk: AddrRisk,
    },
    /// A port that is not a number from 1 to 65535.
    #[error("grant {entry:?}: invalid port {port:?} (expected 1 to 65535)")]
    InvalidPort {
        /// The entry as written.
        entry: String,
        /// The port as written.
        port: String,
    },
    /// `tcp` and `udp` have no default port.
    #[error("grant {entry:?}: a {scheme} grant needs an explicit port")]
    PortRequired {
        /// The entry as written.
        entry: String,
        /// The scheme.
        scheme: &'static str,
    },
    /// Methods on a `tcp` or `udp` grant.
    #[error("grant {entry:?}: methods only apply to http and https grants")]
    MethodsNotHttp {
        /// The entry as written.
        entry: String,
    },
    /// `methods = []`: would never match; remove the key to allow any method.
    #[error(
        "grant {entry:?}: an empty methods list never matches; remove `methods` to allow any method"
    )]
    EmptyMethods {
        /// The entry as written.
        entry: String,
    },
    /// A method that is not an HTTP token.
    #[error("grant {entry:?}: invalid method {method:?}")]
    InvalidMethod {
        /// The entry as written.
        entry: String,
        /// The method as written.
        method: String,
    },
}

/// A request URL or authority that does not parse
/// (see [`Request::from_url`](crate::Request::from_url)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// No `scheme://`.
    #[error("{url:?} is not an absolute URL (scheme://host...)")]
    NotAbsolute {
        /// The URL, without query and userinfo.
        url: String,
    },
    /// A scheme other than http, https, tcp or udp.
    #[error("unsupported scheme {scheme:?}")]
    UnknownScheme {
        /// The scheme as given.
        scheme: String,
    },
    /// A backslash in the authority: URL parsers disagree on what it means,
    /// so it is refused rather than guessed.
    #[error("the authority {authority:?} contains a backslash")]
    Backslash {
        /// The authority, without userinfo.
        authority: String,
    },
    /// The host does not parse.
    #[error(transparent)]
    Host(#[from] HostError),
    /// A port that is not a number from 0 to 65535.
    #[error("invalid port {port:?}")]
    InvalidPort {
        /// The port as given.
        port: String,
    },
    /// `tcp` and `udp` addresses need a port.
    #[error("a {scheme} address needs a port")]
    PortRequired {
        /// The scheme.
        scheme: &'static str,
    },
}

/// One step of a [`KeyPath`]: a table key or an array index.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PathSegment {
    /// A key in a table.
    Key(String),
    /// A 0-based index in an array.
    Index(usize),
}

/// Where a configuration item is, from the root of the policy document:
/// displays as `network.allow[2]` or `credentials[0].header`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct KeyPath(Vec<PathSegment>);

impl KeyPath {
    /// The root of the document.
    pub fn root() -> KeyPath {
        KeyPath(Vec::new())
    }

    /// This path followed by a key.
    pub fn key(&self, key: &str) -> KeyPath {
        let mut p = self.clone();
        p.0.push(PathSegment::Key(key.to_string()));
        p
    }

    /// This path followed by an array index.
    pub fn index(&self, index: usize) -> KeyPath {
        let mut p = self.clone();
        p.0.push(PathSegment::Index(index));
        p
    }

    /// The steps, from the root.
    pub fn segments(&self) -> &[PathSegment] {
        &self.0
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(document)");
        }
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                PathSegment::Key(k) if i == 0 => f.write_str(k)?,
                PathSegment::Key(k) => write!(f, ".{k}")?,
                PathSegment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// What is wrong with a configuration item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigProblem {
    /// Wrong type, unknown key or missing key.
    #[error("{0}")]
    Shape(String),
    /// A grant pattern that does not parse.
    #[error(transparent)]
    Grant(#[from] GrantError),
    /// A value out of range or inconsistent with another.
    #[error("{0}")]
    Invalid(String),
}

/// A `[network]` or `[[credentials]]` item that does not load. The whole
/// configuration is then rejected: nothing is half-applied.
///
/// Displays as `"{path}: {problem}"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct ConfigError {
    path: KeyPath,
    problem: ConfigProblem,
}

impl ConfigError {
    pub(crate) fn new(path: KeyPath, problem: impl Into<ConfigProblem>) -> Self {
        ConfigError {
            path,
            problem: problem.into(),
        }
    }

    pub(crate) fn shape(path: KeyPath, message: impl Into<String>) -> Self {
        ConfigError::new(path, ConfigProblem::Shape(message.into()))
    }

    pub(crate) fn invalid(path: KeyPath, message: impl Into<String>) -> Self {
        ConfigError::new(path, ConfigProblem::Invalid(message.into()))
    }

    /// Where the offending item is.
    pub fn path(&self) -> &KeyPath {
        &self.path
    }

    /// What is wrong with it.
    pub fn problem(&self) -> &ConfigProblem {
        &self.problem
    }
}

/// A configuration error located in the text it came from.
///
/// Displays as `"{origin}:{line}:{col}: {message}"` (1-based line and
/// column, column in characters), like the policy crate's errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}:{line}:{col}: {message}")]
pub struct LocatedError {
    origin: String,
    line: usize,
    col: usize,
    message: String,
    error: Option<Box<ConfigError>>,
}

impl LocatedError {
    pub(crate) fn new(
        src: &str,
        origin: &str,
        offset: usize,
        message: String,
        error: Option<ConfigError>,
    ) -> Self {
        let (line, col) = line_col(src, offset);
        LocatedError {
            origin: origin.to_string(),
            line,
            col,
            message,
            error: error.map(Box::new),
        }
    }

    /// The 1-based line of the offending item.
    pub fn line(&self) -> usize {
        self.line
    }

    /// The 1-based column (in characters) of the offending item.
    pub fn column(&self) -> usize {
        self.col
    }

    /// What is wrong, without the location.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Where the text came from, as given.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The structured error, unless the text was not valid TOML at all.
    pub fn config_error(&self) -> Option<&ConfigError> {
        self.error.as_deref()
    }
}

/// 1-based line and column (in characters) of byte `offset` in `src`.
pub(crate) fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(src.len());
    while !src.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &src[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_paths_display_like_toml() {
        let p = KeyPath::root().key("network").key("allow").index(2);
        assert_eq!(p.to_string(), "network.allow[2]");
        let p = KeyPath::root().key("credentials").index(0).key("header");
        assert_eq!(p.to_string(), "credentials[0].header");
        assert_eq!(KeyPath::root().to_string(), "(document)");
    }

    #[test]
    fn line_col_is_one_based() {
        let src = "a = 1\nbé = 2\n";
        assert_eq!(line_col(src, 0), (1, 1));
        assert_eq!(line_col(src, 10), (2, 4));
        assert_eq!(line_col(src, 999), (3, 1));
    }
}
