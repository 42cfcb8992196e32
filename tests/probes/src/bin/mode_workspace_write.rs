//! The `fs` tool with min-mode `WorkspaceWrite`: the `mode::mode_workspace_write` test runs it
//! in that mode and checks the host filesystem afterwards.

#[path = "../shared/fsops.rs"]
#[macro_use]
mod fsops;

fs_probe!(WorkspaceWrite);
