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
    /// The secret must be valid UTF-8 of [`MIN_SECRET_BYTES`] to
    /// [`MAX_SECRET_BYTES`] bytes without control characters other than
    /// tab (it goes in a header). From a file (a regular one, with one
    /// name), one trailing `\n` or `\r\n` is dropped. Errors name the
    /// variable or file, never the value.
    ///
    /// # Ambient Authority
    ///
    /// This reads the host process's environment ([`std::env::var_os`]) or
    /// filesystem ([`read_bounded`]) with the process's own rights. It is
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
                // A trailing newline (`\r\n`) beyond the bound is dropped.
                let bytes = read_bounded(path, MAX_SECRET_BYTES + 2).map_err(|e| match e {
                    BoundedReadError::TooLong(_) => CredentialError::TooLong {
                        host: self.host.clone(),
                        source_name: self.source.to_string(),
                    },
                    e => CredentialError::Unreadable {
                        host: self.host.clone(),
                        source_name: self.source.to_string(),
                        message: e.to_string(),
                    },
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
        if secret.expose().len() > MAX_SECRET_BYTES {
            return Err(CredentialError::TooLong {
                host: self.host.clone(),
                source_name: self.source.to_string(),
            });
        }
        if !secret.expose().is_empty() && secret.expose().len() < MIN_SECRET_BYTES {
            return Err(CredentialError::TooShort {
                host: self.host.clone(),
                source_name: self.source.to_string(),
            });
        }
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
        Ok(Credential::new(self.clone(), secret))
    }
}

/// The longest secret a credential may have, in bytes. Servers refuse
/// longer header lines anyway (8 KiB is common).
pub const MAX_SECRET_BYTES: usize = 8192;

/// The shortest secret a credential may have, in bytes. A response of the
/// server a secret was sent to has it masked, and a result has it
/// redacted, so a secret of a few bytes would alter any text that happens
/// to hold them; tokens are far longer.
pub const MIN_SECRET_BYTES: usize = 8;

/// Why [`read_bounded`] read nothing.
#[derive(Debug)]
pub enum BoundedReadError {
    /// Not a regular file (a directory, a device, a pipe).
    NotAFile,
    /// A regular file with more than one name, one of which could be
    /// where a tool reads or writes it.
    HardLinked(u64),
    /// Longer than the bound.
    TooLong(usize),
    /// The file could not be opened or read.
    Io(std::io::Error),
}

impl fmt::Display for BoundedReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BoundedReadError::NotAFile => f.write_str("not a regular file"),
            BoundedReadError::HardLinked(n) => write!(
                f,
                "the file has {n} hard links (one could be where a tool reads or writes it); give it one name"
            ),
            BoundedReadError::TooLong(max) => write!(f, "longer than {max} bytes"),
            BoundedReadError::Io(e) => e.fmt(f),
        }
    }
}

/// The bytes of the regular file at `path` that has one name, refused when
/// longer than `max` (a secret or a certificate file: never a device or a
/// pipe, which could block or never end). The file is opened without
/// blocking and checked through the open handle, so that it cannot be
/// swapped for a pipe between the check and the read.
///
/// # Ambient Authority
///
/// Reads the file system with the process's own rights.
pub fn read_bounded(path: &std::path::Path, max: usize) -> Result<Vec<u8>, BoundedReadError> {
    use std::io::Read;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(BoundedReadError::Io)?;
    let meta = file.metadata().map_err(BoundedReadError::Io)?;
    if !meta.is_file() {
        return Err(BoundedReadError::NotAFile);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if meta.nlink() > 1 {
            return Err(BoundedReadError::HardLinked(meta.nlink()));
        }
    }
    let mut bytes = Vec::new();
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(BoundedReadError::Io)?;
    if bytes.len() > max {
        return Err(BoundedReadError::TooLong(max));
    }
    Ok(bytes)
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
    /// Shorter than [`MIN_SECRET_BYTES`].
    #[error(
        "credential for {host}: {source_name} is shorter than {MIN_SECRET_BYTES} bytes: too short to be masked in responses without altering them"
    )]
    TooShort {
        /// The host of the credential.
        host: Host,
        /// Where the secret was looked for.
        source_name: String,
    },
    /// Longer than [`MAX_SECRET_BYTES`].
    #[error(
        "credential for {host}: {source_name} is longer than {MAX_SECRET_BYTES} bytes, more than a header value can be"
    )]
    TooLong {
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
    /// What the search for the secret needs, worked out once.
    needle: crate::scan::Needle,
}

impl Credential {
    fn new(spec: CredentialSpec, secret: Secret) -> Credential {
        let needle = crate::scan::Needle::of(secret.expose().as_bytes());
        Credential {
            spec,
            secret,
            needle,
        }
    }

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

    /// Whether no credential is loaded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `text` with every occurrence of every loaded secret replaced by
    /// `replacement`: where occurrences overlap or one holds another, the
    /// whole stretch they cover is replaced once, so that no piece of
    /// either is left.
    pub fn redact<'a>(&self, text: &'a str, replacement: &str) -> Cow<'a, str> {
        let mut hits = Vec::new();
        self.occurrences(text.as_bytes(), &mut hits);
        if hits.is_empty() {
            return Cow::Borrowed(text);
        }
        hits.sort_by_key(|r| r.start);
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        let mut hits = hits.into_iter().peekable();
        while let Some(first) = hits.next() {
            let mut end = first.end;
            while let Some(next) = hits.next_if(|r| r.start <= end) {
                end = end.max(next.end);
            }
            // Secrets are UTF-8 text, so each stretch starts and ends on a
            // character boundary of `text`.
            out.push_str(text.get(at..first.start).unwrap_or_default());
            out.push_str(replacement);
            at = end;
        }
        out.push_str(text.get(at..).unwrap_or_default());
        Cow::Owned(out)
    }

    /// The secrets, as bytes.
    fn secrets(&self) -> impl Iterator<Item = (&[u8], &crate::scan::Needle)> {
        self.0
            .iter()
            .map(|c| (c.secret.expose().as_bytes(), &c.needle))
            .filter(|(s, _)| !s.is_empty())
    }

    /// Whether `bytes` holds an occurrence of a loaded secret (searched
    /// at a cost independent of how `bytes` relates to a secret:
    /// `scan`).
    pub fn contains(&self, bytes: &[u8]) -> bool {
        let mut hits = Vec::new();
        self.occurrences(bytes, &mut hits);
        !hits.is_empty()
    }

    /// Whether a header name holds any loaded secret, in any ASCII letter
    /// case: HTTP/1 parsers such as hyper's give names lowercased, so a
    /// server that echoes a secret as a name passes it on lowercased.
    pub fn in_header_name(&self, name: &[u8]) -> bool {
        let mut hits = Vec::new();
        for (secret, needle) in self.secrets() {
            crate::scan::occurrences(secret, needle, name, true, &mut hits);
        }
        !hits.is_empty()
    }

    /// Overwrites every byte of `bytes` that belongs to an occurrence of a
    /// loaded secret (overlapping ones too) with [`MASK_BYTE`]; whether
    /// there was any. For a whole value, such as a response header's.
    pub fn mask(&self, bytes: &mut [u8]) -> bool {
        let mut hits = Vec::new();
        self.occurrences(bytes, &mut hits);
        for r in &hits {
            bytes[r.clone()].fill(MASK_BYTE);
        }
        !hits.is_empty()
    }

    /// Every occurrence of every secret in `bytes`, overlapping ones
    /// included, as ranges.
    fn occurrences(&self, bytes: &[u8], hits: &mut Vec<std::ops::Range<usize>>) {
        for (secret, needle) in self.secrets() {
            crate::scan::occurrences(secret, needle, bytes, false, hits);
        }
    }
}

/// The byte that stands for each byte of a secret in what the server it
/// was sent to sends back: a response keeps its length (and so its framing
/// and any `content-length`), and the guest never reads the secret.
pub const MASK_BYTE: u8 = b'*';

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
        std::fs::write(&file, "tok-12345\r\n").unwrap();
        let c = spec(SecretSource::File(file.clone())).load().unwrap();
        assert_eq!(c.header_value().expose(), "Bearer tok-12345");
        let debug = format!("{c:?}");
        assert!(!debug.contains("tok-12345"), "{debug}");
        assert!(debug.contains("[redacted]"), "{debug}");
        assert_eq!(
            Credentials(vec![c.clone()]).redact("echo: Bearer tok-12345!", "[REDACTED]"),
            "echo: Bearer [REDACTED]!"
        );
        std::fs::write(&file, "short\n").unwrap();
        assert!(matches!(
            spec(SecretSource::File(file.clone())).load(),
            Err(CredentialError::TooShort { .. })
        ));

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

    /// A header name holds a secret whatever its letters' case (a parser
    /// gives names lowercased); a name that holds none does not.
    #[test]
    fn a_secret_in_a_header_name_is_found_in_any_case() {
        let c = loaded(&["Sk-MiXeD-CaSe-42"]);
        assert!(c.in_header_name(b"x-sk-mixed-case-42"));
        assert!(c.in_header_name(b"sk-mixed-case-42"));
        assert!(!c.in_header_name(b"x-sk-mixed-case-4"));
        assert!(
            !c.contains(b"x-sk-mixed-case-42"),
            "an exact search misses it"
        );
    }

    /// Credentials of these secrets, loaded from the environment.
    fn loaded(secrets: &[&str]) -> Credentials {
        Credentials(
            secrets
                .iter()
                .map(|s| {
                    Credential::new(
                        spec(SecretSource::Env("UNUSED".into())),
                        Secret::new(s.to_string()),
                    )
                })
                .collect(),
        )
    }

    /// Every byte of every occurrence is masked (overlapping ones too), in
    /// place, and nothing else changes: a masked response keeps its length.
    #[test]
    fn a_secret_is_masked_in_place() {
        let secrets = loaded(&["sk-123abc", "abab"]);
        let text = b"head sk-123abc mid sk-12 sk-123ab ababab tail sk-123abcsk-123abc abab";
        let mut whole = text.to_vec();
        assert!(secrets.mask(&mut whole));
        assert_eq!(
            String::from_utf8_lossy(&whole),
            "head ********* mid sk-12 sk-123ab ****** tail ****************** ****"
        );
        let mut plain = b"sk-12 sk-123ab".to_vec();
        assert!(!secrets.mask(&mut plain));
        assert_eq!(plain, b"sk-12 sk-123ab");
        assert!(!loaded(&[]).mask(&mut whole.clone()));
    }

    /// A secret inside another, or two that overlap, are redacted as the
    /// one stretch they cover: no piece of either is left.
    #[test]
    fn nested_and_overlapping_secrets_leave_no_piece() {
        let secrets = loaded(&["abc123", "xxabc123yy", "123yyzz"]);
        assert_eq!(
            secrets.redact("[xxabc123yy] [abc123] [abc123yyzz] é", "R"),
            "[R] [R] [R] é"
        );
        assert_eq!(secrets.redact("nothing here", "R"), "nothing here");
    }

    /// A secret file must be a regular file of at most the size given,
    /// and a secret at most [`MAX_SECRET_BYTES`] long.
    #[test]
    fn secret_files_are_bounded() {
        let dir = std::env::temp_dir().join(format!("toolhost-egress-b-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "x".repeat(MAX_SECRET_BYTES)).unwrap();
        assert!(spec(SecretSource::File(file.clone())).load().is_ok());
        std::fs::write(&file, "x".repeat(MAX_SECRET_BYTES + 1)).unwrap();
        assert!(matches!(
            spec(SecretSource::File(file.clone())).load(),
            Err(CredentialError::TooLong { .. })
        ));
        std::fs::write(&file, "x".repeat(MAX_SECRET_BYTES + 3)).unwrap();
        assert!(matches!(
            spec(SecretSource::File(file.clone())).load(),
            Err(CredentialError::TooLong { .. })
        ));
        // A second name for the file (which could be in the workspace).
        std::fs::write(&file, "x".repeat(MIN_SECRET_BYTES)).unwrap();
        std::fs::hard_link(&file, dir.join("second-name")).unwrap();
        let err = spec(SecretSource::File(file.clone())).load().unwrap_err();
        assert!(err.to_string().contains("2 hard links"), "{err}");
        let err = spec(SecretSource::File(dir.clone())).load().unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        #[cfg(target_os = "linux")]
        {
            let err = spec(SecretSource::File("/dev/zero".into()))
                .load()
                .unwrap_err();
            assert!(err.to_string().contains("not a regular file"), "{err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_variable_is_named() {
        let var = "TOOLHOST_EGRESS_TEST_SURELY_UNSET_VARIABLE";
        let err = spec(SecretSource::Env(var.to_string())).load().unwrap_err();
        assert!(err.to_string().contains(var), "{err}");
    }
}
