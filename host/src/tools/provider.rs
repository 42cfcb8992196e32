//! Tool declarations in the shape each model provider accepts
//! (`toolhost list --schema-for openai|anthropic|gemini`, [`provider_tool`]).
//!
//! Providers accept narrower schema dialects than JSON Schema 2020-12, and
//! refuse a whole request over one keyword they do not know. Each profile
//! starts from the client view of the schema
//! ([`Descriptor::for_clients`]: standard formats only), inlines local
//! `$ref`s where the provider has none, and rewrites or drops what the
//! provider does not take.
//!
//! A normalized schema may only be *looser* than the tool's own, never
//! stricter in a way that hides a valid call, except where a provider
//! demands it (OpenAI strict mode closes objects). Nothing is lost at
//! enforcement: the host validates every call against the tool's full
//! schema, whatever the model was shown. MCP `tools/list` keeps the full
//! schema.
//!
//! | provider | declaration | schema rules applied |
//! |---|---|---|
//! | `openai` | `{"type":"function","function":{name, description, parameters, strict}}` | strict mode when the schema allows it: every object closed (`additionalProperties: false`) with every property required, optional ones made nullable; only the keywords strict mode supports; otherwise `strict: false` with the schema cleaned of annotations |
//! | `anthropic` | `{name, description, input_schema}` | root `type: "object"`; `$schema`, `$id`, `$comment` removed |
//! | `gemini` | `{name, description, parameters?}` | the OpenAPI 3.0 subset: one `type` per schema (`nullable` for null), string-only `enum` (`const` becomes one), `oneOf` as `anyOf`, no `$ref`, `additionalProperties`, `default`, `title`; no `parameters` for a tool without arguments |

use crate::tools::descriptor::Descriptor;
use serde_json::{Map, Value, json};
use std::fmt;
use std::str::FromStr;

/// A model provider whose tool-declaration format [`provider_tool`] targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// OpenAI function calling (Chat Completions `tools`), strict when possible.
    OpenAi,
    /// Anthropic Messages API `tools`.
    Anthropic,
    /// Google Gemini `functionDeclarations`.
    Gemini,
}

impl Provider {
    /// Every provider.
    pub const ALL: [Provider; 3] = [Provider::OpenAi, Provider::Anthropic, Provider::Gemini];

    /// The name `--schema-for` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Gemini => "gemini",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Provider {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Provider::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("unknown provider {s:?} (expected openai, anthropic or gemini)"))
    }
}

/// The declaration of `descriptor`'s tool in `provider`'s format, with its
/// input schema normalized to what the provider accepts.
pub fn provider_tool(provider: Provider, descriptor: &Descriptor) -> Value {
    let d = descriptor.for_clients();
    match provider {
        Provider::Anthropic => json!({
            "name": d.name,
            "description": d.description,
            "input_schema": anthropic(&d.input_schema),
        }),
        Provider::OpenAi => {
            let (inlined, cut) = inline_refs(&d.input_schema);
            let mut strict = !cut;
            let mut parameters = openai_strict(&inlined, &mut strict);
            if !is_object_type(&parameters) {
                strict = false;
            }
            if !strict {
                parameters = object_root(clean(&inlined));
            }
            json!({
                "type": "function",
                "function": {
                    "name": d.name,
                    "description": d.description,
                    "parameters": parameters,
                    "strict": strict,
                },
            })
        }
        Provider::Gemini => {
            let parameters = object_root(gemini(&inline_refs(&d.input_schema).0));
            let mut out = json!({ "name": d.name, "description": d.description });
            let has_properties = parameters
                .get("properties")
                .and_then(Value::as_object)
                .is_some_and(|p| !p.is_empty());
            if has_properties && let Some(o) = out.as_object_mut() {
                o.insert("parameters".into(), parameters);
            }
            out
        }
    }
}

/// Keywords that only annotate or identify a schema.
const ANNOTATIONS: [&str; 10] = [
    "$schema",
    "$id",
    "$comment",
    "$anchor",
    "title",
    "default",
    "examples",
    "readOnly",
    "writeOnly",
    "deprecated",
];

/// The `format`s OpenAI strict mode supports.
const OPENAI_FORMATS: [&str; 9] = [
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Keywords OpenAI strict mode takes as they are (besides those rebuilt:
/// `type`, `properties`, `required`, `additionalProperties`, `items`,
/// `anyOf`, `format`).
const OPENAI_KEPT: [&str; 11] = [
    "description",
    "enum",
    "const",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
];

/// Keywords whose loss changes a schema's shape, not only its bounds:
/// strict mode cannot express them.
const OPENAI_STRUCTURAL: [&str; 11] = [
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "patternProperties",
    "dependentSchemas",
    "prefixItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
];

fn anthropic(schema: &Value) -> Value {
    let mut out = match schema {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    for k in ["$schema", "$id", "$comment"] {
        out.remove(k);
    }
    object_root(Value::Object(out))
}

/// Makes sure the root says `type: "object"` (a boolean or typeless root
/// becomes an object schema; tool arguments are always an object).
fn object_root(schema: Value) -> Value {
    let mut m = match schema {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    if !m.get("type").is_some_and(|t| t == "object") {
        m.insert("type".into(), json!("object"));
        m.remove("anyOf");
        m.remove("oneOf");
    }
    if !m.contains_key("properties") {
        m.insert("properties".into(), json!({}));
    }
    Value::Object(m)
}

fn is_object_type(schema: &Value) -> bool {
    schema.get("type").is_some_and(|t| t == "object")
}

/// The schema without annotations, everywhere (for OpenAI non-strict).
fn clean(schema: &Value) -> Value {
    match schema {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !ANNOTATIONS.contains(&k.as_str()))
                .filter(|(k, _)| !matches!(k.as_str(), "$defs" | "definitions"))
                .map(|(k, v)| {
                    let v = match k.as_str() {
                        "properties" => map_values(v, clean),
                        "items" | "additionalProperties" | "not" => clean(v),
                        "anyOf" | "oneOf" | "allOf" => map_items(v, clean),
                        _ => v.clone(),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn map_values(v: &Value, mut f: impl FnMut(&Value) -> Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), f(v))).collect()),
        other => other.clone(),
    }
}

fn map_items(v: &Value, f: impl Fn(&Value) -> Value) -> Value {
    match v {
        Value::Array(a) => Value::Array(a.iter().map(f).collect()),
        other => other.clone(),
    }
}

/// OpenAI strict mode; sets `strict` to false when the schema needs
/// something strict mode cannot say.
fn openai_strict(schema: &Value, strict: &mut bool) -> Value {
    let Value::Object(m) = schema else {
        // `true`: any value, which strict mode cannot say.
        *strict = false;
        return json!({});
    };
    let mut out = Map::new();
    for (k, v) in m {
        let k = k.as_str();
        if OPENAI_KEPT.contains(&k) {
            out.insert(k.into(), v.clone());
        } else if OPENAI_STRUCTURAL.contains(&k) {
            *strict = false;
        } else {
            match k {
                "type" => {
                    out.insert(k.into(), v.clone());
                }
                "format" if v.as_str().is_some_and(|f| OPENAI_FORMATS.contains(&f)) => {
                    out.insert(k.into(), v.clone());
                }
                "items" if v.is_object() => {
                    out.insert(k.into(), openai_strict(v, strict));
                }
                "items" => *strict = false,
                "anyOf" | "oneOf" => {
                    let all = v
                        .as_array()
                        .map(|a| a.iter().map(|s| openai_strict(s, strict)).collect())
                        .unwrap_or_default();
                    out.insert("anyOf".into(), Value::Array(all));
                }
                "additionalProperties" if !(v == &json!(false) || v == &json!(true)) => {
                    *strict = false;
                }
                // Rebuilt below, dropped (annotations, bounds strict mode
                // does not take; the host still checks them), or handled.
                _ => {}
            }
        }
    }
    let object = m.get("type").is_some_and(|t| {
        t == "object"
            || t.as_array()
                .is_some_and(|ts| ts.iter().any(|t| t == "object"))
    }) || m.contains_key("properties");
    if object {
        let required: Vec<&str> = m
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut props = Map::new();
        if let Some(Value::Object(p)) = m.get("properties") {
            for (name, s) in p {
                let s = openai_strict(s, strict);
                let s = if required.contains(&name.as_str()) {
                    s
                } else {
                    nullable(s)
                };
                props.insert(name.clone(), s);
            }
        }
        // What closing cannot say: an object that takes any key (no
        // properties and not closed, or explicitly open) would be closed to
        // `{}`, and a required name with no property would be dropped; the
        // model could then not send a valid call. Not strict.
        let open = m.get("additionalProperties") == Some(&json!(true))
            || (props.is_empty() && m.get("additionalProperties") != Some(&json!(false)));
        if open || required.iter().any(|r| !props.contains_key(*r)) {
            *strict = false;
        }
        let names: Vec<Value> = props.keys().map(|k| json!(k)).collect();
        // An object that may also be null (`["object", "null"]`) stays so.
        let or_null = m
            .get("type")
            .and_then(Value::as_array)
            .is_some_and(|ts| ts.iter().any(|t| t == "null"));
        out.insert(
            "type".into(),
            if or_null {
                json!(["object", "null"])
            } else {
                json!("object")
            },
        );
        out.insert("properties".into(), Value::Object(props));
        out.insert("required".into(), Value::Array(names));
        // Closing an object only keeps the model from sending what the
        // schema did not describe; the host still takes it if it is sent.
        out.insert("additionalProperties".into(), json!(false));
    }
    let typed = ["type", "anyOf", "enum", "const"]
        .iter()
        .any(|k| out.contains_key(*k));
    if !typed {
        *strict = false;
    }
    Value::Object(out)
}

/// Whether a schema's `type` is `integer` (alone, or beside `null`).
fn integer_typed(m: &Map<String, Value>) -> bool {
    match m.get("type") {
        Some(Value::String(t)) => t == "integer",
        Some(Value::Array(ts)) => {
            ts.iter().any(|t| t == "integer") && ts.iter().all(|t| t == "integer" || t == "null")
        }
        _ => false,
    }
}

/// `schema` or null: how strict mode says "optional".
fn nullable(schema: Value) -> Value {
    let Value::Object(mut m) = schema else {
        return schema;
    };
    match m.get_mut("type") {
        Some(Value::String(t)) if t != "null" => {
            let t = t.clone();
            m.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(types)) => {
            if !types.iter().any(|t| t == "null") {
                types.push(json!("null"));
            }
        }
        _ => {
            if let Some(Value::Array(any)) = m.get_mut("anyOf") {
                any.push(json!({"type": "null"}));
            } else {
                return json!({ "anyOf": [Value::Object(m), {"type": "null"}] });
            }
        }
    }
    if let Some(Value::Array(e)) = m.get_mut("enum")
        && !e.contains(&Value::Null)
    {
        e.push(Value::Null);
    }
    Value::Object(m)
}

/// Gemini's OpenAPI 3.0 subset.
fn gemini(schema: &Value) -> Value {
    let Value::Object(m) = schema else {
        // Any value: a string is one, and the only shape every model sends.
        return json!({"type": "string"});
    };
    let mut out = Map::new();
    // `allOf` of one schema is that schema; of several, it is dropped
    // (looser; the host still checks it).
    if let Some(Value::Array(all)) = m.get("allOf")
        && let [one] = all.as_slice()
        && let Value::Object(inner) = gemini(one)
    {
        out.extend(inner);
    }
    let mut nullable = false;
    match m.get("type") {
        Some(Value::String(t)) if t == "null" => {
            out.insert("type".into(), json!("string"));
            nullable = true;
        }
        Some(Value::String(t)) => {
            out.insert("type".into(), json!(t));
        }
        Some(Value::Array(types)) => {
            let real: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
            nullable = real.len() < types.len();
            match real.as_slice() {
                [] => {
                    out.insert("type".into(), json!("string"));
                }
                [one] => {
                    out.insert("type".into(), (*one).clone());
                }
                many => {
                    let any: Vec<Value> = many.iter().map(|t| json!({"type": t})).collect();
                    out.insert("anyOf".into(), Value::Array(any));
                }
            }
        }
        _ => {}
    }
    for (k, v) in m {
        match k.as_str() {
            "description" | "pattern" | "minimum" | "maximum" | "minItems" | "maxItems"
            | "minLength" | "maxLength" | "minProperties" | "maxProperties" => {
                out.insert(k.clone(), v.clone());
            }
            // The subset has inclusive bounds only: for an integer, the
            // exclusive bound is the next integer in; for a number there is
            // no exact inclusive one, so none is shown (showing the bound
            // itself would offer the model a value the host refuses).
            "exclusiveMinimum" if !m.contains_key("minimum") => {
                if let Some(n) = v.as_i64().filter(|_| integer_typed(m)) {
                    out.insert("minimum".into(), json!(n.saturating_add(1)));
                }
            }
            "exclusiveMaximum" if !m.contains_key("maximum") => {
                if let Some(n) = v.as_i64().filter(|_| integer_typed(m)) {
                    out.insert("maximum".into(), json!(n.saturating_sub(1)));
                }
            }
            "format" => {
                let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
                let ok = match ty {
                    "string" => matches!(v.as_str(), Some("date-time" | "enum")),
                    "integer" => matches!(v.as_str(), Some("int32" | "int64")),
                    "number" => matches!(v.as_str(), Some("float" | "double")),
                    _ => false,
                };
                if ok {
                    out.insert(k.clone(), v.clone());
                }
            }
            "enum" => {
                if let Some(values) = v.as_array() {
                    let strings: Vec<&Value> = values.iter().filter(|x| x.is_string()).collect();
                    nullable |= values.contains(&Value::Null);
                    if !strings.is_empty() && strings.len() + usize::from(nullable) >= values.len()
                    {
                        out.insert("type".into(), json!("string"));
                        out.insert(
                            k.clone(),
                            Value::Array(strings.into_iter().cloned().collect()),
                        );
                    }
                }
            }
            "const" if v.is_string() => {
                out.insert("type".into(), json!("string"));
                out.insert("enum".into(), json!([v]));
            }
            "properties" => {
                out.insert(k.clone(), map_values(v, gemini));
                out.entry("type").or_insert(json!("object"));
            }
            "required" => {
                let known = m.get("properties").and_then(Value::as_object);
                let names: Vec<Value> = v
                    .as_array()
                    .map(|r| {
                        r.iter()
                            .filter(|n| {
                                n.as_str()
                                    .is_some_and(|n| known.is_some_and(|p| p.contains_key(n)))
                            })
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                out.insert(k.clone(), Value::Array(names));
            }
            "items" => {
                let items = match v {
                    Value::Array(tuple) => {
                        json!({ "anyOf": tuple.iter().map(gemini).collect::<Vec<_>>() })
                    }
                    one => gemini(one),
                };
                out.insert(k.clone(), items);
            }
            "anyOf" | "oneOf" => {
                let any: Vec<Value> = v
                    .as_array()
                    .map(|a| a.iter().map(gemini).collect())
                    .unwrap_or_default();
                out.insert("anyOf".into(), Value::Array(any));
            }
            "nullable" if v == &json!(true) => nullable = true,
            // Everything else is not in the subset: dropped.
            _ => {}
        }
    }
    if nullable {
        out.insert("nullable".into(), json!(true));
    }
    if !out.contains_key("type") && !out.contains_key("anyOf") {
        // Nothing left that says what it is: any value, shown as a string.
        out.insert("type".into(), json!("string"));
    }
    Value::Object(out)
}

/// How deep local `$ref`s are inlined; a deeper (recursive) one becomes
/// "any value".
const MAX_REF_DEPTH: usize = 8;

/// The most schema nodes inlining may produce. Each `$ref` copies its
/// target, so a few hundred bytes of schema (twenty properties that each
/// refer to the root) would otherwise unfold into billions of nodes; a long
/// description referred to from many places, into gigabytes. Counted in
/// bytes: each node, and the text of each string and value it copies.
const MAX_INLINED_BYTES: usize = 1 << 20;

/// Inlines `$ref`s to `#/$defs/...` and `#/definitions/...` and drops the
/// definitions. A ref that does not resolve, recurses too deep, or is met
/// once the copy has reached [`MAX_INLINED_BYTES`], becomes `{}` (any
/// value; the host still validates against the real schema); the rest of
/// the schema is kept whole, so the result stays a valid schema. Also says
/// whether the budget cut anything (the declaration is then not strict).
fn inline_refs(root: &Value) -> (Value, bool) {
    fn walk(v: &Value, root: &Value, depth: usize, budget: &mut usize) -> Value {
        // Each node, and the text it copies: a string's, an object's keys.
        let keys = |m: &Map<String, Value>| m.keys().map(|k| 16 + k.len()).sum::<usize>();
        *budget = budget.saturating_sub(match v {
            Value::String(s) => 16 + s.len(),
            Value::Object(m) => 16 + keys(m),
            _ => 16,
        });
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    let target = r
                        .strip_prefix('#')
                        .and_then(|p| root.pointer(p))
                        .filter(|_| depth < MAX_REF_DEPTH && *budget > 0);
                    let mut base = match target {
                        Some(t) => match walk(t, root, depth + 1, budget) {
                            Value::Object(o) => o,
                            _ => Map::new(),
                        },
                        None => Map::new(),
                    };
                    // Siblings of `$ref` (a description, say) win.
                    for (k, x) in m {
                        if k != "$ref" {
                            base.insert(k.clone(), walk(x, root, depth, budget));
                        }
                    }
                    return Value::Object(base);
                }
                Value::Object(
                    m.iter()
                        .filter(|(k, _)| !matches!(k.as_str(), "$defs" | "definitions"))
                        .map(|(k, x)| {
                            let x = match k.as_str() {
                                // Maps from names (which may be anything,
                                // `$ref` or `definitions` too) to schemas.
                                "properties" | "patternProperties" | "dependentSchemas" => {
                                    if let Value::Object(names) = x {
                                        *budget = budget.saturating_sub(keys(names));
                                    }
                                    map_values(x, |s| walk(s, root, depth, budget))
                                }
                                // Instances, not schemas: left alone (and
                                // counted: a copy is a copy).
                                "const" | "enum" | "default" | "examples" => {
                                    *budget = budget.saturating_sub(
                                        serde_json::to_string(x).map_or(0, |t| t.len()),
                                    );
                                    x.clone()
                                }
                                _ => walk(x, root, depth, budget),
                            };
                            (k.clone(), x)
                        })
                        .collect(),
                )
            }
            Value::Array(a) => {
                Value::Array(a.iter().map(|x| walk(x, root, depth, budget)).collect())
            }
            other => other.clone(),
        }
    }
    let mut budget = MAX_INLINED_BYTES;
    let inlined = walk(root, root, 0, &mut budget);
    (inlined, budget == 0)
}
