//! The `fs` tool with min-mode `WorkspaceWrite`: the `escape::escape_workspace_write` test runs the
//! filesystem escape corpus through it and checks the host filesystem afterwards.

#[path = "../shared/fsops.rs"]
#[macro_use]
mod fsops;

fs_probe!(WorkspaceWrite);
