//! The vocabulary of pre-execute decisions: [`DecisionKind`] as written in a
//! policy file, [`Decision`] as returned for a call (with its reason),
//! [`Evaluation`], and the approval axis [`ApprovalSetting`].
//!
//! Approval is a separate axis from the decision: the policy says *whether* a
//! human must be asked; [`ApprovalSetting`] says whether one may be.

use crate::error::UnknownName;
use crate::rule::RuleRef;
use std::fmt;
use std::str::FromStr;

/// A decision without its reason, ordered by strictness: `Allow < Ask < Deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DecisionKind {
    /// The call may run.
    Allow,
    /// The call may run only after a human approves it.
    Ask,
    /// The call must not run.
    Deny,
}

impl DecisionKind {
    /// Every kind, most permissive first.
    pub const ALL: [DecisionKind; 3] = [DecisionKind::Allow, DecisionKind::Ask, DecisionKind::Deny];

    /// The name as written in policy files.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Allow => "allow",
            DecisionKind::Ask => "ask",
            DecisionKind::Deny => "deny",
        }
    }
}

impl fmt::Display for DecisionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DecisionKind {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DecisionKind::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| UnknownName::new("decision", s, "allow, deny or ask"))
    }
}

/// The pre-execute decision for one call.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Decision {
    /// The call may run (guards still apply).
    Allow,
    /// The call must not run.
    Deny {
        /// Why, for the model and the log.
        reason: String,
    },
    /// The call may run only after a human approves it (guards still apply,
    /// and run before anyone is asked).
    Ask {
        /// What the human is told.
        reason: String,
    },
}

impl Decision {
    /// The decision without its reason.
    pub fn kind(&self) -> DecisionKind {
        match self {
            Decision::Allow => DecisionKind::Allow,
            Decision::Deny { .. } => DecisionKind::Deny,
            Decision::Ask { .. } => DecisionKind::Ask,
        }
    }

    /// The reason of a deny or ask; `None` for allow.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Decision::Allow => None,
            Decision::Deny { reason } | Decision::Ask { reason } => Some(reason),
        }
    }
}

/// The result of [`Policy::evaluate`](crate::Policy::evaluate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    /// The strictest decision among the matching rules, or the policy default
    /// when none matched.
    pub decision: Decision,
    /// The rule that decided; `None` when the default applied.
    pub matched: Option<RuleRef>,
}

/// Whether a human may be asked when the decision is [`Decision::Ask`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApprovalSetting {
    /// Ask the approver.
    Ask,
    /// Never ask: every [`Decision::Ask`] is refused without asking.
    /// (It never turns an ask into an allow.)
    Never,
}

impl ApprovalSetting {
    /// The name as written in policy files.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalSetting::Ask => "ask",
            ApprovalSetting::Never => "never",
        }
    }
}

impl fmt::Display for ApprovalSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ApprovalSetting {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ask" => Ok(ApprovalSetting::Ask),
            "never" => Ok(ApprovalSetting::Never),
            _ => Err(UnknownName::new("approval setting", s, "ask or never")),
        }
    }
}
