//! The `fs` tool with min-mode `None`: the `mode::mode_none` test runs it
//! in that mode and checks the host filesystem afterwards.

#[path = "../shared/fsops.rs"]
#[macro_use]
mod fsops;

fs_probe!(None);
