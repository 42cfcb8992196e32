//! The result of a call, exactly as DESIGN.md §6 prints it with `--json`.
//!
//! Three layers are kept apart: `canonical` (structured, schema-validated,
//! for programs, policy and audit), `content` (what the model reads) and
//! `meta` (for a UI). Hiding data from the model by editing only `content`
//! does not hide it from `canonical`.

use crate::sandbox::Receipt;
use crate::tools::ContentItem;
use serde::{Deserialize, Serialize};
use toolhost_core::ErrorCode;

/// `ok` or `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The tool ran and its result passed every check.
    Ok,
    /// The call was refused or failed; `error` says why.
    Error,
}

/// A stable code and a message the model can act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallError {
    /// The stable code.
    pub code: ErrorCode,
    /// What happened and what to do about it.
    pub message: String,
}

/// The result of one call.
#[derive(Debug, Clone, Serialize)]
pub struct CallResult {
    /// The call's id (unique per host process, joined to every log event).
    pub call_id: String,
    /// The tool's name, as called.
    pub tool: String,
    /// `ok` or `error`.
    pub status: Status,
    /// Why the call failed; `null` when `ok`.
    pub error: Option<CallError>,
    /// The structured result (`null` on error, except a program-backed
    /// tool's non-zero exit, which keeps the program's record).
    pub canonical: serde_json::Value,
    /// What the model reads. On error, one text block naming the code.
    pub content: Vec<ContentItem>,
    /// UI metadata (`null` when none).
    pub meta: serde_json::Value,
    /// What the call cost and what it was refused.
    pub receipt: Receipt,
}

impl CallResult {
    /// A successful result.
    pub fn ok(
        call_id: String,
        tool: String,
        canonical: serde_json::Value,
        content: Vec<ContentItem>,
        meta: Option<serde_json::Value>,
        receipt: Receipt,
    ) -> Self {
        CallResult {
            call_id,
            tool,
            status: Status::Ok,
            error: None,
            canonical,
            content,
            meta: meta.unwrap_or(serde_json::Value::Null),
            receipt,
        }
    }

    /// A refusal or failure: `content` carries the code and message so that
    /// the model sees them too.
    pub fn error(
        call_id: String,
        tool: String,
        code: ErrorCode,
        message: impl Into<String>,
        receipt: Receipt,
    ) -> Self {
        let message = message.into();
        CallResult {
            call_id,
            tool,
            status: Status::Error,
            content: vec![ContentItem::text(format!("{code}: {message}"))],
            error: Some(CallError { code, message }),
            canonical: serde_json::Value::Null,
            meta: serde_json::Value::Null,
            receipt,
        }
    }

    /// The error code, if the call failed.
    pub fn code(&self) -> Option<ErrorCode> {
        self.error.as_ref().map(|e| e.code)
    }

    /// True when the call succeeded.
    pub fn is_ok(&self) -> bool {
        self.status == Status::Ok
    }
}
