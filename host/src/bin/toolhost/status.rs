//! `run`'s exit status, a pure function in a file of its own: the host test
//! binary includes this file to test it (`host/tests/host/cli_run.rs`), so
//! that the binary has no unit tests of its own, whose test binary would
//! link wasmtime once more for one assertion.

/// `run`'s exit status: 0 every call ok, 1 an error result, 3 a result
/// that could not be recorded (whatever it says).
pub(crate) fn run_status(flushed: bool, all_ok: bool) -> u8 {
    match (flushed, all_ok) {
        (false, _) => 3,
        (true, true) => 0,
        (true, false) => 1,
    }
}
