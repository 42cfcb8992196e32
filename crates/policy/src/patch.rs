//! Argument patches: the `[[patches]]` of a policy file, controlled
//! rewrites of a call's arguments before policy, guards and approval see
//! them ([`Policy::patch`]).
//!
//! The host applies them after the arguments validated, validates the
//! patched arguments again (a patch that breaks the schema refuses the call
//! before anyone is asked), and from then on uses only the patched ones:
//! policy, guards, the approver, the intent (which also keeps the originals),
//! the body and post-execute. This module only computes the rewrite.

use crate::error::{LoadError, line_col};
use crate::file::{RawPatch, toml_to_json};
use crate::load::at;
use crate::matcher::{ToolPattern, check_pointer};
use crate::policy::Policy;
use serde_json::Value;
use std::fmt;
use toml::Spanned;

#[derive(Debug, Clone)]
enum PatchOp {
    /// Set the field when it is absent.
    Set(Value),
    /// Set the field whatever it holds.
    Force(Value),
    /// Bring a number into `[min, max]`.
    Clamp {
        min: Option<serde_json::Number>,
        max: Option<serde_json::Number>,
    },
    /// Replace a leading `from` of a string with `to`.
    RewritePrefix { from: String, to: String },
}

/// A compiled `[[patches]]` entry.
#[derive(Debug, Clone)]
pub(crate) struct Patch {
    tool: ToolPattern,
    pointer: String,
    op: PatchOp,
    index: usize,
    line: usize,
}

/// One patch that changed a call's arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedPatch {
    /// The patch, e.g. `patches[0] (line 12)`.
    pub patch: String,
    /// The JSON pointer it rewrote (empty: the whole arguments).
    pub pointer: String,
    /// The value before (`None`: the field was absent).
    pub before: Option<Value>,
    /// The value after.
    pub after: Value,
}

impl fmt::Display for AppliedPatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.pointer.is_empty() {
            "the arguments"
        } else {
            &self.pointer
        };
        match &self.before {
            Some(b) => write!(f, "{} set {what} from {b} to {}", self.patch, self.after),
            None => write!(f, "{} set {what} to {}", self.patch, self.after),
        }
    }
}

/// The arguments after every patch that applies, and what changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Patched {
    /// The patched arguments.
    pub args: Value,
    /// The patches that changed something, in file order.
    pub applied: Vec<AppliedPatch>,
}

/// A patch that cannot apply to a call (its field's parent is not an
/// object): the call is refused rather than run unpatched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchError {
    /// The patch, e.g. `patches[0] (line 12)`.
    pub patch: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for PatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.patch, self.message)
    }
}

impl Policy {
    /// Applies every patch whose tool pattern matches `tool` to `args`, in
    /// file order (each sees the result of the ones before). `Ok(None)` when
    /// nothing changed. Pure.
    pub fn patch(&self, tool: &str, args: &Value) -> Result<Option<Patched>, PatchError> {
        let mut out = args.clone();
        let mut applied = Vec::new();
        for p in self.stack.patches.iter().filter(|p| p.tool.matches(tool)) {
            if let Some(a) = p.apply(&mut out)? {
                applied.push(a);
            }
        }
        Ok((!applied.is_empty()).then_some(Patched { args: out, applied }))
    }

    /// True when the policy has `[[patches]]`.
    pub fn has_patches(&self) -> bool {
        !self.stack.patches.is_empty()
    }
}

impl Patch {
    fn label(&self) -> String {
        format!("patches[{}] (line {})", self.index, self.line)
    }

    fn apply(&self, args: &mut Value) -> Result<Option<AppliedPatch>, PatchError> {
        let (parent, key) = split_pointer(&self.pointer);
        let Some(Value::Object(map)) = args.pointer_mut(parent) else {
            return Err(PatchError {
                patch: self.label(),
                message: format!(
                    "cannot apply: {:?} is not an object in the arguments",
                    if parent.is_empty() { "/" } else { parent }
                ),
            });
        };
        let before = map.get(&key).cloned();
        let after = match (&self.op, &before) {
            // A `null` is the field left out (a tool reads it as its
            // default), so `set` fills it as it fills an absent one.
            (PatchOp::Set(v), None | Some(Value::Null)) => Some(v.clone()),
            (PatchOp::Set(_), Some(_)) => None,
            (PatchOp::Force(v), _) => Some(v.clone()),
            (PatchOp::Clamp { min, max }, Some(Value::Number(n))) => {
                use std::cmp::Ordering::{Greater, Less};
                match (min, max) {
                    (Some(lo), _) if compare(n, lo) == Some(Less) => {
                        Some(Value::Number(lo.clone()))
                    }
                    (_, Some(hi)) if compare(n, hi) == Some(Greater) => {
                        Some(Value::Number(hi.clone()))
                    }
                    _ => None,
                }
            }
            // A value a clamp cannot read as a number (a string the tool may
            // parse as one) would pass unclamped: the call is refused.
            (PatchOp::Clamp { .. }, Some(v)) if !v.is_null() => {
                return Err(PatchError {
                    patch: self.label(),
                    message: format!(
                        "cannot apply: {:?} is {v}, not a number to clamp",
                        self.pointer
                    ),
                });
            }
            (PatchOp::RewritePrefix { from, to }, Some(Value::String(s))) => s
                .strip_prefix(from.as_str())
                .map(|rest| Value::String(format!("{to}{rest}"))),
            // Absent or of another type: the schema, not a patch, judges it.
            (PatchOp::Clamp { .. } | PatchOp::RewritePrefix { .. }, _) => None,
        };
        let Some(after) = after.filter(|a| Some(a) != before.as_ref()) else {
            return Ok(None);
        };
        map.insert(key, after.clone());
        Ok(Some(AppliedPatch {
            patch: self.label(),
            pointer: self.pointer.clone(),
            before,
            after,
        }))
    }
}

/// Orders two JSON numbers: exactly when both are integers (as `f64`,
/// `2^53 + 1` would equal `2^53`), otherwise as floats.
fn compare(a: &serde_json::Number, b: &serde_json::Number) -> Option<std::cmp::Ordering> {
    let int = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (int(a), int(b)) {
        (Some(x), Some(y)) => Some(x.cmp(&y)),
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

/// `/a/b~1c` → (`/a`, `b/c`): the parent pointer and the unescaped last token.
fn split_pointer(pointer: &str) -> (&str, String) {
    let cut = pointer.rfind('/').unwrap_or(0);
    let key = pointer[cut + 1..].replace("~1", "/").replace("~0", "~");
    (&pointer[..cut], key)
}

type LoadResult<T> = std::result::Result<T, LoadError>;

/// Compiles the file's `[[patches]]`.
pub(crate) fn compile(raw: &[Spanned<RawPatch>], src: &str) -> LoadResult<Vec<Patch>> {
    raw.iter()
        .enumerate()
        .map(|(index, p)| compile_one(p, index, src))
        .collect()
}

fn number(v: &Spanned<toml::Value>, key: &str) -> LoadResult<serde_json::Number> {
    match toml_to_json(v.get_ref()) {
        Value::Number(n) => Ok(n),
        other => Err(LoadError::new(
            v.span(),
            format!("{key}: expected a number, found {other}"),
        )),
    }
}

fn compile_one(raw: &Spanned<RawPatch>, index: usize, src: &str) -> LoadResult<Patch> {
    let key = format!("patches[{index}]");
    let p = raw.get_ref();
    let tool = at(
        p.tool.span(),
        ToolPattern::new(p.tool.get_ref()),
        &format!("{key}.tool"),
    )?;
    let pointer = p.pointer.get_ref().clone();
    at(
        p.pointer.span(),
        check_pointer(&pointer),
        &format!("{key}.pointer"),
    )?;
    let ops = [
        p.set.is_some(),
        p.force.is_some(),
        p.clamp.is_some(),
        p.rewrite_prefix.is_some(),
    ];
    if ops.iter().filter(|x| **x).count() != 1 {
        return Err(LoadError::new(
            raw.span(),
            format!(
                "{key}: a patch has exactly one of `set`, `force`, `clamp` or `rewrite_prefix`"
            ),
        ));
    }
    let op = if let Some(v) = &p.set {
        PatchOp::Set(toml_to_json(v.get_ref()))
    } else if let Some(v) = &p.force {
        PatchOp::Force(toml_to_json(v.get_ref()))
    } else if let Some(c) = &p.clamp {
        let c_ref = c.get_ref();
        let min = c_ref
            .min
            .as_ref()
            .map(|v| number(v, &format!("{key}.clamp.min")))
            .transpose()?;
        let max = c_ref
            .max
            .as_ref()
            .map(|v| number(v, &format!("{key}.clamp.max")))
            .transpose()?;
        match (&min, &max) {
            (None, None) => {
                return Err(LoadError::new(
                    c.span(),
                    format!("{key}.clamp: needs `min`, `max` or both"),
                ));
            }
            (Some(lo), Some(hi)) if lo.as_f64() > hi.as_f64() => {
                return Err(LoadError::new(
                    c.span(),
                    format!("{key}.clamp: min {lo} is larger than max {hi}"),
                ));
            }
            _ => {}
        }
        PatchOp::Clamp { min, max }
    } else if let Some(r) = &p.rewrite_prefix {
        let r_ref = r.get_ref();
        if r_ref.from.get_ref().is_empty() {
            return Err(LoadError::new(
                r_ref.from.span(),
                format!("{key}.rewrite_prefix.from: an empty prefix would match every string"),
            ));
        }
        PatchOp::RewritePrefix {
            from: r_ref.from.get_ref().clone(),
            to: r_ref.to.get_ref().clone(),
        }
    } else {
        return Err(LoadError::new(raw.span(), format!("{key}: no operation")));
    };
    Ok(Patch {
        tool,
        pointer,
        op,
        index,
        line: line_col(src, raw.span().start).0,
    })
}
