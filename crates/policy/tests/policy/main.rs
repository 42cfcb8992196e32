//! One integration-test binary for toolhost-policy: each module pins one
//! behaviour of the public API.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on a set-up error"
)]

mod evaluate;
mod examples;
mod guards;
mod layers;
mod load_errors;
mod network;
mod patches;
mod post_execute;
mod presets;
mod rate_limits;

use serde_json::Value;
use toolhost_policy::{CallFacts, Policy, PolicyError, SandboxMode, SideEffect};

/// Loads a policy that must be valid.
pub fn load(src: &str) -> Policy {
    match Policy::from_toml(src, "test.toml") {
        Ok(p) => p,
        Err(e) => panic!("policy should load, got: {e}"),
    }
}

/// Loads a policy that must be rejected, and returns the error.
pub fn reject(src: &str) -> PolicyError {
    match Policy::from_toml(src, "test.toml") {
        Ok(_) => panic!("policy should be rejected:\n{src}"),
        Err(e) => e,
    }
}

/// Asserts the error is on `line` and its text contains every needle.
#[track_caller]
pub fn assert_error(src: &str, line: usize, needles: &[&str]) {
    let e = reject(src);
    let text = e.to_string();
    assert_eq!(e.line(), line, "wrong line in: {text}");
    assert!(
        text.starts_with(&format!("test.toml:{line}:")),
        "display is origin:line:col: {text}"
    );
    for n in needles {
        assert!(text.contains(n), "{n:?} not in: {text}");
    }
}

/// A call asked to run in `workspace-write`, as the host judges it (a tool
/// that declares `none` or `read` runs `read-only`, and one that declares
/// `none` is seen as a read there).
pub fn facts<'a>(tool: &'a str, args: &'a Value, side_effect: SideEffect) -> CallFacts<'a> {
    CallFacts::of_call(tool, args, side_effect, SandboxMode::WorkspaceWrite)
}
