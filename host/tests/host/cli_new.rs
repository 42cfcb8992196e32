//! `toolhost new` and `toolhost wit`: what they write, and the arguments
//! they refuse (exit 2, nothing written). Building the projects they make is
//! `scripts/first-hour`'s (CI runs it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn toolhost(args: &[&str]) -> Output {
    Command::new(crate::support::bin())
        .args(args)
        .output()
        .unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The checkout this test (and the binary) was built from.
fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The files under `dir`, relative, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                pending.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap();
                names.push(rel.to_str().unwrap().to_string());
            }
        }
    }
    names.sort();
    names
}

/// Asserts exit 2 with `says` on stderr, nothing on stdout.
fn assert_refused(out: &Output, says: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(says), "{err}");
    assert!(out.stdout.is_empty(), "{out:?}");
}

#[test]
fn wit_writes_the_repositorys_wit_files() {
    let tmp = crate::support::tempdir();
    let dir = tmp.path().join("a/b/wit");
    let out = toolhost(&["wit", path(&dir)]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let repo_wit = checkout().join("wit");
    assert_eq!(listing(&dir), listing(&repo_wit));
    for name in listing(&repo_wit) {
        assert_eq!(
            std::fs::read(dir.join(&name)).unwrap(),
            std::fs::read(repo_wit.join(&name)).unwrap(),
            "{name}"
        );
    }
    // Again over an older copy: replaced, other files left alone.
    std::fs::write(dir.join("tool.wit"), "old").unwrap();
    std::fs::write(dir.join("mine.wit"), "mine").unwrap();
    assert_eq!(toolhost(&["wit", path(&dir)]).status.code(), Some(0));
    assert_eq!(
        std::fs::read(dir.join("tool.wit")).unwrap(),
        std::fs::read(repo_wit.join("tool.wit")).unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("mine.wit")).unwrap(),
        "mine"
    );
}

#[test]
fn wit_refuses_a_file_for_a_directory() {
    let tmp = crate::support::tempdir();
    let file = tmp.path().join("f");
    std::fs::write(&file, "x").unwrap();
    assert_refused(&toolhost(&["wit", path(&file)]), "cannot create");
}

#[test]
fn new_refuses_a_bad_name_a_bad_language_and_a_non_checkout() {
    let tmp = crate::support::tempdir();
    let dir = tmp.path().join("p");
    let d = path(&dir);
    for bad in ["9lives", "has space", "dot.ted", "", &"x".repeat(65)] {
        let out = toolhost(&["new", bad, "--lang", "rust", d]);
        assert_refused(&out, "a tool name is 1-64 characters");
    }
    assert_refused(
        &toolhost(&["new", "ok", "--lang", "go", d]),
        "invalid value 'go' for '--lang <LANG>'",
    );
    assert_refused(&toolhost(&["new", "ok", d]), "--lang");
    assert_refused(
        &toolhost(&["new", "core", "--lang", "rust", d]),
        "names a built-in Rust crate",
    );
    let not_a_checkout = path(tmp.path());
    for lang in ["rust", "python", "js"] {
        let out = toolhost(&["new", "ok", "--lang", lang, d, "--sdk", not_a_checkout]);
        assert_refused(&out, "not a toolhost checkout");
    }
    assert!(!dir.exists());
}

#[test]
fn new_refuses_a_directory_that_is_not_empty() {
    let tmp = crate::support::tempdir();
    std::fs::write(tmp.path().join("keep.txt"), "mine").unwrap();
    let out = toolhost(&["new", "word_freq", "--lang", "python", path(tmp.path())]);
    assert_refused(&out, "exists and is not empty");
    assert_eq!(listing(tmp.path()), ["keep.txt"]);
    let file = tmp.path().join("keep.txt");
    let out = toolhost(&["new", "word_freq", "--lang", "js", path(&file)]);
    assert_refused(&out, "a new or empty directory is needed");
}

/// The files `new` writes for `lang`, besides `wit/`.
fn expected_files(lang: &str) -> Vec<&'static str> {
    match lang {
        "rust" => vec![
            ".gitignore",
            "Cargo.toml",
            "README.md",
            "rust-toolchain.toml",
            "src/lib.rs",
        ],
        "python" => vec![
            ".gitignore",
            "README.md",
            "build.sh",
            "requirements.txt",
            "src/app.py",
            "tests/test_app.py",
        ],
        _ => vec![
            ".gitignore",
            ".npmrc",
            "README.md",
            "package.json",
            "src/tool.js",
            "test/tool.test.js",
        ],
    }
}

/// The line of the project that names the SDK in `checkout`.
fn sdk_line(lang: &str, checkout: &Path) -> (&'static str, String) {
    let c = checkout.display();
    match lang {
        "rust" => (
            "Cargo.toml",
            format!("toolhost-guest = {{ path = \"{c}/guest-sdk\" }}"),
        ),
        "python" => (
            "requirements.txt",
            format!("toolhost-guest @ file://{c}/sdk/python"),
        ),
        _ => (
            "package.json",
            format!("\"toolhost-guest\": \"file:{c}/sdk/js\""),
        ),
    }
}

#[test]
fn new_writes_a_project_with_the_sdk_of_its_checkout() {
    for lang in ["rust", "python", "js"] {
        let tmp = crate::support::tempdir();
        // An existing empty directory will do.
        let dir = tmp.path().join(lang);
        std::fs::create_dir(&dir).unwrap();
        let out = toolhost(&["new", "word-freq", "--lang", lang, path(&dir)]);
        assert_eq!(out.status.code(), Some(0), "{lang}: {out:?}");
        let mut expected: Vec<String> =
            expected_files(lang).iter().map(|s| s.to_string()).collect();
        expected.extend(
            listing(&checkout().join("wit"))
                .iter()
                .map(|f| format!("wit/{f}")),
        );
        expected.sort();
        assert_eq!(listing(&dir), expected, "{lang}");
        let (file, line) = sdk_line(lang, &checkout());
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(text.contains(&line), "{lang}: {line} not in {text}");
        let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
        assert!(readme.contains("toolhost conformance "), "{readme}");
        let source = expected_files(lang)
            .into_iter()
            .find(|f| f.starts_with("src/"))
            .unwrap();
        let source = std::fs::read_to_string(dir.join(source)).unwrap();
        assert!(source.contains("\"word-freq\""), "{source}");
        assert!(source.contains("one two three"), "the example: {source}");
    }
}

#[test]
fn an_explicit_sdk_is_written_as_given() {
    let tmp = crate::support::tempdir();
    let dir = tmp.path().join("p");
    let out = toolhost(&[
        "new",
        "t",
        "--lang",
        "python",
        path(&dir),
        "--sdk",
        path(&checkout()),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let build = dir.join("build.sh");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&build).unwrap().permissions().mode();
    assert_eq!(mode & 0o111, 0o111, "build.sh is executable: {mode:o}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("./build.sh"), "{stdout}");
}
