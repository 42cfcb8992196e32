//! Phase 2: the arguments parsed and validated against the tool's input
//! schema, with two normalisations around validation: a `null` the schema
//! reads as "left out" is dropped before it (strict function calling sends
//! one for every optional argument), and a whole number spelled as a float
//! is written as an integer after it (what the tool reads is what was
//! validated). Pure: no I/O, no state.

use super::Refusal;
use crate::tools::registry::RegisteredTool;
use toolhost_core::ErrorCode;

/// The most bytes of arguments a call may carry.
pub const MAX_ARGS_BYTES: usize = 1 << 20;

/// Phase 2: `text` parsed (at most [`MAX_ARGS_BYTES`]), its `null`s read as
/// left out where the schema allows ([`nulls_as_absent`]), validated against
/// `tool`'s input schema, its whole numbers written as integers.
pub(super) fn parse_args(tool: &RegisteredTool, text: &str) -> Result<serde_json::Value, Refusal> {
    if text.len() > MAX_ARGS_BYTES {
        return Err((
            ErrorCode::InvalidArgs,
            format!(
                "the arguments are {} bytes; the limit is {MAX_ARGS_BYTES}",
                text.len()
            ),
        ));
    }
    let args: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        (
            ErrorCode::InvalidArgs,
            format!("the arguments are not valid JSON: {e}"),
        )
    })?;
    let mut args = args;
    nulls_as_absent(
        &mut args,
        &tool.descriptor.input_schema,
        &tool.descriptor.input_schema,
        0,
    );
    tool.validate_args(&args).map_err(|e| {
        (
            ErrorCode::InvalidArgs,
            format!(
                "the arguments do not match the input schema of {}: {e}",
                tool.descriptor.name
            ),
        )
    })?;
    whole_numbers_as_integers(&mut args);
    Ok(args)
}

/// Strict function calling (OpenAI's strict mode, which `toolhost list
/// --schema-for openai` targets) makes every optional property required
/// and nullable, so a model sends `null` for an argument it leaves out.
/// Such a `null`, for a property the schema does not require and whose own
/// schema does not accept `null`, reads as the property left out. Where the
/// schema cannot tell (a `$ref` that does not resolve, a property schema
/// without a type), the `null` stays and validation decides. A value under
/// `anyOf` / `oneOf` (how an optional nested object is spelled, beside
/// `null`) is read by its one branch that can hold the value's kind when
/// every other branch plainly cannot; otherwise its nulls stay.
fn nulls_as_absent(
    value: &mut serde_json::Value,
    schema: &serde_json::Value,
    root: &serde_json::Value,
    depth: usize,
) {
    if depth > 64 {
        return;
    }
    let schema = resolve_ref(schema, root);
    let (own, kind) = match value {
        serde_json::Value::Object(_) => ("properties", "object"),
        serde_json::Value::Array(_) => ("items", "array"),
        _ => return,
    };
    let Some(sub) = schema.get(own) else {
        if let Some(branch) = only_branch_for(schema, root, kind) {
            nulls_as_absent(value, branch, root, depth + 1);
        }
        return;
    };
    match value {
        serde_json::Value::Object(map) => {
            let Some(properties) = sub.as_object() else {
                return;
            };
            let required: Vec<&str> = schema
                .get("required")
                .and_then(|r| r.as_array())
                .map(|r| r.iter().filter_map(|n| n.as_str()).collect())
                .unwrap_or_default();
            map.retain(|k, v| {
                !(v.is_null()
                    && !required.contains(&k.as_str())
                    && properties
                        .get(k)
                        .is_some_and(|p| !accepts_null(p, root, &mut 256)))
            });
            for (k, v) in map.iter_mut() {
                if let Some(p) = properties.get(k) {
                    nulls_as_absent(v, p, root, depth + 1);
                }
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                nulls_as_absent(v, sub, root, depth + 1);
            }
        }
        _ => {}
    }
}

/// The one branch of `schema`'s `anyOf` or `oneOf` (its `$ref` followed)
/// that may hold a value of `kind` (`object`, `array`), when every other
/// branch plainly cannot ([`may_hold`]); none otherwise.
fn only_branch_for<'a>(
    schema: &'a serde_json::Value,
    root: &'a serde_json::Value,
    kind: &str,
) -> Option<&'a serde_json::Value> {
    let mut may = branches(schema)?
        .iter()
        .map(|b| resolve_ref(b, root))
        .filter(|b| may_hold(b, kind) != Some(false));
    match (may.next(), may.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

/// What `schema`'s own keywords (its `$ref` already followed) say of a
/// value of `kind` (`null`, `object`, `array`): `Some(false)` when they
/// plainly refuse it (`false`, a `type` without it, a `const` or `enum` of
/// other kinds), `Some(true)` when they may take it (`true`, a `$ref` that
/// did not resolve, a `type` with it), `None` when they say nothing of it.
/// JSON Schema's keywords all apply at once, so one keyword's refusal is
/// the schema's.
fn may_hold(schema: &serde_json::Value, kind: &str) -> Option<bool> {
    let kind_of = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Object(_) => "object",
        serde_json::Value::Array(_) => "array",
        _ => "scalar",
    };
    let Some(o) = schema.as_object() else {
        return Some(schema.as_bool().unwrap_or(true));
    };
    if o.contains_key("$ref") {
        return Some(true);
    }
    match o.get("type") {
        Some(serde_json::Value::String(t)) => return Some(t == kind),
        Some(serde_json::Value::Array(types)) => return Some(types.iter().any(|t| t == kind)),
        Some(_) => return Some(true),
        None => {}
    }
    if let Some(c) = o.get("const") {
        return Some(kind_of(c) == kind);
    }
    if let Some(values) = o.get("enum").and_then(|e| e.as_array()) {
        return Some(values.iter().any(|v| kind_of(v) == kind));
    }
    None
}

/// A local `$ref`'s target (followed a few times), else the schema itself.
fn resolve_ref<'a>(
    schema: &'a serde_json::Value,
    root: &'a serde_json::Value,
) -> &'a serde_json::Value {
    let mut s = schema;
    for _ in 0..8 {
        match s
            .get("$ref")
            .and_then(|r| r.as_str())
            .and_then(|r| r.strip_prefix('#'))
            .and_then(|p| root.pointer(p))
        {
            Some(target) => s = target,
            None => break,
        }
    }
    s
}

/// Whether `schema` may accept `null`: true unless it plainly cannot (its
/// own keywords refuse it, see [`may_hold`], or `anyOf`/`oneOf` branches
/// none of which can).
/// Looks at most `budget` schemas (a tool's schema is untrusted: branches of
/// branches must not multiply the work); past it, the answer is "maybe".
fn accepts_null(schema: &serde_json::Value, root: &serde_json::Value, budget: &mut usize) -> bool {
    if *budget == 0 {
        return true;
    }
    *budget -= 1;
    let schema = resolve_ref(schema, root);
    if let Some(answer) = may_hold(schema, "null") {
        return answer;
    }
    branches(schema).is_none_or(|b| b.iter().any(|b| accepts_null(b, root, budget)))
}

/// `schema`'s `anyOf` branches, else its `oneOf` ones.
fn branches(schema: &serde_json::Value) -> Option<&Vec<serde_json::Value>> {
    ["anyOf", "oneOf"]
        .iter()
        .find_map(|k| schema.get(*k).and_then(|b| b.as_array()))
}

/// Writes every whole number that came spelled as a float (`1.0`, `1e3`) as
/// the integer it is. JSON Schema counts `1.0` as an integer, so validation
/// accepts it; the tool must then read what was validated, and a guest
/// parser that wants an integer refuses `1.0` (Rust's serde, Python's
/// helper), after dispatch. Floats beyond 2^53 are left as they are.
fn whole_numbers_as_integers(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() <= 9_007_199_254_740_992.0
            {
                // Exact: |f| <= 2^53.
                *n = serde_json::Number::from(f as i64);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(whole_numbers_as_integers),
        serde_json::Value::Object(map) => map.values_mut().for_each(whole_numbers_as_integers),
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly on a set-up error")]
mod tests {
    use super::*;
    use serde_json::json;

    /// Whether a property accepts `null` is looked up within a budget: a
    /// schema of branches of branches (20 wide, 5 deep: 3.2 million) is
    /// "maybe" after 256 looks, and the `null` is left to validation.
    #[test]
    fn a_null_is_kept_where_the_schema_is_too_large_to_tell() {
        // Each level is twenty references to the next: a small schema.
        let mut defs = serde_json::Map::new();
        for level in 0..5 {
            let next = json!({"$ref": format!("#/$defs/d{}", level + 1)});
            defs.insert(format!("d{level}"), json!({"anyOf": vec![next; 20]}));
        }
        defs.insert("d5".into(), json!({"type": "string"}));
        let schema = json!({"type": "object", "$defs": defs,
                            "properties": {"p": {"$ref": "#/$defs/d0"}}});
        let mut args = json!({"p": null});
        nulls_as_absent(&mut args, &schema, &schema, 0);
        assert_eq!(args, json!({"p": null}));
        // Small enough to tell: the null reads as left out.
        let schema =
            json!({"type": "object", "properties": {"p": {"anyOf": [{"type": "string"}]}}});
        let mut args = json!({"p": null});
        nulls_as_absent(&mut args, &schema, &schema, 0);
        assert_eq!(args, json!({}));
    }

    /// An optional nested object (`anyOf` of its `$ref` and `null`, as
    /// schemars spells `Option<Struct>`) has its own left-out properties
    /// read as absent, as the top level's are; so do the objects of an
    /// optional list. Where another branch could hold the object too (one
    /// with properties, or a bare `{"type": "object"}`, or one without a
    /// type), its nulls stay for validation to decide.
    #[test]
    fn nulls_in_an_optional_nested_object_read_as_absent() {
        let schema = json!({
            "type": "object",
            "$defs": {"Inner": {"type": "object",
                "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                "required": ["a"]}},
            "properties": {
                "inner": {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}]},
                "list": {"oneOf": [{"type": "array", "items": {"$ref": "#/$defs/Inner"}},
                                   {"type": "null"}]},
                "either": {"anyOf": [{"$ref": "#/$defs/Inner"},
                                     {"type": "object", "properties": {"b": {"type": "null"}}}]},
                "loose": {"oneOf": [{"$ref": "#/$defs/Inner"},
                                    {"type": "object", "required": ["b"]}]},
                "untyped": {"anyOf": [{"$ref": "#/$defs/Inner"}, {}]}
            }
        });
        let mut args = json!({
            "inner": {"a": "x", "b": null},
            "list": [{"a": "y", "b": null}],
            "either": {"a": "z", "b": null},
            "loose": {"a": "w", "b": null},
            "untyped": {"a": "v", "b": null}
        });
        nulls_as_absent(&mut args, &schema, &schema, 0);
        assert_eq!(
            args,
            json!({
                "inner": {"a": "x"},
                "list": [{"a": "y"}],
                "either": {"a": "z", "b": null},
                "loose": {"a": "w", "b": null},
                "untyped": {"a": "v", "b": null}
            })
        );
    }
}
