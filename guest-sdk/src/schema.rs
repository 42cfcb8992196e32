//! The JSON Schemas of a tool's arguments and output, as clients accept
//! them.
//!
//! schemars annotates Rust numbers with their machine type (`"format":
//! "uint64"`, `"int32"`, `"double"`, ...). JSON Schema 2020-12 defines no
//! such formats, and clients that check formats (the TypeScript MCP SDK, for
//! one) warn about or refuse them. The SDK keeps only the 2020-12 formats;
//! an integer width becomes the `minimum`/`maximum` it implies wherever
//! schemars did not bound that side already. (The host applies the same
//! rule to every tool's schemas before showing them to clients, since tools
//! built without this SDK may carry such formats too.)

use schemars::transform::{Transform, transform_subschemas};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value};

/// Every `format` that JSON Schema 2020-12 defines (Validation, section 7.3).
pub const STANDARD_FORMATS: [&str; 19] = [
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

/// The JSON Schema (draft 2020-12) of `T` as it is read (deserialized), with
/// only the formats in [`STANDARD_FORMATS`]: what
/// [`export_tools!`](crate::export_tools) declares for a tool's `Args`.
pub fn schema_for<T: JsonSchema>() -> Schema {
    schemars::generate::SchemaSettings::draft2020_12()
        .with_transform(StandardFormats)
        .into_generator()
        .into_root_schema_for::<T>()
}

/// The JSON Schema of `T` as it is written (serialized), otherwise like
/// [`schema_for`]: what a tool declares for its `Output`. A field serde skips
/// when writing (`skip_serializing_if`) is then optional, as the output the
/// host checks against it is.
pub fn output_schema_for<T: JsonSchema>() -> Schema {
    schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .with_transform(StandardFormats)
        .into_generator()
        .into_root_schema_for::<T>()
}

/// Drops every `format` outside [`STANDARD_FORMATS`], keeping an integer
/// width as bounds, in a schema and all its subschemas.
#[derive(Debug, Clone, Copy)]
struct StandardFormats;

impl Transform for StandardFormats {
    fn transform(&mut self, schema: &mut Schema) {
        if let Some(object) = schema.as_object_mut() {
            drop_format(object);
        }
        transform_subschemas(self, schema);
    }
}

/// The bounds an integer width implies. Pointer-sized integers take this
/// target's width (tools are built for wasm32); 128-bit maxima do not fit a
/// JSON number without loss.
fn width_bounds(format: &str) -> (Option<Value>, Option<Value>) {
    match format {
        "int8" => (Some(i8::MIN.into()), Some(i8::MAX.into())),
        "int16" => (Some(i16::MIN.into()), Some(i16::MAX.into())),
        "int32" => (Some(i32::MIN.into()), Some(i32::MAX.into())),
        "int64" => (Some(i64::MIN.into()), Some(i64::MAX.into())),
        "int" => (Some(isize::MIN.into()), Some(isize::MAX.into())),
        "uint8" => (Some(0.into()), Some(u8::MAX.into())),
        "uint16" => (Some(0.into()), Some(u16::MAX.into())),
        "uint32" => (Some(0.into()), Some(u32::MAX.into())),
        "uint64" => (Some(0.into()), Some(u64::MAX.into())),
        "uint" => (Some(0.into()), Some(usize::MAX.into())),
        "uint128" => (Some(0.into()), None),
        _ => (None, None),
    }
}

fn drop_format(object: &mut Map<String, Value>) {
    let format = match object.get("format") {
        None => return,
        Some(Value::String(f)) if STANDARD_FORMATS.contains(&f.as_str()) => return,
        Some(Value::String(f)) => f.clone(),
        Some(_) => String::new(),
    };
    object.remove("format");
    let numeric = |t: &Value| matches!(t.as_str(), Some("integer" | "number"));
    let may_be_number = match object.get("type") {
        None => true,
        Some(Value::Array(types)) => types.iter().any(numeric),
        Some(t) => numeric(t),
    };
    if !may_be_number {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;
    use std::net::Ipv4Addr;

    /// Every `"format": "<string>"` anywhere in `v`.
    fn formats(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                for (k, child) in o {
                    if let (true, Some(f)) = (k == "format", child.as_str()) {
                        out.push(f.to_string());
                    }
                    formats(child, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|c| formats(c, out)),
            _ => {}
        }
    }

    #[derive(JsonSchema)]
    #[allow(dead_code, reason = "read only through the derive")]
    struct Inner {
        big: u64,
        small: Option<u8>,
        ratio: f32,
    }

    #[derive(JsonSchema)]
    #[allow(dead_code, reason = "read only through the derive")]
    enum Choice {
        Count(u32),
        Signed { value: i64 },
    }

    #[derive(JsonSchema)]
    #[allow(dead_code, reason = "read only through the derive")]
    struct Args {
        count: u64,
        offset: i32,
        size: usize,
        ratio: f64,
        addr: Ipv4Addr,
        inner: Inner,
        list: Vec<u16>,
        map: BTreeMap<String, i8>,
        choice: Choice,
        #[schemars(range(min = 1, max = 10))]
        pick: u32,
    }

    #[derive(serde::Serialize, JsonSchema)]
    #[allow(dead_code, reason = "read only through the derive")]
    struct Out {
        hits: Vec<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        warnings: Vec<String>,
    }

    /// An output field skipped when empty is not required: the canonical
    /// output without it must validate.
    #[test]
    fn an_output_field_skipped_when_writing_is_optional() {
        let schema = serde_json::to_value(output_schema_for::<Out>()).unwrap_or_default();
        assert_eq!(schema["required"], json!(["hits"]), "{schema:#}");
        let as_read = serde_json::to_value(schema_for::<Out>()).unwrap_or_default();
        assert_eq!(
            as_read["required"],
            json!(["hits", "warnings"]),
            "{as_read:#}"
        );
    }

    #[test]
    fn only_standard_formats_at_every_depth() {
        let schema = serde_json::to_value(schema_for::<Args>()).unwrap_or_default();
        let mut found = Vec::new();
        formats(&schema, &mut found);
        assert_eq!(found, ["ipv4"], "{schema:#}");
    }

    #[test]
    fn integer_widths_become_bounds() {
        let schema = serde_json::to_value(schema_for::<Args>()).unwrap_or_default();
        let props = &schema["properties"];
        assert_eq!(
            props["count"],
            json!({"type": "integer", "minimum": 0, "maximum": u64::MAX})
        );
        assert_eq!(
            props["offset"],
            json!({"type": "integer", "minimum": i32::MIN, "maximum": i32::MAX})
        );
        assert_eq!(
            props["size"],
            json!({"type": "integer", "minimum": 0, "maximum": usize::MAX})
        );
        assert_eq!(props["ratio"], json!({"type": "number"}));
        assert_eq!(
            props["pick"],
            json!({"type": "integer", "minimum": 1, "maximum": 10}),
            "the author's bounds win"
        );
        assert_eq!(
            props["list"]["items"],
            json!({"type": "integer", "minimum": 0, "maximum": u16::MAX})
        );
        let inner = &schema["$defs"]["Inner"]["properties"];
        assert_eq!(
            inner["small"],
            json!({"type": ["integer", "null"], "minimum": 0, "maximum": 255})
        );
    }
}
