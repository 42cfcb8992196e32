//! Ordinary WASI command programs for the `toolhost exec` tests: each is a
//! plain `main` that uses WASI as any program would (std first), built as a
//! preview 1 core module (`wasm32-wasip1`) and as a command component
//! (`wasm32-wasip2`) by the conformance suite's build script. Nothing here
//! knows about toolhost.
