//! The `fs` tool with min-mode `None`: the `escape::escape_none` test runs the
//! filesystem escape corpus through it and checks the host filesystem afterwards.

#[path = "../shared/fsops.rs"]
#[macro_use]
mod fsops;

fs_probe!(None);
