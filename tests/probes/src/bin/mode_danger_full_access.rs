//! The `fs` tool with min-mode `DangerFullAccess`: the `mode::mode_danger_full_access` test runs it
//! in that mode and checks the host filesystem afterwards.

#[path = "../shared/fsops.rs"]
#[macro_use]
mod fsops;

fs_probe!(DangerFullAccess);
