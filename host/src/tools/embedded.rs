//! The example tools of `tools/`, built for wasm32-wasip2 by `build.rs` and
//! embedded so that `toolhost run read_file ...` needs no tools directory.

include!(concat!(env!("OUT_DIR"), "/embedded_tools.rs"));
