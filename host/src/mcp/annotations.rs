//! The MCP tool annotations (`readOnlyHint`, `destructiveHint`,
//! `idempotentHint`, `openWorldHint`), derived from what the host enforces
//! for calls of the tool, never from what its author declared.
//!
//! A hint that promises safety is given only when the host makes it true:
//!
//! - `readOnlyHint: true` when the calls of this server cannot change
//!   anything: they run in mode `none` or `read-only` (the runtime preopens
//!   nothing writable), or the tool needs a wider mode than the calls get
//!   (every call is refused before it runs), and no network grant can apply
//!   to it;
//! - `destructiveHint: false` only when read-only: in `workspace-write` a
//!   tool can overwrite or delete any workspace file, whatever it declares;
//! - `idempotentHint: true` only when read-only: repeating a call that
//!   changes nothing changes nothing; the host cannot check an author's
//!   claim that a write is idempotent;
//! - `openWorldHint` is whether a network grant can apply to the tool's
//!   calls (the host's answer, [`Host::may_reach_network`]).
//!
//! The descriptor's `side-effect` and `idempotent` are what the author says;
//! they stay in the descriptor (and in policy rules that match on them),
//! not in the hints.

use crate::pipeline::Host;
use crate::tools::Descriptor;
use rmcp::model::ToolAnnotations;
use toolhost_core::SandboxMode;

/// What the host will enforce for the calls of one tool on this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Enforced {
    /// The mode every call of the tool runs in on this server (the
    /// server's, narrowed to what the tool's side effect allows).
    pub call_mode: SandboxMode,
    /// The narrowest mode the tool works in; a call in a narrower mode is
    /// refused before it runs.
    pub min_mode: SandboxMode,
    /// Whether any network grant could apply to a call of the tool.
    pub may_reach_network: bool,
}

impl Enforced {
    /// What `host` enforces for `tool` on a server whose calls run in
    /// `mode` (`None`: the policy's default mode).
    pub(super) fn of(host: &Host, tool: &Descriptor, mode: Option<SandboxMode>) -> Enforced {
        Enforced {
            call_mode: mode
                .unwrap_or_else(|| host.policy().default_mode())
                .min(tool.side_effect.widest_mode()),
            min_mode: tool.min_mode,
            may_reach_network: host.grants_network_to(tool),
        }
    }

    /// True when no call can change anything outside the call.
    fn read_only(&self) -> bool {
        let never_runs = self.min_mode > self.call_mode;
        let no_writes = self.call_mode <= SandboxMode::ReadOnly;
        never_runs || (no_writes && !self.may_reach_network)
    }

    /// The annotations for these facts.
    pub(super) fn annotations(&self) -> ToolAnnotations {
        let read_only = self.read_only();
        let mut a = ToolAnnotations::default();
        a.read_only_hint = Some(read_only);
        a.destructive_hint = Some(!read_only);
        a.idempotent_hint = Some(read_only);
        a.open_world_hint = Some(self.may_reach_network && self.min_mode <= self.call_mode);
        debug_assert!(!(read_only && a.open_world_hint == Some(true)));
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SandboxMode::*;

    fn hints(call_mode: SandboxMode, min_mode: SandboxMode, net: bool) -> [bool; 4] {
        let a = Enforced {
            call_mode,
            min_mode,
            may_reach_network: net,
        }
        .annotations();
        [
            a.read_only_hint.unwrap_or(false),
            a.destructive_hint.unwrap_or(true),
            a.idempotent_hint.unwrap_or(false),
            a.open_world_hint.unwrap_or(true),
        ]
    }

    #[test]
    fn read_only_modes_make_every_tool_read_only() {
        for mode in [None, ReadOnly] {
            for min in SandboxMode::ALL {
                assert_eq!(
                    hints(mode, min, false),
                    [true, false, true, false],
                    "{mode} {min}"
                );
            }
        }
    }

    #[test]
    fn writable_modes_make_every_runnable_tool_destructive() {
        for mode in [WorkspaceWrite, DangerFullAccess] {
            for min in [None, ReadOnly, WorkspaceWrite] {
                assert_eq!(
                    hints(mode, min, false),
                    [false, true, false, false],
                    "{mode} {min}"
                );
            }
        }
        // A tool that needs more than the calls get never runs.
        assert_eq!(
            hints(WorkspaceWrite, DangerFullAccess, false),
            [true, false, true, false]
        );
    }

    #[test]
    fn a_network_grant_opens_the_world_and_ends_read_only() {
        assert_eq!(hints(None, None, true), [false, true, false, true]);
        assert_eq!(hints(ReadOnly, ReadOnly, true), [false, true, false, true]);
        // Refused before it runs: the grant never applies.
        assert_eq!(
            hints(ReadOnly, WorkspaceWrite, true),
            [true, false, true, false]
        );
    }
}
