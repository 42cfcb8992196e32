//! The `fs` tool with min-mode `DangerFullAccess`: the `escape::escape_danger_full_access` test runs the
//! filesystem escape corpus through it and checks the host filesystem afterwards.

#[path = "../shared/fsops.rs"]
#[macro_use]
mod fsops;

fs_probe!(DangerFullAccess);
