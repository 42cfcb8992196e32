//! The policy file's network sections as written: the serde shapes
//! [`NetworkSection`] (`[network]`), [`GrantEntry`] and [`CredentialEntry`]
//! (`[[credentials]]`), and the loaders that turn them into a
//! [`NetworkPolicy`]: [`NetworkPolicy::from_toml`] (text, errors located by
//! line), [`NetworkPolicy::from_toml_value`] (a parsed document, errors named
//! by key path) and [`NetworkPolicy::from_sections`] (the shapes, for a caller
//! that embeds them in its own file format).
//!
//! Every table denies unknown keys, so a typo is an error, never ignored. Any
//! error rejects the whole configuration.

use crate::credential::{CredentialSpec, SecretSource, is_header_value};
use crate::error::{ConfigError, KeyPath, LocatedError, PathSegment};
use crate::grant::{Grant, Scheme, is_token};
use crate::host::Host;
use crate::policy::{Limits, NetworkPolicy};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// `[network]` as written.
///
/// ```toml
/// [network]
/// allow = [
///   "https://api.example.com",                               # any method, port 443
///   { url = "http://*.internal.example.com:8080", methods = ["GET", "HEAD"] },
///   "http://127.0.0.1:3000",                                 # an exact address unlocks it
/// ]
/// ask = ["https://*.github.com"]       # same shape: requests that need an approval
/// max_requests = 32                    # per call (default 32)
/// max_response_bytes = 8388608         # per call, bodies summed (default 8 MiB)
/// request_timeout_ms = 30000           # per request (default 30 s)
/// ca_file = "/etc/toolhost/private-ca.pem"   # extra trusted roots (stored, not read here)
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSection {
    /// Requests that may go without asking.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<GrantEntry>,
    /// Requests that may go after an approval.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ask: Vec<GrantEntry>,
    /// At most this many requests per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u32>,
    /// At most this many response body bytes per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<u64>,
    /// Each request's timeout in milliseconds (inside the call's deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout_ms: Option<u64>,
    /// A PEM file of extra trusted CA certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

/// One grant as written: a pattern string, or a table with methods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum GrantEntry {
    /// `"https://api.example.com"`: any method.
    Pattern(String),
    /// `{ url = "https://api.example.com", methods = ["GET"] }`.
    Table(GrantTable),
}

/// The table form of a [`GrantEntry`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantTable {
    /// The pattern: `scheme://host[:port]`.
    pub url: String,
    /// The methods allowed; absent means any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
}

impl GrantEntry {
    /// Parses the entry into a [`Grant`].
    pub fn to_grant(&self) -> Result<Grant, crate::GrantError> {
        match self {
            GrantEntry::Pattern(p) => Grant::parse(p),
            GrantEntry::Table(t) => Grant::with_methods(&t.url, t.methods.as_deref()),
        }
    }

    /// Reads one entry of a list of grants from a parsed document and
    /// parses it, exactly as an entry of `[network] allow` is: a pattern
    /// string or a `{ url, methods }` table. For a caller whose own format
    /// holds lists of grants (a policy rule's `network`); errors name the
    /// entry by `path` (`rules[2].network[0]: grant "htp://x": unknown
    /// scheme ...`), with the messages `[network]`'s entries get.
    pub fn grant_from_toml(value: &toml::Value, path: &KeyPath) -> Result<Grant, ConfigError> {
        let entry: GrantEntry = value_as(value, path.clone())?;
        entry.grant_at(path)
    }

    /// [`GrantEntry::to_grant`], its error named by `path`.
    fn grant_at(&self, path: &KeyPath) -> Result<Grant, ConfigError> {
        self.to_grant()
            .map_err(|g| ConfigError::new(path.clone(), g))
    }
}

impl<'de> Deserialize<'de> for GrantEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EntryVisitor;

        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = GrantEntry;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a grant: a pattern such as \"https://api.example.com\" \
                     or a table { url = \"...\", methods = [\"GET\"] }",
                )
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<GrantEntry, E> {
                Ok(GrantEntry::Pattern(v.to_string()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<GrantEntry, A::Error> {
                GrantTable::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(GrantEntry::Table)
            }
        }

        d.deserialize_any(EntryVisitor)
    }
}

/// One `[[credentials]]` entry as written. It holds where the secret is,
/// never the secret itself.
///
/// ```toml
/// [[credentials]]
/// host = "api.example.com"     # one exact host (a name or an IP address); no wildcards
/// # scheme = "https"           # optional: `https` (the default) or `http`
/// # port = 443                 # optional: the scheme's default port unless given
/// header = "Authorization"     # the header the host sets on requests to that origin
/// value_env = "EXAMPLE_TOKEN"  # read from the host process's environment, or:
/// # value_file = "/run/secrets/example-token"   # read from a file (one trailing newline dropped)
/// prefix = "Bearer "           # optional, put before the secret
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialEntry {
    /// The host the credential belongs to.
    pub host: String,
    /// The scheme of its requests: `https` (the default) or `http`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// The port of its requests (default: the scheme's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The header it is sent in.
    pub header: String,
    /// An environment variable of the host process holding the secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_env: Option<String>,
    /// A file holding the secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_file: Option<PathBuf>,
    /// Text put before the secret (`"Bearer "`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

/// Headers a credential may not set: they frame or route the request.
const FORBIDDEN_HEADERS: [&str; 10] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
    "expect",
];

const NETWORK_KEYS: &str =
    "allow, ask, max_requests, max_response_bytes, request_timeout_ms or ca_file";

impl NetworkPolicy {
    /// Parses the network part of a policy file's text: `[network]` and
    /// `[[credentials]]`; other keys are left to the policy crate. `origin`
    /// names the text in errors (usually its path); errors carry the line and
    /// column of the offending item.
    pub fn from_toml(src: &str, origin: &str) -> Result<NetworkPolicy, LocatedError> {
        let table: toml::Table = toml::from_str(src).map_err(|e| {
            let offset = e.span().map_or(0, |s| s.start);
            LocatedError::new(
                src,
                origin,
                offset,
                e.message().trim_end().to_string(),
                None,
            )
        })?;
        NetworkPolicy::from_toml_value(&toml::Value::Table(table)).map_err(|e| {
            let offset = locate(src, e.path()).unwrap_or(0);
            LocatedError::new(src, origin, offset, e.to_string(), Some(e))
        })
    }

    /// Reads `network` and `credentials` from a parsed policy document
    /// (other keys are ignored). When `network` is absent, no request is
    /// granted: the network is off.
    pub fn from_toml_value(root: &toml::Value) -> Result<NetworkPolicy, ConfigError> {
        let path = KeyPath::root();
        let Some(table) = root.as_table() else {
            return Err(ConfigError::shape(path, "expected a table"));
        };
        let network = table
            .get("network")
            .map(|v| network_section(v, &path.key("network")))
            .transpose()?;
        let credentials = match table.get("credentials") {
            None => Vec::new(),
            Some(toml::Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| value_as(v, path.key("credentials").index(i)))
                .collect::<Result<Vec<CredentialEntry>, _>>()?,
            Some(_) => {
                return Err(ConfigError::shape(
                    path.key("credentials"),
                    "expected an array of tables ([[credentials]])",
                ));
            }
        };
        NetworkPolicy::from_sections(network.as_ref(), &credentials)
    }

    /// Builds a policy from the serde shapes, for a caller that embeds
    /// [`NetworkSection`] and [`CredentialEntry`] in its own format. Errors
    /// name the item by its key path from the document root
    /// (`network.allow[2]`, `credentials[0].header`).
    pub fn from_sections(
        network: Option<&NetworkSection>,
        credentials: &[CredentialEntry],
    ) -> Result<NetworkPolicy, ConfigError> {
        let root = KeyPath::root().key("network");
        let mut policy = NetworkPolicy::default();
        if let Some(n) = network {
            policy.allow = compile_grants(&n.allow, &root.key("allow"))?;
            policy.ask = compile_grants(&n.ask, &root.key("ask"))?;
            policy.limits = compile_limits(n, &root)?;
            if let Some(ca) = &n.ca_file {
                if !ca.is_absolute() {
                    return Err(ConfigError::invalid(
                        root.key("ca_file"),
                        format!(
                            "{:?} is not an absolute path (a relative one would depend on the directory the host starts in); remove the key to use the system's roots only",
                            ca.display().to_string()
                        ),
                    ));
                }
                policy.ca_file = Some(ca.clone());
            }
        }
        let path = KeyPath::root().key("credentials");
        for (i, entry) in credentials.iter().enumerate() {
            let spec = compile_credential(entry, &path.index(i))?;
            if let Some(j) = policy.credentials.iter().position(|c: &CredentialSpec| {
                c.applies_to(spec.scheme(), spec.host(), spec.port())
            }) {
                return Err(ConfigError::invalid(
                    path.index(i).key("host"),
                    format!(
                        "{}://{}:{} already has a credential (credentials[{j}]); one credential per origin",
                        spec.scheme(),
                        spec.host(),
                        spec.port()
                    ),
                ));
            }
            policy.credentials.push(spec);
        }
        Ok(policy)
    }
}

/// Deserialises one value, naming `path` in the error.
fn value_as<T: serde::de::DeserializeOwned>(
    v: &toml::Value,
    path: KeyPath,
) -> Result<T, ConfigError> {
    v.clone()
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError::shape(path, e.message().trim_end().to_string()))
}

/// `[network]` key by key, so that an error names its item.
fn network_section(v: &toml::Value, path: &KeyPath) -> Result<NetworkSection, ConfigError> {
    let Some(table) = v.as_table() else {
        return Err(ConfigError::shape(
            path.clone(),
            "expected a table ([network])",
        ));
    };
    let mut section = NetworkSection::default();
    for (key, value) in table {
        let at = path.key(key);
        match key.as_str() {
            "allow" | "ask" => {
                let Some(items) = value.as_array() else {
                    return Err(ConfigError::shape(
                        at,
                        format!(
                            "expected an array of grants: {key} = [\"https://api.example.com\"]"
                        ),
                    ));
                };
                let list = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| value_as(item, at.index(i)))
                    .collect::<Result<Vec<GrantEntry>, _>>()?;
                if key == "allow" {
                    section.allow = list;
                } else {
                    section.ask = list;
                }
            }
            "max_requests" => section.max_requests = Some(value_as(value, at)?),
            "max_response_bytes" => section.max_response_bytes = Some(value_as(value, at)?),
            "request_timeout_ms" => section.request_timeout_ms = Some(value_as(value, at)?),
            "ca_file" => section.ca_file = Some(value_as(value, at)?),
            other => {
                return Err(ConfigError::shape(
                    at,
                    format!("unknown key `{other}` (expected {NETWORK_KEYS})"),
                ));
            }
        }
    }
    Ok(section)
}

fn compile_grants(entries: &[GrantEntry], path: &KeyPath) -> Result<Vec<Grant>, ConfigError> {
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| e.grant_at(&path.index(i)))
        .collect()
}

fn compile_limits(n: &NetworkSection, path: &KeyPath) -> Result<Limits, ConfigError> {
    let mut limits = Limits::default();
    let positive = |v: Option<u64>, key: &str| -> Result<Option<u64>, ConfigError> {
        match v {
            Some(0) => Err(ConfigError::invalid(
                path.key(key),
                "must be at least 1 (to turn the network off, grant nothing)",
            )),
            other => Ok(other),
        }
    };
    if let Some(v) = positive(n.max_requests.map(u64::from), "max_requests")? {
        limits.max_requests = u32::try_from(v).unwrap_or(u32::MAX);
    }
    if let Some(v) = positive(n.max_response_bytes, "max_response_bytes")? {
        limits.max_response_bytes = v;
    }
    if let Some(v) = positive(n.request_timeout_ms, "request_timeout_ms")? {
        limits.request_timeout_ms = v;
    }
    Ok(limits)
}

fn compile_credential(e: &CredentialEntry, path: &KeyPath) -> Result<CredentialSpec, ConfigError> {
    if e.host.contains('*') {
        return Err(ConfigError::invalid(
            path.key("host"),
            format!(
                "{:?}: a credential belongs to one exact host; wildcards are not accepted",
                e.host
            ),
        ));
    }
    let host = Host::parse_canonical(&e.host)
        .map_err(|h| ConfigError::invalid(path.key("host"), h.to_string()))?;
    let header = e.header.to_ascii_lowercase();
    if !is_token(&header) {
        return Err(ConfigError::invalid(
            path.key("header"),
            format!("{:?} is not a valid header name", e.header),
        ));
    }
    if FORBIDDEN_HEADERS.contains(&header.as_str()) {
        return Err(ConfigError::invalid(
            path.key("header"),
            format!(
                "{:?} frames or routes the request; a credential cannot set it",
                e.header
            ),
        ));
    }
    let source = match (&e.value_env, &e.value_file) {
        (Some(var), None) => {
            if var.is_empty() || var.contains(['=', '\0']) {
                return Err(ConfigError::invalid(
                    path.key("value_env"),
                    format!("{var:?} is not an environment variable name"),
                ));
            }
            SecretSource::Env(var.clone())
        }
        (None, Some(file)) => {
            if !file.is_absolute() {
                return Err(ConfigError::invalid(
                    path.key("value_file"),
                    format!(
                        "{:?} is not an absolute path (a relative one would depend on the directory the host starts in)",
                        file.display().to_string()
                    ),
                ));
            }
            SecretSource::File(file.clone())
        }
        (Some(_), Some(_)) => {
            return Err(ConfigError::invalid(
                path.clone(),
                "a credential has either `value_env` or `value_file`, not both",
            ));
        }
        (None, None) => {
            return Err(ConfigError::invalid(
                path.clone(),
                "a credential needs `value_env` or `value_file` (where the host reads the secret)",
            ));
        }
    };
    let prefix = e.prefix.clone().unwrap_or_default();
    if !is_header_value(&prefix) {
        return Err(ConfigError::invalid(
            path.key("prefix"),
            "a header value cannot contain control characters",
        ));
    }
    let scheme = match e.scheme.as_deref() {
        None | Some("https") => Scheme::Https,
        Some("http") => Scheme::Http,
        Some(other) => {
            return Err(ConfigError::invalid(
                path.key("scheme"),
                format!(
                    "{other:?}: a credential goes with `https` (the default) or `http` requests"
                ),
            ));
        }
    };
    let port = match (e.port, scheme.default_port()) {
        (Some(0), _) => {
            return Err(ConfigError::invalid(path.key("port"), "port 0"));
        }
        (Some(p), _) | (None, Some(p)) => p,
        (None, None) => {
            return Err(ConfigError::invalid(path.key("port"), "a port is needed"));
        }
    };
    Ok(CredentialSpec::new(
        (scheme, host, port),
        header,
        source,
        prefix,
    ))
}

/// The byte offset of the item at `path` in `src`: the deepest item of the
/// path that exists there.
fn locate(src: &str, path: &KeyPath) -> Option<usize> {
    let root = DeTable::parse(src).ok()?;
    let mut offset = root.span().start;
    let mut current: Option<&Spanned<DeValue<'_>>> = None;
    for seg in path.segments() {
        let next = match (seg, current.map(Spanned::get_ref)) {
            (PathSegment::Key(k), None) => find_key(root.get_ref(), k),
            (PathSegment::Key(k), Some(DeValue::Table(t))) => find_key(t, k),
            (PathSegment::Index(i), Some(DeValue::Array(a))) => a.get(*i),
            _ => None,
        };
        let Some(next) = next else {
            break;
        };
        offset = next.span().start;
        current = Some(next);
    }
    Some(offset)
}

fn find_key<'a, 'i>(table: &'a DeTable<'i>, key: &str) -> Option<&'a Spanned<DeValue<'i>>> {
    table
        .iter()
        .find(|(k, _)| k.get_ref().as_ref() == key)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ConfigProblem;

    #[test]
    fn absent_sections_deny_everything() {
        let p = NetworkPolicy::from_toml("version = 1\ndefault = \"allow\"\n", "p.toml").unwrap();
        assert!(!p.is_enabled());
        assert_eq!(p, NetworkPolicy::default());
        assert_eq!(p.limits(), Limits::default());
    }

    #[test]
    fn a_full_section_loads() {
        let src = r#"
version = 1

[network]
allow = [
  "https://api.example.com",
  { url = "http://*.internal.example.com:8080", methods = ["get", "HEAD"] },
]
ask = ["https://*.github.com"]
max_requests = 4
max_response_bytes = 1024
request_timeout_ms = 500
ca_file = "/etc/ca.pem"

[[credentials]]
host = "API.example.com"
header = "Authorization"
value_env = "EXAMPLE_TOKEN"
prefix = "Bearer "
"#;
        let p = NetworkPolicy::from_toml(src, "p.toml").unwrap();
        assert_eq!(p.allow().len(), 2);
        assert_eq!(p.ask().len(), 1);
        assert_eq!(
            p.allow()[1].methods(),
            Some(&["GET".to_string(), "HEAD".to_string()][..])
        );
        assert_eq!(
            p.limits(),
            Limits {
                max_requests: 4,
                max_response_bytes: 1024,
                request_timeout_ms: 500
            }
        );
        assert_eq!(p.ca_file(), Some(std::path::Path::new("/etc/ca.pem")));
        let e = err("[network]\nallow = [\"https://a.example.com\"]\nca_file = \"ca.pem\"\n");
        assert!(e.message().contains("not an absolute path"), "{e}");
        assert_eq!(e.line(), 3, "{e}");
        let c = &p.credentials()[0];
        assert_eq!(c.host().to_string(), "api.example.com");
        assert_eq!(c.header(), "authorization");
        assert_eq!(c.source(), &SecretSource::Env("EXAMPLE_TOKEN".to_string()));
        assert_eq!(
            p.reachable(),
            [
                "https://api.example.com:443",
                "http://*.internal.example.com:8080",
                "ask:https://*.github.com:443"
            ]
        );
    }

    fn err(src: &str) -> LocatedError {
        NetworkPolicy::from_toml(src, "p.toml").unwrap_err()
    }

    #[test]
    fn errors_name_the_entry_and_its_line() {
        let e = err("[network]\nallow = [\n  \"https://ok.example.com\",\n  \"htp://bad\",\n]\n");
        assert_eq!((e.line(), e.column()), (4, 3), "{e}");
        assert_eq!(
            e.to_string(),
            "p.toml:4:3: network.allow[1]: grant \"htp://bad\": unknown scheme \"htp\" \
             (expected http, https, tcp or udp)"
        );
        let ce = e.config_error().unwrap();
        assert!(matches!(
            ce.problem(),
            ConfigProblem::Grant(crate::GrantError::UnknownScheme { .. })
        ));

        let e = err("[network]\nask = [\n  \"https://*.github.io\",\n]\n");
        assert_eq!(e.line(), 3, "{e}");
        assert!(
            e.message().starts_with(
                "network.ask[0]: grant \"https://*.github.io\": \"github.io\" is a public suffix"
            ),
            "{e}"
        );

        let e = err("[network]\nalow = []\n");
        assert_eq!(e.line(), 2, "{e}");
        assert!(e.message().contains("unknown key `alow`"), "{e}");

        let e = err("[network]\nask = [{ url = \"https://x.example.com\", method = [\"GET\"] }]\n");
        assert_eq!(e.line(), 2, "{e}");
        assert!(
            e.message()
                .starts_with("network.ask[0]: unknown field `method`"),
            "{e}"
        );

        let e = err("[network]\nallow = [3]\n");
        assert!(e.message().contains("a grant: a pattern"), "{e}");

        let e = err("[network]\nmax_requests = 0\n");
        assert_eq!(e.line(), 2, "{e}");
        assert!(
            e.message()
                .starts_with("network.max_requests: must be at least 1"),
            "{e}"
        );

        let e = err("[network]\nmax_requests = -3\n");
        assert!(e.message().starts_with("network.max_requests:"), "{e}");

        let e = err("[network]\nallow = \"https://x.example.com\"\n");
        assert!(e.message().contains("expected an array of grants"), "{e}");

        let e = err("network = 3\n");
        assert!(e.message().contains("expected a table"), "{e}");

        let e = err("[network\n");
        assert!(e.config_error().is_none());
        assert_eq!(e.line(), 1);
    }

    /// An entry read on its own (a policy rule's `network`) parses, and
    /// fails, exactly as the same entry of `[network] allow` does.
    #[test]
    fn an_entry_alone_reads_as_in_network_allow() {
        let path = KeyPath::root().key("rules").index(2).key("network");
        let entries: toml::Table = toml::from_str(
            "a = [\"https://api.example.com\", { url = \"http://127.0.0.1:8080\", methods = [\"get\"] }, \"htp://bad\", { url = \"https://x.example.com\", method = [\"GET\"] }, \"https://*.github.io\", 3]",
        )
        .unwrap();
        let entries = entries["a"].as_array().unwrap();
        let read = |i: usize| GrantEntry::grant_from_toml(&entries[i], &path.index(i));
        assert_eq!(
            read(0).unwrap(),
            Grant::parse("https://api.example.com").unwrap()
        );
        assert_eq!(read(1).unwrap().methods(), Some(&["GET".to_string()][..]));
        for (i, entry) in entries.iter().enumerate().skip(2) {
            let alone = read(i).unwrap_err().to_string();
            let src = format!("[network]\nallow = [{entry}]\n");
            let in_network = err(&src).message().to_string();
            let alone = alone.strip_prefix(&format!("rules[2].network[{i}]: "));
            let in_network = in_network.strip_prefix("network.allow[0]: ");
            assert!(
                alone.is_some() && in_network.is_some(),
                "{alone:?} / {in_network:?}"
            );
            assert_eq!(alone, in_network);
        }
    }

    #[test]
    fn credential_errors() {
        let cases = [
            (
                "host = \"*.example.com\"\nheader = \"A\"\nvalue_env = \"V\"",
                2,
                "wildcards",
            ),
            (
                "host = \"127.1\"\nheader = \"A\"\nvalue_env = \"V\"",
                2,
                "write the address",
            ),
            (
                "host = \"a.example.com\"\nheader = \"Bad Header\"\nvalue_env = \"V\"",
                3,
                "not a valid header",
            ),
            (
                "host = \"a.example.com\"\nheader = \"Host\"\nvalue_env = \"V\"",
                3,
                "frames or routes",
            ),
            (
                "host = \"a.example.com\"\nheader = \"A\"",
                1,
                "needs `value_env` or `value_file`",
            ),
            (
                "host = \"a.example.com\"\nheader = \"A\"\nvalue_env = \"V\"\nvalue_file = \"f\"",
                1,
                "not both",
            ),
            (
                "host = \"a.example.com\"\nheader = \"A\"\nvalue_env = \"\"",
                4,
                "not an environment variable",
            ),
            (
                "host = \"a.example.com\"\nheader = \"A\"\nvalue_file = \"secrets/token\"",
                4,
                "not an absolute path",
            ),
            (
                "host = \"a.example.com\"\nheader = \"A\"\nvalue_env = \"V\"\nprefix = \"a\\nb\"",
                5,
                "control characters",
            ),
            (
                "host = \"a.example.com\"\nheader = \"A\"\nvalue = \"sk-123\"",
                1,
                "unknown field `value`",
            ),
            (
                "host = \"a.example.com\"\nscheme = \"tcp\"\nheader = \"A\"\nvalue_env = \"V\"",
                3,
                "goes with `https` (the default) or `http`",
            ),
            (
                "host = \"a.example.com\"\nport = 0\nheader = \"A\"\nvalue_env = \"V\"",
                3,
                "port 0",
            ),
        ];
        for (body, line, needle) in cases {
            let src = format!("[[credentials]]\n{body}\n");
            let e = err(&src);
            assert!(e.message().contains(needle), "{body}: {e}");
            assert_eq!(e.line(), line, "{body}: {e}");
            assert!(e.message().starts_with("credentials[0]"), "{e}");
        }
        let dup = "[[credentials]]\nhost = \"a.example.com\"\nheader = \"A\"\nvalue_env = \"V\"\n\
                   [[credentials]]\nhost = \"A.example.com.\"\nheader = \"B\"\nvalue_env = \"W\"\n";
        let e = err(dup);
        assert_eq!(e.line(), 6, "{e}");
        assert!(
            e.message()
                .contains("already has a credential (credentials[0])"),
            "{e}"
        );
        // Another origin of the same host is another credential.
        let two = "[[credentials]]\nhost = \"a.example.com\"\nheader = \"A\"\nvalue_env = \"V\"\n\
                   [[credentials]]\nhost = \"a.example.com\"\nport = 8443\nheader = \"A\"\nvalue_env = \"W\"\n";
        let p = NetworkPolicy::from_toml(two, "two.toml").unwrap();
        let ports: Vec<u16> = p.credentials().iter().map(CredentialSpec::port).collect();
        assert_eq!(ports, [443, 8443]);
    }

    #[test]
    fn sections_round_trip_through_serde() {
        let section = NetworkSection {
            allow: vec![
                GrantEntry::Pattern("https://a.example.com".to_string()),
                GrantEntry::Table(GrantTable {
                    url: "https://b.example.com".to_string(),
                    methods: Some(vec!["GET".to_string()]),
                }),
            ],
            max_requests: Some(3),
            ..NetworkSection::default()
        };
        let text = toml::to_string(&section).unwrap();
        let back: NetworkSection = toml::from_str(&text).unwrap();
        assert_eq!(back, section);
        let p = NetworkPolicy::from_sections(Some(&back), &[]).unwrap();
        assert_eq!(p.allow().len(), 2);
        assert_eq!(p.limits().max_requests, 3);
    }

    /// A grant of an unspecified address is refused where it is read, in
    /// each list and each form, named by its key path and located at its
    /// line; a policy rule's entry (read alone) is refused the same way.
    #[test]
    fn unspecified_grants_are_refused_where_they_are_read() {
        let cases = [
            (
                "[network]\nallow = [\n  \"https://ok.example.com\",\n  \"http://0.0.0.0:8080\",\n]\n",
                (4, 3),
                "network.allow[1]: grant \"http://0.0.0.0:8080\": ",
            ),
            (
                "[network]\nask = [\"udp://[::]:53\"]\n",
                (2, 8),
                "network.ask[0]: grant \"udp://[::]:53\": ",
            ),
            (
                "[network]\nallow = [\"https://ok.example.com\"]\nask = [\n  { url = \"http://[::ffff:0.0.0.0]\", methods = [\"GET\"] },\n]\n",
                (4, 3),
                "network.ask[0]: grant \"http://[::ffff:0.0.0.0]\": ",
            ),
            (
                "[network]\nallow = [\"tcp://0:80\"]\n",
                (2, 10),
                "network.allow[0]: grant \"tcp://0:80\": ",
            ),
        ];
        for (src, at, prefix) in cases {
            let e = err(src);
            assert_eq!((e.line(), e.column()), at, "{e}");
            assert!(e.message().starts_with(prefix), "{e}");
            assert!(e.message().contains("an unspecified address"), "{e}");
            assert!(
                matches!(
                    e.config_error().map(ConfigError::problem),
                    Some(ConfigProblem::Grant(
                        crate::GrantError::UnspecifiedAddress { .. }
                    ))
                ),
                "{e:?}"
            );
        }
        let path = KeyPath::root().key("rules").index(3).key("network");
        for entry in [
            "\"http://0.0.0.0\"",
            "{ url = \"http://[::]\", methods = [\"GET\"] }",
        ] {
            let doc: toml::Table = toml::from_str(&format!("a = {entry}")).unwrap();
            let e = GrantEntry::grant_from_toml(&doc["a"], &path.index(1)).unwrap_err();
            let text = e.to_string();
            assert!(text.starts_with("rules[3].network[1]: grant "), "{text}");
            assert!(text.contains("an unspecified address"), "{text}");
        }
    }
}
