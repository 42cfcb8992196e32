//! The shape of the host crate's source, checked: the module graph of
//! `host/src` (each file a node, each `crate::`/`super::`/`self::` path an
//! edge to the file that defines the module it names) has no cycle; no
//! file is over 1,000 lines; no function in `pipeline/` is over 80 lines.
//! Test modules (`#[cfg(test)] mod tests` and `*_tests.rs`) and the binary
//! (`bin/`) are left out: they may reach anywhere. So is `lib.rs`, the
//! table of contents, which names everything. A path is read as text: it
//! leads to the file of the module it names, not through a re-export to
//! the file that defines the item, so a module imports its siblings'
//! items from them, not from its parent's re-exports.
//!
//! `docs/ARCHITECTURE.md` says how to read a failure: a cycle is printed
//! file by file, each with the paths that tie it to the next.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `host/src`.
fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every library source file under `dir`, by module path (`pipeline::call`;
/// a `mod.rs` is its folder's module, `lib.rs` the crate's, `""`).
fn modules(dir: &Path, prefix: &[String], out: &mut BTreeMap<Vec<String>, PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if prefix.is_empty() && name == "bin" {
                continue;
            }
            let mut p = prefix.to_vec();
            p.push(name);
            modules(&path, &p, out);
            continue;
        }
        let Some(stem) = name.strip_suffix(".rs") else {
            continue;
        };
        if stem.ends_with("_tests") || (prefix.is_empty() && stem == "main") {
            continue;
        }
        let mut p = prefix.to_vec();
        if !matches!(stem, "mod" | "lib") {
            p.push(stem.to_string());
        }
        out.insert(p, path);
    }
}

/// A file's text without its test module (from a `#[cfg(...test...)]`
/// followed, past any other attributes, by `mod`: test modules close the
/// files here) and comments.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let mut kept = String::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let test_cfg = t.starts_with("#[cfg(") && t.contains("test");
        if test_cfg {
            let next = lines[i + 1..]
                .iter()
                .map(|l| l.trim_start())
                .find(|l| !l.starts_with("#[") && !l.starts_with("//"));
            if next.is_some_and(|l| l.starts_with("mod ") || l.starts_with("pub(crate) mod ")) {
                break;
            }
        }
        if t.starts_with("//") {
            continue;
        }
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

/// The module paths `code` names, as written (`crate::a::b::C`,
/// `super::x`, `self::y`), resolved against `module`: each the longest
/// prefix that is a module of `known`.
fn references(
    code: &str,
    module: &[String],
    known: &BTreeMap<Vec<String>, PathBuf>,
    facades: &BTreeMap<Vec<String>, Facade>,
) -> BTreeSet<Vec<String>> {
    let mut found = BTreeSet::new();
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        let starts = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|k| bytes[i..].starts_with(k.as_bytes()) && (i == 0 || !ident(bytes[i - 1])));
        let Some(start) = starts else {
            i += 1;
            continue;
        };
        // The path: identifiers joined by `::`; a `{` group is read one
        // level deep (`crate::a::{b, c::D}`).
        let mut j = i + start.len();
        // `super` of a file's module `a::b` (a/b.rs) is `a`, and of a
        // folder's `a` (a/mod.rs) the crate: its path less its last name.
        let mut base: Vec<String> = match start {
            "crate::" => Vec::new(),
            "super::" => module[..module.len().saturating_sub(1)].to_vec(),
            _ => module.to_vec(),
        };
        let read_ident = |j: &mut usize| {
            let s = *j;
            while *j < bytes.len() && ident(bytes[*j]) {
                *j += 1;
            }
            code[s..*j].to_string()
        };
        let mut paths = Vec::new();
        loop {
            let name = read_ident(&mut j);
            if name.is_empty() {
                break;
            }
            base.push(name);
            if code[j..].starts_with("::{") {
                j += 3;
                let group_end = code[j..].find('}').map_or(code.len(), |e| j + e);
                for item in code[j..group_end].split(',') {
                    let mut p = base.clone();
                    p.extend(
                        item.trim()
                            .split("::")
                            .map(|s| s.split_whitespace().next().unwrap_or("").to_string())
                            .filter(|s| !s.is_empty() && s != "self"),
                    );
                    paths.push(p);
                }
                j = group_end;
                break;
            }
            if code[j..].starts_with("::") {
                j += 2;
                continue;
            }
            break;
        }
        paths.push(base);
        for mut p in paths {
            let mut last = None;
            while !p.is_empty() && !known.contains_key(&p) {
                last = p.pop();
            }
            // An item a module re-exports from a child is the child's.
            if let (Some(name), Some(f)) = (last, facades.get(&p)) {
                let child = f.names.get(&name).or_else(|| {
                    let defined = defines(&known[&p], &name);
                    f.globs.first().filter(|_| !defined)
                });
                if let Some(child) = child {
                    p.push(child.clone());
                }
            }
            found.insert(p);
        }
        i = j.max(i + 1);
    }
    found
}

/// A module's re-exports of its children's items (`pub use child::{A, B}`,
/// `pub(crate) use self::child::*`): by name, and the children re-exported
/// whole.
#[derive(Default)]
struct Facade {
    names: BTreeMap<String, String>,
    globs: Vec<String>,
}

/// `code` split into its re-export statements (`pub`, `pub(crate)` or
/// `pub(super)` `use`: the module's table of contents, which is not an
/// import of its own) and the rest.
fn split_facade(code: &str) -> (String, Vec<String>) {
    let (mut rest, mut facade) = (String::new(), Vec::new());
    let mut current: Option<String> = None;
    for line in code.lines() {
        let t = line.trim_start();
        if current.is_none()
            && ["pub use ", "pub(crate) use ", "pub(super) use "]
                .iter()
                .any(|k| t.starts_with(k))
        {
            current = Some(String::new());
        }
        match current.as_mut() {
            Some(stmt) => {
                stmt.push_str(t);
                stmt.push(' ');
                if t.trim_end().ends_with(';') {
                    facade.extend(current.take());
                }
            }
            None => {
                rest.push_str(line);
                rest.push('\n');
            }
        }
    }
    (rest, facade)
}

/// What the re-export statements of `module` say of its children.
fn facade_of(
    statements: &[String],
    module: &[String],
    known: &BTreeMap<Vec<String>, PathBuf>,
) -> Facade {
    let mut f = Facade::default();
    for stmt in statements {
        let path = stmt
            .split_once("use ")
            .map_or("", |(_, p)| p)
            .trim()
            .trim_end_matches(';');
        let path = path.strip_prefix("self::").unwrap_or(path);
        let Some((child, items)) = path.split_once("::") else {
            continue;
        };
        let mut c = module.to_vec();
        c.push(child.trim().to_string());
        if !known.contains_key(&c) {
            continue;
        }
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim();
            if item == "*" {
                f.globs.push(child.trim().to_string());
                continue;
            }
            let name = item.rsplit(" as ").next().unwrap_or(item).trim();
            let name = name.rsplit("::").next().unwrap_or(name);
            if !name.is_empty() {
                f.names.insert(name.to_string(), child.trim().to_string());
            }
        }
    }
    f
}

/// The child modules `code` (of `module`) names without `self::`:
/// `use child::Item;`, `pub(crate) use child::*;`.
fn children_used(
    code: &str,
    module: &[String],
    known: &BTreeMap<Vec<String>, PathBuf>,
) -> BTreeSet<Vec<String>> {
    let mut found = BTreeSet::new();
    for line in code.lines() {
        let t = line.trim_start();
        let Some(rest) = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|k| t.strip_prefix(k))
        else {
            continue;
        };
        let Some((first, _)) = rest.split_once("::") else {
            continue;
        };
        let mut child = module.to_vec();
        child.push(first.trim().to_string());
        if known.contains_key(&child) {
            found.insert(child);
        }
    }
    found
}

/// Whether the file at `path` defines an item named `name`.
fn defines(path: &Path, name: &str) -> bool {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    [
        "struct ",
        "enum ",
        "fn ",
        "const ",
        "static ",
        "type ",
        "trait ",
        "mod ",
        "macro_rules! ",
    ]
    .iter()
    .any(|k| {
        text.match_indices(&format!("{k}{name}")).any(|(i, m)| {
            let after = text[i + m.len()..].chars().next();
            !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    })
}

/// The strongly connected components with more than one file (Tarjan).
fn cycles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct State<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on: BTreeSet<&'a Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Vec<String>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        let edges = s.edges;
        for w in edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// Every file by module path, and the modules each one names.
type Graph = (
    BTreeMap<Vec<String>, PathBuf>,
    BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
);

fn graph() -> Graph {
    let mut known = BTreeMap::new();
    modules(&src(), &[], &mut known);
    let mut split = BTreeMap::new();
    let mut facades = BTreeMap::new();
    for (module, path) in &known {
        let (rest, statements) = split_facade(&code(path));
        facades.insert(module.clone(), facade_of(&statements, module, &known));
        split.insert(module.clone(), rest);
    }
    let mut edges = BTreeMap::new();
    for (module, rest) in &split {
        // `lib.rs` is the crate's table of contents: it names everything,
        // and what names the crate root names one of its re-exports.
        if module.is_empty() {
            continue;
        }
        let mut to = references(rest, module, &known, &facades);
        to.extend(children_used(rest, module, &known));
        to.remove(module);
        to.remove(&Vec::new());
        edges.insert(module.clone(), to);
    }
    (known, edges)
}

#[test]
fn the_host_crate_has_no_import_cycle() {
    let (known, edges) = graph();
    assert!(known.len() > 40, "only {} files read", known.len());
    // Edges are read at all: the pipeline names the sandbox.
    assert!(
        edges[&vec!["pipeline".to_string(), "execute".to_string()]]
            .iter()
            .any(|m| m.first().is_some_and(|f| f == "sandbox")),
        "{:?}",
        edges[&vec!["pipeline".to_string(), "execute".to_string()]]
    );
    let found = cycles(&edges);
    let shown: Vec<String> = found
        .iter()
        .map(|c| {
            c.iter()
                .map(|m| {
                    let next: Vec<String> = edges[m]
                        .iter()
                        .filter(|t| c.contains(t))
                        .map(|t| known[t].strip_prefix(src()).unwrap().display().to_string())
                        .collect();
                    format!(
                        "  {} -> {}",
                        known[m].strip_prefix(src()).unwrap().display(),
                        next.join(", ")
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    assert!(
        found.is_empty(),
        "{} import cycles in host/src:\n{}",
        found.len(),
        shown.join("\n--\n")
    );
}

#[test]
fn a_cycle_is_found_when_there_is_one() {
    let m = |s: &str| vec![s.to_string()];
    let mut edges = BTreeMap::new();
    edges.insert(m("a"), BTreeSet::from([m("b")]));
    edges.insert(m("b"), BTreeSet::from([m("c")]));
    edges.insert(m("c"), BTreeSet::from([m("a")]));
    edges.insert(m("d"), BTreeSet::from([m("a")]));
    let found = cycles(&edges);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].len(), 3);
    edges.insert(m("c"), BTreeSet::new());
    assert!(cycles(&edges).is_empty());
}

#[test]
fn no_source_file_is_over_a_thousand_lines() {
    let (known, _) = graph();
    let long: Vec<String> = known
        .values()
        .filter_map(|p| {
            let n = std::fs::read_to_string(p).unwrap().lines().count();
            (n > 1000).then(|| format!("{} ({n} lines)", p.display()))
        })
        .collect();
    assert!(long.is_empty(), "{long:?}");
}

#[test]
fn no_function_in_the_pipeline_is_over_80_lines() {
    let (known, _) = graph();
    let mut long = Vec::new();
    for (module, path) in &known {
        if module.first().is_none_or(|f| f != "pipeline") {
            continue;
        }
        let text = code(path);
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            let is_fn = [
                "fn ",
                "pub fn ",
                "pub(crate) fn ",
                "pub(super) fn ",
                "async fn ",
            ]
            .iter()
            .chain(
                [
                    "pub async fn ",
                    "pub(crate) async fn ",
                    "pub(super) async fn ",
                ]
                .iter(),
            )
            .any(|k| t.starts_with(k));
            if !is_fn || t.ends_with(';') {
                continue;
            }
            let indent = line.len() - t.len();
            let end = lines[i + 1..]
                .iter()
                .position(|l| l.len() - l.trim_start().len() == indent && l.trim_start() == "}")
                .map_or(0, |e| e + 1);
            if end > 80 {
                long.push(format!("{}:{} ({end} lines)", path.display(), i + 1));
            }
        }
    }
    assert!(long.is_empty(), "{long:?}");
}

/// The names `lib.rs` re-exports at the crate root (its `pub use` lines
/// outside the inline `pub mod` blocks), each `as` counted by its new name.
fn root_names(lib: &str) -> Vec<String> {
    let mut top = String::new();
    let mut depth = 0usize;
    for line in lib.lines() {
        let t = line.trim_start();
        if depth == 0 && t.starts_with("pub mod ") && t.ends_with('{') {
            depth = 1;
            continue;
        }
        if depth > 0 {
            depth += t.matches('{').count();
            depth -= t.matches('}').count().min(depth);
            continue;
        }
        top.push_str(line);
        top.push('\n');
    }
    let mut names = Vec::new();
    for stmt in top.split(';') {
        let Some(at) = stmt.find("pub use ") else {
            continue;
        };
        let path = &stmt[at + "pub use ".len()..];
        let items = match (path.find('{'), path.rfind('}')) {
            (Some(a), Some(b)) => &path[a + 1..b],
            _ => path,
        };
        for item in items.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let name = item.rsplit(" as ").next().unwrap_or(item);
            names.push(name.rsplit("::").next().unwrap_or(name).to_string());
        }
    }
    names
}

#[test]
fn the_crate_root_exports_about_fifty_names() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let names = root_names(&lib);
    // The pipeline, its requests and results, the approvers and hooks;
    // the rest lives in the small modules (`queue`, `manifest`, `runtime`,
    // `schemas`), and nothing test- or bench-only is at the root.
    assert!(names.contains(&"Host".to_string()), "{names:?}");
    assert!(names.len() <= 55, "{} root names: {names:?}", names.len());
    let hidden = lib
        .lines()
        .zip(lib.lines().skip(1))
        .filter(|(a, b)| a.contains("doc(hidden)") && b.starts_with("pub use"))
        .count();
    assert_eq!(hidden, 0, "a hidden name at the crate root");
}

#[test]
fn root_names_are_counted_outside_module_blocks() {
    let lib = "pub use a::{B, C as D};\npub mod m {\n    pub use x::{Y, Z};\n}\npub use e::F;\n";
    assert_eq!(root_names(lib), ["B", "D", "F"]);
}
