//! Principals: who asked for a call ([`Subject`]), who is an owner, which
//! tools only owners get, and named groups (the `[principals]` section).
//!
//! A principal is a name. The host decides which name a call carries (the
//! library caller's, a stdio client profile's, the one an HTTP bearer token
//! maps to); this module only says what a name may see and call.
//! [`LOCAL_PRINCIPAL`] (the operator at the command line, or a library
//! caller that names nobody) is always an owner.

use crate::matcher::ToolPattern;
use std::collections::BTreeMap;

/// The principal of a call that names nobody: the operator running the
/// command line, or a library caller. Always an owner.
pub const LOCAL_PRINCIPAL: &str = "local";

/// The principal of an HTTP request whose token maps to no name, and of an
/// HTTP server without tokens. Never an owner unless a policy lists it.
pub const ANONYMOUS_PRINCIPAL: &str = "anonymous";

/// Checks a principal (or group) name: 1 to 64 of `A-Z a-z 0-9 . _ -`.
pub fn check_principal_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a principal name (1 to 64 letters, digits, '.', '_' or '-')"
        ))
    }
}

/// Who a call comes from, as the layers see it.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The principal's name ([`LOCAL_PRINCIPAL`] when the caller named nobody).
    pub principal: &'a str,
    /// The call's scope and its parents, outermost first; empty for the
    /// global scope.
    pub scopes: &'a [String],
}

impl<'a> Subject<'a> {
    /// The local principal in the global scope.
    pub fn local() -> Subject<'static> {
        Subject {
            principal: LOCAL_PRINCIPAL,
            scopes: &[],
        }
    }

    /// True when the call comes from a scope that has a parent (a subagent).
    pub fn is_subagent(&self) -> bool {
        self.scopes.len() > 1
    }

    /// The innermost scope, if any.
    pub fn scope(&self) -> Option<&'a str> {
        self.scopes.last().map(String::as_str)
    }
}

/// The compiled `[principals]` section.
#[derive(Debug, Clone, Default)]
pub(crate) struct Principals {
    /// Owners besides [`LOCAL_PRINCIPAL`].
    pub(crate) owners: Vec<String>,
    /// Tool patterns only owners see and call, each with its line.
    pub(crate) owner_only: Vec<(ToolPattern, usize)>,
    /// Group name to members.
    pub(crate) groups: BTreeMap<String, Vec<String>>,
}

impl Principals {
    /// True when `principal` is an owner.
    pub(crate) fn is_owner(&self, principal: &str) -> bool {
        principal == LOCAL_PRINCIPAL || self.owners.iter().any(|o| o == principal)
    }

    /// True when `principal` belongs to `group`.
    pub(crate) fn in_group(&self, group: &str, principal: &str) -> bool {
        self.groups
            .get(group)
            .is_some_and(|m| m.iter().any(|p| p == principal))
    }

    /// The `owner_only` entry that withholds `tool` from `principal`, as
    /// `(index, line)`; `None` when the principal may have it.
    pub(crate) fn withheld(&self, tool: &str, principal: &str) -> Option<(usize, usize)> {
        if self.is_owner(principal) {
            return None;
        }
        self.owner_only
            .iter()
            .enumerate()
            .find(|(_, (p, _))| p.matches(tool))
            .map(|(i, (_, line))| (i, *line))
    }
}
