//! The files of a new project, per language: templates embedded from
//! `host/templates/`, whose `{{key}}` placeholders take the project's
//! values, plus the WIT contract.

use crate::args::Lang;
use anyhow::{Result, anyhow, bail};

/// One file of a new project.
#[derive(Debug)]
pub(crate) struct File {
    /// Its path inside the project.
    pub(crate) path: String,
    /// Its contents.
    pub(crate) text: String,
    /// Whether it is a script to run (mode 0755).
    pub(crate) executable: bool,
}

/// A template: the path it is written to, its text, whether it is a script.
type Template = (&'static str, &'static str, bool);

const RUST: &[Template] = &[
    (
        "Cargo.toml",
        include_str!("../../../../templates/rust/Cargo.toml"),
        false,
    ),
    (
        "rust-toolchain.toml",
        include_str!("../../../../templates/rust/rust-toolchain.toml"),
        false,
    ),
    (
        "src/lib.rs",
        include_str!("../../../../templates/rust/lib.rs"),
        false,
    ),
    (
        "README.md",
        include_str!("../../../../templates/rust/README.md"),
        false,
    ),
    (
        ".gitignore",
        include_str!("../../../../templates/rust/gitignore"),
        false,
    ),
];

const PYTHON: &[Template] = &[
    (
        "src/app.py",
        include_str!("../../../../templates/python/app.py"),
        false,
    ),
    (
        "tests/test_app.py",
        include_str!("../../../../templates/python/test_app.py"),
        false,
    ),
    (
        "requirements.txt",
        include_str!("../../../../templates/python/requirements.txt"),
        false,
    ),
    (
        "build.sh",
        include_str!("../../../../templates/python/build.sh"),
        true,
    ),
    (
        "README.md",
        include_str!("../../../../templates/python/README.md"),
        false,
    ),
    (
        ".gitignore",
        include_str!("../../../../templates/python/gitignore"),
        false,
    ),
];

const JS: &[Template] = &[
    (
        "package.json",
        include_str!("../../../../templates/js/package.json"),
        false,
    ),
    (
        "src/tool.js",
        include_str!("../../../../templates/js/tool.js"),
        false,
    ),
    (
        "test/tool.test.js",
        include_str!("../../../../templates/js/tool.test.js"),
        false,
    ),
    (
        "README.md",
        include_str!("../../../../templates/js/README.md"),
        false,
    ),
    (
        ".npmrc",
        include_str!("../../../../templates/js/npmrc"),
        false,
    ),
    (
        ".gitignore",
        include_str!("../../../../templates/js/gitignore"),
        false,
    ),
];

/// The templates of `lang`.
fn templates(lang: Lang) -> &'static [Template] {
    match lang {
        Lang::Rust => RUST,
        Lang::Python => PYTHON,
        Lang::Js => JS,
    }
}

/// The project's files: `lang`'s templates filled with `vars`, and the WIT
/// contract under `wit/`.
pub(crate) fn render(lang: Lang, vars: &[(&str, String)]) -> Result<Vec<File>> {
    let mut files = Vec::new();
    for &(path, template, executable) in templates(lang) {
        let text = fill(template, vars).map_err(|e| anyhow!("template {path}: {e}"))?;
        files.push(File {
            path: path.to_string(),
            text,
            executable,
        });
    }
    for &(name, text) in crate::wit::WIT_FILES {
        files.push(File {
            path: format!("wit/{name}"),
            text: text.to_string(),
            executable: false,
        });
    }
    Ok(files)
}

/// `template` with each `{{key}}` replaced by its value in `vars`. A key
/// without a value is an error; values are not scanned again.
pub(crate) fn fill(template: &str, vars: &[(&str, String)]) -> Result<String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            bail!("an unclosed {{{{");
        };
        let key = &after[..end];
        let value = vars
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
            .ok_or_else(|| anyhow!("no value for {{{{{key}}}}}"))?;
        out.push_str(value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_each_key_once_and_refuses_unknown_ones() {
        let vars = [("a", "{{b}}".to_string()), ("b", "x".to_string())];
        assert_eq!(
            fill("[{{a}}|{{b}}]", &vars).ok().as_deref(),
            Some("[{{b}}|x]")
        );
        assert!(fill("{{c}}", &vars).is_err());
        assert!(fill("{{a", &vars).is_err());
    }

    /// Every placeholder of every template has a value in what `new`
    /// passes.
    #[test]
    fn every_template_fills() {
        let sdk = crate::new::sdk::Sdk::Checkout("/c".into());
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            let files = crate::new::vars(lang, "word-freq", &sdk).and_then(|v| render(lang, &v));
            assert!(files.is_ok(), "{lang:?}: {files:?}");
        }
    }
}
