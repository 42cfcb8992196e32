//! Shared helpers of the guest probes. Each probe is one file in
//! `src/bin/<suite>_<case>.rs`: an ordinary Rust program that exports one or
//! more toolhost tools (its `main` is never called by the host).
