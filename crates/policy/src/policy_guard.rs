//! [`PolicyGuard`]: a guard declared in a policy file's `[[guards]]`.

use crate::facts::CallFacts;
use crate::guard::{Guard, GuardVerdict};
use crate::matcher::{Leaf, ToolPattern, count_glob_eval, find_leaf, glob_set, normalize_path};
use globset::{Candidate, GlobMatcher, GlobSet};
use regex::Regex;

/// The path check of a [`PolicyGuard`]: deny when a string at `pointer`
/// matches one of the globs.
#[derive(Debug, Clone)]
pub(crate) struct PathCheck {
    pointer: String,
    globs: Vec<(String, GlobMatcher)>,
    /// The globs in one set, so that each string is tested once, not once
    /// per glob (`None` if globset could not build it: one by one then).
    set: Option<GlobSet>,
}

impl PathCheck {
    /// The check of the strings at `pointer` against `globs` (each with its
    /// text, for the reason).
    pub(crate) fn new(pointer: String, globs: Vec<(String, GlobMatcher)>) -> PathCheck {
        let set = glob_set(globs.iter().map(|(_, g)| g.glob()));
        PathCheck {
            pointer,
            globs,
            set,
        }
    }

    /// The first of the globs (in file order) that `path` matches as
    /// written, normalised (`normal`) or as a directory (`as_dir`, for
    /// `**/.git/**` to cover `.git`).
    fn first_match(&self, path: &str, normal: &str, as_dir: &str) -> Option<&str> {
        let Some(set) = &self.set else {
            return self
                .globs
                .iter()
                .find(|(_, g)| {
                    let is = |t: &str| {
                        count_glob_eval();
                        g.is_match(t)
                    };
                    is(path) || is(normal) || is(as_dir)
                })
                .map(|(glob, _)| glob.as_str());
        };
        let mut into = Vec::new();
        let mut first = None;
        for text in [Some(path), (normal != path).then_some(normal), Some(as_dir)]
            .into_iter()
            .flatten()
        {
            count_glob_eval();
            set.matches_candidate_into(&Candidate::new(text), &mut into);
            // In ascending order: the first is the lowest.
            if let Some(&i) = into.first() {
                first = Some(first.map_or(i, |f: usize| f.min(i)));
            }
        }
        first
            .and_then(|i| self.globs.get(i))
            .map(|(glob, _)| glob.as_str())
    }
}

/// A guard from a policy file.
///
/// It applies to calls whose tool matches its pattern, and denies when
/// *either* check fires:
///
/// * `deny_args_matching`: the regex matches the arguments serialised as
///   compact JSON (so it sees keys as well as values, and strings in their
///   JSON-escaped form);
/// * `deny_paths` with `pointer`: a string at the pointer (or any string in an
///   array or object there, keys too, at any depth) matches a glob, either as written or after lexical
///   normalisation (`a/./b/../.git/x` is also checked as `a/.git/x`).
///   Symlinks are not resolved: this is a policy check, not the sandbox.
#[derive(Debug, Clone)]
pub struct PolicyGuard {
    pub(crate) name: String,
    pub(crate) tool: ToolPattern,
    pub(crate) args_regex: Option<Regex>,
    pub(crate) paths: Option<PathCheck>,
    pub(crate) reason: String,
}

impl PolicyGuard {
    /// The guard's reason as written in the file.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The tool pattern as written.
    pub fn tool_pattern(&self) -> &str {
        self.tool.as_str()
    }
}

impl Guard for PolicyGuard {
    fn name(&self) -> &str {
        &self.name
    }

    fn check(&self, facts: &CallFacts<'_>) -> GuardVerdict {
        if !self.tool.matches(facts.tool) {
            return GuardVerdict::Pass;
        }
        if let Some(re) = &self.args_regex {
            // Serialising a Value cannot fail; if it ever did, deny.
            let hit = serde_json::to_string(facts.args).map_or(true, |json| re.is_match(&json));
            if hit {
                return GuardVerdict::Deny {
                    reason: self.reason.clone(),
                };
            }
        }
        if let Some(check) = &self.paths {
            let Some(value) = facts.args.pointer(&check.pointer) else {
                return GuardVerdict::Pass;
            };
            let denied = find_leaf(value, &mut |l| {
                let Leaf::Str(path) = l else { return None };
                let normal = normalize_path(path);
                // The directory a glob protects is covered too: `**/.git/**`
                // denies `.git` and `src/.git/` (which normalises to
                // `src/.git`), as it denies what is inside them.
                let as_dir = format!("{normal}/");
                check
                    .first_match(path, &normal, &as_dir)
                    .map(|glob| format!("{} (path {path:?} matches {glob:?})", self.reason))
            });
            if let Some(reason) = denied {
                return GuardVerdict::Deny { reason };
            }
        }
        GuardVerdict::Pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::path_glob;

    /// The set names the glob that the globs one by one name, for every
    /// spelling a guard tests.
    #[test]
    fn the_set_finds_the_glob_the_list_finds() {
        let globs: Vec<(String, GlobMatcher)> = [
            "/etc/**",
            "**/.git/**",
            "secrets/**",
            "*.key",
            "**/*.pem",
            "src/*",
            "[ab]?",
            "**",
        ]
        .iter()
        .map(|g| (g.to_string(), path_glob(g).unwrap()))
        .collect();
        let with_set = PathCheck::new("/p".into(), globs.clone());
        assert!(with_set.set.is_some());
        let one_by_one = PathCheck {
            set: None,
            ..with_set.clone()
        };
        let mut found = 0;
        for path in [
            "",
            ".",
            "..",
            "/etc",
            "/etc/passwd",
            "/x/../etc/passwd",
            ".git",
            "src/.git/",
            "a.key",
            "k/a.key",
            "x.pem",
            "a/b/x.pem",
            "src/a",
            "src/a/b",
            "ab",
            "secrets",
            "secrets//k",
        ] {
            let normal = normalize_path(path);
            let as_dir = format!("{normal}/");
            let (a, b) = (
                with_set.first_match(path, &normal, &as_dir),
                one_by_one.first_match(path, &normal, &as_dir),
            );
            assert_eq!(a, b, "{path:?}");
            found += usize::from(a.is_some_and(|g| g != "**"));
        }
        assert!(found > 5, "{found}");
    }
}
