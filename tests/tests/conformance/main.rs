//! One test binary for the whole conformance suite. Each suite is a module;
//! each probe `<suite>_<case>` in `tests/probes/src/bin/` must have a test
//! function named `<suite>_<case>` in its suite module, or this binary does
//! not build.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on a set-up error"
)]

#[macro_use]
mod common;

mod cache;
mod capability;
mod cli;
mod contract;
mod durability;
mod egress;
mod escape;
mod exec;
mod load;
mod mode;
mod program_tool;
mod python_tool;
mod runtime;
