//! [`PolicyGuard`]: a guard declared in a policy file's `[[guards]]`.

use crate::facts::CallFacts;
use crate::guard::{Guard, GuardVerdict};
use crate::matcher::{Leaf, ToolPattern, find_leaf, normalize_path};
use globset::GlobMatcher;
use regex::Regex;

/// The path check of a [`PolicyGuard`]: deny when a string at `pointer`
/// matches one of the globs.
#[derive(Debug, Clone)]
pub(crate) struct PathCheck {
    pub(crate) pointer: String,
    pub(crate) globs: Vec<(String, GlobMatcher)>,
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
                    .globs
                    .iter()
                    .find(|(_, g)| g.is_match(path) || g.is_match(&*normal) || g.is_match(&as_dir))
                    .map(|(glob, _)| format!("{} (path {path:?} matches {glob:?})", self.reason))
            });
            if let Some(reason) = denied {
                return GuardVerdict::Deny { reason };
            }
        }
        GuardVerdict::Pass
    }
}
