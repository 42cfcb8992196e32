//! Named points of the call pipeline where a test harness can stop the
//! process, so that crash recovery is tested at exactly the moments that
//! matter (before and after the intent commit, the body, the result commit).
//!
//! With `TOOLHOST_TEST_PAUSE_AT=<point>` in the environment, the process
//! writes `toolhost-paused:<point>` on a line of its own to stderr when it
//! reaches `<point>`, and then sleeps forever, holding whatever it holds (the
//! session log's lock, a half-finished call), until the harness kills it.
//! Some points only announce themselves and carry on
//! ([`announce`]): the harness kills the process a little later, while it is
//! busy there (for example while a tool body runs).
//!
//! Without the variable (every normal run) each point is one load of a
//! value read once from the environment. Optimised builds have no crash
//! points at all (each is an empty function) unless built with the
//! `crash-points` feature: a release binary cannot be paused by its
//! environment.
//!
//! The points, in pipeline order:
//! - `before-intent`: every check passed, the intent is not committed yet;
//! - `after-intent`: the intent is durable, the body has not started;
//! - `after-inner-intent`: the same for an inner call of code mode (a call
//!   made by a program's code through the host, `pipeline/code_mode.rs`),
//!   while its outer call's body waits for it;
//! - `during-body` (announced only): the body is about to start;
//! - `after-body`: the body returned, its result is not committed;
//! - `after-result`: the result is committed (lazily, as designed), the
//!   process has not flushed the log or answered yet.

use std::io::Write as _;

/// The environment variable naming the point to stop at.
#[cfg_attr(
    not(any(debug_assertions, feature = "crash-points")),
    allow(dead_code, reason = "read only where crash points exist")
)]
pub(crate) const ENV: &str = "TOOLHOST_TEST_PAUSE_AT";

#[cfg(not(any(debug_assertions, feature = "crash-points")))]
fn target() -> Option<&'static str> {
    None
}

#[cfg(any(debug_assertions, feature = "crash-points"))]
fn target() -> Option<&'static str> {
    static TARGET: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    TARGET
        .get_or_init(|| std::env::var(ENV).ok().filter(|v| !v.is_empty()))
        .as_deref()
}

fn mark(point: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "toolhost-paused:{point}");
    let _ = err.flush();
}

/// The pipeline reached `point`: stop here forever if the harness asked for it.
pub(crate) fn reached(point: &'static str) {
    if target() == Some(point) {
        mark(point);
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

/// The pipeline reached `point`: say so if the harness asked for it, and go on.
pub(crate) fn announce(point: &'static str) {
    if target() == Some(point) {
        mark(point);
    }
}
