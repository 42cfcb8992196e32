//! Errors of this crate: [`PolicyError`] for a policy file that does not load,
//! and [`UnknownName`] for a name (decision, preset, side effect, ...) that does
//! not exist.
//!
//! No dependency's error type leaks out: toml, regex and globset errors are
//! turned into messages located in the policy file.

use std::fmt;
use std::ops::Range;

/// A policy file that does not parse or validate. The whole file is rejected.
///
/// Displays as `"{origin}:{line}:{col}: {message}"`, where line and column are
/// 1-based and point at the offending item (column counted in characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}:{line}:{col}: {message}")]
#[non_exhaustive]
pub struct PolicyError {
    origin: String,
    line: usize,
    col: usize,
    message: String,
}

impl PolicyError {
    /// Locates `message` at byte `offset` of `src`.
    pub(crate) fn at(src: &str, origin: &str, offset: usize, message: String) -> Self {
        let (line, col) = line_col(src, offset);
        PolicyError {
            origin: origin.to_string(),
            line,
            col,
            message,
        }
    }

    /// An error already located by line and column (1-based).
    pub(crate) fn located(origin: &str, line: usize, col: usize, message: String) -> Self {
        PolicyError {
            origin: origin.to_string(),
            line,
            col,
            message,
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

    /// Where the policy came from, as passed to [`Policy::from_toml`](crate::Policy::from_toml).
    pub fn origin(&self) -> &str {
        &self.origin
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

/// A validation failure before it is located: a byte span and a message.
#[derive(Debug, Clone)]
pub(crate) struct LoadError {
    pub(crate) span: Range<usize>,
    pub(crate) message: String,
}

impl LoadError {
    pub(crate) fn new(span: Range<usize>, message: impl Into<String>) -> Self {
        LoadError {
            span,
            message: message.into(),
        }
    }
}

/// A name that is not one of the accepted ones, e.g. `decision = "maybe"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    what: &'static str,
    found: String,
    expected: &'static str,
}

impl UnknownName {
    pub(crate) fn new(what: &'static str, found: &str, expected: &'static str) -> Self {
        UnknownName {
            what,
            found: found.to_string(),
            expected,
        }
    }

    /// The rejected text.
    pub fn found(&self) -> &str {
        &self.found
    }
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown {} {:?} (expected {})",
            self.what, self.found, self.expected
        )
    }
}

impl std::error::Error for UnknownName {}

#[cfg(test)]
mod tests {
    use super::line_col;

    #[test]
    fn offsets_become_one_based_line_and_column() {
        let src = "a = 1\nbé = 2\n";
        assert_eq!(line_col(src, 0), (1, 1));
        assert_eq!(line_col(src, 4), (1, 5));
        assert_eq!(line_col(src, 6), (2, 1));
        // "bé " is 4 bytes, 3 characters.
        assert_eq!(line_col(src, 10), (2, 4));
        assert_eq!(line_col(src, 999), (3, 1));
    }
}
