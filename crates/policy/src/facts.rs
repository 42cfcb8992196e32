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
    /// The side effect the tool declares.
    pub side_effect: SideEffect,
    /// The sandbox mode the call would run in.
    pub mode: SandboxMode,
}
