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

/// A file's text without its test module (from `#[cfg(test)]` followed by
/// `mod` to the end: test modules close the files here) and comments.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let mut kept = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
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
            while !p.is_empty() && !known.contains_key(&p) {
                p.pop();
            }
            found.insert(p);
        }
        i = j.max(i + 1);
    }
    found
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
    let mut edges = BTreeMap::new();
    for (module, path) in &known {
        // `lib.rs` is the crate's table of contents: it names everything,
        // and what names the crate root names one of its re-exports.
        if module.is_empty() {
            continue;
        }
        let mut to = references(&code(path), module, &known);
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
