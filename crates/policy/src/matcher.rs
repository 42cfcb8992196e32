//! Compiled matchers shared by rules and guards: tool-name patterns, argument
//! matchers (a JSON pointer plus a glob or a regex), and the lexical path
//! normalisation guards use.
//!
//! Matching is pure string work. Paths are never resolved against a
//! filesystem (no symlinks, no current directory): that is the sandbox's job.

use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use regex::{Regex, RegexBuilder};
use std::borrow::Cow;

/// The longest glob or regex a policy may give, in bytes. Far above any
/// real pattern; it keeps a hostile file from building a matcher that
/// costs megabytes (globset panics on one past its own size limit).
const MAX_PATTERN_BYTES: usize = 4096;

/// What one compiled regex may take (the regex crate's default is 10 MiB).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Counts one evaluation of a glob or a glob set against one string on this
/// thread, for the tests that count work (`arg_globs_tests.rs`): compiled
/// out of every other build.
#[inline]
pub(crate) fn count_glob_eval() {
    #[cfg(test)]
    GLOB_EVALS.with(|n| n.set(n.get() + 1));
}

#[cfg(test)]
thread_local! {
    /// Glob evaluations on this thread ([`count_glob_eval`]).
    pub(crate) static GLOB_EVALS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Refuses a pattern longer than [`MAX_PATTERN_BYTES`].
fn check_length(kind: &str, text: &str) -> Result<(), String> {
    if text.len() > MAX_PATTERN_BYTES {
        return Err(format!(
            "{kind} of {} bytes is too long (at most {MAX_PATTERN_BYTES})",
            text.len()
        ));
    }
    Ok(())
}

/// Compiles `glob` into a matcher, turning globset's panic on a pattern
/// past its size limit into an error.
fn compile(glob: &Glob) -> Result<GlobMatcher, String> {
    std::panic::catch_unwind(|| glob.compile_matcher())
        .map_err(|_| format!("glob {:?} is too large to compile", glob.glob()))
}

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
        check_length("tool glob", text)?;
        let glob = compile(
            &Glob::new(text).map_err(|e| format!("invalid tool glob {text:?}: {}", e.kind()))?,
        )?;
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
    check_length("glob", text)?;
    let glob = GlobBuilder::new(text)
        .literal_separator(true)
        .build()
        .map_err(|e| format!("invalid glob {text:?}: {}", e.kind()))?;
    compile(&glob)
}

/// One set of `globs`, or `None` when globset cannot build it (its size
/// limits are per set, and each glob was checked alone): the caller then
/// matches them one by one. Never panics.
pub(crate) fn glob_set<'g>(globs: impl IntoIterator<Item = &'g Glob>) -> Option<GlobSet> {
    let mut builder = GlobSetBuilder::new();
    for g in globs {
        builder.add(g.clone());
    }
    std::panic::catch_unwind(|| builder.build()).ok()?.ok()
}

/// Compiles a regex; the message keeps only regex's one-line explanation.
pub(crate) fn regex(text: &str) -> Result<Regex, String> {
    check_length("regex", text)?;
    RegexBuilder::new(text)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
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
    /// A glob, and for a glob that ends in `/**` under a literal last
    /// segment (`secrets/**`, `**/.git/**`), the directory itself
    /// (`secrets`): naming it (to list, search or remove it) reaches what
    /// the glob covers, so a deny or ask rule tests it too. Not under a
    /// wildcard (`*/**`): its stem would be every top-level name.
    Glob(GlobMatcher, Option<GlobMatcher>),
    Regex(Regex),
}

/// A rule's argument matcher: the value at `pointer` must match.
///
/// Strings match on their text, numbers and booleans on their JSON text. A
/// missing pointer or `null` never matches. An array or an object matches a
/// deny or ask rule when any string, number or boolean in it does (at any
/// depth, the keys of objects as strings too), so that a list, a list of
/// objects such as `[{"path": ...}]`, or a map keyed by path, cannot carry a
/// path past it;
/// neither ever matches an allow rule (point at an element, e.g.
/// `/paths/0`, to allow by one).
#[derive(Debug, Clone)]
pub(crate) struct ArgMatcher {
    pointer: String,
    test: Test,
}

impl ArgMatcher {
    pub(crate) fn glob(pointer: &str, glob: &str) -> Result<Self, String> {
        check_pointer(pointer)?;
        let dir = literal_dir_stem(glob).map(path_glob).transpose()?;
        Ok(ArgMatcher {
            pointer: pointer.to_string(),
            test: Test::Glob(path_glob(glob)?, dir),
        })
    }

    pub(crate) fn regex(pointer: &str, re: &str) -> Result<Self, String> {
        check_pointer(pointer)?;
        Ok(ArgMatcher {
            pointer: pointer.to_string(),
            test: Test::Regex(regex(re)?),
        })
    }

    /// The JSON pointer it looks at.
    pub(crate) fn pointer(&self) -> &str {
        &self.pointer
    }

    /// The globs a deny or ask rule tests each value with (the value matches
    /// when one of them does): the glob and its directory stem's (see
    /// [`Test::Glob`]). `None` for a regex.
    pub(crate) fn loose_globs(&self) -> Option<Vec<&Glob>> {
        match &self.test {
            Test::Glob(g, dir) => Some(
                std::iter::once(g)
                    .chain(dir)
                    .map(GlobMatcher::glob)
                    .collect(),
            ),
            Test::Regex(_) => None,
        }
    }

    /// Whether the value at the pointer matches. A string with a `.` or
    /// `..` segment is tested as it is and as a path with those resolved
    /// ([`normalize_path`]), so that `src/../.git/x` is not taken for a
    /// file under `src/`: with `strict` (an allow rule) both must match.
    /// Otherwise (deny and ask) either spelling matching is enough, and so
    /// is the path with empty segments and a trailing `/` dropped too
    /// (`.git//config`, `build/`), which the sandbox ignores. Either way the
    /// spelling can only make a rule stricter, never more permissive; an
    /// allow rule reads text without `.` or `..` segments (a URL's `//`, a
    /// command line) as written. A deny or ask glob `dir/**` also matches
    /// `dir` itself (see [`Test::Glob`]).
    pub(crate) fn matches(&self, args: &serde_json::Value, strict: bool) -> bool {
        let test = |text: &str| match &self.test {
            Test::Glob(g, dir) => {
                count_glob_eval();
                g.is_match(text)
                    || (!strict
                        && dir.as_ref().is_some_and(|d| {
                            count_glob_eval();
                            d.is_match(text)
                        }))
            }
            Test::Regex(r) => r.is_match(text),
        };
        let text = |s: &str| {
            let dots = s.split('/').any(|seg| seg == "." || seg == "..");
            if strict {
                return test(s) && (!dots || test(&normalize_path(s)));
            }
            if test(s) {
                return true;
            }
            match normalize_path(s) {
                Cow::Owned(normal) => normal != s && test(&normal),
                Cow::Borrowed(_) => false,
            }
        };
        let leaf = |l: Leaf<'_>| match l {
            Leaf::Str(s) => text(s),
            Leaf::Num(n) => test(&number_text(n)),
            Leaf::Bool(b) => test(if b { "true" } else { "false" }),
        };
        match args.pointer(&self.pointer) {
            Some(serde_json::Value::Array(_) | serde_json::Value::Object(_)) if strict => false,
            Some(v) => find_leaf(v, &mut |l| leaf(l).then_some(())).is_some(),
            None => false,
        }
    }
}

/// A string, number or boolean inside an argument (an object's key is a
/// string).
#[derive(Clone, Copy)]
pub(crate) enum Leaf<'a> {
    Str(&'a str),
    Num(&'a serde_json::Number),
    Bool(bool),
}

/// The first `hit` of the strings, numbers and booleans in `value`, looking
/// inside arrays and objects (keys and values) at any depth (bounded by the
/// parser's nesting limit). Rules and guards use this so that a list, or
/// objects with paths as values or as keys, cannot smuggle one past them.
pub(crate) fn find_leaf<'a, T>(
    value: &'a serde_json::Value,
    hit: &mut impl FnMut(Leaf<'a>) -> Option<T>,
) -> Option<T> {
    match value {
        serde_json::Value::String(s) => hit(Leaf::Str(s)),
        serde_json::Value::Number(n) => hit(Leaf::Num(n)),
        serde_json::Value::Bool(b) => hit(Leaf::Bool(*b)),
        serde_json::Value::Null => None,
        serde_json::Value::Array(items) => items.iter().find_map(|v| find_leaf(v, hit)),
        serde_json::Value::Object(members) => members
            .iter()
            .find_map(|(k, v)| hit(Leaf::Str(k)).or_else(|| find_leaf(v, hit))),
    }
}

/// A number's text for matching: a whole number written as a float
/// (`1e3`, `1000.0`), which JSON Schema counts as an integer, reads as the
/// integer (`1000`), so that a rule written for integers sees it.
pub(crate) fn number_text(n: &serde_json::Number) -> String {
    match n.as_f64() {
        Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
            format!("{}", f as i64)
        }
        _ => n.to_string(),
    }
}

/// The directory a glob `dir/**` covers, when the directory's own name is
/// literal (`secrets` of `secrets/**`, `**/.git` of `**/.git/**`); not for
/// `*/**`, whose stem would be every top-level name.
fn literal_dir_stem(glob: &str) -> Option<&str> {
    let stem = glob.strip_suffix("/**").filter(|s| !s.is_empty())?;
    let last = stem.rsplit('/').next().unwrap_or(stem);
    (!last.contains(['*', '?', '[', ']', '{', '}', '\\'])).then_some(stem)
}

/// Lexically normalises a `/`-separated path: drops `.` and empty segments and
/// resolves `..` against the segments before it (never above the root of an
/// absolute path). `a/./b//../c` becomes `a/c`; `/x/../../etc` becomes `/etc`.
pub(crate) fn normalize_path(path: &str) -> Cow<'_, str> {
    if already_normal(path) {
        Cow::Borrowed(path)
    } else {
        Cow::Owned(normalized(path))
    }
}

/// [`normalize_path`], always building the result.
fn normalized(path: &str) -> String {
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

/// Whether [`normalize_path`] would give `path` back as it is: no empty,
/// `.` or (but for a leading run in a relative path) `..` segment. Most
/// paths are, and a deny rule tests every string of an argument list, so
/// they are not copied.
fn already_normal(path: &str) -> bool {
    if path == "/" || path == "." {
        return true;
    }
    let (absolute, rest) = match path.strip_prefix('/') {
        Some(rest) => (true, rest),
        None => (false, path),
    };
    let mut named = absolute;
    for seg in rest.split('/') {
        match seg {
            "" | "." => return false,
            ".." if named => return false,
            ".." => {}
            _ => named = true,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_path_is_copied_only_when_normalising_changes_it() {
        for p in [
            "", "/", "//", "a", "a/b", "/a/b", "a/", "/a/", "./a", "a/.", "../a", "../../a",
            "a/..", "/..", "/../a", "a//b", "..", ".", "...", "a/.../b", "..a/b", "/a/../b",
        ] {
            let built = normalized(p);
            assert_eq!(already_normal(p), built == p, "{p:?} gives {built:?}");
            assert_eq!(normalize_path(p), built, "{p:?}");
        }
    }

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
        assert!(m.matches(&json!({"n": 42}), true));
        // Whole numbers written as floats read as integers.
        let whole = ArgMatcher::regex("/n", "^[0-9]{4,}$").unwrap();
        let parsed: serde_json::Value = serde_json::from_str(r#"{"n": 1e3}"#).unwrap();
        assert!(whole.matches(&parsed, true));
        assert!(whole.matches(&json!({"n": 1000.0}), true));
        assert!(!whole.matches(&json!({"n": 1000.5}), true));
        assert!(!m.matches(&json!({"n": [42]}), true));
        assert!(!m.matches(&json!({}), true));
        let g = ArgMatcher::glob("/p", "src/*").unwrap();
        assert!(g.matches(&json!({"p": "src/a.rs"}), true));
        assert!(!g.matches(&json!({"p": "src/a/b.rs"}), true));
        // Text with `//` but no dot segment is read as written by an allow
        // rule (a command line, a URL); a deny rule also reads it as a path.
        let clone = ArgMatcher::regex("/c", r"^git clone https://github\.com/").unwrap();
        assert!(clone.matches(&json!({"c": "git clone https://github.com/a/b"}), true));
        let top = ArgMatcher::glob("/p", "*/**").unwrap();
        assert!(!top.matches(&json!({"p": "README.md"}), false));
        // A deny or ask rule for what is under a directory also covers the
        // directory itself, in any spelling; an allow rule does not.
        let secrets = ArgMatcher::glob("/p", "secrets/**").unwrap();
        for p in [
            "secrets",
            "secrets/",
            "./secrets",
            "src/../secrets",
            "secrets/k",
        ] {
            assert!(secrets.matches(&json!({ "p": p }), false), "{p}");
        }
        assert!(!secrets.matches(&json!({"p": "secrets"}), true));
        assert!(!secrets.matches(&json!({"p": "secretsx"}), false));
        let git = ArgMatcher::glob("/p", "**/.git/**").unwrap();
        assert!(git.matches(&json!({"p": ".git"}), false));
        assert!(git.matches(&json!({"p": "vendor/x/.git"}), false));
        assert!(!git.matches(&json!({"p": "vendor/x/.gitignore"}), false));
        let nested = ArgMatcher::glob("/p", "src/*/**").unwrap();
        assert!(!nested.matches(&json!({"p": "src/a.rs"}), false));
        let git = ArgMatcher::glob("/p", ".git/*").unwrap();
        assert!(git.matches(&json!({"p": ".git//config"}), false));
        assert!(!git.matches(&json!({"p": ".git//config"}), true));
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
