//! Compiled matchers shared by rules and guards: tool-name patterns, argument
//! matchers (a JSON pointer plus a glob or a regex), and the lexical path
//! normalisation guards use.
//!
//! Matching is pure string work. Paths are never resolved against a
//! filesystem (no symlinks, no current directory): that is the sandbox's job.

use globset::{Glob, GlobBuilder, GlobMatcher};
use regex::Regex;

/// A tool-name pattern: an exact name or a glob (globset syntax).
#[derive(Debug, Clone)]
pub(crate) struct ToolPattern {
    text: String,
    glob: GlobMatcher,
}

impl ToolPattern {
    /// Compiles `text`; the error is a message without location.
    pub(crate) fn new(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Err("empty tool pattern (use \"*\" for every tool)".to_string());
        }
        let glob = Glob::new(text)
            .map_err(|e| format!("invalid tool glob {text:?}: {}", e.kind()))?
            .compile_matcher();
        Ok(ToolPattern {
            text: text.to_string(),
            glob,
        })
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    pub(crate) fn matches(&self, tool: &str) -> bool {
        self.glob.is_match(tool)
    }
}

/// Compiles a glob over argument strings and paths. `*` and `?` do not cross
/// `/`; `**` does.
pub(crate) fn path_glob(text: &str) -> Result<GlobMatcher, String> {
    GlobBuilder::new(text)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("invalid glob {text:?}: {}", e.kind()))
}

/// Compiles a regex; the message keeps only regex's one-line explanation.
pub(crate) fn regex(text: &str) -> Result<Regex, String> {
    Regex::new(text).map_err(|e| {
        let full = e.to_string();
        let short = full
            .lines()
            .find_map(|l| l.strip_prefix("error: "))
            .unwrap_or(&full)
            .to_string();
        format!("invalid regex {text:?}: {short}")
    })
}

/// Checks that `pointer` is a JSON pointer (RFC 6901) to something inside the
/// arguments: it starts with `/` and every `~` is `~0` or `~1`.
pub(crate) fn check_pointer(pointer: &str) -> Result<(), String> {
    if !pointer.starts_with('/') {
        return Err(format!(
            "pointer {pointer:?} must start with \"/\" (a JSON pointer such as \"/path\")"
        ));
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(format!(
                "pointer {pointer:?} has a \"~\" not followed by 0 or 1"
            ));
        }
    }
    Ok(())
}

/// How an argument matcher tests the value at its pointer.
#[derive(Debug, Clone)]
enum Test {
    Glob(GlobMatcher),
    Regex(Regex),
}

/// A rule's argument matcher: the value at `pointer` must match.
///
/// Strings match on their text, numbers and booleans on their JSON text. A
/// missing pointer, `null`, an array or an object never matches (point at an
/// element, e.g. `/paths/0`, to match inside an array).
#[derive(Debug, Clone)]
pub(crate) struct ArgMatcher {
    pointer: String,
    test: Test,
}

impl ArgMatcher {
    pub(crate) fn glob(pointer: &str, glob: &str) -> Result<Self, String> {
        check_pointer(pointer)?;
        Ok(ArgMatcher {
            pointer: pointer.to_string(),
            test: Test::Glob(path_glob(glob)?),
        })
    }

    pub(crate) fn regex(pointer: &str, re: &str) -> Result<Self, String> {
        check_pointer(pointer)?;
        Ok(ArgMatcher {
            pointer: pointer.to_string(),
            test: Test::Regex(regex(re)?),
        })
    }

    pub(crate) fn matches(&self, args: &serde_json::Value) -> bool {
        let text = match args.pointer(&self.pointer) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => v.to_string(),
            _ => return false,
        };
        match &self.test {
            Test::Glob(g) => g.is_match(&text),
            Test::Regex(r) => r.is_match(&text),
        }
    }
}

/// Every string at `value`, looking inside arrays (at any depth). Guards use
/// this so that a list of paths cannot smuggle one past a path check.
pub(crate) fn strings_in(value: &serde_json::Value) -> Vec<&str> {
    match value {
        serde_json::Value::String(s) => vec![s.as_str()],
        serde_json::Value::Array(items) => items.iter().flat_map(strings_in).collect(),
        _ => Vec::new(),
    }
}

/// Lexically normalises a `/`-separated path: drops `.` and empty segments and
/// resolves `..` against the segments before it (never above the root of an
/// absolute path). `a/./b//../c` becomes `a/c`; `/x/../../etc` becomes `/etc`.
pub(crate) fn normalize_path(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => match parts.last() {
                Some(&last) if last != ".." => {
                    parts.pop();
                }
                _ if absolute => {}
                _ => parts.push(".."),
            },
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    if absolute {
        format!("/{joined}")
    } else if joined.is_empty() {
        ".".to_string()
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_normalise_lexically() {
        assert_eq!(normalize_path("a/./b//../c"), "a/c");
        assert_eq!(normalize_path("/x/../../etc/passwd"), "/etc/passwd");
        assert_eq!(normalize_path("../a"), "../a");
        assert_eq!(normalize_path("./"), ".");
        assert_eq!(normalize_path("src/.git/../.git/config"), "src/.git/config");
    }

    #[test]
    fn arg_matchers_match_scalars_only() {
        let m = ArgMatcher::regex("/n", "^4").unwrap();
        assert!(m.matches(&json!({"n": 42})));
        assert!(!m.matches(&json!({"n": [42]})));
        assert!(!m.matches(&json!({})));
        let g = ArgMatcher::glob("/p", "src/*").unwrap();
        assert!(g.matches(&json!({"p": "src/a.rs"})));
        assert!(!g.matches(&json!({"p": "src/a/b.rs"})));
    }

    #[test]
    fn pointers_are_checked() {
        assert!(check_pointer("/a~1b/~0").is_ok());
        assert!(check_pointer("a").is_err());
        assert!(check_pointer("").is_err());
        assert!(check_pointer("/a~2").is_err());
        assert!(check_pointer("/a~").is_err());
    }
}
