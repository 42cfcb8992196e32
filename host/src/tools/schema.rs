//! Schemas as clients see them: only the `format`s that JSON Schema 2020-12
//! defines.
//!
//! Schema generators for typed languages annotate numbers with their
//! machine type (`"format": "uint64"`, `"int32"`, `"double"`; schemars does
//! this for every Rust integer and float), and clients that check formats
//! (the TypeScript MCP SDK, through ajv) warn about or refuse formats they do
//! not know. Before a schema is handed to a client (MCP `tools/list`,
//! `toolhost list --json`), every `format` outside the 2020-12 vocabulary is
//! removed; an integer width is kept as the `minimum`/`maximum` it implies
//! when the schema does not bound that side already. The host validates
//! arguments and outputs against the tool's own schema, never this one.
//!
//! Only schema positions are rewritten: a property *named* `format`, or a
//! `format` key inside `const`, `enum`, `default` or `examples` (which hold
//! instances, not schemas), is left alone.

use serde_json::{Map, Value};

/// Every `format` that JSON Schema 2020-12 defines (Validation, section 7.3).
pub(crate) const STANDARD_FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Keywords whose value is one schema.
const ONE_SCHEMA: [&str; 12] = [
    "not",
    "if",
    "then",
    "else",
    "contains",
    "additionalProperties",
    "propertyNames",
    "additionalItems",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
    // `items` is one schema in 2020-12 and may be an array before it.
    "items",
];

/// Keywords whose value is an array of schemas.
const SCHEMA_ARRAYS: [&str; 5] = ["allOf", "anyOf", "oneOf", "prefixItems", "items"];

/// Keywords whose value maps names to schemas.
const SCHEMA_MAPS: [&str; 6] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    // Before 2019-09: a schema or an array of property names per name.
    "dependencies",
];

/// The bounds an integer width implies, for the widths generators emit.
/// `uint`/`int` (pointer-sized) have no known width: `uint` keeps its sign
/// only. 128-bit maxima do not fit a JSON number without loss.
fn width_bounds(format: &str) -> (Option<Value>, Option<Value>) {
    match format {
        "int8" => (Some(i8::MIN.into()), Some(i8::MAX.into())),
        "int16" => (Some(i16::MIN.into()), Some(i16::MAX.into())),
        "int32" => (Some(i32::MIN.into()), Some(i32::MAX.into())),
        "int64" => (Some(i64::MIN.into()), Some(i64::MAX.into())),
        "uint8" => (Some(0.into()), Some(u8::MAX.into())),
        "uint16" => (Some(0.into()), Some(u16::MAX.into())),
        "uint32" => (Some(0.into()), Some(u32::MAX.into())),
        "uint64" => (Some(0.into()), Some(u64::MAX.into())),
        "uint" | "uint128" => (Some(0.into()), None),
        _ => (None, None),
    }
}

/// True when `format` is one of [`STANDARD_FORMATS`].
pub(crate) fn is_standard_format(format: &str) -> bool {
    STANDARD_FORMATS.contains(&format)
}

/// `schema` with every `format` outside [`STANDARD_FORMATS`] removed, at
/// every depth (`properties`, `items`, `$defs`, `anyOf`, ...). A removed
/// integer width (`uint64`, `int32`, ...) becomes `minimum`/`maximum` where
/// the schema has no bound on that side.
pub(crate) fn with_standard_formats(schema: &Value) -> Value {
    let mut schema = schema.clone();
    standardize(&mut schema);
    schema
}

fn standardize(schema: &mut Value) {
    // Boolean schemas (and anything that is not a schema object) carry no
    // format.
    let Value::Object(object) = schema else {
        return;
    };
    drop_format(object);
    for (key, value) in object.iter_mut() {
        let key = key.as_str();
        if ONE_SCHEMA.contains(&key) && value.is_object() {
            standardize(value);
        }
        if SCHEMA_ARRAYS.contains(&key)
            && let Value::Array(items) = value
        {
            items.iter_mut().for_each(standardize);
        }
        if SCHEMA_MAPS.contains(&key)
            && let Value::Object(map) = value
        {
            map.values_mut().for_each(standardize);
        }
    }
}

fn drop_format(object: &mut Map<String, Value>) {
    let format = match object.get("format") {
        None => return,
        Some(Value::String(f)) if is_standard_format(f) => return,
        Some(Value::String(f)) => f.clone(),
        // Not a string: not a format any client knows either.
        Some(_) => String::new(),
    };
    object.remove("format");
    if !may_be_number(object) {
        return;
    }
    let (min, max) = width_bounds(&format);
    if let Some(min) = min
        && !object.contains_key("minimum")
        && !object.contains_key("exclusiveMinimum")
    {
        object.insert("minimum".into(), min);
    }
    if let Some(max) = max
        && !object.contains_key("maximum")
        && !object.contains_key("exclusiveMaximum")
    {
        object.insert("maximum".into(), max);
    }
}

/// True unless the schema's `type` rules out numbers (bounds would be
/// noise there).
fn may_be_number(object: &Map<String, Value>) -> bool {
    let numeric = |t: &Value| matches!(t.as_str(), Some("integer" | "number"));
    match object.get("type") {
        None => true,
        Some(Value::Array(types)) => types.iter().any(numeric),
        Some(t) => numeric(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn machine_types_become_bounds_and_standard_formats_stay() {
        let schema = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "format": "uint64", "minimum": 0},
                "small": {"type": "integer", "format": "uint8", "minimum": 0, "maximum": 255},
                "signed": {"type": "integer", "format": "int32"},
                "ratio": {"type": "number", "format": "double"},
                "at": {"type": "string", "format": "date-time"},
                "id": {"type": "string", "format": "uuid"},
                "bounded": {"type": "integer", "format": "int64", "minimum": -5, "exclusiveMaximum": 9},
            },
        });
        assert_eq!(
            with_standard_formats(&schema),
            json!({
                "type": "object",
                "properties": {
                    "n": {"type": "integer", "minimum": 0, "maximum": u64::MAX},
                    "small": {"type": "integer", "minimum": 0, "maximum": 255},
                    "signed": {"type": "integer", "minimum": i32::MIN, "maximum": i32::MAX},
                    "ratio": {"type": "number"},
                    "at": {"type": "string", "format": "date-time"},
                    "id": {"type": "string", "format": "uuid"},
                    "bounded": {"type": "integer", "minimum": -5, "exclusiveMaximum": 9},
                },
            })
        );
    }

    #[test]
    fn every_schema_position_is_visited() {
        let f = || json!({"type": "integer", "format": "uint"});
        let clean = json!({"type": "integer", "minimum": 0});
        let schema = json!({
            "$defs": {"A": f()},
            "definitions": {"B": f()},
            "properties": {"p": {"type": "array", "items": f()}},
            "patternProperties": {"^x": f()},
            "additionalProperties": f(),
            "items": [f(), true],
            "prefixItems": [f()],
            "anyOf": [f(), {"allOf": [f()]}, {"oneOf": [f()]}],
            "not": f(),
            "if": f(), "then": f(), "else": f(),
            "contains": f(),
            "propertyNames": {"format": "idn-hostname"},
            "dependentSchemas": {"d": f()},
            "dependencies": {"e": f(), "g": ["a", "b"]},
            "unevaluatedProperties": f(),
            "format": "float",
        });
        let out = with_standard_formats(&schema);
        assert_eq!(out["$defs"]["A"], clean);
        assert_eq!(out["definitions"]["B"], clean);
        assert_eq!(out["properties"]["p"]["items"], clean);
        assert_eq!(out["patternProperties"]["^x"], clean);
        assert_eq!(out["additionalProperties"], clean);
        assert_eq!(out["items"], json!([clean, true]));
        assert_eq!(out["prefixItems"][0], clean);
        assert_eq!(out["anyOf"][0], clean);
        assert_eq!(out["anyOf"][1]["allOf"][0], clean);
        assert_eq!(out["anyOf"][2]["oneOf"][0], clean);
        for k in [
            "not",
            "if",
            "then",
            "else",
            "contains",
            "unevaluatedProperties",
        ] {
            assert_eq!(out[k], clean, "{k}");
        }
        assert_eq!(out["propertyNames"], json!({"format": "idn-hostname"}));
        assert_eq!(out["dependentSchemas"]["d"], clean);
        assert_eq!(out["dependencies"]["e"], clean);
        assert_eq!(out["dependencies"]["g"], json!(["a", "b"]));
        assert!(out.get("format").is_none(), "{out}");
    }

    #[test]
    fn instances_and_properties_named_format_are_left_alone() {
        let schema = json!({
            "type": "object",
            "properties": {
                "format": {"type": "string", "enum": ["uint64", "csv"]},
            },
            "const": {"format": "uint64"},
            "default": {"format": "int32"},
            "examples": [{"format": "double"}],
            "x-vendor": {"format": "uint64"},
        });
        assert_eq!(with_standard_formats(&schema), schema);
    }

    #[test]
    fn bounds_only_where_numbers_are_allowed() {
        assert_eq!(
            with_standard_formats(&json!({"type": "string", "format": "uint8"})),
            json!({"type": "string"})
        );
        assert_eq!(
            with_standard_formats(&json!({"type": ["integer", "null"], "format": "uint8"})),
            json!({"type": ["integer", "null"], "minimum": 0, "maximum": 255})
        );
        assert_eq!(
            with_standard_formats(&json!({"format": "int8"})),
            json!({"minimum": -128, "maximum": 127})
        );
    }

    #[test]
    fn a_format_that_is_not_a_string_is_removed() {
        assert_eq!(
            with_standard_formats(&json!({"type": "string", "format": 7})),
            json!({"type": "string"})
        );
        assert_eq!(with_standard_formats(&json!(true)), json!(true));
    }
}
