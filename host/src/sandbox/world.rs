//! What a component of the wrong world is told: wasmtime's reason, what the
//! component exports instead (and what such a component is), where the
//! contract is (`toolhost wit DIR`, the WIT reference) and the guide of the
//! language that made it.

use crate::tools::toolchain::Toolchain;
use wasmtime::Engine;
use wasmtime::component::Component;

/// The interface a tool component exports.
const TOOL_EXPORT: &str = "toolhost:tool/tool";

/// `detail` (why the component does not fit the `toolhost:tool` world)
/// followed by what it exports and where to go from there.
pub(crate) fn wrong_world_detail(
    detail: &str,
    component: &Component,
    engine: &Engine,
    bytes: &[u8],
) -> String {
    let exports: Vec<String> = component
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let toolchain = Toolchain::of(bytes);
    let made_by = match toolchain {
        Toolchain::Unknown => String::new(),
        known => format!(" It was made with {}.", known.name()),
    };
    format!(
        "{detail}. {}{made_by} A tool exports {TOOL_EXPORT} of the WIT package toolhost:tool@0.1: \
         `toolhost wit DIR` writes that WIT into DIR to build against (docs/reference/wit.md), \
         and {} shows a whole tool",
        what_it_exports(&exports),
        toolchain.guide()
    )
}

/// "It exports ...", with what a component exporting that is.
fn what_it_exports(exports: &[String]) -> String {
    if exports.is_empty() {
        return "It exports nothing.".into();
    }
    let has = |prefix: &str| exports.iter().any(|e| e.starts_with(prefix));
    let kind = if has(TOOL_EXPORT) {
        " (a version of toolhost:tool this host does not load)"
    } else if has("wasi:cli/run") {
        " (a WASI command program: run it with `toolhost exec`, or serve it as a tool with a \
         manifest, docs/guides/programs-as-tools.md)"
    } else if has("wasi:http/incoming-handler") {
        " (an HTTP handler, of the wasi:http/proxy world)"
    } else {
        ""
    };
    format!("It exports {}{kind}.", exports.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_are_named_with_what_they_make() {
        assert_eq!(what_it_exports(&[]), "It exports nothing.");
        let command = what_it_exports(&["wasi:cli/run@0.2.3".into()]);
        assert!(
            command.starts_with("It exports wasi:cli/run@0.2.3 (a WASI command program"),
            "{command}"
        );
        let other = what_it_exports(&["toolhost:tool/tool@0.2.0".into()]);
        assert!(other.contains("does not load"), "{other}");
        assert_eq!(
            what_it_exports(&["a:b/c".into(), "d:e/f".into()]),
            "It exports a:b/c, d:e/f."
        );
    }
}
