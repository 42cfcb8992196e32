//! The `fs` tool declaring side effect `read` although it writes: the
//! `capability::capability_understated_write` test gives its calls
//! `workspace-write` under a policy that asks before writes, and checks
//! that the tool is granted no write (it runs read-only), so understating
//! its side effect gets it past the question but not into the workspace.

#[path = "../shared/fsops.rs"]
#[macro_use]
mod fsops;

fs_probe!(ReadOnly, Read);
