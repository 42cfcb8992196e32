//! The conformance suite's probe paths. See `tests/conformance/` for the
//! tests and CONFORMANCE.md for the promises they check.

include!(concat!(env!("OUT_DIR"), "/probes.rs"));
