//! The `fs` tool with min-mode `ReadOnly`: the `escape::escape_read_only` test runs the
//! filesystem escape corpus through it and checks the host filesystem afterwards.

#[path = "../shared/fsops.rs"]
#[macro_use]
mod fsops;

fs_probe!(ReadOnly);
