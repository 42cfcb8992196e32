//! The MCP shapes of the host's tools and results: a registered tool as
//! `tools/list` shows it, a [`CallResult`] (or its JSON in the session log)
//! as the `tools/call` result or the task result a client reads. Pure
//! conversions: no session, no transport.

use super::annotations::Enforced;
use crate::result::CallResult;
use crate::tools::ContentItem;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, MetaObject, Tool};
use serde_json::{Value, json};
use std::sync::Arc;

/// The MCP view of a tool. Its schemas are the client view
/// ([`Descriptor::for_clients`](crate::tools::Descriptor::for_clients)): only
/// JSON Schema 2020-12 formats.
///
/// Its annotations say what the host enforces for its calls
/// ([`Enforced`]), not what the author declared.
pub(super) fn mcp_tool(t: &crate::tools::registry::RegisteredTool, enforced: Enforced) -> Tool {
    let d = &t.descriptor.for_clients();
    let input = mcp_input_schema(&d.input_schema);
    let mut tool = Tool::new(d.name.clone(), d.description.clone(), Arc::new(input));
    // MCP output schemas describe `structuredContent`, which is always an
    // object: other schemas are not advertised.
    if let Some(Value::Object(o)) = &d.output_schema
        && o.get("type").and_then(Value::as_str) == Some("object")
    {
        tool = tool.with_raw_output_schema(Arc::new(o.clone()));
    }
    tool.with_annotations(enforced.annotations())
}

/// A tool's input schema as MCP lists it: MCP requires `type: "object"` at
/// the root. A schema that leaves the type out says it (a client that
/// validates the list would otherwise refuse every tool in it), and so does
/// one whose type also allows others (`["object", "null"]`: MCP arguments
/// are always an object). The host loads only schemas that describe an
/// object, so this never widens what a call may send.
fn mcp_input_schema(schema: &Value) -> serde_json::Map<String, Value> {
    match schema {
        Value::Object(o) if o.get("type") != Some(&json!("object")) => {
            let mut o = o.clone();
            o.insert("type".into(), json!("object"));
            o
        }
        Value::Object(o) => o.clone(),
        // `true` (anything goes) as an object schema.
        _ => {
            let mut o = serde_json::Map::new();
            o.insert("type".into(), json!("object"));
            o
        }
    }
}

/// The MCP view of a content block. [`ContentItem`] serialises in MCP's
/// shapes (`text`, `image`, `audio`, `resource_link`, `resource`), so the
/// block is its JSON; one rmcp cannot read (never expected) becomes its
/// JSON as text rather than vanishing.
fn mcp_content(c: &ContentItem) -> ContentBlock {
    // Text, by far the most common, is built directly: no round trip
    // through a JSON value (a copy of the whole text, twice) per call.
    if let ContentItem::Text { text } = c {
        return ContentBlock::text(text.clone());
    }
    let json = serde_json::to_value(c).unwrap_or(Value::Null);
    serde_json::from_value(json.clone()).unwrap_or_else(|_| ContentBlock::text(json.to_string()))
}

/// The MCP view of a result: `structuredContent` is the canonical value (ok
/// results only, and only when it is an object, as MCP requires); `content`
/// the model content; errors are `isError` with `CODE: message` text.
pub fn to_mcp_result(r: &CallResult) -> CallToolResult {
    let mut out = match &r.error {
        None => {
            let content = r.content.iter().map(mcp_content).collect();
            let mut out = CallToolResult::success(content);
            if r.canonical.is_object() {
                out.structured_content = Some(r.canonical.clone());
            }
            out
        }
        Some(e) => CallToolResult::error(vec![ContentBlock::text(format!(
            "{}: {}",
            e.code, e.message
        ))]),
    };
    let mut meta = serde_json::Map::new();
    meta.insert(
        "toolhost".into(),
        json!({
            "call_id": r.call_id,
            "code": r.error.as_ref().map(|e| e.code),
            "meta": r.meta,
            "receipt": r.receipt,
        }),
    );
    out.meta = Some(MetaObject(meta));
    out
}

/// The MCP view of a result as the session log holds it (a
/// [`CallResult`]'s JSON, or recovery's `TOOL_OUTCOME_UNKNOWN`): the shape
/// [`to_mcp_result`] gives, as a JSON object.
pub(super) fn to_mcp_result_json(payload: &Value) -> JsonObject {
    let error = payload.get("error").filter(|e| !e.is_null());
    let mut out = match error {
        None => {
            let content = payload
                .get("content")
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .map(|c| {
                            serde_json::from_value(c.clone())
                                .unwrap_or_else(|_| ContentBlock::text(c.to_string()))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let mut out = CallToolResult::success(content);
            if let Some(canonical) = payload.get("canonical").filter(|c| c.is_object()) {
                out.structured_content = Some(canonical.clone());
            }
            out
        }
        Some(e) => CallToolResult::error(vec![ContentBlock::text(format!(
            "{}: {}",
            e.get("code")
                .and_then(Value::as_str)
                .unwrap_or("TOOL_ERROR"),
            e.get("message").and_then(Value::as_str).unwrap_or_default()
        ))]),
    };
    let mut meta = serde_json::Map::new();
    meta.insert(
        "toolhost".into(),
        json!({
            "call_id": payload.get("call_id"),
            "code": error.and_then(|e| e.get("code")),
            "meta": payload.get("meta"),
            "receipt": payload.get("receipt"),
        }),
    );
    out.meta = Some(MetaObject(meta));
    match serde_json::to_value(out) {
        Ok(Value::Object(o)) => o,
        _ => JsonObject::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every listed input schema has `type: "object"` at its root, whatever
    /// the tool wrote there, and keeps the rest of what it wrote.
    #[test]
    fn listed_input_schemas_are_objects_at_the_root() {
        let props = json!({"path": {"type": "string"}});
        for (written, want) in [
            (
                json!({"properties": props}),
                json!({"type": "object", "properties": props}),
            ),
            (
                json!({"type": ["object", "null"], "properties": props}),
                json!({"type": "object", "properties": props}),
            ),
            (
                json!({"type": "object", "required": ["path"]}),
                json!({"type": "object", "required": ["path"]}),
            ),
            (json!(true), json!({"type": "object"})),
        ] {
            assert_eq!(Value::Object(mcp_input_schema(&written)), want, "{written}");
        }
    }
}
