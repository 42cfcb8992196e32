//! `toolhost new NAME --lang rust|python|js [DIR]`: a tool project, ready
//! to build outside any checkout: one tool named NAME with an input schema
//! that carries an example, its unit test in the language's own runner,
//! the WIT contract, and a README with the commands (build, test, `run`,
//! `conformance`, serving). Its SDK comes from a toolhost checkout
//! ([`sdk`]).

mod sdk;
mod templates;

use crate::args::{Lang, NewArgs};
use anyhow::{Context, Result, bail};
use sdk::Sdk;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use templates::File;

/// Creates the project and prints what to run next.
pub(crate) fn new(a: NewArgs) -> Result<ExitCode> {
    check_rust_name(a.lang, &a.name)?;
    let dir = a.dir.clone().unwrap_or_else(|| PathBuf::from(&a.name));
    let existed = check_empty(&dir)?;
    let sdk = Sdk::resolve(a.sdk.as_deref(), a.lang)?;
    let files = templates::render(a.lang, &vars(a.lang, &a.name, &sdk)?)?;
    write_project(&dir, &files, existed)?;
    outln!(
        "created {} ({} tool `{}`, its SDK from {})",
        dir.display(),
        a.lang.label(),
        a.name,
        sdk.note()
    );
    outln!("next, in {} (its README.md):", dir.display());
    for command in readme_commands(&files) {
        outln!("  {command}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The lines of the first `sh` block of the project's README: its
/// commands.
fn readme_commands(files: &[File]) -> Vec<&str> {
    let readme = files.iter().find(|f| f.path == "README.md");
    readme
        .map(|f| f.text.lines())
        .into_iter()
        .flatten()
        .skip_while(|l| *l != "```sh")
        .skip(1)
        .take_while(|l| *l != "```")
        .collect()
}

/// The values of the templates' placeholders.
pub(crate) fn vars(lang: Lang, name: &str, sdk: &Sdk) -> Result<Vec<(&'static str, String)>> {
    let mut vars = vec![("name", name.to_string()), ("sdk_note", sdk.note())];
    match lang {
        Lang::Rust => {
            vars.push(("crate", crate_name(name)));
            vars.push(("type_name", type_name(name)));
            vars.push(("rust_channel", rust_channel()?.to_string()));
            vars.push(("sdk_dependency", sdk.cargo_dependency()));
        }
        Lang::Python => vars.push(("sdk_requirement", sdk.pip_requirement())),
        Lang::Js => {
            vars.push(("npm_name", name.to_ascii_lowercase()));
            vars.push(("sdk_spec", sdk.npm_spec()?));
        }
    }
    Ok(vars)
}

/// Crate names Cargo refuses for a new package: the built-in crates.
const BUILT_IN_CRATES: [&str; 5] = ["alloc", "core", "proc_macro", "std", "test"];

/// Refuses a tool name that cannot name a Rust crate.
fn check_rust_name(lang: Lang, name: &str) -> Result<()> {
    if lang == Lang::Rust && BUILT_IN_CRATES.contains(&crate_name(name).as_str()) {
        bail!("{name:?} names a built-in Rust crate; pick another tool name");
    }
    Ok(())
}

/// The library crate's name (and the `.wasm`'s): `-` becomes `_`.
fn crate_name(name: &str) -> String {
    name.replace('-', "_")
}

/// Names the Rust template uses besides the tool's type.
const TAKEN_TYPE_NAMES: [&str; 19] = [
    "Args",
    "Output",
    "Content",
    "SandboxMode",
    "SideEffect",
    "Tool",
    "ToolError",
    "JsonSchema",
    "Deserialize",
    "Serialize",
    "String",
    "Vec",
    "Option",
    "Result",
    "Some",
    "None",
    "Ok",
    "Err",
    "Self",
];

/// The tool's Rust type: the name in CamelCase (`word_freq`: `WordFreq`),
/// with `Tool` appended where that is a name the template already uses.
fn type_name(name: &str) -> String {
    let mut camel: String = name
        .split(['_', '-'])
        .flat_map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase())
                .into_iter()
                .chain(chars)
        })
        .collect();
    if TAKEN_TYPE_NAMES.contains(&camel.as_str()) {
        camel.push_str("Tool");
    }
    camel
}

/// The toolchain channel of the repository's `rust-toolchain.toml`, which
/// a Rust project pins too.
fn rust_channel() -> Result<&'static str> {
    include_str!("../../../../rust-toolchain.toml")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("channel"))
        .filter_map(|l| l.trim().strip_prefix('='))
        .map(|v| v.trim().trim_matches('"'))
        .next()
        .context("rust-toolchain.toml names no channel")
}

/// Refuses a `dir` that exists and is not an empty directory; says whether
/// it exists.
fn check_empty(dir: &Path) -> Result<bool> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!(
                    "{} exists and is not empty; name a new or empty directory",
                    dir.display()
                );
            }
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => bail!(
            "{}: {e} (a new or empty directory is needed)",
            dir.display()
        ),
    }
}

/// Writes `files` into `dir`, creating it unless it `existed`. On a
/// failure, what was created is removed again.
fn write_project(dir: &Path, files: &[File], existed: bool) -> Result<()> {
    let written = write_files(dir, files);
    if written.is_err() {
        remove_files(dir, files);
        if !existed {
            let _ = std::fs::remove_dir(dir);
        }
    }
    written
}

/// Removes `files` from `dir`, and the directories they made there once
/// empty.
fn remove_files(dir: &Path, files: &[File]) {
    for f in files {
        let _ = std::fs::remove_file(dir.join(&f.path));
    }
    let mut subdirs: Vec<&Path> = files
        .iter()
        .filter_map(|f| Path::new(&f.path).parent())
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    subdirs.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    subdirs.dedup();
    for sub in subdirs {
        let _ = std::fs::remove_dir(dir.join(sub));
    }
}

/// Writes each file, never over an existing one.
fn write_files(dir: &Path, files: &[File]) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for f in files {
        let path = dir.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if f.executable { 0o755 } else { 0o644 })
            .open(&path)
            .and_then(|mut file| file.write_all(f.text.as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_are_camel_case_and_avoid_the_templates_names() {
        assert_eq!(type_name("word_freq"), "WordFreq");
        assert_eq!(type_name("http-get2"), "HttpGet2");
        assert_eq!(type_name("a__b"), "AB");
        assert_eq!(type_name("args"), "ArgsTool");
        assert_eq!(type_name("self"), "SelfTool");
    }

    #[test]
    fn each_readme_gives_build_test_run_and_conformance() {
        let sdk = Sdk::Checkout("/c".into());
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            let files = vars(lang, "t", &sdk).and_then(|v| templates::render(lang, &v));
            let files = files.unwrap_or_default();
            let commands = readme_commands(&files);
            assert_eq!(commands.len(), 4, "{lang:?}: {commands:?}");
            assert!(commands[2].starts_with("toolhost run "), "{commands:?}");
            assert!(
                commands[3].starts_with("toolhost conformance "),
                "{commands:?}"
            );
        }
    }

    #[test]
    fn the_rust_channel_is_the_repositorys() {
        assert!(rust_channel().is_ok_and(|c| c.starts_with("1.")));
    }

    #[test]
    fn built_in_crate_names_are_refused_for_rust_only() {
        assert!(check_rust_name(Lang::Rust, "core").is_err());
        assert!(check_rust_name(Lang::Rust, "proc-macro").is_err());
        assert!(check_rust_name(Lang::Python, "core").is_ok());
    }
}
