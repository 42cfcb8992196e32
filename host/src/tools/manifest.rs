//! `NAME.tool.toml`: the manifest that turns a WASI program into a tool.
//!
//! A manifest names the tool, describes it, gives its input schema, says how
//! validated arguments become the program's argv (fixed strings and
//! `{field}` placeholders, never a shell), which argument is its stdin,
//! the environment it gets (only what is listed), where the workspace
//! appears inside it, the narrowest sandbox mode it works in, its side
//! effect, whether calls may overlap, and its limits. The program is
//! `NAME.wasm` beside the manifest unless `wasm` names another file.
//!
//! This module parses and checks; it runs nothing and opens nothing but
//! the manifest itself. A bad manifest is a [`ManifestError`] with a stable
//! code, never a panic: manifests come from a tools directory, which is
//! configuration, but a typo in one must not take the host down.
//!
//! ```toml
//! name = "wc"
//! description = "Counts lines, words and bytes of the text given."
//! argv = ["wc", "-l", "{files}"]   # an array argument expands to one arg each
//! stdin = "text"                   # this argument is the program's stdin
//! mode = "read-only"               # the narrowest mode it works in
//! side_effect = "read"
//! concurrency_safe = true
//! workspace = "/"                  # where the workspace is mounted (default ".")
//! env = { LANG = "C" }
//! preopens = [{ host = "lib", guest = "/usr/lib" }]  # read-only, beside the manifest
//! limits = { timeout_ms = 10000, memory_mb = 128, output_bytes = 65536 }
//! input_schema = '''{"type":"object","properties":{"text":{"type":"string"},
//!   "files":{"type":"array","items":{"type":"string"}}}}'''
//! ```

use crate::sandbox::spec::{GUEST_SCRATCH, check_guest_path};
use crate::tools::descriptor::{Descriptor, is_valid_name};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toolhost_core::{SandboxMode, SideEffect};

/// The suffix of a manifest's file name.
pub const MANIFEST_SUFFIX: &str = ".tool.toml";

/// The largest manifest read, in bytes.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// The stable codes of manifest errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ManifestCode {
    /// The manifest cannot be read, is not TOML, or says something wrong.
    Invalid,
    /// The program the manifest names is not there.
    WasmMissing,
    /// The program is there but is not a WASI program that can be a tool.
    NotProgram,
}

impl ManifestCode {
    /// The code as text: `MANIFEST_INVALID`, `MANIFEST_WASM_MISSING`,
    /// `MANIFEST_NOT_PROGRAM`.
    pub fn as_str(self) -> &'static str {
        match self {
            ManifestCode::Invalid => "MANIFEST_INVALID",
            ManifestCode::WasmMissing => "MANIFEST_WASM_MISSING",
            ManifestCode::NotProgram => "MANIFEST_NOT_PROGRAM",
        }
    }
}

impl std::fmt::Display for ManifestCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A manifest that cannot become a tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {path}: {detail}")]
pub struct ManifestError {
    /// The stable code.
    pub code: ManifestCode,
    /// The manifest file.
    pub path: String,
    /// What is wrong, and what to do about it.
    pub detail: String,
}

/// One piece of an argv element.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field(String),
}

/// One argv element: fixed text and placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ArgTemplate(Vec<Piece>);

/// Read-only host directory shown to the program at a guest path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preopen {
    /// The host directory (absolute: resolved against the manifest's).
    pub host: PathBuf,
    /// Where the program sees it.
    pub guest: String,
}

/// The limits a manifest sets; each caps the host's for this tool (the
/// tighter of the two holds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManifestLimits {
    /// Wall-clock deadline.
    pub timeout: Option<Duration>,
    /// Fuel (only with a fuel-metering runtime).
    pub fuel: Option<u64>,
    /// Largest linear memory, in bytes.
    pub memory: Option<usize>,
    /// Bytes of stdout and of stderr kept, each.
    pub output: Option<usize>,
}

/// A checked manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The manifest file.
    pub path: PathBuf,
    /// The program file.
    pub wasm: PathBuf,
    /// The tool's descriptor (schema, mode, side effect, concurrency).
    pub descriptor: Descriptor,
    argv: Vec<ArgTemplate>,
    /// Arguments whose values may begin an argv element with `-` (which
    /// the program reads as an option); any other such value is refused.
    allow_dash: Vec<String>,
    /// The argument passed as stdin, if any.
    pub stdin: Option<String>,
    /// The environment, exactly.
    pub env: Vec<(String, String)>,
    /// Where the workspace is mounted.
    pub workspace: String,
    /// Extra read-only directories.
    pub preopens: Vec<Preopen>,
    /// Limits.
    pub limits: ManifestLimits,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: String,
    description: String,
    #[serde(default)]
    wasm: Option<String>,
    input_schema: toml::Value,
    argv: Vec<String>,
    #[serde(default)]
    allow_dash: Vec<String>,
    #[serde(default)]
    stdin: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    workspace: Option<String>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    side_effect: Option<String>,
    #[serde(default)]
    concurrency_safe: bool,
    #[serde(default)]
    idempotent: bool,
    #[serde(default)]
    preopens: Vec<RawPreopen>,
    #[serde(default)]
    limits: RawLimits,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPreopen {
    host: String,
    guest: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    timeout_ms: Option<u64>,
    fuel: Option<u64>,
    memory_mb: Option<u64>,
    output_bytes: Option<u64>,
}

/// The tool name a manifest file name implies (`wc.tool.toml` -> `wc`).
pub fn name_of(path: &Path) -> Option<&str> {
    path.file_name()?.to_str()?.strip_suffix(MANIFEST_SUFFIX)
}

impl Manifest {
    /// Reads and checks the manifest at `path`. The program it names must
    /// exist (it is not loaded here).
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        let invalid = |detail: String| ManifestError {
            code: ManifestCode::Invalid,
            path: path.display().to_string(),
            detail,
        };
        // A regular file, read through its open handle and never past the cap (a
        // symbolic link to a device would otherwise be read without end; opening
        // a FIFO would wait for a writer, so that is checked before opening).
        let regular = std::fs::metadata(path)
            .map_err(|e| invalid(format!("cannot read it: {e}")))?
            .is_file();
        if !regular {
            return Err(invalid("it is not a regular file".to_string()));
        }
        let file =
            std::fs::File::open(path).map_err(|e| invalid(format!("cannot read it: {e}")))?;
        let meta = file
            .metadata()
            .map_err(|e| invalid(format!("cannot read it: {e}")))?;
        if !meta.is_file() {
            return Err(invalid("it is not a regular file".to_string()));
        }
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(file, MAX_MANIFEST_BYTES + 1),
            &mut text,
        )
        .map_err(|e| invalid(format!("cannot read it: {e}")))?;
        if text.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(invalid(format!(
                "it is over {MAX_MANIFEST_BYTES} bytes, the most a manifest may have"
            )));
        }
        let mut manifest = Manifest::parse(&text, path)?;
        if !manifest.wasm.is_file() {
            return Err(ManifestError {
                code: ManifestCode::WasmMissing,
                path: path.display().to_string(),
                detail: format!(
                    "the program {} does not exist; put it beside the manifest or name it with `wasm = \"...\"`",
                    manifest.wasm.display()
                ),
            });
        }
        // A preopen is a directory of the tool's own files: it must resolve (symbolic
        // links followed) inside the manifest's directory.
        let base = std::fs::canonicalize(directory_of(path))
            .map_err(|e| invalid(format!("cannot resolve its directory: {e}")))?;
        for p in &mut manifest.preopens {
            let resolved = std::fs::canonicalize(&p.host).ok().filter(|r| r.is_dir());
            let Some(resolved) = resolved else {
                return Err(invalid(format!(
                    "preopen {} (for {}) is not a directory",
                    p.host.display(),
                    p.guest
                )));
            };
            if resolved == base {
                return Err(invalid(format!(
                    "preopen {} (for {}) resolves to the manifest's own directory {}; a \
                     preopen is a directory of the tool's files below it",
                    p.host.display(),
                    p.guest,
                    base.display()
                )));
            }
            if !resolved.starts_with(&base) {
                return Err(invalid(format!(
                    "preopen {} (for {}) resolves to {}, outside the manifest's directory {}",
                    p.host.display(),
                    p.guest,
                    resolved.display(),
                    base.display()
                )));
            }
            p.host = resolved;
        }
        Ok(manifest)
    }

    /// What an approval of a call of this tool is about, beside the
    /// arguments: SHA-256 (hex) of `program_sha256` (the program's bytes)
    /// and of everything this checked manifest runs it with (argv, env,
    /// preopens, limits, ...). A reload that keeps the program but changes
    /// how it runs is not approved by an answer given before.
    pub fn approval_digest(&self, program_sha256: &str) -> String {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(program_sha256.as_bytes());
        h.update(b"\n");
        h.update(format!("{self:?}").as_bytes());
        hex::encode(h.finalize())
    }

    /// Parses and checks manifest text; relative paths are resolved against
    /// the directory of `path`. Touches no file.
    pub fn parse(text: &str, path: &Path) -> Result<Manifest, ManifestError> {
        let invalid = |detail: String| ManifestError {
            code: ManifestCode::Invalid,
            path: path.display().to_string(),
            detail,
        };
        let raw: Raw = toml::from_str(text).map_err(|e| invalid(e.message().to_string()))?;
        if !is_valid_name(&raw.name) {
            return Err(invalid(format!(
                "name {:?} is not a valid tool name (1-64 characters of [a-zA-Z0-9_-], starting with a letter)",
                raw.name.chars().take(80).collect::<String>()
            )));
        }
        if let Some(implied) = name_of(path)
            && implied != raw.name
        {
            return Err(invalid(format!(
                "the file is named for {implied:?} but declares name {:?}",
                raw.name
            )));
        }
        if raw.description.trim().is_empty() {
            return Err(invalid("description is empty; the model reads it".into()));
        }
        let input_schema = match raw.input_schema {
            toml::Value::String(s) => serde_json::from_str::<serde_json::Value>(&s)
                .map_err(|e| invalid(format!("input_schema is not JSON: {e}")))?,
            other => {
                serde_json::to_value(other).map_err(|e| invalid(format!("input_schema: {e}")))?
            }
        };
        if !input_schema.is_object() {
            return Err(invalid("input_schema must be a JSON object".into()));
        }
        if let Err(e) = jsonschema::meta::validate(&input_schema) {
            return Err(invalid(format!(
                "input_schema is not a valid JSON Schema: {e}"
            )));
        }
        let properties = input_schema.get("properties").and_then(|p| p.as_object());
        let declared = |field: &str| properties.is_some_and(|p| p.contains_key(field));
        if raw.argv.is_empty() {
            return Err(invalid(
                "argv is empty; its first element is the program name the guest sees".into(),
            ));
        }
        let mut argv = Vec::with_capacity(raw.argv.len());
        for (i, element) in raw.argv.iter().enumerate() {
            let template =
                parse_template(element).map_err(|e| invalid(format!("argv[{i}]: {e}")))?;
            for piece in &template.0 {
                if let Piece::Field(f) = piece
                    && !declared(f)
                {
                    return Err(invalid(format!(
                        "argv[{i}] uses {{{f}}}, which input_schema.properties does not declare"
                    )));
                }
            }
            if i == 0 && template.0.iter().any(|p| matches!(p, Piece::Field(_))) {
                return Err(invalid(
                    "argv[0] is the program name and takes no placeholder".into(),
                ));
            }
            argv.push(template);
        }
        if let Some(field) = raw.allow_dash.iter().find(|f| !declared(f)) {
            return Err(invalid(format!(
                "allow_dash names {field:?}, which input_schema.properties does not declare"
            )));
        }
        if let Some(field) = &raw.stdin
            && !declared(field)
        {
            return Err(invalid(format!(
                "stdin names {field:?}, which input_schema.properties does not declare"
            )));
        }
        let mut env = Vec::with_capacity(raw.env.len());
        for (k, v) in raw.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(invalid(format!(
                    "env key {k:?} (or its value) is not a valid variable"
                )));
            }
            env.push((k, v));
        }
        let workspace = raw.workspace.unwrap_or_else(|| ".".into());
        check_guest_path(&workspace, true).map_err(|e| invalid(format!("workspace: {e}")))?;
        if workspace == GUEST_SCRATCH {
            return Err(invalid(format!(
                "workspace: {GUEST_SCRATCH} is where the per-call scratch directory is mounted"
            )));
        }
        let min_mode = match raw.mode.as_deref() {
            None => SandboxMode::None,
            Some(m) => m
                .parse()
                .map_err(|_| invalid(format!("mode {m:?} is not a sandbox mode (none, read-only, workspace-write, danger-full-access)")))?,
        };
        let side_effect = match raw.side_effect.as_deref() {
            // A program that needs a writable mode writes.
            None if min_mode > SideEffect::Read.widest_mode() => SideEffect::Write,
            None => SideEffect::Read,
            Some(s) => s.parse().map_err(|_| {
                invalid(format!(
                    "side_effect {s:?} is not one of none, read, write, external"
                ))
            })?,
        };
        let base = directory_of(path);
        let wasm = match raw.wasm {
            Some(w) => base.join(w),
            None => base.join(format!("{}.wasm", raw.name)),
        };
        let mut preopens = Vec::with_capacity(raw.preopens.len());
        for p in raw.preopens {
            check_guest_path(&p.guest, false)
                .map_err(|e| invalid(format!("preopen {:?}: {e}", p.guest)))?;
            if p.guest == workspace {
                return Err(invalid(format!(
                    "preopen {:?} is where the workspace is mounted",
                    p.guest
                )));
            }
            // The guest's root holds the workspace (mounted at `.`) and the
            // scratch directory holds a call's temporary files: a preopen at
            // either would hide them. Nor may two preopens share a path.
            if p.guest == "/" || p.guest == GUEST_SCRATCH {
                return Err(invalid(format!(
                    "preopen {:?} would hide the {}",
                    p.guest,
                    if p.guest == "/" {
                        "workspace"
                    } else {
                        "per-call scratch directory"
                    }
                )));
            }
            if preopens.iter().any(|q: &Preopen| q.guest == p.guest) {
                return Err(invalid(format!("two preopens are at {:?}", p.guest)));
            }
            let host = Path::new(&p.host);
            if host.is_absolute()
                || host
                    .components()
                    .any(|c| matches!(c, std::path::Component::ParentDir))
                || !host
                    .components()
                    .any(|c| matches!(c, std::path::Component::Normal(_)))
            {
                return Err(invalid(format!(
                    "preopen {:?}: its host directory is a path below the manifest's directory, neither absolute nor with `..` (nor the manifest's directory itself)",
                    p.guest
                )));
            }
            preopens.push(Preopen {
                host: base.join(host),
                guest: p.guest,
            });
        }
        let mb = |m: u64| usize::try_from(m.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
        let limits = ManifestLimits {
            timeout: raw.limits.timeout_ms.map(Duration::from_millis),
            fuel: raw.limits.fuel,
            memory: raw.limits.memory_mb.map(mb),
            output: raw
                .limits
                .output_bytes
                .map(|b| usize::try_from(b).unwrap_or(usize::MAX)),
        };
        if limits.timeout == Some(Duration::ZERO) || limits.memory == Some(0) {
            return Err(invalid(
                "limits.timeout_ms and limits.memory_mb must be above 0".into(),
            ));
        }
        let descriptor = Descriptor {
            name: raw.name,
            description: raw.description,
            input_schema,
            output_schema: None,
            concurrency_safe: raw.concurrency_safe,
            side_effect,
            idempotent: raw.idempotent,
            min_mode,
        };
        descriptor.check().map_err(invalid)?;
        Ok(Manifest {
            path: path.to_path_buf(),
            wasm,
            descriptor,
            argv,
            allow_dash: raw.allow_dash,
            stdin: raw.stdin,
            env,
            workspace,
            preopens,
            limits,
        })
    }

    /// The argv of a call with the validated `args`: fixed text as written,
    /// each `{field}` replaced by its argument (a string as it is, a number
    /// or boolean as JSON writes it, an object as JSON). An element that is
    /// only a placeholder of an array argument expands to one element per
    /// item; one whose argument is absent or null is left out. Nothing is
    /// ever given to a shell.
    ///
    /// An element that begins with an argument's value may not begin with
    /// `-` unless the manifest's `allow_dash` names that argument: the
    /// program would read it as an option (`--files0-from=.env` given as a
    /// file name), which nothing that inspects the arguments would see.
    pub fn argv(&self, args: &serde_json::Value) -> Result<Vec<String>, String> {
        let mut out = Vec::with_capacity(self.argv.len());
        for template in &self.argv {
            if let [Piece::Field(f)] = template.0.as_slice() {
                match args.get(f) {
                    None | Some(serde_json::Value::Null) => {}
                    Some(serde_json::Value::Array(items)) => {
                        for item in items {
                            out.push(self.operand(f, scalar(f, item)?)?);
                        }
                    }
                    Some(v) => out.push(self.operand(f, scalar(f, v)?)?),
                }
                continue;
            }
            let mut s = String::new();
            let mut absent = false;
            // The argument whose value the element begins with (the first
            // piece that adds text), if it begins with one.
            let mut begins_with: Option<&str> = None;
            for piece in &template.0 {
                let was_empty = s.is_empty();
                match piece {
                    Piece::Text(t) => s.push_str(t),
                    Piece::Field(f) => match args.get(f) {
                        None | Some(serde_json::Value::Null) => absent = true,
                        Some(serde_json::Value::Array(_)) => {
                            return Err(format!(
                                "argument {f:?} is an array; an array expands only where its placeholder is a whole argv element"
                            ));
                        }
                        Some(v) => {
                            s.push_str(&scalar(f, v)?);
                            if was_empty && !s.is_empty() {
                                begins_with = Some(f);
                            }
                        }
                    },
                }
            }
            if !absent {
                match begins_with {
                    Some(f) => out.push(self.operand(f, s)?),
                    None => out.push(s),
                }
            }
        }
        Ok(out)
    }

    /// `element`, which begins with argument `field`'s value, unless it
    /// begins with `-` and `allow_dash` does not name `field`.
    fn operand(&self, field: &str, element: String) -> Result<String, String> {
        if element.starts_with('-') && !self.allow_dash.iter().any(|f| f == field) {
            return Err(format!(
                "argument {field:?} begins with '-', which the program would read as an \
                 option; the tool's manifest does not allow that (allow_dash)"
            ));
        }
        Ok(element)
    }

    /// The stdin of a call with the validated `args`: the named argument's
    /// text (a string as it is, anything else as JSON), or nothing.
    pub fn stdin(&self, args: &serde_json::Value) -> Vec<u8> {
        match self.stdin.as_ref().and_then(|f| args.get(f)) {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::String(s)) => s.as_bytes().to_vec(),
            Some(v) => v.to_string().into_bytes(),
        }
    }
}

fn scalar(field: &str, v: &serde_json::Value) -> Result<String, String> {
    let s = match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        serde_json::Value::Array(_) => {
            return Err(format!("argument {field:?} holds a nested array"));
        }
        other => other.to_string(),
    };
    if s.contains('\0') {
        return Err(format!("argument {field:?} contains a NUL byte"));
    }
    Ok(s)
}

/// Splits an argv element into text and `{field}` placeholders; `{{` and
/// `}}` stand for literal braces.
fn parse_template(s: &str) -> Result<ArgTemplate, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let mut field = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) if c.is_ascii_alphanumeric() || c == '_' || c == '-' => {
                            field.push(c)
                        }
                        Some(c) => {
                            return Err(format!(
                                "placeholder {{{field}{c}... is not a field name (write {{{{ for a literal brace)"
                            ));
                        }
                        None => return Err(format!("placeholder {{{field} is not closed")),
                    }
                }
                if field.is_empty() {
                    return Err("empty placeholder {} (write {{}} for literal braces)".into());
                }
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(Piece::Field(field));
            }
            '}' => return Err("unmatched } (write }} for a literal brace)".into()),
            c => text.push(c),
        }
    }
    if !text.is_empty() || pieces.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(ArgTemplate(pieces))
}

/// The directory a manifest's relative paths start from: the one `path` is
/// in (`.` for a bare file name, whose parent is empty).
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BASE: &str = r#"
name = "t"
description = "d"
input_schema = '{"type":"object","properties":{"a":{"type":"string"},"xs":{"type":"array"},"n":{"type":"integer"}}}'
"#;

    fn parse(extra: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(&format!("{BASE}{extra}"), Path::new("/tools/t.tool.toml"))
    }

    /// The approval digest covers the program and how the manifest runs it.
    #[test]
    fn the_approval_digest_covers_program_and_manifest() {
        let m = parse(r#"argv = ["t", "{a}"]"#).unwrap_or_else(|e| panic!("{e}"));
        let same = parse(r#"argv = ["t", "{a}"]"#).unwrap_or_else(|e| panic!("{e}"));
        let other = parse(r#"argv = ["t", "--force", "{a}"]"#).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.approval_digest("p1"), same.approval_digest("p1"));
        assert_ne!(m.approval_digest("p1"), m.approval_digest("p2"));
        assert_ne!(m.approval_digest("p1"), other.approval_digest("p1"));
    }

    #[test]
    fn argv_templates_substitute_expand_and_omit() {
        let m = parse(r#"argv = ["t", "--a={a}", "{xs}", "{n}", "{{lit}}", "-x"]"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.wasm, PathBuf::from("/tools/t.wasm"));
        let argv = m.argv(&json!({"a": "b c", "xs": ["1", 2], "n": 5}));
        assert_eq!(
            argv,
            Ok(vec![
                "t".to_string(),
                "--a=b c".into(),
                "1".into(),
                "2".into(),
                "5".into(),
                "{lit}".into(),
                "-x".into()
            ])
        );
        let argv = m.argv(&json!({}));
        assert_eq!(argv, Ok(vec!["t".to_string(), "{lit}".into(), "-x".into()]));
        assert!(m.argv(&json!({"a": "x\u{0}y"})).is_err());
    }

    #[test]
    fn an_argument_that_would_become_an_option_is_refused_unless_allowed() {
        let m = parse(r#"argv = ["t", "-l", "{xs}", "{a}{n}", "--a={a}"]"#)
            .unwrap_or_else(|e| panic!("{e}"));
        for args in [
            json!({"xs": ["ok", "--files0-from=.env"]}),
            json!({"xs": "-f/ws/.env"}),
            json!({"a": "-o", "n": 1}),
            json!({"xs": [-5]}),
        ] {
            let got = m.argv(&args);
            assert!(
                got.as_ref().is_err_and(|e| e.contains("begins with '-'")),
                "{args}: {got:?}"
            );
        }
        // Inside an element, after fixed text, a dash is only text.
        assert_eq!(
            m.argv(&json!({"a": "x", "n": -1, "xs": ["a-b"]})),
            Ok(vec![
                "t".to_string(),
                "-l".into(),
                "a-b".into(),
                "x-1".into(),
                "--a=x".into()
            ])
        );
        assert_eq!(
            m.argv(&json!({"xs": "x"})).map(|v| v.len()),
            Ok(3),
            "the option-like fixed text of the manifest stays"
        );
        // The dash is charged to the argument it comes from, not to an empty
        // one before it.
        let m = parse(
            r#"argv = ["t", "{a}{n}"]
allow_dash = ["a"]"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(m.argv(&json!({"a": "", "n": -1})).is_err());
        assert_eq!(
            m.argv(&json!({"a": "-x", "n": 1})),
            Ok(vec!["t".to_string(), "-x1".into()])
        );
        let m = parse(
            r#"argv = ["t", "{xs}"]
allow_dash = ["xs"]"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            m.argv(&json!({"xs": ["-1"]})),
            Ok(vec!["t".to_string(), "-1".into()])
        );
        let got = parse(
            r#"argv = ["t"]
allow_dash = ["nope"]"#,
        );
        assert!(
            got.as_ref()
                .is_err_and(|e| e.detail.contains("allow_dash names \"nope\"")),
            "{got:?}"
        );
    }

    /// A preopen must resolve inside the manifest's directory (a symbolic link out
    /// is refused), and a manifest must be a regular file (a link to a device is
    /// not read).
    #[test]
    fn load_keeps_preopens_inside_the_manifest_directory() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let d = dir.path();
        std::fs::write(d.join("t.wasm"), b"\0asm").unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("/", d.join("lib")).unwrap_or_else(|e| panic!("{e}"));
        let manifest = d.join("t.tool.toml");
        let text =
            format!("{BASE}argv = [\"t\"]\npreopens = [{{ host = \"lib\", guest = \"/h\" }}]\n");
        std::fs::write(&manifest, &text).unwrap_or_else(|e| panic!("{e}"));
        let e = Manifest::load(&manifest).err();
        assert!(
            e.as_ref()
                .is_some_and(|e| e.detail.contains("outside the manifest's directory")),
            "{e:?}"
        );
        std::fs::remove_file(d.join("lib")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir(d.join("lib")).unwrap_or_else(|e| panic!("{e}"));
        let m = Manifest::load(&manifest).unwrap_or_else(|e| panic!("{e}"));
        let lib = std::fs::canonicalize(d.join("lib")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.preopens[0].host, lib);
        let fifo = d.join("f.tool.toml");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(made.success());
        let e = Manifest::load(&fifo).err();
        assert!(
            e.as_ref()
                .is_some_and(|e| e.detail.contains("not a regular file")),
            "{e:?}"
        );
        let device = d.join("z.tool.toml");
        std::os::unix::fs::symlink("/dev/zero", &device).unwrap_or_else(|e| panic!("{e}"));
        let e = Manifest::load(&device).err();
        assert!(
            e.as_ref()
                .is_some_and(|e| e.detail.contains("not a regular file")),
            "{e:?}"
        );
    }

    #[test]
    fn bad_manifests_are_refused_with_a_code() {
        let cases = [
            (r#"argv = []"#, "argv is empty"),
            (r#"argv = ["t", "{missing}"]"#, "does not declare"),
            (r#"argv = ["t", "{a"]"#, "not closed"),
            (r#"argv = ["t", "a}"]"#, "unmatched"),
            (r#"argv = ["{a}"]"#, "argv[0]"),
            ("argv = [\"t\"]\nstdin = \"zz\"", "stdin names"),
            ("argv = [\"t\"]\nmode = \"sideways\"", "not a sandbox mode"),
            ("argv = [\"t\"]\nworkspace = \"rel\"", "absolute"),
            ("argv = [\"t\"]\nbogus = 1", "bogus"),
            ("argv = [\"t\"]\nworkspace = \"/tmp\"", "scratch"),
            ("argv = [\"t\"]\nworkspace = \"//tmp\"", "empty component"),
            (
                "argv = [\"t\"]\npreopens = [{ host = \"a\", guest = \"/tmp\" }]",
                "would hide the per-call scratch",
            ),
            (
                "argv = [\"t\"]\npreopens = [{ host = \"a\", guest = \"/\" }]",
                "would hide the workspace",
            ),
            (
                "argv = [\"t\"]\npreopens = [{ host = \"a\", guest = \"/x\" }, { host = \"b\", guest = \"/x\" }]",
                "two preopens",
            ),
            (
                "argv = [\"t\"]\npreopens = [{ host = \"a\", guest = \"/x/\" }]",
                "trailing",
            ),
            (
                "argv = [\"t\"]\npreopens = [{ host = \"/\", guest = \"/h\" }]",
                "neither absolute nor with `..`",
            ),
            (
                "argv = [\"t\"]\npreopens = [{ host = \"lib/../../..\", guest = \"/h\" }]",
                "neither absolute nor with `..`",
            ),
            (
                "argv = [\"t\"]\nmode = \"workspace-write\"\nside_effect = \"read\"",
                "declares side effect read, which runs at most read-only",
            ),
        ];
        for (extra, want) in cases {
            let e = parse(extra)
                .err()
                .unwrap_or_else(|| panic!("{extra} parsed"));
            assert_eq!(e.code, ManifestCode::Invalid, "{extra}");
            assert!(e.detail.contains(want), "{extra}: {}", e.detail);
            assert!(e.to_string().starts_with("MANIFEST_INVALID: "));
        }
        // Without `side_effect`, a program that needs a writable mode
        // declares writes; one that does not, reads.
        for (mode, effect) in [
            ("read-only", SideEffect::Read),
            ("workspace-write", SideEffect::Write),
            ("danger-full-access", SideEffect::Write),
        ] {
            let m = parse(&format!("argv = [\"t\"]\nmode = \"{mode}\""))
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(m.descriptor.side_effect, effect, "{mode}");
        }
        let e = Manifest::parse("name = \"t\"", Path::new("/x/other.tool.toml"));
        assert_eq!(
            e.map(|_| ()).map_err(|e| e.code),
            Err(ManifestCode::Invalid)
        );
    }
}
