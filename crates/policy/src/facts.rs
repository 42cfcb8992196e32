//! [`CallFacts`]: everything policy and guards may look at for one call.

use crate::side_effect::SideEffect;
use toolhost_core::SandboxMode;

/// The facts of one call, after its arguments were parsed and validated.
///
/// Policy and guards see only these: a decision never depends on anything the
/// caller did not pass in.
#[derive(Debug, Clone, Copy)]
pub struct CallFacts<'a> {
    /// The tool's name.
    pub tool: &'a str,
    /// The call's arguments (already validated against the tool's schema).
    pub args: &'a serde_json::Value,
    /// The side effect the call is seen with: the tool's declared one, and
    /// `read` for a tool that declares `none` but can read
    /// ([`SideEffect::as_run_in`]).
    pub side_effect: SideEffect,
    /// The side effect the tool declares (deny and ask rules match it too).
    pub declared: SideEffect,
    /// The sandbox mode the call would run in.
    pub mode: SandboxMode,
}

impl<'a> CallFacts<'a> {
    /// The facts of a call of `tool`, which declares `declared`, asked to
    /// run in `mode`, as the host judges it: the mode capped by the side
    /// effect ([`SideEffect::widest_mode`]), and the side effect seen as
    /// what that mode lets it do at least ([`SideEffect::as_run_in`]).
    pub fn of_call(
        tool: &'a str,
        args: &'a serde_json::Value,
        declared: SideEffect,
        mode: SandboxMode,
    ) -> Self {
        let mode = mode.min(declared.widest_mode());
        CallFacts {
            tool,
            args,
            side_effect: declared.as_run_in(mode),
            declared,
            mode,
        }
    }

    /// Whether the call may have `effect`: the side effect the tool
    /// declares, the one it is seen with, and what its mode lets any body
    /// do whatever the tool declares:
    /// `read` in every mode but `none`, `write` in a mode with a writable
    /// preopen (`workspace-write`, `danger-full-access`). Deny and ask
    /// rules match by this, so a tool cannot pass a rule about reads by
    /// declaring more (`write`) than it may do in a read-only call.
    pub fn may(&self, effect: SideEffect) -> bool {
        effect == self.declared
            || effect == self.side_effect
            || match effect {
                SideEffect::Read => self.mode != SandboxMode::None,
                SideEffect::Write => matches!(
                    self.mode,
                    SandboxMode::WorkspaceWrite | SandboxMode::DangerFullAccess
                ),
                SideEffect::None | SideEffect::External => false,
            }
    }
}
