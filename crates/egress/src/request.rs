//! [`Request`]: the facts of one outgoing request or connection that a
//! decision reads (scheme, host, port, method), and the parsers that build it
//! from a URL or from a wasi:http `(scheme, authority)` pair.
//!
//! The host is parsed by [`Host::parse`], so a request is classified by the
//! address its host denotes, whatever the spelling.

use crate::error::UrlError;
use crate::grant::{Scheme, parse_port, split_host_port};
use crate::host::Host;
use crate::record::{bounded, strip_query};

/// One outgoing request (http, https) or connection (tcp, udp).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Request {
    /// What it speaks.
    pub scheme: Scheme,
    /// Where it goes, as parsed (an odd IPv4 spelling is already an address).
    pub host: Host,
    /// The port it goes to.
    pub port: u16,
    /// The HTTP method, exactly as the guest sent it; `None` for sockets.
    pub method: Option<String>,
}

/// The most bytes of a request's path that records keep.
pub(crate) const MAX_RECORDED_PATH: usize = 512;

impl Request {
    /// A request from its parts.
    pub fn new(scheme: Scheme, host: Host, port: u16, method: Option<&str>) -> Request {
        Request {
            scheme,
            host,
            port,
            method: method.map(str::to_string),
        }
    }

    /// Parses an absolute URL (`https://api.example.com/v1?x=1`): scheme,
    /// authority (userinfo dropped, port defaulted), nothing else.
    pub fn from_url(url: &str, method: Option<&str>) -> Result<Request, UrlError> {
        let Some((scheme_text, rest)) = url.split_once("://") else {
            return Err(UrlError::NotAbsolute {
                url: crate::record::redact_url(url),
            });
        };
        let scheme = scheme_text.parse::<Scheme>()?;
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        Request::from_authority(scheme, &rest[..end], method)
    }

    /// Parses a wasi:http authority (`host[:port]`, possibly with userinfo,
    /// which is dropped) for the given scheme. An empty or absent port is the
    /// scheme's default.
    pub fn from_authority(
        scheme: Scheme,
        authority: &str,
        method: Option<&str>,
    ) -> Result<Request, UrlError> {
        let host_port = authority
            .rsplit_once('@')
            .map_or(authority, |(_, after)| after);
        if authority.contains('\\') {
            return Err(UrlError::Backslash {
                authority: host_port.to_string(),
            });
        }
        let (host_text, port_text) = split_host_port(host_port);
        let host = Host::parse(host_text)?;
        let port = match port_text.filter(|p| !p.is_empty()) {
            Some(p) => parse_port(p).ok_or_else(|| UrlError::InvalidPort {
                port: p.to_string(),
            })?,
            None => scheme.default_port().ok_or(UrlError::PortRequired {
                scheme: scheme.as_str(),
            })?,
        };
        Ok(Request::new(scheme, host, port, method))
    }

    /// `scheme://host:port`, the port always explicit.
    pub fn origin(&self) -> String {
        format!("{}://{}:{}", self.scheme, self.host, self.port)
    }

    /// What an [`EgressRecord`](crate::EgressRecord) shows:
    /// `scheme://host:port/path`, without query or fragment. `path` is the
    /// request's path (with or without query); empty means `/` for http and
    /// nothing for sockets.
    pub fn url_without_query(&self, path: &str) -> String {
        // What is recorded of a path is bounded: a guest's 64 KiB path,
        // refused again and again, would otherwise fill the receipt.
        let path = bounded(strip_query(path), MAX_RECORDED_PATH);
        if !self.scheme.is_http() && path.is_empty() {
            return self.origin();
        }
        let slash = if path.starts_with('/') { "" } else { "/" };
        format!("{}{slash}{path}", self.origin())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn urls_parse_to_scheme_host_port() {
        let r = Request::from_url("HTTPS://u:p@API.example.com/v1?key=1", Some("GET")).unwrap();
        assert_eq!(r.scheme, Scheme::Https);
        assert_eq!(r.host.to_string(), "api.example.com");
        assert_eq!(r.port, 443);
        let r = Request::from_url("http://0x7f.1:8080/", Some("GET")).unwrap();
        assert_eq!(r.host, Host::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert_eq!(r.port, 8080);
        let r = Request::from_url("http://[::1]/", None).unwrap();
        assert_eq!(r.origin(), "http://[::1]:80");
        let r = Request::from_url("http://example.com:/", None).unwrap();
        assert_eq!(r.port, 80);
    }

    #[test]
    fn the_host_after_the_last_at_sign_is_the_host() {
        let r = Request::from_url("http://allowed.com@evil.com/", None).unwrap();
        assert_eq!(r.host.to_string(), "evil.com");
        let r = Request::from_url("http://a@allowed.com:80@127.0.0.1/", None).unwrap();
        assert_eq!(r.host.to_string(), "127.0.0.1");
    }

    #[test]
    fn malformed_urls_are_errors() {
        assert!(matches!(
            Request::from_url("example.com/x", None),
            Err(UrlError::NotAbsolute { .. })
        ));
        assert!(matches!(
            Request::from_url("gopher://example.com/", None),
            Err(UrlError::UnknownScheme { .. })
        ));
        assert!(matches!(
            Request::from_url("http://evil.com\\@good.com/", None),
            Err(UrlError::Backslash { .. })
        ));
        assert!(matches!(
            Request::from_url("http://example.com:99999/", None),
            Err(UrlError::InvalidPort { .. })
        ));
        assert!(matches!(
            Request::from_url("tcp://example.com", None),
            Err(UrlError::PortRequired { .. })
        ));
        assert!(matches!(
            Request::from_url("http://1.2.3.4.5/", None),
            Err(UrlError::Host(_))
        ));
    }

    #[test]
    fn records_show_no_query() {
        let r = Request::from_url("https://api.example.com/v1?key=secret", Some("GET")).unwrap();
        assert_eq!(
            r.url_without_query("/v1/items?key=secret#frag"),
            "https://api.example.com:443/v1/items"
        );
        assert_eq!(r.url_without_query(""), "https://api.example.com:443/");
        let long = format!("/{}?q=1", "é".repeat(40_000));
        let url = r.url_without_query(&long);
        assert!(url.len() < MAX_RECORDED_PATH + 100, "{}", url.len());
        assert!(url.ends_with("more bytes]"), "{url}");
        let r = Request::from_url("tcp://db.example.com:5432", None).unwrap();
        assert_eq!(r.url_without_query(""), "tcp://db.example.com:5432");
    }
}
