//! Credentials the guest never sees: [`CredentialSpec`] (which host, which
//! header, where the secret is), [`Credential`] (a spec with its secret
//! loaded), [`Credentials`] (all of a policy's, loaded), and [`Secret`], the
//! only type that holds a secret.
//!
//! A secret is never printed, serialised or compared by value: [`Secret`]
//! implements neither `Display` nor `Serialize`, and its `Debug` prints
//! `[redacted]`. Reading secrets is the one place this crate touches the
//! process's environment or files: [`CredentialSpec::load`].

use crate::error::KeyPath;
use crate::grant::Scheme;
use crate::host::Host;
use serde::Serialize;
use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;

/// A secret value. `Debug` prints `[redacted]`; there is no `Display`, no
/// `Serialize`, no `PartialEq`. Read it with [`Secret::expose`] only where
/// it is sent.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl Drop for Secret {
    /// Best effort: overwrite the bytes before the memory is freed. (The
    /// compiler may still have copied them; this is hygiene, not a
    /// guarantee.)
    fn drop(&mut self) {
        let mut bytes = std::mem::take(&mut self.0).into_bytes();
        bytes.iter_mut().for_each(|b| *b = 0);
        std::hint::black_box(&bytes);
    }
}

/// Where the host reads a secret from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretSource {
    /// An environment variable of the host process.
    Env(String),
    /// A file (one trailing newline is dropped).
    File(PathBuf),
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::Env(var) => write!(f, "environment variable {var}"),
            SecretSource::File(path) => write!(f, "file {}", path.display()),
        }
    }
}

/// A credential as configured: which origin it belongs to (scheme, host,
/// port), which header it is sent in, where its secret is, and the text put
/// before the secret. Holds no secret, so it may be printed and serialised.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct CredentialSpec {
    scheme: Scheme,
    host: Host,
    port: u16,
    header: String,
    source: SecretSource,
    prefix: String,
}

impl CredentialSpec {
    pub(crate) fn new(
        (scheme, host, port): (Scheme, Host, u16),
        header: String,
        source: SecretSource,
        prefix: String,
    ) -> Self {
        CredentialSpec {
            scheme,
            host,
            port,
            header,
            source,
            prefix,
        }
    }

    /// The one host it belongs to.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The scheme of the requests it goes with (`https` unless configured).
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The port of the requests it goes with (the scheme's default unless
    /// configured).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether it goes with a request to `scheme://host:port`: exactly its
    /// origin. A credential for `https://api.example.com` is not sent over
    /// plain HTTP, nor to another port of that host (another service).
    pub fn applies_to(&self, scheme: Scheme, host: &Host, port: u16) -> bool {
        self.scheme == scheme && self.port == port && &self.host == host
    }

    /// The header name, lower case.
    pub fn header(&self) -> &str {
        &self.header
    }

    /// Where the secret is.
    pub fn source(&self) -> &SecretSource {
        &self.source
    }

    /// The text put before the secret (often `"Bearer "`; may be empty).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Reads the secret and returns the loaded credential.
    ///
    /// The secret must be non-empty valid UTF-8 without control characters
    /// other than tab (it goes in a header). From a file, one trailing `\n` or `\r\n` is
    /// dropped. Errors name the variable or file, never the value.
    ///
    /// # Ambient Authority
    ///
    /// This reads the host process's environment ([`std::env::var_os`]) or
    /// filesystem ([`std::fs::read`]) with the process's own rights. It is
    /// the only function of this crate that does. Call it in the host, when
    /// the policy is loaded or before a call; never on a path or variable
    /// name that a guest chose.
    pub fn load(&self) -> Result<Credential, CredentialError> {
        let raw = match &self.source {
            SecretSource::Env(var) => std::env::var_os(var)
                .ok_or_else(|| CredentialError::Missing {
                    host: self.host.clone(),
                    source_name: self.source.to_string(),
                })?
                .into_string()
                .map_err(|_| CredentialError::NotUtf8 {
                    host: self.host.clone(),
                    source_name: self.source.to_string(),
                })?,
            SecretSource::File(path) => {
                let bytes = std::fs::read(path).map_err(|e| CredentialError::Unreadable {
                    host: self.host.clone(),
                    source_name: self.source.to_string(),
                    message: e.to_string(),
                })?;
                let mut text = String::from_utf8(bytes).map_err(|_| CredentialError::NotUtf8 {
                    host: self.host.clone(),
                    source_name: self.source.to_string(),
                })?;
                if text.ends_with('\n') {
                    text.pop();
                    if text.ends_with('\r') {
                        text.pop();
                    }
                }
                text
            }
        };
        let secret = Secret::new(raw);
        if secret.expose().is_empty() {
            return Err(CredentialError::Empty {
                host: self.host.clone(),
                source_name: self.source.to_string(),
            });
        }
        if !is_header_value(secret.expose()) {
            return Err(CredentialError::NotAHeaderValue {
                host: self.host.clone(),
                source_name: self.source.to_string(),
            });
        }
        Ok(Credential {
            spec: self.clone(),
            secret,
        })
    }
}

/// True when `s` can be (part of) a header value: no control character
/// except tab (RFC 9110 field-value, as the `http` crate checks it).
pub(crate) fn is_header_value(s: &str) -> bool {
    !s.chars().any(|c| c.is_control() && c != '\t')
}

/// A secret that could not be loaded. Messages name the host and where the
/// secret was looked for, never its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialError {
    /// The variable is not set.
    #[error("credential for {host}: {source_name} is not set")]
    Missing {
        /// The host of the credential.
        host: Host,
        /// Where the secret was looked for.
        source_name: String,
    },
    /// The file could not be read.
    #[error("credential for {host}: cannot read {source_name}: {message}")]
    Unreadable {
        /// The host of the credential.
        host: Host,
        /// Where the secret was looked for.
        source_name: String,
        /// The I/O error.
        message: String,
    },
    /// Not valid UTF-8.
    #[error("credential for {host}: {source_name} is not valid UTF-8")]
    NotUtf8 {
        /// The host of the credential.
        host: Host,
        /// Where the secret was looked for.
        source_name: String,
    },
    /// Empty.
    #[error("credential for {host}: {source_name} is empty")]
    Empty {
        /// The host of the credential.
        host: Host,
        /// Where the secret was looked for.
        source_name: String,
    },
    /// Contains a control character (other than tab), which a header value
    /// cannot.
    #[error(
        "credential for {host}: {source_name} contains a control character, which a header value cannot"
    )]
    NotAHeaderValue {
        /// The host of the credential.
        host: Host,
        /// Where the secret was looked for.
        source_name: String,
    },
}

/// A credential with its secret loaded. `Debug` shows the spec and
/// `[redacted]`.
#[derive(Debug, Clone)]
pub struct Credential {
    spec: CredentialSpec,
    secret: Secret,
}

impl Credential {
    /// What it was loaded from.
    pub fn spec(&self) -> &CredentialSpec {
        &self.spec
    }

    /// The one host it belongs to.
    pub fn host(&self) -> &Host {
        self.spec.host()
    }

    /// The header name, lower case.
    pub fn header(&self) -> &str {
        self.spec.header()
    }

    /// The header value: the prefix followed by the secret.
    pub fn header_value(&self) -> Secret {
        Secret::new(format!("{}{}", self.spec.prefix, self.secret.expose()))
    }

    /// `text` with every occurrence of the secret (alone, and with its
    /// prefix) replaced by `replacement`: for a tool that echoes it back.
    pub fn redact<'a>(&self, text: &'a str, replacement: &str) -> Cow<'a, str> {
        let secret = self.secret.expose();
        if secret.is_empty() || !text.contains(secret) {
            return Cow::Borrowed(text);
        }
        // The secret alone covers the prefixed form too.
        Cow::Owned(text.replace(secret, replacement))
    }
}

/// Every credential of a policy, loaded.
#[derive(Debug, Clone, Default)]
pub struct Credentials(Vec<Credential>);

impl Credentials {
    /// Loads every credential spec of `specs`; the first failure fails all,
    /// named by its position (`credentials[1]`).
    ///
    /// # Ambient Authority
    ///
    /// Reads the host process's environment and files, as
    /// [`CredentialSpec::load`].
    pub fn load(specs: &[CredentialSpec]) -> Result<Credentials, (KeyPath, CredentialError)> {
        specs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.load()
                    .map_err(|e| (KeyPath::root().key("credentials").index(i), e))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Credentials)
    }

    /// The credential of the origin `scheme://host:port`, if any (exact
    /// match: the name or address the request named, never what it
    /// resolved to; the scheme and port the credential names).
    pub fn credential_for(&self, scheme: Scheme, host: &Host, port: u16) -> Option<&Credential> {
        self.0
            .iter()
            .find(|c| c.spec.applies_to(scheme, host, port))
    }

    /// Every loaded credential.
    pub fn iter(&self) -> impl Iterator<Item = &Credential> {
        self.0.iter()
    }

    /// `text` with every loaded secret replaced by `replacement`.
    pub fn redact<'a>(&self, text: &'a str, replacement: &str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for c in &self.0 {
            if let Cow::Owned(s) = c.redact(&out, replacement) {
                out = Cow::Owned(s);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(source: SecretSource) -> CredentialSpec {
        CredentialSpec::new(
            (Scheme::Https, Host::parse("api.example.com").unwrap(), 443),
            "authorization".to_string(),
            source,
            "Bearer ".to_string(),
        )
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("sk-very-secret".to_string());
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert_eq!(format!("{s:#?}"), "[redacted]");
    }

    #[test]
    fn file_secrets_load_without_the_newline() {
        let dir = std::env::temp_dir().join(format!("toolhost-egress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "tok-123\r\n").unwrap();
        let c = spec(SecretSource::File(file.clone())).load().unwrap();
        assert_eq!(c.header_value().expose(), "Bearer tok-123");
        let debug = format!("{c:?}");
        assert!(!debug.contains("tok-123"), "{debug}");
        assert!(debug.contains("[redacted]"), "{debug}");
        assert_eq!(
            c.redact("echo: Bearer tok-123!", "[REDACTED]"),
            "echo: Bearer [REDACTED]!"
        );

        std::fs::write(&file, "two\nlines\n").unwrap();
        let err = spec(SecretSource::File(file.clone())).load().unwrap_err();
        assert!(matches!(err, CredentialError::NotAHeaderValue { .. }));
        assert!(!err.to_string().contains("lines"));

        std::fs::write(&file, "\n").unwrap();
        assert!(matches!(
            spec(SecretSource::File(file.clone())).load(),
            Err(CredentialError::Empty { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(
            spec(SecretSource::File(file)).load(),
            Err(CredentialError::Unreadable { .. })
        ));
    }

    #[test]
    fn a_missing_variable_is_named() {
        let var = "TOOLHOST_EGRESS_TEST_SURELY_UNSET_VARIABLE";
        let err = spec(SecretSource::Env(var.to_string())).load().unwrap_err();
        assert!(err.to_string().contains(var), "{err}");
    }
}
