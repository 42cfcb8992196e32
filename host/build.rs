//! Builds the example tools in `tools/` for wasm32-wasip2 and embeds them, so
//! that `toolhost run read_file ...` works without a tools directory.

use std::fmt::Write as _;

const TOOLS: &[&str] = &[
    "tool-read_file",
    "tool-write_file",
    "tool-list_dir",
    "tool-grep",
    "tool-sleep",
    "tool-http_fetch",
];
/// Built with the tools but not embedded: the benchmarks load it by path.
const BENCH_GUEST: &str = "toolhost-bench-guest";
/// Built with the tools but not embedded: the tools the MCP conformance
/// suite calls, loaded by path in tests.
const MCP_FIXTURES: &str = "toolhost-mcp-fixtures";

fn main() {
    let mut packages = TOOLS.to_vec();
    packages.push(BENCH_GUEST);
    packages.push(MCP_FIXTURES);
    let built = toolhost_build_support::build_shipped(
        &packages,
        "wasm-tools",
        &[
            "tools",
            "guest-sdk",
            "wit",
            "benches/cpu-guest",
            "tests/mcp-fixtures",
        ],
    );
    let mut src = String::from(
        "/// The example tools, embedded at build time: (name, component bytes).\npub static EMBEDDED_TOOLS: &[(&str, &[u8])] = &[\n",
    );
    for b in built.iter().filter(|b| b.name.starts_with("tool_")) {
        let name = b.name.trim_start_matches("tool_");
        let _ = writeln!(
            src,
            "    ({name:?}, include_bytes!({:?})),",
            b.path.display().to_string()
        );
    }
    src.push_str("];\n");
    // Paths for this package's tests and benchmarks only, not the library:
    // `env!("TOOLHOST_BENCH_GUEST")`, `env!("TOOLHOST_MCP_FIXTURES")`.
    for (name, var) in [
        ("toolhost_bench_guest", "TOOLHOST_BENCH_GUEST"),
        ("toolhost_mcp_fixtures", "TOOLHOST_MCP_FIXTURES"),
    ] {
        if let Some(b) = built.iter().find(|b| b.name == name) {
            println!("cargo::rustc-env={var}={}", b.path.display());
        }
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default())
        .join("embedded_tools.rs");
    if let Err(e) = std::fs::write(&out, src) {
        println!("cargo::error=cannot write {}: {e}", out.display());
        std::process::exit(1);
    }
}
