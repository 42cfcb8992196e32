//! Hosts: [`Host`] (what a request names, classified by what it denotes),
//! [`DomainName`] (a normalised DNS name) and the parsers behind them,
//! including the one for the odd spellings of IPv4 addresses.
//!
//! Two parsers share one grammar:
//!
//! * [`Host::parse`] reads a host as a URL carries it, the way a permissive
//!   URL parser or the C library's `inet_aton` would: `2130706433`,
//!   `0177.0.0.1`, `0x7f.1` and `127.1` all denote `127.0.0.1`, and become
//!   [`Host::Ip`]. A host is then judged by the address it denotes, never by
//!   its spelling.
//! * [`Host::parse_canonical`] reads a host written in a policy file, where
//!   only the canonical dotted-quad spelling of an IPv4 address is accepted
//!   (an odd spelling there is almost certainly a mistake or a trick).
//!
//! Names are ASCII only (letters, digits, `-`, `_`), lowercased, without the
//! trailing dot. A host whose last label looks like a number (all digits, or
//! `0x` and hex digits) is always read as an IPv4 address: if it is not a
//! valid one it is rejected, never looked up as a name, because some resolver
//! on the way might read it as an address.

use crate::error::HostError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// The longest DNS name, without the trailing dot (RFC 1035).
const MAX_NAME_LEN: usize = 253;
/// The longest DNS label (RFC 1035).
const MAX_LABEL_LEN: usize = 63;

/// A DNS name: ASCII, lowercase, without the trailing dot, labels of 1 to 63
/// characters among `a-z`, `0-9`, `-` and `_`, at most 253 characters, and a
/// last label that does not look like a number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct DomainName(String);

impl DomainName {
    /// Parses a name. An IP address (in any spelling) is an error here; use
    /// [`Host::parse`] to accept both.
    pub fn parse(s: &str) -> Result<DomainName, HostError> {
        match parse_host(s)? {
            Parsed::Name(n) => Ok(n),
            Parsed::Ipv4 { .. } | Parsed::Ipv6(_) => Err(HostError::NotAName {
                host: s.to_string(),
            }),
        }
    }

    /// The name as text (lowercase, no trailing dot).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// How many labels the name has (`api.example.com` has 3).
    pub fn label_count(&self) -> usize {
        self.0.split('.').count()
    }

    /// True when `self` is a strict subdomain of `parent`, at any depth:
    /// `a.example.com` and `a.b.example.com` are subdomains of `example.com`;
    /// `example.com` and `badexample.com` are not.
    pub fn is_strict_subdomain_of(&self, parent: &DomainName) -> bool {
        is_strict_subdomain(&self.0, parent.as_str())
    }
}

/// [`DomainName::is_strict_subdomain_of`] on names already normalised.
pub(crate) fn is_strict_subdomain(name: &str, parent: &str) -> bool {
    name.strip_suffix(parent)
        .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
}

impl fmt::Display for DomainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A concrete host a request goes to: a DNS name, or an IP address.
///
/// Displays as a URL would carry it: the name, the dotted IPv4 address, or the
/// IPv6 address in brackets.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Host {
    /// A DNS name, to be resolved.
    Name(DomainName),
    /// An IP address literal (whatever its spelling was).
    Ip(IpAddr),
}

impl Host {
    /// Parses a host as a URL carries it (no port, no brackets missing):
    /// a name, a bracketed IPv6 address, or an IPv4 address in any of the
    /// spellings permissive parsers accept (decimal `2130706433`, octal
    /// `0177.0.0.1`, hex `0x7f.1`, short `127.1`, mixed, trailing dot). The
    /// result is what the host denotes.
    pub fn parse(s: &str) -> Result<Host, HostError> {
        Ok(match parse_host(s)? {
            Parsed::Name(n) => Host::Name(n),
            Parsed::Ipv4 { addr, .. } => Host::Ip(IpAddr::V4(addr)),
            Parsed::Ipv6(addr) => Host::Ip(IpAddr::V6(addr)),
        })
    }

    /// Parses a host written in configuration: as [`Host::parse`], except
    /// that an IPv4 address must be in canonical dotted-quad form
    /// (`127.0.0.1`, not `127.1` or `0x7f.0.0.1`).
    pub fn parse_canonical(s: &str) -> Result<Host, HostError> {
        Ok(match parse_host(s)? {
            Parsed::Name(n) => Host::Name(n),
            Parsed::Ipv4 { addr, canonical } => {
                if !canonical {
                    return Err(HostError::NonCanonicalIpv4 {
                        host: s.to_string(),
                        canonical: addr,
                    });
                }
                Host::Ip(IpAddr::V4(addr))
            }
            Parsed::Ipv6(addr) => Host::Ip(IpAddr::V6(addr)),
        })
    }

    /// The address, when the host is an IP literal.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Host::Ip(ip) => Some(*ip),
            Host::Name(_) => None,
        }
    }

    /// The name, when the host is a DNS name.
    pub fn name(&self) -> Option<&DomainName> {
        match self {
            Host::Name(n) => Some(n),
            Host::Ip(_) => None,
        }
    }
}

impl FromStr for Host {
    type Err = HostError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Host::parse(s)
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n.as_str()),
            Host::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            Host::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
        }
    }
}

impl serde::Serialize for Host {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What a host string turned out to be.
pub(crate) enum Parsed {
    Name(DomainName),
    Ipv4 {
        addr: Ipv4Addr,
        /// Written exactly as `addr` displays (dotted quad, decimal, no
        /// leading zeros, no trailing dot).
        canonical: bool,
    },
    Ipv6(Ipv6Addr),
}

/// The one host grammar (see the module docs).
pub(crate) fn parse_host(s: &str) -> Result<Parsed, HostError> {
    if s.is_empty() {
        return Err(HostError::Empty);
    }
    if !s.is_ascii() {
        return Err(HostError::NonAscii {
            host: s.to_string(),
        });
    }
    if let Some(rest) = s.strip_prefix('[') {
        let inner = rest
            .strip_suffix(']')
            .ok_or_else(|| HostError::InvalidIpv6 {
                host: s.to_string(),
            })?;
        if inner.contains('%') {
            return Err(HostError::ZoneId {
                host: s.to_string(),
            });
        }
        return inner
            .parse::<Ipv6Addr>()
            .map(Parsed::Ipv6)
            .map_err(|_| HostError::InvalidIpv6 {
                host: s.to_string(),
            });
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
    {
        return Err(if c == ':' {
            HostError::UnbracketedIpv6 {
                host: s.to_string(),
            }
        } else {
            HostError::InvalidChar {
                host: s.to_string(),
                found: c,
            }
        });
    }
    let lower = s.to_ascii_lowercase();
    let trimmed = lower.strip_suffix('.').unwrap_or(&lower);
    if trimmed.is_empty() {
        return Err(HostError::Empty);
    }
    let last = trimmed.rsplit('.').next().unwrap_or(trimmed);
    if looks_numeric(last) {
        let addr = parse_ipv4_any(trimmed).ok_or_else(|| HostError::InvalidIpv4 {
            host: s.to_string(),
        })?;
        return Ok(Parsed::Ipv4 {
            addr,
            canonical: s == addr.to_string(),
        });
    }
    for label in trimmed.split('.') {
        if label.is_empty() {
            return Err(HostError::EmptyLabel {
                host: s.to_string(),
            });
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(HostError::LabelTooLong {
                host: s.to_string(),
            });
        }
    }
    if trimmed.len() > MAX_NAME_LEN {
        return Err(HostError::NameTooLong {
            host: s.to_string(),
        });
    }
    Ok(Parsed::Name(DomainName(trimmed.to_string())))
}

/// True when a label reads as a number: all decimal digits, or `0x` followed
/// by hex digits (possibly none). Such a last label makes the whole host an
/// IPv4 address, as in the WHATWG URL standard ("ends in a number").
fn looks_numeric(label: &str) -> bool {
    if !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    let lower = label.to_ascii_lowercase();
    lower
        .strip_prefix("0x")
        .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Parses an IPv4 address in every spelling that `inet_aton` and the WHATWG
/// URL parser accept: one to four dot-separated parts, each decimal, octal
/// (leading `0`) or hex (`0x`), the last part filling the remaining bytes
/// (`127.1` is `127.0.0.1`, `2130706433` is `127.0.0.1`). One trailing dot is
/// allowed. Returns `None` when `s` is not such an address.
///
/// This is how a host string is classified by what it denotes: a host that
/// parses here is an address, whatever it looks like.
pub fn parse_ipv4_any(s: &str) -> Option<Ipv4Addr> {
    let s = s.strip_suffix('.').unwrap_or(s);
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut numbers = Vec::with_capacity(parts.len());
    for part in &parts {
        numbers.push(parse_ipv4_number(part)?);
    }
    let (last, init) = numbers.split_last()?;
    if init.iter().any(|n| *n > 255) {
        return None;
    }
    // The last part fills the bytes the others left: 4 - init.len() bytes.
    let last_bits = 8 * (4 - init.len() as u32);
    if last_bits < 64 && *last >= (1u64 << last_bits) {
        return None;
    }
    let mut value: u64 = *last;
    for (i, n) in init.iter().enumerate() {
        value += n << (8 * (3 - i as u32));
    }
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

/// One part of an IPv4 address: decimal, octal (leading `0`) or hex (`0x`;
/// `0x` alone is 0). Anything else, including an empty part, a sign or a
/// value beyond `u32::MAX`, is `None`.
fn parse_ipv4_number(part: &str) -> Option<u64> {
    if part.is_empty() {
        return None;
    }
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    let mut value: u64 = 0;
    for c in digits.chars() {
        let d = c.to_digit(radix)?;
        value = value
            .checked_mul(u64::from(radix))?
            .checked_add(u64::from(d))?;
        if value > u64::from(u32::MAX) {
            return None;
        }
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> Option<Ipv4Addr> {
        parse_ipv4_any(s)
    }

    #[test]
    fn odd_ipv4_spellings_denote_their_address() {
        let lo = Some(Ipv4Addr::new(127, 0, 0, 1));
        for s in [
            "127.0.0.1",
            "2130706433",
            "0177.0.0.1",
            "0x7f.0.0.1",
            "0x7f.1",
            "127.1",
            "127.0.1",
            "0x7f000001",
            "017700000001",
            "0x7F.0x0.0.01",
            "127.0.0.1.",
            "0177.0x0.1",
        ] {
            assert_eq!(v4(s), lo, "{s}");
        }
        assert_eq!(v4("0"), Some(Ipv4Addr::UNSPECIFIED));
        assert_eq!(v4("0x"), Some(Ipv4Addr::UNSPECIFIED));
        assert_eq!(v4("4294967295"), Some(Ipv4Addr::BROADCAST));
    }

    #[test]
    fn invalid_ipv4_spellings_are_none() {
        for s in [
            "",
            ".",
            "1.2.3.4.5",
            "256.0.0.1",
            "1.2.3.256",
            "1.2.65536",
            "1.16777216",
            "4294967296",
            "08",
            "0x1g",
            "1..2",
            "+1",
            "1.-2",
            "99999999999999999999999",
            "example.com",
        ] {
            assert_eq!(v4(s), None, "{s:?}");
        }
    }

    #[test]
    fn hosts_are_classified_by_what_they_denote() {
        assert_eq!(
            Host::parse("0x7f.1").unwrap(),
            Host::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        assert_eq!(
            Host::parse("[::1]").unwrap(),
            Host::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST))
        );
        assert_eq!(
            Host::parse("API.Example.COM.").unwrap().to_string(),
            "api.example.com"
        );
        // A numeric-looking last label that is not an address is never a name.
        assert!(matches!(
            Host::parse("example.123"),
            Err(HostError::InvalidIpv4 { .. })
        ));
        assert!(matches!(
            Host::parse("::1"),
            Err(HostError::UnbracketedIpv6 { .. })
        ));
        assert!(matches!(
            Host::parse("[fe80::1%eth0]"),
            Err(HostError::ZoneId { .. })
        ));
        assert!(matches!(
            Host::parse("bücher.de"),
            Err(HostError::NonAscii { .. })
        ));
        assert!(matches!(
            Host::parse("a..b"),
            Err(HostError::EmptyLabel { .. })
        ));
        assert!(matches!(
            Host::parse("a%2e.b"),
            Err(HostError::InvalidChar { found: '%', .. })
        ));
    }

    #[test]
    fn canonical_parsing_refuses_odd_spellings() {
        assert!(Host::parse_canonical("127.0.0.1").is_ok());
        for s in [
            "127.1",
            "0x7f.0.0.1",
            "2130706433",
            "127.0.0.01",
            "127.0.0.1.",
        ] {
            assert!(
                matches!(
                    Host::parse_canonical(s),
                    Err(HostError::NonCanonicalIpv4 { .. })
                ),
                "{s}"
            );
        }
    }

    #[test]
    fn subdomains_are_strict() {
        let parent = DomainName::parse("example.com").unwrap();
        let yes = ["a.example.com", "a.b.example.com"];
        let no = ["example.com", "badexample.com", "a.example.co", "com"];
        for s in yes {
            assert!(
                DomainName::parse(s)
                    .unwrap()
                    .is_strict_subdomain_of(&parent)
            );
        }
        for s in no {
            assert!(
                !DomainName::parse(s)
                    .unwrap()
                    .is_strict_subdomain_of(&parent)
            );
        }
    }

    #[test]
    fn name_limits() {
        let label = "a".repeat(63);
        assert!(DomainName::parse(&label).is_ok());
        assert!(DomainName::parse(&"a".repeat(64)).is_err());
        let long = vec!["abcdefghi"; 26].join(".");
        assert!(long.len() > 253);
        assert!(matches!(
            DomainName::parse(&long),
            Err(HostError::NameTooLong { .. })
        ));
    }
}
