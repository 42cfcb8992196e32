//! Builds the example tools in `tools/` for wasm32-wasip2 and embeds them, so
//! that `toolhost run read_file ...` works without a tools directory.

use std::fmt::Write as _;

const TOOLS: &[&str] = &["tool-read_file", "tool-write_file", "tool-list_dir", "tool-grep", "tool-sleep"];

fn main() {
    let built = toolhost_build_support::build(TOOLS, "wasm-tools", &["tools", "guest-sdk", "wit"]);
    let mut src = String::from("/// The example tools, embedded at build time: (name, component bytes).\npub static EMBEDDED_TOOLS: &[(&str, &[u8])] = &[\n");
    for b in built.iter().filter(|b| b.name.starts_with("tool_")) {
        let name = b.name.trim_start_matches("tool_");
        let _ = writeln!(src, "    ({name:?}, include_bytes!({:?})),", b.path.display().to_string());
    }
    src.push_str("];\n");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("embedded_tools.rs");
    if let Err(e) = std::fs::write(&out, src) {
        println!("cargo::error=cannot write {}: {e}", out.display());
        std::process::exit(1);
    }
}
