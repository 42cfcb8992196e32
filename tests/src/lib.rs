//! The conformance suite's probe paths, and the paths of the `toolhost
//! exec` test programs (`p1::NAME`, `p2::NAME`). See `tests/conformance/`
//! for the tests and CONFORMANCE.md for the promises they check.

include!(concat!(env!("OUT_DIR"), "/probes.rs"));
