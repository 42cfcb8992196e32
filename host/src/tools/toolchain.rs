//! Which toolchain made a component, read from its own metadata: the
//! `producers` custom sections (of the component and of the core modules
//! inside it) and, for componentize-py, whose sections name only the tools
//! it runs, the names of its runtime library in the modules' imports. Used
//! to phrase advice in the language the author writes: how that language's
//! helper declares examples, which guide to read.

use wasmparser::{KnownCustom, Parser, Payload};

/// The toolchains the host knows how to advise about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toolchain {
    /// Rust with wit-bindgen (the guest SDK, `toolhost-guest`).
    Rust,
    /// Python with componentize-py (the helper `toolhost_guest.py`).
    Python,
    /// JavaScript with componentize-js / jco (StarlingMonkey; the helper
    /// `toolhost_guest.js`).
    JavaScript,
    /// Anything else, or a component that does not say.
    Unknown,
}

/// What the component's metadata says about how it was made.
#[derive(Debug, Default)]
struct Marks {
    languages: Vec<String>,
    processed_by: Vec<String>,
    componentize_py: bool,
}

impl Toolchain {
    /// The toolchain that made the component `bytes`.
    pub fn of(bytes: &[u8]) -> Toolchain {
        let marks = marks(bytes);
        let processed = |name: &str| {
            marks
                .processed_by
                .iter()
                .any(|p| p.eq_ignore_ascii_case(name))
        };
        let language = |name: &str| marks.languages.iter().any(|l| l == name);
        if marks.componentize_py || processed("componentize-py") {
            Toolchain::Python
        } else if processed("ComponentizeJS") || processed("jco") || language("JavaScript") {
            Toolchain::JavaScript
        } else if language("Rust") {
            Toolchain::Rust
        } else {
            Toolchain::Unknown
        }
    }

    /// What it is called in a report.
    pub fn name(self) -> &'static str {
        match self {
            Toolchain::Rust => "Rust (wit-bindgen)",
            Toolchain::Python => "Python (componentize-py)",
            Toolchain::JavaScript => "JavaScript (componentize-js)",
            Toolchain::Unknown => "an unknown toolchain",
        }
    }

    /// The guide to writing a tool with it (a path in the repository's
    /// documentation), or the list of guides.
    pub fn guide(self) -> &'static str {
        match self {
            Toolchain::Rust => "docs/guides/tool-rust.md",
            Toolchain::Python => "docs/guides/tool-python.md",
            Toolchain::JavaScript => "docs/guides/tool-javascript.md",
            Toolchain::Unknown => "docs/guides/tool-rust.md, tool-python.md or tool-javascript.md",
        }
    }

    /// How a tool made with it declares the examples that `toolhost
    /// conformance` runs.
    pub fn examples_hint(self) -> &'static str {
        match self {
            Toolchain::Rust => {
                "with the guest SDK, put `#[schemars(example = serde_json::json!({ ... }))]` on the tool's `Args` struct, once per example"
            }
            Toolchain::Python => {
                "with the helper, pass them to the decorator: `@tool(examples=[{ ... }])` (each is checked against the argument type when the module loads)"
            }
            Toolchain::JavaScript => {
                "with the helper, add them to the definition: `tool({ ..., examples: [{ ... }] })`"
            }
            Toolchain::Unknown => {
                "add an `examples` array of argument objects to the tool's input schema"
            }
        }
    }
}

/// The marks of every module and component in `bytes`; what does not
/// parse is left out (the component is checked elsewhere).
fn marks(bytes: &[u8]) -> Marks {
    let mut marks = Marks::default();
    for payload in Parser::new(0).parse_all(bytes) {
        let Ok(payload) = payload else {
            break;
        };
        match payload {
            Payload::CustomSection(section) => {
                if let KnownCustom::Producers(reader) = section.as_known() {
                    read_producers(reader, &mut marks);
                }
            }
            Payload::ImportSection(reader) => {
                marks.componentize_py |= reader.into_imports().flatten().any(|import| {
                    import.module.contains("componentize_py")
                        || import.name.contains("componentize_py")
                });
            }
            _ => {}
        }
    }
    marks
}

/// Adds the languages and tools a `producers` section names.
fn read_producers(reader: wasmparser::ProducersSectionReader<'_>, marks: &mut Marks) {
    for field in reader.into_iter().flatten() {
        let list = match field.name {
            "language" => &mut marks.languages,
            "processed-by" | "sdk" => &mut marks.processed_by,
            _ => continue,
        };
        for value in field.values.into_iter().flatten() {
            if !list.iter().any(|v| v == value.name) {
                list.push(value.name.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A core module with one producers section (hand-encoded: a custom
    /// section named `producers` with one field of one value).
    fn with_producers(field: &str, name: &str) -> Vec<u8> {
        let mut payload = Vec::new();
        let string = |s: &str, out: &mut Vec<u8>| {
            out.push(s.len() as u8);
            out.extend_from_slice(s.as_bytes());
        };
        string("producers", &mut payload);
        payload.push(1);
        string(field, &mut payload);
        payload.push(1);
        string(name, &mut payload);
        string("1.0", &mut payload);
        let mut module = b"\0asm\x01\0\0\0".to_vec();
        module.push(0);
        module.push(payload.len() as u8);
        module.extend(payload);
        module
    }

    #[test]
    fn producers_name_the_toolchain() {
        assert_eq!(
            Toolchain::of(&with_producers("language", "Rust")),
            Toolchain::Rust
        );
        assert_eq!(
            Toolchain::of(&with_producers("processed-by", "ComponentizeJS")),
            Toolchain::JavaScript
        );
        assert_eq!(
            Toolchain::of(&with_producers("processed-by", "componentize-py")),
            Toolchain::Python
        );
        assert_eq!(
            Toolchain::of(&with_producers("language", "Go")),
            Toolchain::Unknown
        );
        assert_eq!(Toolchain::of(b"not wasm"), Toolchain::Unknown);
    }
}
