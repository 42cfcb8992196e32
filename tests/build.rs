//! Builds every probe in `probes/src/bin/` for wasm32-wasip2 and generates
//! `probes.rs`: a path constant per probe and a `foreach_<suite>!` macro per
//! suite, so the test binary fails to build when a probe has no test. Also
//! builds the `toolhost exec` test programs of `programs/src/bin/` for
//! wasm32-wasip1 and wasm32-wasip2 (modules `p1` and `p2` of path
//! constants).

use std::collections::BTreeMap;
use std::fmt::Write as _;

fn main() {
    let built = toolhost_build_support::build(
        &["toolhost-probes"],
        "wasm-probes",
        &["tests/probes", "guest-sdk", "wit"],
    );
    let mut src = String::new();
    let mut suites: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for b in &built {
        let upper = b.name.to_uppercase();
        let _ = writeln!(
            src,
            "pub const {upper}: &str = {:?};",
            b.path.display().to_string()
        );
        if let Some((suite, _)) = b.name.split_once('_') {
            suites
                .entry(suite.to_string())
                .or_default()
                .push(b.name.clone());
        }
    }
    for (suite, names) in &suites {
        let _ = writeln!(
            src,
            "#[macro_export]\nmacro_rules! foreach_{suite} {{\n    ($mac:ident) => {{"
        );
        for n in names {
            let _ = writeln!(src, "        $mac!({n});");
        }
        let _ = writeln!(src, "    }};\n}}");
    }
    // The `toolhost exec` test programs, as preview 1 core modules and as
    // command components: `p1::NAME` and `p2::NAME`.
    for (target, module) in [
        (toolhost_build_support::TARGET_P1, "p1"),
        (toolhost_build_support::TARGET, "p2"),
    ] {
        let built = toolhost_build_support::build_for(
            target,
            &["toolhost-test-programs"],
            "wasm-programs",
            &["tests/programs"],
        );
        let _ = writeln!(
            src,
            "/// The test programs built for {target}.\npub mod {module} {{"
        );
        for b in &built {
            let _ = writeln!(
                src,
                "    pub const {}: &str = {:?};",
                b.name.to_uppercase(),
                b.path.display().to_string()
            );
        }
        let _ = writeln!(src, "}}");
    }
    let out =
        std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("probes.rs");
    if let Err(e) = std::fs::write(&out, src) {
        println!("cargo::error=cannot write {}: {e}", out.display());
        std::process::exit(1);
    }
}
