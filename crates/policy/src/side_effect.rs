//! [`SideEffect`]: what a tool declares it does to the world, as rules match it.

use crate::error::UnknownName;
use std::fmt;
use std::str::FromStr;

/// The side effect a tool declares, narrowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SideEffect {
    /// Pure computation.
    None,
    /// Reads files or other state.
    Read,
    /// Writes files or other local state.
    Write,
    /// Acts outside the host: network, other systems, anything not undoable here.
    External,
}

impl SideEffect {
    /// Every side effect, narrowest first.
    pub const ALL: [SideEffect; 4] = [
        SideEffect::None,
        SideEffect::Read,
        SideEffect::Write,
        SideEffect::External,
    ];

    /// The name as written in policy files and tool manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            SideEffect::None => "none",
            SideEffect::Read => "read",
            SideEffect::Write => "write",
            SideEffect::External => "external",
        }
    }
}

impl fmt::Display for SideEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SideEffect {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SideEffect::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| UnknownName::new("side effect", s, "none, read, write or external"))
    }
}

impl From<toolhost_core::SideEffect> for SideEffect {
    fn from(s: toolhost_core::SideEffect) -> Self {
        match s {
            toolhost_core::SideEffect::None => SideEffect::None,
            toolhost_core::SideEffect::Read => SideEffect::Read,
            toolhost_core::SideEffect::Write => SideEffect::Write,
            toolhost_core::SideEffect::External => SideEffect::External,
        }
    }
}
