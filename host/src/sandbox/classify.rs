//! How a body ended, as a stable code and a message the model can act on.
//!
//! Classification is by type, not by an error's text: wasmtime's own
//! [`Trap`] codes, the [`LimitHit`] a limit of this host raised or
//! recorded, and why the store's epoch callback stopped the guest. The one
//! exception is wasmtime's hostcall-fuel error, which has no public type
//! (see [`HOSTCALL_FUEL_EXHAUSTED`]). It is a
//! pure function of what the store saw, so each case is tested without a
//! guest. This module decides nothing and enforces nothing; the store
//! module records what it classifies.

use crate::sandbox::limits::{LimitHit, MAX_RESOURCES};
use crate::sandbox::output::CapturedOutput;
use toolhost_core::ErrorCode;
use wasmtime::Trap;
use wasmtime::component::ResourceTableError;

/// What wasmtime says when a guest hands the host more data in one transfer
/// (a function's result, the arguments of one host call) than the store's
/// hostcall fuel allows. The error's type is private to wasmtime, so it is
/// recognised by this text; a conformance test (`runtime_output_flood`)
/// makes a real guest hit it, so a change of wording fails there.
pub(crate) const HOSTCALL_FUEL_EXHAUSTED: &str = "fuel allocated for hostcalls has been exhausted";

/// What the store saw while a body ran, as far as classifying needs it.
pub(crate) struct Seen<'a> {
    /// Most bytes the guest may hand the host in one transfer (the store's
    /// hostcall fuel).
    pub transfer_cap: usize,
    /// The call's output cap (`Limits::max_output`).
    pub max_output: usize,
    /// Set when the epoch callback stopped the guest (deadline or cancel).
    pub stopped_by: Option<ErrorCode>,
    /// The growth limit the resource limiter refused, if any.
    pub limit_hit: Option<LimitHit>,
    /// The guest's captured stderr (its tail goes into a trap's message).
    pub stderr: &'a CapturedOutput,
}

/// Maps how a body failed to a stable code and a message.
///
/// In order: a stop by the epoch callback (the trap it causes is only its
/// symptom); fuel exhaustion; a limit of this host, raised as a
/// [`LimitHit`] error or recorded by the limiter; a transfer to the host
/// above [`Seen::transfer_cap`] (`OUTPUT_TOO_LARGE`); anything else is `TRAP`,
/// with the trap's code (or the error) and the tail of stderr.
pub(crate) fn classify(err: &wasmtime::Error, seen: &Seen<'_>) -> (ErrorCode, String) {
    if let Some(code) = seen.stopped_by {
        return (code, stop_message(code));
    }
    let trap = err.downcast_ref::<Trap>().copied();
    if trap == Some(Trap::OutOfFuel) {
        return (
            ErrorCode::OutOfFuel,
            "the call used up its fuel budget".into(),
        );
    }
    if let Some(hit) = err.downcast_ref::<LimitHit>().copied().or(seen.limit_hit) {
        return (ErrorCode::MemoryLimit, hit.to_string());
    }
    if err.chain().any(|e| {
        matches!(
            e.downcast_ref::<ResourceTableError>(),
            Some(ResourceTableError::Full)
        )
    }) {
        return (
            ErrorCode::MemoryLimit,
            format!(
                "the call held more than {MAX_RESOURCES} host resources at once (open files, \
                 sockets, streams, HTTP requests and fields)"
            ),
        );
    }
    if err
        .chain()
        .any(|e| e.to_string().contains(HOSTCALL_FUEL_EXHAUSTED))
    {
        return (
            ErrorCode::OutputTooLarge,
            format!(
                "the tool handed the host more than {} bytes at once (its result, whose limit \
                 is {} bytes, or the arguments of one host call); the host refused it without \
                 reading it whole",
                seen.transfer_cap, seen.max_output
            ),
        );
    }
    let (stderr, _) = seen.stderr.snapshot();
    let tail = stderr
        .lines()
        .rev()
        .take(5)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    let what = match trap {
        Some(t) => t.to_string(),
        None => format!("{err:#}"),
    };
    let message = if tail.is_empty() {
        format!("the tool trapped: {what}")
    } else {
        format!("the tool trapped: {what}\n{tail}")
    };
    (ErrorCode::Trap, message)
}

/// The message of a call stopped from outside (`TIMEOUT` or `CANCELLED`).
pub(crate) fn stop_message(code: ErrorCode) -> String {
    match code {
        ErrorCode::Cancelled => "the call was cancelled; the tool was stopped".into(),
        _ => "the call ran past its deadline and was stopped".into(),
    }
}

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;
