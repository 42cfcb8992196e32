//! Argument objects made from a tool's input schema, for a tool that
//! declares no examples: one its schema should accept, to run the body
//! with, and ones it should refuse, to check that the host refuses them
//! before the body.
//!
//! The generator is small and bounded: it follows `$ref`s inside the
//! schema, takes `const` and the first of an `enum`, the first branch of
//! `anyOf`/`oneOf` that yields a value, `allOf` merged, only the required
//! properties of an object (more when `minProperties` asks), the fewest
//! items an array may hold, the smallest number the bounds allow (1 when
//! they allow it), and a string of the length, `format` or `pattern` asked
//! for (a pattern is parsed and one of its matches written out). What it
//! makes is only a candidate: the caller validates it with the host's own
//! validator, and a schema it cannot satisfy is reported, not guessed at.

use super::pattern::matching;
use serde_json::{Map, Value, json};

/// How deep schemas may nest (a `$ref` counts as a level): past this, a
/// recursive schema whose recursion is required has no finite value.
const MAX_DEPTH: usize = 32;

/// The most schemas the generator visits for one object: a schema that
/// branches at every level (`anyOf` of `$ref`s of `anyOf`s ...) would
/// otherwise take exponential time, and the schema is the checked tool's.
const MAX_STEPS: u32 = 10_000;

/// The most items an array, or properties an object, is given.
const MAX_ITEMS: u64 = 64;

/// The longest string written.
const MAX_STRING: u64 = 4096;

/// An object the input schema `root` should accept, or why none could be
/// made.
pub(crate) fn valid_args(root: &Value) -> Result<Value, String> {
    Gen::new(root).value(root, 0, true)
}

/// Objects derived from `valid` that the schema `root` should refuse, each
/// with what was changed: a required property left out, a property of the
/// wrong type, a property the schema does not allow.
pub(crate) fn invalid_args(root: &Value, valid: &Value) -> Vec<(Value, String)> {
    let Some(object) = valid.as_object() else {
        return Vec::new();
    };
    let generator = Gen::new(root);
    let schema = generator.resolve(root, 0).unwrap_or_else(|_| root.clone());
    let mut out = Vec::new();
    let required = string_list(schema.get("required"));
    if let Some(name) = required.first() {
        let mut without = object.clone();
        without.remove(name);
        out.push((
            Value::Object(without),
            format!("its required property {name:?} left out"),
        ));
    }
    if let Some((name, value)) = object.iter().next() {
        let wrong = if value.is_string() {
            json!(12345)
        } else {
            json!("a string")
        };
        let mut changed = object.clone();
        changed.insert(name.clone(), wrong);
        out.push((
            Value::Object(changed),
            format!("property {name:?} of the wrong type"),
        ));
    }
    let mut extra = object.clone();
    extra.insert("__toolhost_conformance_unexpected__".into(), json!(true));
    out.push((
        Value::Object(extra),
        "a property it does not declare".into(),
    ));
    out
}

/// The names in a `required`-like array of strings.
fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The generator over one root schema (what `$ref`s point into).
struct Gen<'a> {
    root: &'a Value,
    /// Schemas visited so far (at most [`MAX_STEPS`]).
    steps: std::cell::Cell<u32>,
}

impl<'a> Gen<'a> {
    fn new(root: &'a Value) -> Gen<'a> {
        Gen {
            root,
            steps: std::cell::Cell::new(0),
        }
    }

    /// Counts one more schema visited; an error past [`MAX_STEPS`].
    fn step(&self) -> Result<(), String> {
        let n = self.steps.get() + 1;
        self.steps.set(n);
        if n > MAX_STEPS {
            return Err(format!(
                "the generator gave up after visiting {MAX_STEPS} schemas"
            ));
        }
        Ok(())
    }

    /// A value `schema` accepts; at the top level (`top`), an object.
    fn value(&self, schema: &Value, depth: usize, top: bool) -> Result<Value, String> {
        self.step()?;
        if depth > MAX_DEPTH {
            return Err(format!(
                "the schema nests deeper than {MAX_DEPTH} levels (a recursive $ref whose recursion is required?)"
            ));
        }
        let schema = self.resolve(schema, depth)?;
        let Some(obj) = schema.as_object() else {
            return match schema {
                Value::Bool(false) => Err("a `false` schema accepts nothing".into()),
                _ if top => Ok(json!({})),
                _ => Ok(json!("example")),
            };
        };
        if let Some(c) = obj.get("const") {
            return Ok(c.clone());
        }
        if let Some(e) = obj.get("enum") {
            return e
                .as_array()
                .and_then(|a| a.first())
                .cloned()
                .ok_or_else(|| "an empty `enum` accepts nothing".to_string());
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = obj.get(key).and_then(Value::as_array) {
                return self.first_branch(obj, key, branches, depth, top);
            }
        }
        match type_of(obj, top).as_str() {
            "object" => self.object(obj, depth),
            "array" => self.array(obj, depth),
            "string" => string(obj),
            "integer" => number(obj, true),
            "number" => number(obj, false),
            "boolean" => Ok(json!(true)),
            "null" => Ok(Value::Null),
            _ => Ok(json!("example")),
        }
    }

    /// The schema with its `$ref` (into the root) and `allOf` merged in.
    fn resolve(&self, schema: &Value, depth: usize) -> Result<Value, String> {
        self.step()?;
        if depth > MAX_DEPTH {
            return Err(format!(
                "$ref and allOf nest deeper than {MAX_DEPTH} levels (a $ref that points to itself?)"
            ));
        }
        let Some(obj) = schema.as_object() else {
            return Ok(schema.clone());
        };
        let mut merged = obj.clone();
        if let Some(r) = merged.remove("$ref") {
            let target = self.target(&r)?;
            let target = self.resolve(target, depth + 1)?;
            merged = merge(target.as_object().cloned().unwrap_or_default(), merged);
        }
        if let Some(all) = merged.remove("allOf") {
            for part in all.as_array().into_iter().flatten() {
                let part = self.resolve(part, depth + 1)?;
                merged = merge(merged, part.as_object().cloned().unwrap_or_default());
            }
        }
        if merged.contains_key("$dynamicRef") {
            return Err("the schema uses $dynamicRef, which the generator does not follow".into());
        }
        Ok(Value::Object(merged))
    }

    /// What a `$ref` inside the root schema points to.
    fn target(&self, r: &Value) -> Result<&Value, String> {
        let text = r.as_str().unwrap_or_default();
        let pointer = text
            .strip_prefix('#')
            .ok_or_else(|| format!("$ref {text:?} points outside the schema"))?;
        self.root
            .pointer(pointer)
            .ok_or_else(|| format!("$ref {text:?} points to nothing in the schema"))
    }

    /// The value of the first branch of `anyOf`/`oneOf` that yields one,
    /// each branch taken with the keywords beside it.
    fn first_branch(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        branches: &[Value],
        depth: usize,
        top: bool,
    ) -> Result<Value, String> {
        let mut rest = obj.clone();
        rest.remove(key);
        let mut why = Vec::new();
        // A branch that is only `null` last: the body is worth running with
        // a value (`Option<T>` is `anyOf: [T, null]` to some generators).
        let (nulls, values): (Vec<&Value>, Vec<&Value>) = branches
            .iter()
            .partition(|b| b.get("type") == Some(&json!("null")));
        for branch in values.into_iter().chain(nulls) {
            let tried = self.resolve(branch, depth + 1).and_then(|branch| {
                let both = merge(
                    rest.clone(),
                    branch.as_object().cloned().unwrap_or_default(),
                );
                self.value(&Value::Object(both), depth + 1, top)
            });
            match tried {
                Ok(v) => return Ok(v),
                // Out of steps: no other branch is tried, and the error
                // says only that.
                Err(e) if self.steps.get() > MAX_STEPS => return Err(e),
                // The first reason only: each branch's would repeat its
                // own branches', and grow with the schema.
                Err(e) if why.is_empty() => why.push(e),
                Err(_) => {}
            }
        }
        Err(format!(
            "no branch of `{key}` yields a value (the first: {})",
            why.join("")
        ))
    }

    /// An object with the required properties (and as many more as
    /// `minProperties` asks for).
    fn object(&self, obj: &Map<String, Value>, depth: usize) -> Result<Value, String> {
        let properties = obj.get("properties").and_then(Value::as_object);
        let extra = obj.get("additionalProperties");
        let mut names = string_list(obj.get("required"));
        let wanted = obj
            .get("minProperties")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if wanted > MAX_ITEMS {
            return Err(format!("minProperties {wanted} is more than {MAX_ITEMS}"));
        }
        for name in properties.into_iter().flat_map(|p| p.keys()) {
            if names.len() as u64 >= wanted {
                break;
            }
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        let mut out = Map::new();
        for name in names {
            let schema = match (properties.and_then(|p| p.get(&name)), extra) {
                (Some(s), _) => s,
                (None, Some(Value::Bool(false))) => {
                    return Err(format!(
                        "property {name:?} is required but additionalProperties is false and it is not declared"
                    ));
                }
                (None, Some(s)) if s.is_object() => s,
                (None, _) => &Value::Bool(true),
            };
            let v = self
                .value(schema, depth + 1, false)
                .map_err(|e| format!("property {name:?}: {e}"))?;
            out.insert(name, v);
        }
        Ok(Value::Object(out))
    }

    /// The shortest array the schema allows (one item when it asks for one
    /// through `contains`).
    fn array(&self, obj: &Map<String, Value>, depth: usize) -> Result<Value, String> {
        let mut count = obj.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        if count > MAX_ITEMS {
            return Err(format!("minItems {count} is more than {MAX_ITEMS}"));
        }
        let prefix = obj
            .get("prefixItems")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let contains = obj.get("contains");
        if count == 0 && contains.is_some() {
            count = 1;
        }
        let items = obj.get("items").unwrap_or(&Value::Bool(true));
        let mut out = Vec::new();
        for i in 0..count as usize {
            let schema = match (prefix.get(i), contains) {
                (Some(s), _) => s,
                (None, Some(c)) if i == 0 => c,
                _ => items,
            };
            out.push(
                self.value(schema, depth + 1, false)
                    .map_err(|e| format!("item {i}: {e}"))?,
            );
        }
        Ok(Value::Array(out))
    }
}

/// `base` with `over`'s keywords added: `properties` joined, `required`
/// united, every other keyword of `over` kept over `base`'s.
fn merge(mut base: Map<String, Value>, over: Map<String, Value>) -> Map<String, Value> {
    for (key, value) in over {
        match (key.as_str(), base.get_mut(&key), value) {
            ("properties", Some(Value::Object(mine)), Value::Object(theirs)) => {
                mine.extend(theirs);
            }
            ("required", Some(Value::Array(mine)), Value::Array(theirs)) => {
                for name in theirs {
                    if !mine.contains(&name) {
                        mine.push(name);
                    }
                }
            }
            (_, _, value) => {
                base.insert(key, value);
            }
        }
    }
    base
}

/// The type to make: the schema's (the first that is not `null`, when it
/// lists several), else what its keywords imply; an object at the top.
fn type_of(obj: &Map<String, Value>, top: bool) -> String {
    match obj.get("type") {
        Some(Value::String(t)) => return t.clone(),
        Some(Value::Array(types)) => {
            let names: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
            if let Some(t) = names.iter().find(|t| **t != "null").or(names.first()) {
                return (*t).to_string();
            }
        }
        _ => {}
    }
    let has = |keys: &[&str]| keys.iter().any(|k| obj.contains_key(*k));
    let implied = if top || has(&["properties", "required", "additionalProperties"]) {
        "object"
    } else if has(&["items", "prefixItems", "minItems", "contains"]) {
        "array"
    } else if has(&["minLength", "maxLength", "pattern", "format"]) {
        "string"
    } else if has(&["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]) {
        "number"
    } else {
        "any"
    };
    implied.to_string()
}

/// A string of the asked length, `format` or `pattern`.
fn string(obj: &Map<String, Value>) -> Result<Value, String> {
    let min = obj.get("minLength").and_then(Value::as_u64).unwrap_or(0);
    let max = obj
        .get("maxLength")
        .and_then(Value::as_u64)
        .unwrap_or(MAX_STRING);
    if min > max || min > MAX_STRING {
        return Err(format!(
            "no string has at least {min} and at most {max} characters (or it is longer than {MAX_STRING})"
        ));
    }
    let fits = |s: &str| (min..=max).contains(&(s.chars().count() as u64));
    if let Some(pattern) = obj.get("pattern").and_then(Value::as_str) {
        return matching(pattern, min, max)
            .map(Value::String)
            .map_err(|e| format!("pattern {pattern:?}: {e}"));
    }
    if let Some(sample) = obj
        .get("format")
        .and_then(Value::as_str)
        .and_then(sample_of)
    {
        if fits(sample) {
            return Ok(json!(sample));
        }
        return Err(format!(
            "format {:?} has no value of {min} to {max} characters",
            obj.get("format")
        ));
    }
    let len = usize::try_from(min.max(1).min(max)).unwrap_or(1);
    Ok(Value::String("a".repeat(len)))
}

/// A value of a standard `format`.
fn sample_of(format: &str) -> Option<&'static str> {
    Some(match format {
        "date-time" => "2024-01-01T00:00:00Z",
        "date" => "2024-01-01",
        "time" => "00:00:00Z",
        "duration" => "P1D",
        "email" | "idn-email" => "user@example.com",
        "hostname" | "idn-hostname" => "example.com",
        "ipv4" => "192.0.2.1",
        "ipv6" => "2001:db8::1",
        "uri" | "iri" | "uri-reference" | "iri-reference" => "https://example.com/",
        "uuid" => "00000000-0000-4000-8000-000000000000",
        "uri-template" => "https://example.com/{id}",
        "json-pointer" => "/a",
        "relative-json-pointer" => "0",
        "regex" => "a",
        _ => return None,
    })
}

/// The number the bounds allow that is nearest 1 among a few candidates
/// (an integer for `integer`), a multiple of `multipleOf`.
fn number(obj: &Map<String, Value>, integer: bool) -> Result<Value, String> {
    let get = |k: &str| obj.get(k).and_then(Value::as_f64);
    let (min, max) = (get("minimum"), get("maximum"));
    let (xmin, xmax) = (get("exclusiveMinimum"), get("exclusiveMaximum"));
    let step = get("multipleOf").filter(|m| *m > 0.0);
    let ok = |v: f64| {
        v.is_finite()
            && min.is_none_or(|m| v >= m)
            && max.is_none_or(|m| v <= m)
            && xmin.is_none_or(|m| v > m)
            && xmax.is_none_or(|m| v < m)
            && (!integer || v.fract() == 0.0)
            && step.is_none_or(|s| ((v / s).round() * s - v).abs() < 1e-9)
    };
    let mut candidates = vec![1.0, 0.0];
    for bound in [min, xmin].into_iter().flatten() {
        candidates.extend([bound, bound.floor() + 1.0, bound + 0.5]);
        if let Some(s) = step {
            candidates.extend([(bound / s).ceil() * s, ((bound / s).floor() + 1.0) * s]);
        }
    }
    for bound in [max, xmax].into_iter().flatten() {
        candidates.extend([bound, bound.ceil() - 1.0, bound - 0.5]);
        if let Some(s) = step {
            candidates.extend([(bound / s).floor() * s, ((bound / s).ceil() - 1.0) * s]);
        }
    }
    if let (Some(lo), Some(hi)) = (min.or(xmin), max.or(xmax)) {
        candidates.push((lo + hi) / 2.0);
    }
    if let Some(s) = step {
        candidates.push(s);
    }
    let found = candidates
        .into_iter()
        .find(|v| ok(*v))
        .ok_or_else(|| "no number the generator tried satisfies its bounds".to_string())?;
    Ok(as_json_number(found, integer))
}

/// `v` as a JSON number: an integer when it is whole and `integer` asks
/// for one (or it fits one exactly).
fn as_json_number(v: f64, integer: bool) -> Value {
    if (integer || v.fract() == 0.0) && v.abs() < 9.0e15 {
        return json!(v as i64);
    }
    json!(v)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;

    #[test]
    fn required_properties_of_each_type() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "minLength": 3 },
                "n": { "type": "integer", "minimum": 5, "maximum": 9, "multipleOf": 3 },
                "x": { "type": "number", "exclusiveMinimum": 1.5, "maximum": 1.75 },
                "mode": { "enum": ["fast", "slow"] },
                "kind": { "const": "k" },
                "flag": { "type": ["boolean", "null"] },
                "tags": { "type": "array", "items": { "type": "string" }, "minItems": 2 },
                "optional": { "type": "string" }
            },
            "required": ["path", "n", "x", "mode", "kind", "flag", "tags"],
            "additionalProperties": false
        });
        let v = valid_args(&schema).unwrap();
        assert_eq!(
            v,
            json!({
                "path": "aaa", "n": 6, "x": 1.75, "mode": "fast", "kind": "k",
                "flag": true, "tags": ["a", "a"]
            })
        );
    }

    #[test]
    fn refs_all_of_and_any_of_are_followed() {
        let schema = json!({
            "$ref": "#/$defs/Args",
            "$defs": {
                "Args": {
                    "allOf": [
                        { "properties": { "a": { "$ref": "#/$defs/Name" } }, "required": ["a"] },
                        { "properties": { "b": { "anyOf": [ { "type": "null" }, { "type": "integer", "minimum": 7 } ] } }, "required": ["b"] }
                    ]
                },
                "Name": { "type": "string", "pattern": "^[A-Z][a-z]{2,}$" }
            }
        });
        let v = valid_args(&schema).unwrap();
        assert_eq!(v, json!({ "a": "Aaa", "b": 7 }));
    }

    #[test]
    fn what_cannot_be_made_is_said() {
        let empty_enum =
            json!({ "type": "object", "properties": { "a": { "enum": [] } }, "required": ["a"] });
        let e = valid_args(&empty_enum).unwrap_err();
        assert!(
            e.contains("property \"a\"") && e.contains("empty `enum`"),
            "{e}"
        );
        let bounds = json!({ "properties": { "n": { "type": "integer", "minimum": 3, "maximum": 2 } }, "required": ["n"] });
        assert!(valid_args(&bounds).unwrap_err().contains("bounds"));
        let recursive = json!({ "$ref": "#/$defs/T", "$defs": { "T": { "properties": { "t": { "$ref": "#/$defs/T" } }, "required": ["t"] } } });
        assert!(valid_args(&recursive).unwrap_err().contains("deeper"));
        let cycle = json!({ "$ref": "#/$defs/A", "$defs": { "A": { "$ref": "#/$defs/A" } } });
        assert!(valid_args(&cycle).unwrap_err().contains("points to itself"));
        // Every level branches twice: 2^30 paths, cut short.
        let mut defs = serde_json::Map::new();
        for i in 0..30 {
            let next = json!({ "$ref": format!("#/$defs/D{}", i + 1) });
            let branch =
                json!({ "type": "object", "properties": { "x": next }, "required": ["x"] });
            defs.insert(
                format!("D{i}"),
                json!({ "anyOf": [branch.clone(), branch] }),
            );
        }
        defs.insert("D30".into(), json!({ "enum": [] }));
        let wide = json!({ "$ref": "#/$defs/D0", "$defs": defs });
        let e = valid_args(&wide).unwrap_err();
        assert!(
            e.ends_with("the generator gave up after visiting 10000 schemas") && e.len() < 1000,
            "{e}"
        );
        let outside = json!({ "$ref": "https://example.com/schema.json" });
        assert!(valid_args(&outside).unwrap_err().contains("outside"));
    }

    #[test]
    fn invalid_objects_change_one_thing() {
        let schema = json!({
            "type": "object",
            "properties": { "path": { "type": "string" } },
            "required": ["path"],
            "additionalProperties": false
        });
        let v = valid_args(&schema).unwrap();
        let bad: Vec<Value> = invalid_args(&schema, &v)
            .into_iter()
            .map(|(b, _)| b)
            .collect();
        assert_eq!(
            bad,
            [
                json!({}),
                json!({ "path": 12345 }),
                json!({ "path": "a", "__toolhost_conformance_unexpected__": true })
            ]
        );
    }
}
