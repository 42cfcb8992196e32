//! [`Preset`]: named sets of policy defaults, and the rules each one adds.

use crate::decision::{ApprovalSetting, DecisionKind};
use crate::error::UnknownName;
use crate::side_effect::SideEffect;
use std::fmt;
use std::str::FromStr;
use toolhost_core::SandboxMode;

/// A named set of defaults, chosen with `preset = "..."` in a policy file.
///
/// | preset | `mode` | `approval` | `default` | built-in rule |
/// |---|---|---|---|---|
/// | `read-only` | `read-only` | `ask` | `allow` | side effect `write` or `external`: ask |
/// | `workspace-write` | `workspace-write` | `ask` | `allow` | side effect `external`: ask |
/// | `danger-full-access` | `danger-full-access` | `never` | `allow` | none |
///
/// Explicit `mode`, `approval` and `default` keys in the file override the
/// preset's values. The built-in rule is added before the file's rules; since
/// the strictest matching rule wins, a file rule cannot relax it (choose
/// another preset instead). Presets have no guards and nothing in a preset
/// relaxes a guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Preset {
    /// Read and analyse; anything that writes or reaches outside asks.
    ReadOnly,
    /// Edit the project; anything that reaches outside asks.
    WorkspaceWrite,
    /// Everything allowed, nobody asked. Never the default.
    DangerFullAccess,
}

impl Preset {
    /// Every preset, narrowest first.
    pub const ALL: [Preset; 3] = [
        Preset::ReadOnly,
        Preset::WorkspaceWrite,
        Preset::DangerFullAccess,
    ];

    /// The name as written in policy files.
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::ReadOnly => "read-only",
            Preset::WorkspaceWrite => "workspace-write",
            Preset::DangerFullAccess => "danger-full-access",
        }
    }

    /// The default sandbox mode for calls.
    pub fn mode(self) -> SandboxMode {
        match self {
            Preset::ReadOnly => SandboxMode::ReadOnly,
            Preset::WorkspaceWrite => SandboxMode::WorkspaceWrite,
            Preset::DangerFullAccess => SandboxMode::DangerFullAccess,
        }
    }

    /// The approval setting.
    pub fn approval(self) -> ApprovalSetting {
        match self {
            Preset::ReadOnly | Preset::WorkspaceWrite => ApprovalSetting::Ask,
            Preset::DangerFullAccess => ApprovalSetting::Never,
        }
    }

    /// The decision for calls no rule matches.
    pub fn default_decision(self) -> DecisionKind {
        DecisionKind::Allow
    }

    /// The side effects the preset's built-in rule asks about, with the reason
    /// it gives; `None` when the preset adds no rule.
    pub(crate) fn ask_rule(self) -> Option<(&'static [SideEffect], &'static str)> {
        match self {
            Preset::ReadOnly => Some((
                &[SideEffect::Write, SideEffect::External],
                "the read-only preset asks before any tool that writes or acts outside the host",
            )),
            Preset::WorkspaceWrite => Some((
                &[SideEffect::External],
                "the workspace-write preset asks before any tool that acts outside the host",
            )),
            Preset::DangerFullAccess => None,
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Preset {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Preset::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                UnknownName::new(
                    "preset",
                    s,
                    "read-only, workspace-write or danger-full-access",
                )
            })
    }
}
