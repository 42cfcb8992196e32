//! The `fs` tool with min-mode `ReadOnly`: the `mode::mode_read_only` test runs it
//! in that mode and checks the host filesystem afterwards.

#[path = "../shared/fsops.rs"]
#[macro_use]
mod fsops;

fs_probe!(ReadOnly);
