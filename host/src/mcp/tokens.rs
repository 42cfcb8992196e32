//! The bearer tokens of the HTTP transport (`--tokens FILE`): the file,
//! kept as SHA-256 digests, each with the principal it maps to, and the
//! token a request offers. Comparisons are constant time. What a token
//! admits is the front door's (`admission`).

use http::{HeaderMap, header};
use sha2::{Digest, Sha256};
use std::path::Path;
use subtle::ConstantTimeEq;

/// Bearer tokens, kept as SHA-256 digests and compared in constant time
/// (digests: a wrong guess learns nothing from the length either), each
/// with the principal it maps to.
#[derive(Clone)]
pub struct Tokens {
    entries: Vec<([u8; 32], String)>,
}

impl Tokens {
    /// Reads one token per line, optionally followed by the principal it
    /// maps to (`TOKEN alice`; without one, [`ANONYMOUS_PRINCIPAL`]); blank
    /// lines and lines starting with `#` are skipped. A file without
    /// tokens, a token with characters a bearer token cannot have, or a
    /// principal name that is not one, is an error.
    ///
    /// [`ANONYMOUS_PRINCIPAL`]: toolhost_policy::ANONYMOUS_PRINCIPAL
    pub fn from_file(path: &Path) -> Result<Tokens, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the tokens file {}: {e}", path.display()))?;
        Tokens::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses the text of a tokens file (see [`Tokens::from_file`]).
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut entries = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let token = words.next().unwrap_or_default();
            if !token.bytes().all(is_token_byte) {
                return Err(format!(
                    "line {}: a bearer token has only letters, digits and -._~+/=",
                    n + 1
                ));
            }
            let principal = match (words.next(), words.next()) {
                (None, _) => toolhost_policy::ANONYMOUS_PRINCIPAL.to_string(),
                (Some(p), None) => {
                    toolhost_policy::check_principal_name(p)
                        .map_err(|e| format!("line {}: {e}", n + 1))?;
                    p.to_string()
                }
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "line {}: expected TOKEN or TOKEN PRINCIPAL, found more words",
                        n + 1
                    ));
                }
            };
            entries.push((Sha256::digest(token.as_bytes()).into(), principal));
        }
        if entries.is_empty() {
            return Err("no tokens (one token per line; # starts a comment)".into());
        }
        Ok(Tokens { entries })
    }

    /// How many tokens there are (never their text: for `Debug`).
    pub(super) fn count(&self) -> usize {
        self.entries.len()
    }

    /// Whether `token` is one of the tokens; looks at every one of them.
    #[cfg(test)]
    fn admits(&self, token: &str) -> bool {
        self.principal_of(token).is_some()
    }

    /// The principal `token` maps to, if it is one of the tokens. Looks at
    /// every token and selects without branching on the comparisons.
    pub(super) fn principal_of(&self, token: &str) -> Option<&str> {
        use subtle::ConditionallySelectable;
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = subtle::Choice::from(0);
        let mut index = 0u64;
        for (i, (d, _)) in self.entries.iter().enumerate() {
            let hit = d.ct_eq(&digest);
            index = u64::conditional_select(&index, &(i as u64), hit);
            found |= hit;
        }
        let found: bool = found.into();
        found
            .then(|| self.entries.get(index as usize).map(|(_, p)| p.as_str()))
            .flatten()
    }
}

/// The bearer token a request offers, if any.
pub(super) fn bearer(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_string())
        })
}

/// The SHA-256 of the bearer token `headers` offer, if any.
pub(super) fn token_digest(headers: &HeaderMap) -> Option<[u8; 32]> {
    bearer(headers).map(|t| Sha256::digest(t.as_bytes()).into())
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_skip_comments_and_compare() {
        let t = Tokens::parse("# tokens\n\n  alpha-1  \nbeta/2=\n").ok();
        let Some(t) = t else {
            panic!("tokens did not parse");
        };
        assert!(t.admits("alpha-1") && t.admits("beta/2="));
        assert!(!t.admits("alpha") && !t.admits("") && !t.admits("# tokens"));
        assert!(Tokens::parse("# only a comment\n").is_err());
        // A second word names the token's principal; more is an error.
        let named = Tokens::parse("tok-a alice\ntok-b\n").ok();
        let Some(named) = named else {
            panic!("named tokens did not parse");
        };
        assert_eq!(named.principal_of("tok-a"), Some("alice"));
        assert_eq!(named.principal_of("tok-b"), Some("anonymous"));
        assert_eq!(named.principal_of("alice"), None);
        assert!(Tokens::parse("has two spaces\n").is_err());
        assert!(Tokens::parse("tok bad!name\n").is_err());
        assert!(Tokens::parse("b@d alice\n").is_err());
    }
}
