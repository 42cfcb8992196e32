//! Vocabulary shared by every toolhost crate: the sandbox modes of
//! DESIGN.md §2 and the stable error codes of DESIGN.md §4.
//!
//! This crate owns names only; it must not grow behaviour. Codes are never
//! renamed: they are what models, scripts and tests match on.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A sandbox mode, narrowest first. The order is the width order: a mode is
/// wider than another when it grants a superset of its file effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Nothing preopened: pure computation.
    None,
    /// The workspace preopened read-only.
    ReadOnly,
    /// The workspace read-write, plus a per-call scratch directory.
    WorkspaceWrite,
    /// The host root preopened read-write. Never the default.
    DangerFullAccess,
}

impl SandboxMode {
    /// Every mode, narrowest first.
    pub const ALL: [SandboxMode; 4] = [
        SandboxMode::None,
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::DangerFullAccess,
    ];

    /// The mode's name as written on the command line and in policy files.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::None => "none",
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::DangerFullAccess => "danger-full-access",
        }
    }

    /// True when `self` grants strictly more than `other`.
    pub fn is_wider_than(self, other: SandboxMode) -> bool {
        self > other
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error for a mode name that does not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownMode(pub String);

impl fmt::Display for UnknownMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown sandbox mode {:?} (expected none, read-only, workspace-write or danger-full-access)",
            self.0
        )
    }
}

impl std::error::Error for UnknownMode {}

impl FromStr for SandboxMode {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SandboxMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownMode(s.to_string()))
    }
}

/// What a tool may change in the outside world, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SideEffect {
    /// Computes only.
    None,
    /// Reads files, changes nothing.
    Read,
    /// Changes files in the workspace.
    Write,
    /// Changes state outside the host's view.
    External,
}

impl SideEffect {
    /// Every side-effect class, weakest first.
    pub const ALL: [SideEffect; 4] = [
        SideEffect::None,
        SideEffect::Read,
        SideEffect::Write,
        SideEffect::External,
    ];

    /// The class's name as written in policy files.
    pub fn as_str(self) -> &'static str {
        match self {
            SideEffect::None => "none",
            SideEffect::Read => "read",
            SideEffect::Write => "write",
            SideEffect::External => "external",
        }
    }

    /// The widest sandbox mode a call of a tool that declares this side
    /// effect runs in: writes reach only tools that declare `write` or
    /// `external`, so a tool that declares `none` or `read` runs at most
    /// `read-only`, whatever mode its call was given. Understating a side
    /// effect (to pass a policy that asks before writes) then buys nothing.
    pub fn widest_mode(self) -> SandboxMode {
        match self {
            SideEffect::None | SideEffect::Read => SandboxMode::ReadOnly,
            SideEffect::Write | SideEffect::External => SandboxMode::DangerFullAccess,
        }
    }

    /// The side effect the policy and the guards see for a call of a tool
    /// that declares this one and runs in `mode` (already capped by
    /// [`SideEffect::widest_mode`]): what the grant lets it do, at least.
    /// A tool that declares `none` but runs with the workspace preopened
    /// (any mode but `none`) can read it, so it is seen as `read`:
    /// understating a side effect to pass a rule that asks or denies before
    /// reads then buys nothing either. Writes need no such step: a tool
    /// that declares less than `write` never runs where it could write.
    pub fn as_run_in(self, mode: SandboxMode) -> SideEffect {
        match self {
            SideEffect::None if mode != SandboxMode::None => SideEffect::Read,
            declared => declared,
        }
    }
}

impl fmt::Display for SideEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SideEffect {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SideEffect::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                format!("unknown side effect {s:?} (expected none, read, write or external)")
            })
    }
}

macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident => $text:literal,)+) => {
        /// A stable error code (DESIGN.md §4). Serialised as its
        /// SCREAMING_SNAKE name; never renamed.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $($(#[$doc])* #[serde(rename = $text)] $variant,)+
        }

        impl ErrorCode {
            /// Every code.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)+];

            /// The code's stable name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $text,)+
                }
            }
        }
    };
}

error_codes! {
    /// No visible tool has that name.
    UnknownTool => "UNKNOWN_TOOL",
    /// The arguments are not JSON or do not satisfy the input schema.
    InvalidArgs => "INVALID_ARGS",
    /// A policy rule (or the default) denied the call.
    PolicyDenied => "POLICY_DENIED",
    /// A guard denied the call.
    GuardDenied => "GUARD_DENIED",
    /// The approver rejected the call.
    ApprovalRejected => "APPROVAL_REJECTED",
    /// The approval was cancelled.
    ApprovalCancelled => "APPROVAL_CANCELLED",
    /// No approver could be asked, or it failed (timeout, crash, garbage).
    ApprovalUnavailable => "APPROVAL_UNAVAILABLE",
    /// An escalation request was not strictly wider or had no justification.
    EscalationInvalid => "ESCALATION_INVALID",
    /// The intent could not be made durable; the body never started.
    AbortedBeforeDispatch => "ABORTED_BEFORE_DISPATCH",
    /// The requested sandbox cannot be enforced (or is narrower than the tool needs).
    SandboxUnavailable => "SANDBOX_UNAVAILABLE",
    /// The wall-clock deadline passed.
    Timeout => "TIMEOUT",
    /// The fuel budget ran out.
    OutOfFuel => "OUT_OF_FUEL",
    /// The guest tried to grow memory or tables past its limit.
    MemoryLimit => "MEMORY_LIMIT",
    /// The guest trapped (panic, unreachable, stack overflow, ...).
    Trap => "TRAP",
    /// The tool reported an error itself.
    ToolError => "TOOL_ERROR",
    /// The canonical output does not satisfy the output schema, or is not JSON.
    OutputInvalid => "OUTPUT_INVALID",
    /// The result is larger than the output cap.
    OutputTooLarge => "OUTPUT_TOO_LARGE",
    /// A post-execute hook blocked the result.
    PostExecuteBlocked => "POST_EXECUTE_BLOCKED",
    /// The call was cancelled.
    Cancelled => "CANCELLED",
    /// The host stopped after the intent was durable and before the result was:
    /// the tool may or may not have run.
    ToolOutcomeUnknown => "TOOL_OUTCOME_UNKNOWN",
    /// The client (or the client on this tool) made more calls than the
    /// policy's `[rate_limits]` allow; refused before validation.
    RateLimited => "RATE_LIMITED",
    /// An MCP approval's `requestState` is not one this server issued to this
    /// caller (malformed, forged or altered); nothing was decided.
    ApprovalStateInvalid => "APPROVAL_STATE_INVALID",
    /// An MCP approval's `requestState` is past its expiry.
    ApprovalStateExpired => "APPROVAL_STATE_EXPIRED",
    /// An MCP approval's `requestState` was already used (the session log
    /// holds its use): each one decides one call, once.
    ApprovalStateReplayed => "APPROVAL_STATE_REPLAYED",
    /// An MCP approval's `requestState` was issued for another tool,
    /// other arguments or another mode than the call that carries it.
    ApprovalStateMismatch => "APPROVAL_STATE_MISMATCH",
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_can_read_is_seen_as_a_read_at_least() {
        for mode in SandboxMode::ALL {
            for declared in SideEffect::ALL {
                let seen = declared.as_run_in(mode);
                let expected = match (declared, mode) {
                    (SideEffect::None, SandboxMode::None) => SideEffect::None,
                    (SideEffect::None, _) => SideEffect::Read,
                    (d, _) => d,
                };
                assert_eq!(seen, expected, "{declared} in {mode}");
            }
        }
    }

    #[test]
    fn modes_order_by_width_and_round_trip() {
        assert!(SandboxMode::DangerFullAccess.is_wider_than(SandboxMode::WorkspaceWrite));
        assert!(SandboxMode::WorkspaceWrite.is_wider_than(SandboxMode::ReadOnly));
        assert!(SandboxMode::ReadOnly.is_wider_than(SandboxMode::None));
        assert!(!SandboxMode::ReadOnly.is_wider_than(SandboxMode::ReadOnly));
        for m in SandboxMode::ALL {
            assert_eq!(m.as_str().parse::<SandboxMode>(), Ok(m));
            assert_eq!(
                serde_json::to_string(&m).ok(),
                Some(format!("\"{}\"", m.as_str()))
            );
        }
        assert!("full".parse::<SandboxMode>().is_err());
    }

    #[test]
    fn codes_serialise_as_their_stable_names() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_string(code).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
        assert_eq!(
            ErrorCode::ToolOutcomeUnknown.as_str(),
            "TOOL_OUTCOME_UNKNOWN"
        );
        assert_eq!(ErrorCode::ALL.len(), 25);
        assert_eq!(ErrorCode::RateLimited.as_str(), "RATE_LIMITED");
        assert_eq!(
            ErrorCode::ApprovalStateReplayed.as_str(),
            "APPROVAL_STATE_REPLAYED"
        );
    }
}
