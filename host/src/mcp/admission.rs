//! Who the HTTP front door lets in, checked on a request's head before
//! anything is dispatched: a `Host` naming this server (DNS rebinding), an
//! `Origin`, when present, that is loopback or allowed, and with `--tokens`
//! a bearer token, which names the [`Caller`]. It also names the request's
//! client for the policy's `[rate_limits]` ([`HttpClient`]) and gives rmcp
//! the same `Host` and `Origin` lists, which it checks again.

use super::peer::{Caller, HttpClient};
use super::tokens::{Tokens, bearer};
use http::{HeaderMap, header};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;

/// Refuses `--allowed-origin` and `--allowed-host` entries that do not
/// parse (an admission would drop them).
pub(super) fn check_allowed(
    allowed_hosts: &[String],
    allowed_origins: &[String],
) -> Result<(), String> {
    for o in allowed_origins {
        if Origin::parse(o.trim_end_matches(":*")).is_none() {
            return Err(format!(
                "--allowed-origin {o:?} is not scheme://host[:port] (or :* for any port)"
            ));
        }
    }
    for h in allowed_hosts {
        if Authority::parse(h).is_none() {
            return Err(format!("--allowed-host {h:?} is not a host name[:port]"));
        }
    }
    Ok(())
}

/// A `Host` header or allowed host: lower-case name without brackets, port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    fn parse(s: &str) -> Option<Authority> {
        let a = http::uri::Authority::try_from(s.trim()).ok()?;
        if a.as_str().contains('@') {
            return None;
        }
        Some(Authority {
            host: normalize_host(a.host()),
            port: a.port_u16(),
        })
    }
}

fn normalize_host(h: &str) -> String {
    h.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// An `Origin`: scheme, host and port (the scheme's default when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl Origin {
    fn parse(s: &str) -> Option<Origin> {
        let uri = http::Uri::try_from(s.trim()).ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let authority = uri.authority()?;
        if authority.as_str().contains('@') || uri.path_and_query().is_some_and(|p| p != "/") {
            return None;
        }
        let port = authority.port_u16().or(match scheme.as_str() {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        });
        Some(Origin {
            scheme,
            host: normalize_host(authority.host()),
            port,
        })
    }
}

/// What the front door admits: built once from the options and the bound
/// address.
pub(super) struct Admission {
    port: u16,
    /// Host names admitted with the bound port (loopback names, the bound
    /// address).
    names: Vec<String>,
    /// `--allowed-host` entries.
    extra_hosts: Vec<Authority>,
    /// `--allowed-origin` entries; `None` port: any.
    origins: Vec<Origin>,
    tokens: Option<Tokens>,
}

impl Admission {
    /// The checks for a server bound to `bound`, admitting `allowed_hosts`
    /// and `allowed_origins` besides loopback (entries that do not parse
    /// are dropped: `HttpOptions::check` refuses them first), and asking for
    /// one of `tokens` if any.
    pub(super) fn new(
        bound: SocketAddr,
        allowed_hosts: &[String],
        allowed_origins: &[String],
        tokens: Option<Tokens>,
    ) -> Admission {
        let mut names: Vec<String> = LOOPBACK_NAMES.iter().map(|s| s.to_string()).collect();
        if !bound.ip().is_unspecified() {
            names.push(normalize_host(&bound.ip().to_string()));
        }
        let origins = allowed_origins
            .iter()
            .filter_map(|o| match o.strip_suffix(":*") {
                Some(base) => Origin::parse(base).map(|o| Origin { port: None, ..o }),
                None => Origin::parse(o),
            })
            .collect();
        Admission {
            port: bound.port(),
            names,
            extra_hosts: allowed_hosts
                .iter()
                .filter_map(|h| Authority::parse(h))
                .collect(),
            origins,
            tokens,
        }
    }

    /// The `Host` check (DNS rebinding): a loopback name or the bound
    /// address with the bound port (no port: port 80), or an allowed host.
    pub(super) fn host_ok(&self, headers: &HeaderMap) -> bool {
        let mut values = headers.get_all(header::HOST).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return false;
        };
        let Some(host) = value.to_str().ok().and_then(Authority::parse) else {
            return false;
        };
        let port = host.port.unwrap_or(80);
        if port == self.port && self.names.contains(&host.host) {
            return true;
        }
        self.extra_hosts
            .iter()
            .any(|a| a.host == host.host && a.port.is_none_or(|p| p == port))
    }

    /// The `Origin` check: absent, or a loopback origin (any port), or an
    /// allowed one.
    pub(super) fn origin_ok(&self, headers: &HeaderMap) -> bool {
        let mut values = headers.get_all(header::ORIGIN).iter();
        let value = match (values.next(), values.next()) {
            (None, _) => return true,
            (Some(v), None) => v,
            (Some(_), Some(_)) => return false,
        };
        let Some(origin) = value.to_str().ok().and_then(Origin::parse) else {
            return false;
        };
        if matches!(origin.scheme.as_str(), "http" | "https")
            && LOOPBACK_NAMES.contains(&origin.host.as_str())
        {
            return true;
        }
        self.origins.iter().any(|o| {
            o.scheme == origin.scheme
                && o.host == origin.host
                && o.port.is_none_or(|p| Some(p) == origin.port)
        })
    }

    /// The token check: `None` when admitted, else whether a token was
    /// offered at all.
    #[cfg(test)]
    fn token_refused(&self, headers: &HeaderMap) -> Option<bool> {
        self.caller(headers).err()
    }

    /// The token check: `Ok(None)` when no token is asked, `Ok(Some(p))`
    /// when admitted as principal `p`, else `Err(offered)`: whether a token
    /// was offered at all.
    pub(super) fn caller(&self, headers: &HeaderMap) -> Result<Option<Caller>, bool> {
        let Some(tokens) = self.tokens.as_ref() else {
            return Ok(None);
        };
        let offered = bearer(headers);
        match offered {
            Some(t) => match tokens.principal_of(&t) {
                Some(p) => Ok(Some(Caller(p.to_string()))),
                None => Err(true),
            },
            None => Err(false),
        }
    }

    /// The client of an admitted request, for the policy's `[rate_limits]`:
    /// with `--tokens`, its token (a digest of it); otherwise the address it
    /// connects from. Not the MCP session: a client can open sessions, or
    /// send session-less 2026-07-28 requests, as often as it likes.
    pub(super) fn client_of(&self, headers: &HeaderMap, remote: SocketAddr) -> HttpClient {
        if self.tokens.is_some()
            && let Some(token) = bearer(headers)
        {
            let digest = Sha256::digest(token.as_bytes());
            return HttpClient(format!("mcp-http-token-{}", hex::encode(&digest[..8])));
        }
        HttpClient(address_client(remote.ip()))
    }

    /// rmcp's own `Host` list (it checks again after the front door).
    pub(super) fn rmcp_hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = self
            .names
            .iter()
            .map(|n| {
                if n.contains(':') {
                    format!("[{n}]:{}", self.port)
                } else {
                    format!("{n}:{}", self.port)
                }
            })
            .collect();
        if self.port == 80 {
            hosts.extend(self.names.iter().cloned());
        }
        for a in &self.extra_hosts {
            let host = if a.host.contains(':') {
                format!("[{}]", a.host)
            } else {
                a.host.clone()
            };
            hosts.push(match a.port {
                Some(p) => format!("{host}:{p}"),
                None => host,
            });
        }
        hosts
    }

    /// rmcp's own `Origin` list.
    pub(super) fn rmcp_origins(&self) -> Vec<String> {
        let mut origins = Vec::new();
        for scheme in ["http", "https"] {
            for host in ["localhost", "127.0.0.1", "[::1]"] {
                origins.push(format!("{scheme}://{host}:*"));
            }
        }
        for o in &self.origins {
            let host = if o.host.contains(':') {
                format!("[{}]", o.host)
            } else {
                o.host.clone()
            };
            origins.push(match o.port {
                Some(p) => format!("{}://{host}:{p}", o.scheme),
                None => format!("{}://{host}:*", o.scheme),
            });
        }
        origins
    }
}

/// The rate-limit client of a request from `ip`: the address itself for
/// IPv4 (and IPv4-mapped IPv6), its /64 for IPv6, since one host commonly
/// holds a whole /64 and could otherwise take a fresh bucket per address.
fn address_client(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => format!("mcp-http-{v4}"),
            None => {
                let s = v6.segments();
                format!("mcp-http-{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
        v4 => format!("mcp-http-{v4}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One IPv6 /64 is one rate-limit client; IPv4, mapped or not, is its
    /// address.
    #[test]
    fn rate_limit_clients_are_addresses_and_ipv6_prefixes() {
        let client = |ip: &str| address_client(ip.parse().unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(client("192.0.2.7"), "mcp-http-192.0.2.7");
        assert_eq!(client("::ffff:192.0.2.7"), "mcp-http-192.0.2.7");
        assert_eq!(client("2001:db8:1:2::1"), "mcp-http-2001:db8:1:2::/64");
        assert_eq!(client("2001:db8:1:2:ffff::9"), client("2001:db8:1:2::1"));
        assert_ne!(client("2001:db8:1:3::1"), client("2001:db8:1:2::1"));
        assert_eq!(client("::1"), "mcp-http-0:0:0:0::/64");
    }

    fn admission(origins: &[&str], hosts: &[&str], tokens: Option<&str>) -> Admission {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Admission::new(
            SocketAddr::from(([127, 0, 0, 1], 8123)),
            &strings(hosts),
            &strings(origins),
            tokens.map(Tokens::parse).transpose().ok().flatten(),
        )
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            if let Ok(v) = http::HeaderValue::from_str(v) {
                h.append(*k, v);
            }
        }
        h
    }

    #[test]
    fn host_must_name_the_bound_port_on_loopback() {
        let a = admission(&[], &["tools.example:443"], None);
        for ok in [
            "localhost:8123",
            "127.0.0.1:8123",
            "[::1]:8123",
            "LOCALHOST:8123",
            "tools.example:443",
        ] {
            assert!(a.host_ok(&headers(&[("host", ok)])), "{ok}");
        }
        for bad in [
            "evil.example:8123",
            "localhost:8124",
            "localhost",
            "127.0.0.1.evil.example:8123",
            "user@localhost:8123",
            "tools.example:444",
            "",
        ] {
            assert!(!a.host_ok(&headers(&[("host", bad)])), "{bad}");
        }
        assert!(!a.host_ok(&HeaderMap::new()), "no Host");
        assert!(
            !a.host_ok(&headers(&[
                ("host", "localhost:8123"),
                ("host", "evil.example:8123")
            ])),
            "two Hosts"
        );
    }

    #[test]
    fn origin_is_loopback_or_allowed() {
        let a = admission(
            &["https://app.example:*", "http://ui.example:3000"],
            &[],
            None,
        );
        assert!(a.origin_ok(&HeaderMap::new()), "no Origin");
        for ok in [
            "http://localhost:5173",
            "https://127.0.0.1",
            "http://[::1]:9",
            "https://app.example:8443",
            "http://ui.example:3000",
        ] {
            assert!(a.origin_ok(&headers(&[("origin", ok)])), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "null",
            "http://ui.example:3001",
            "http://ui.example",
            "file://localhost",
            "http://localhost.evil.example",
            "garbage",
        ] {
            assert!(!a.origin_ok(&headers(&[("origin", bad)])), "{bad}");
        }
    }

    /// Without one of the tokens a request is refused, and told whether it
    /// offered one.
    #[test]
    fn a_request_needs_one_of_the_tokens() {
        let a = admission(&[], &[], Some("s3cret\n"));
        assert_eq!(a.token_refused(&HeaderMap::new()), Some(false));
        assert_eq!(
            a.token_refused(&headers(&[("authorization", "Bearer nope")])),
            Some(true)
        );
        assert_eq!(
            a.token_refused(&headers(&[("authorization", "bearer s3cret")])),
            None
        );
        assert_eq!(
            a.token_refused(&headers(&[("authorization", "Basic s3cret")])),
            Some(false)
        );
    }
}
