//! The integration tests of the `toolhost` crate, in one binary (wasmtime is
//! linked once): the governed pipeline through the library, durability
//! through the library and the binary, the CLI, `toolhost conformance`, the
//! MCP server with our own and the official SDKs' clients, and tools built by
//! other languages' toolchains (Python).
//!
//! Run one area with a module filter, e.g.
//! `cargo test -p toolhost --test host governance::`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on a set-up error"
)]

mod support;

mod cli_new;
mod cli_precompile;
mod cli_run;
mod cli_serve;
mod conformance_cmd;
mod durability;
mod governance;
mod layout;
mod mcp_http;
mod mcp_protocol;
mod mcp_python;
mod mcp_typescript;
mod network;
mod provider_schemas;
mod toolchains;
