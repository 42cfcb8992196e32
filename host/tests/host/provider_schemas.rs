//! Provider-ready tool declarations (`toolhost list --schema-for`,
//! `toolhost::schemas::provider_tool`): each profile's output is checked against the
//! rules its provider documents, for the embedded tools and for schemas
//! built to hit every rewrite.
//!
//! The rules, as the providers state them:
//! - OpenAI function calling, strict mode (Structured Outputs): the root is
//!   an object schema, not `anyOf`; every object has
//!   `additionalProperties: false` and lists every property in `required`
//!   (optional ones are nullable); only the supported keywords (type,
//!   properties, required, additionalProperties, items, anyOf, enum, const,
//!   description, pattern, format with date-time, time, date, duration,
//!   email, hostname, ipv4, ipv6 or uuid, minimum, maximum,
//!   exclusiveMinimum, exclusiveMaximum, multipleOf, minItems, maxItems,
//!   $ref/$defs); names match `^[a-zA-Z0-9_-]{1,64}$`.
//! - Anthropic tools: `name` (`^[a-zA-Z0-9_-]{1,64}$`), `description`,
//!   `input_schema`, a JSON Schema whose `type` is `object`.
//! - Gemini function declarations: `parameters` is the OpenAPI 3.0 Schema
//!   subset (type, format, description, nullable, enum of strings,
//!   properties, required, items, minItems, maxItems, minimum, maximum,
//!   minLength, maxLength, minProperties, maxProperties, pattern, anyOf);
//!   one type per schema; no `$ref`, `additionalProperties`, `const`,
//!   `oneOf`, `allOf`, `default`, `title`; names start with a letter or `_`.

use serde_json::{Value, json};
use toolhost::schemas::Provider;
use toolhost::schemas::provider_tool;
use toolhost::{Descriptor, SandboxMode, SideEffect};

fn descriptor(name: &str, input_schema: Value) -> Descriptor {
    Descriptor {
        name: name.into(),
        description: format!("the {name} tool"),
        input_schema,
        output_schema: None,
        concurrency_safe: true,
        side_effect: SideEffect::None,
        idempotent: true,
        min_mode: SandboxMode::None,
    }
}

fn name_ok(name: &str, first_may_be_digit: bool) -> bool {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| {
        c.is_ascii_alphabetic()
            || c == '_'
            || (first_may_be_digit && (c.is_ascii_digit() || c == '-'))
    });
    first_ok && name.len() <= 64 && chars.all(|c| c.is_ascii_alphanumeric() || "_-".contains(c))
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// Every schema in `schema`, with its path.
fn schemas<'a>(schema: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>) {
    out.push((path.clone(), schema));
    if let Some(p) = schema.get("properties").and_then(Value::as_object) {
        for (k, s) in p {
            schemas(s, format!("{path}/properties/{k}"), out);
        }
    }
    if let Some(items) = schema.get("items") {
        schemas(items, format!("{path}/items"), out);
    }
    for k in ["anyOf", "oneOf", "allOf"] {
        if let Some(a) = schema.get(k).and_then(Value::as_array) {
            for (i, s) in a.iter().enumerate() {
                schemas(s, format!("{path}/{k}/{i}"), out);
            }
        }
    }
}

fn all_schemas(root: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    schemas(root, String::new(), &mut out);
    out
}

fn check_openai(decl: &Value) -> Result<(), String> {
    if decl["type"] != "function" || keys(decl).len() != 2 {
        return Err(format!("not a function tool: {decl}"));
    }
    let f = &decl["function"];
    if !name_ok(f["name"].as_str().unwrap_or(""), true) {
        return Err(format!("bad name {}", f["name"]));
    }
    let params = &f["parameters"];
    if params["type"] != "object" || params.get("anyOf").is_some() {
        return Err(format!("the root must be an object schema: {params}"));
    }
    if f["strict"] != true {
        return Ok(());
    }
    const ALLOWED: [&str; 18] = [
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
        "enum",
        "const",
        "description",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    ];
    const FORMATS: [&str; 9] = [
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
    for (path, s) in all_schemas(params) {
        if let Some(k) = keys(s).into_iter().find(|k| !ALLOWED.contains(k)) {
            return Err(format!(
                "{path}: keyword {k} is not supported in strict mode"
            ));
        }
        if !["type", "anyOf", "enum", "const"]
            .iter()
            .any(|k| s.get(*k).is_some())
        {
            return Err(format!("{path}: a schema without a type: {s}"));
        }
        if let Some(f) = s.get("format")
            && !FORMATS.contains(&f.as_str().unwrap_or(""))
        {
            return Err(format!("{path}: format {f} is not supported"));
        }
        let is_object = s["type"] == "object"
            || s["type"]
                .as_array()
                .is_some_and(|t| t.contains(&json!("object")));
        if is_object {
            if s["additionalProperties"] != false {
                return Err(format!("{path}: objects need additionalProperties: false"));
            }
            let mut props = keys(&s["properties"]);
            let mut required: Vec<&str> = s["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            props.sort_unstable();
            required.sort_unstable();
            if props != required {
                return Err(format!("{path}: every property must be required: {s}"));
            }
        }
    }
    Ok(())
}

fn check_anthropic(decl: &Value) -> Result<(), String> {
    let mut k = keys(decl);
    k.sort_unstable();
    if k != ["description", "input_schema", "name"] {
        return Err(format!("keys {k:?}"));
    }
    if !name_ok(decl["name"].as_str().unwrap_or(""), true) {
        return Err(format!("bad name {}", decl["name"]));
    }
    if decl["input_schema"]["type"] != "object" || decl["input_schema"].get("$schema").is_some() {
        return Err(format!(
            "input_schema must be an object schema: {}",
            decl["input_schema"]
        ));
    }
    Ok(())
}

fn check_gemini(decl: &Value) -> Result<(), String> {
    if !name_ok(decl["name"].as_str().unwrap_or(""), false) {
        return Err(format!("bad name {}", decl["name"]));
    }
    let Some(params) = decl.get("parameters") else {
        return Ok(());
    };
    if params["type"] != "object" || keys(&params["properties"]).is_empty() {
        return Err(format!(
            "parameters must be an object with properties: {params}"
        ));
    }
    const ALLOWED: [&str; 18] = [
        "type",
        "format",
        "description",
        "nullable",
        "enum",
        "properties",
        "required",
        "items",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minProperties",
        "maxProperties",
        "pattern",
        "anyOf",
    ];
    const TYPES: [&str; 6] = ["string", "number", "integer", "boolean", "array", "object"];
    for (path, s) in all_schemas(params) {
        if let Some(k) = keys(s).into_iter().find(|k| !ALLOWED.contains(k)) {
            return Err(format!(
                "{path}: keyword {k} is not in Gemini's schema subset"
            ));
        }
        match s.get("type") {
            Some(Value::String(t)) if TYPES.contains(&t.as_str()) => {}
            None if s.get("anyOf").is_some() => {}
            other => {
                return Err(format!(
                    "{path}: type must be one of {TYPES:?}, not {other:?}"
                ));
            }
        }
        if let Some(e) = s.get("enum") {
            let strings = e.as_array().is_some_and(|a| a.iter().all(Value::is_string));
            if !strings || s["type"] != "string" {
                return Err(format!(
                    "{path}: enum must be strings of a string schema: {s}"
                ));
            }
        }
        if let Some(f) = s.get("format").and_then(Value::as_str) {
            let ok = match s["type"].as_str() {
                Some("string") => ["date-time", "enum"].contains(&f),
                Some("integer") => ["int32", "int64"].contains(&f),
                Some("number") => ["float", "double"].contains(&f),
                _ => false,
            };
            if !ok {
                return Err(format!("{path}: format {f} is not allowed here"));
            }
        }
        if let Some(r) = s.get("required").and_then(Value::as_array) {
            let props = keys(&s["properties"]);
            if let Some(missing) = r
                .iter()
                .find(|n| !props.contains(&n.as_str().unwrap_or("")))
            {
                return Err(format!("{path}: required {missing} is not a property"));
            }
        }
    }
    Ok(())
}

fn check(provider: Provider, decl: &Value) -> Result<(), String> {
    match provider {
        Provider::OpenAi => check_openai(decl),
        Provider::Anthropic => check_anthropic(decl),
        Provider::Gemini => check_gemini(decl),
    }
}

/// Schemas that hit every rewrite.
fn tricky() -> Vec<Descriptor> {
    vec![
        descriptor(
            "optional_and_nested",
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "title": "Args", "type": "object",
                "properties": {
                    "path": {"type": "string", "default": "."},
                    "limit": {"type": "integer", "format": "uint32", "minimum": 1},
                    "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}},
                    "when": {"type": "string", "format": "date-time"},
                    "site": {"type": "string", "format": "uri"},
                },
                "required": ["path"],
            }),
        ),
        descriptor(
            "unions_and_enums",
            json!({
                "type": "object",
                "properties": {
                    "mode": {"enum": ["fast", "slow"]},
                    "level": {"enum": [1, 2, 3]},
                    "kind": {"const": "file"},
                    "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                    "maybe": {"type": ["string", "null"]},
                    "many": {"type": ["string", "integer"]},
                    "tuple": {"type": "array", "items": [{"type": "string"}, {"type": "number"}]},
                    "only": {"allOf": [{"type": "string", "minLength": 2}]},
                    "anything": true,
                    "bounded": {"type": "number", "exclusiveMinimum": 0},
                },
                "required": ["mode"],
                "additionalProperties": false,
            }),
        ),
        descriptor(
            "refs",
            json!({
                "type": "object",
                "$defs": {
                    "Point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]},
                    "Tree": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}}},
                },
                "properties": {
                    "at": {"$ref": "#/$defs/Point", "description": "where"},
                    "tree": {"$ref": "#/$defs/Tree"},
                    "definitions": {"type": "string"},
                    "$ref": {"type": "string"},
                },
                "required": ["at"],
            }),
        ),
        descriptor(
            "open_map",
            json!({"type": "object", "properties": {"env": {"type": "object", "additionalProperties": {"type": "string"}}}, "patternProperties": {"^x-": {}}}),
        ),
        descriptor("no_args", json!({"type": "object", "properties": {}})),
        descriptor("anything_goes", json!(true)),
    ]
}

#[tokio::test]
async fn every_profile_meets_its_providers_rules() {
    let ws = crate::support::tempdir();
    let host =
        crate::support::builder_with(ws.path(), crate::support::runtime_options_with_pool(2))
            .build()
            .await
            .unwrap();
    let mut all: Vec<Descriptor> = host
        .tools(None)
        .iter()
        .map(|t| t.descriptor.clone())
        .collect();
    assert_eq!(all.len(), toolhost::EMBEDDED_TOOLS.len());
    all.extend(tricky());
    for provider in Provider::ALL {
        for d in &all {
            let decl = provider_tool(provider, d);
            if let Err(e) = check(provider, &decl) {
                panic!("{provider} {}: {e}\n{decl:#}", d.name);
            }
        }
    }
}

#[test]
fn openai_strict_mode_makes_optional_fields_nullable_and_falls_back_when_it_must() {
    let t = tricky();
    let decl = provider_tool(Provider::OpenAi, &t[0]);
    let f = &decl["function"];
    assert_eq!(f["strict"], true, "{decl:#}");
    let p = &f["parameters"]["properties"];
    assert_eq!(
        p["path"],
        json!({"type": "string"}),
        "required stays as it is"
    );
    assert_eq!(p["limit"]["type"], json!(["integer", "null"]));
    assert_eq!(
        p["limit"]["maximum"],
        json!(4_294_967_295u64),
        "the width survives as a bound"
    );
    assert_eq!(p["opts"]["type"], json!(["object", "null"]));
    assert_eq!(
        p["opts"]["properties"]["deep"]["type"],
        json!(["boolean", "null"])
    );
    assert_eq!(p["when"]["format"], "date-time");
    assert!(
        p["site"].get("format").is_none(),
        "uri is not a strict-mode format"
    );
    // An open map cannot be strict: the tool stays usable, not strict.
    let open = provider_tool(Provider::OpenAi, &t[3]);
    assert_eq!(open["function"]["strict"], false, "{open:#}");
    assert_eq!(
        open["function"]["parameters"]["properties"]["env"]["additionalProperties"],
        json!({"type": "string"})
    );
}

#[test]
fn gemini_inlines_refs_and_keeps_properties_named_like_keywords() {
    let decl = provider_tool(Provider::Gemini, &tricky()[2]);
    let p = &decl["parameters"]["properties"];
    assert_eq!(p["at"]["properties"]["x"]["type"], "number", "{decl:#}");
    assert_eq!(p["at"]["description"], "where");
    assert_eq!(p["definitions"]["type"], "string");
    assert_eq!(p["$ref"]["type"], "string");
    // The recursive ref ends as "any value" after a bounded depth.
    let mut depth = 0;
    let mut node = &p["tree"];
    while let Some(next) = node.pointer("/properties/children/items") {
        node = next;
        depth += 1;
    }
    assert!((1..=10).contains(&depth), "{depth}");
    let enums = provider_tool(Provider::Gemini, &tricky()[1]);
    let p = &enums["parameters"]["properties"];
    assert_eq!(p["kind"], json!({"type": "string", "enum": ["file"]}));
    assert_eq!(p["maybe"], json!({"type": "string", "nullable": true}));
    assert!(
        p["level"].get("enum").is_none(),
        "integer enums are not Gemini's"
    );
    assert!(
        provider_tool(Provider::Gemini, &tricky()[4])
            .get("parameters")
            .is_none()
    );
}

#[test]
fn list_schema_for_prints_each_providers_declarations() {
    for provider in Provider::ALL {
        let out = std::process::Command::new(crate::support::bin())
            .args(["list", "--schema-for", provider.as_str()])
            .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let decls: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(decls.len(), toolhost::EMBEDDED_TOOLS.len());
        for d in &decls {
            check(provider, d).unwrap_or_else(|e| panic!("{provider}: {e}"));
        }
    }
    let out = std::process::Command::new(crate::support::bin())
        .args(["list", "--schema-for", "llama"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A schema that refers to itself from many places unfolds without end
/// when each `$ref` is copied: twenty properties that each refer to the
/// root are a few hundred bytes and about 20^8 nodes inlined eight deep.
/// The declarations stay bounded (and OpenAI's is not strict, since what
/// was cut tells the model less than the host checks).
#[test]
fn self_referring_schemas_unfold_to_a_bounded_declaration() {
    let properties: serde_json::Map<String, Value> = (0..20)
        .map(|i| (format!("p{i}"), json!({"$ref": "#"})))
        .collect();
    let d = descriptor(
        "fanout",
        json!({"type": "object", "properties": properties}),
    );
    // And long property names at the root, each referring to it.
    let names: serde_json::Map<String, Value> = (0..3)
        .map(|i| (format!("{i}{}", "k".repeat(80_000)), json!({"$ref": "#"})))
        .collect();
    let d3 = descriptor(
        "fanout_keys",
        json!({"type": "object", "properties": names}),
    );
    for provider in [Provider::OpenAi, Provider::Gemini] {
        let size = serde_json::to_string(&provider_tool(provider, &d3))
            .unwrap()
            .len();
        assert!(size < 8 << 20, "{provider:?}: {size} bytes");
    }
    // And a long description at the root, referred to from three places.
    let d2 = descriptor(
        "fanout_text",
        json!({"type": "object", "description": "d".repeat(200_000),
               "properties": {"a": {"$ref": "#"}, "b": {"$ref": "#"}, "c": {"$ref": "#"}},
               "required": ["a"]}),
    );
    for d in [&d, &d2] {
        for provider in [Provider::OpenAi, Provider::Gemini, Provider::Anthropic] {
            let decl = provider_tool(provider, d);
            let size = serde_json::to_string(&decl).unwrap().len();
            assert!(size < 8 << 20, "{provider:?}: {size} bytes");
            // Still a declaration the provider takes.
            check(provider, &decl).unwrap_or_else(|e| panic!("{provider:?}: {e}"));
            if provider == Provider::OpenAi {
                assert_eq!(decl["function"]["strict"], false, "{provider:?}");
            }
        }
    }
}

/// Strict mode closes every object and requires every property: an object
/// that takes any key (no properties, or `additionalProperties: true`), or
/// a required name without a property, cannot be said that way without
/// making valid calls impossible, so such a declaration is not strict.
#[test]
fn open_objects_and_unlisted_required_names_are_not_strict() {
    for schema in [
        json!({"type": "object"}),
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": true}),
        json!({"type": "object", "properties": {"a": {"type": "string"}, "m": {"type": "object"}}}),
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]}),
        json!({"type": "object", "properties": {"m": {"type": ["object", "null"]}}, "required": ["m"]}),
    ] {
        let decl = provider_tool(Provider::OpenAi, &descriptor("open", schema.clone()));
        assert_eq!(decl["function"]["strict"], false, "{schema}: {decl}");
        check(Provider::OpenAi, &decl).unwrap_or_else(|e| panic!("{schema}: {e}"));
    }
    let closed =
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]});
    let decl = provider_tool(Provider::OpenAi, &descriptor("closed", closed));
    assert_eq!(decl["function"]["strict"], true, "{decl}");
}

/// Gemini's subset has inclusive bounds only: an integer's exclusive bound
/// becomes the next integer in, and a number's is not shown (as an
/// inclusive bound it would offer the model the one value the host
/// refuses).
#[test]
fn gemini_exclusive_bounds_never_admit_the_bound() {
    let d = descriptor(
        "bounds",
        json!({"type": "object", "properties": {
            "count": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
            "ratio": {"type": "number", "exclusiveMinimum": 0}
        }}),
    );
    let decl = provider_tool(Provider::Gemini, &d);
    let p = &decl["parameters"]["properties"];
    assert_eq!(p["count"]["minimum"], 1, "{decl}");
    assert_eq!(p["count"]["maximum"], 9, "{decl}");
    assert!(p["ratio"].get("minimum").is_none(), "{decl}");
    check(Provider::Gemini, &decl).unwrap();
}
