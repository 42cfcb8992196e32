//! [`PostExecuteRules`]: the `[post_execute]` section of a policy file, applied
//! to a tool's result after output validation (DESIGN.md §1, step 8).
//!
//! # Redaction hides from the model only
//!
//! `redact` and `max_content_chars` edit only `content`, the text the model
//! reads. (The host also applies `redact` and `block_matching` to what a
//! tool sends beside it, its log records and progress reports, through
//! [`PostExecuteRules::redact_text`] and [`PostExecuteRules::blocks_text`],
//! before they are sent or recorded: the session log keeps them screened.)
//! They never touch `canonical`, the structured value that programs,
//! policy and the audit log receive. A secret redacted from the model's view is
//! still in `canonical` and in the session log. To keep a secret out of every
//! view, block the result with `block_matching` (which looks at both), or stop
//! the tool from producing it.
//!
//! Order: the block check runs first, on the unredacted content and on
//! `canonical`; then redaction; then the length cap.

use regex::Regex;

/// What [`PostExecuteRules::apply`] did.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PostVerdict {
    /// Nothing matched; the result is unchanged.
    Keep,
    /// The content was redacted or cut; `canonical` is unchanged.
    Changed,
    /// The result must not be delivered; content and canonical are unchanged
    /// and the caller discards both.
    Blocked {
        /// Why, without echoing the matched text.
        reason: String,
    },
}

/// The post-execute rules of a policy file. The default has no rules and keeps
/// every result.
#[derive(Debug, Clone, Default)]
pub struct PostExecuteRules {
    pub(crate) redact: Vec<Regex>,
    pub(crate) max_content_chars: Option<usize>,
    pub(crate) block_matching: Option<Regex>,
}

/// What redacted text is replaced with.
pub const REDACTED: &str = "[REDACTED]";

impl PostExecuteRules {
    /// True when there is nothing to apply.
    pub fn is_empty(&self) -> bool {
        self.redact.is_empty() && self.max_content_chars.is_none() && self.block_matching.is_none()
    }

    /// The content cap in characters (Unicode scalar values), if any.
    pub fn max_content_chars(&self) -> Option<usize> {
        self.max_content_chars
    }

    /// `text` with every `redact` match replaced by [`REDACTED`]: for what
    /// leaves the host beside the content (a tool's log records and
    /// progress reports), which a client may show the model too.
    pub fn redact_text<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        let mut out = std::borrow::Cow::Borrowed(text);
        for re in &self.redact {
            if re.is_match(&out) {
                out = std::borrow::Cow::Owned(re.replace_all(&out, REDACTED).into_owned());
            }
        }
        out
    }

    /// Whether `block_matching` matches `text` (such text is withheld
    /// wherever it would leave the host).
    pub fn blocks_text(&self, text: &str) -> bool {
        self.block_matching
            .as_ref()
            .is_some_and(|re| re.is_match(text))
    }

    /// Applies the rules to one result.
    ///
    /// * `block_matching` is tested against every content text, the compact
    ///   JSON text of `canonical`, and every string inside `canonical`
    ///   (unescaped). Any match blocks.
    /// * each `redact` regex replaces its matches in every content text with
    ///   `[REDACTED]`;
    /// * when the content texts together exceed `max_content_chars`, they are
    ///   cut to the cap (later blocks dropped) and
    ///   `[... N characters cut by policy]` is appended to the last kept text
    ///   (the marker is not counted against the cap).
    ///
    /// `canonical` is only read, never edited: see the module docs.
    pub fn apply(&self, content: &mut Vec<String>, canonical: &serde_json::Value) -> PostVerdict {
        if let Some(re) = &self.block_matching {
            if let Some(i) = content.iter().position(|t| re.is_match(t)) {
                return PostVerdict::Blocked {
                    reason: format!(
                        "content block {} matched the policy's post_execute.block_matching",
                        i + 1
                    ),
                };
            }
            if canonical_matches(re, canonical) {
                return PostVerdict::Blocked {
                    reason: "the canonical result matched the policy's post_execute.block_matching"
                        .to_string(),
                };
            }
        }
        let mut changed = false;
        for text in content.iter_mut() {
            for re in &self.redact {
                if re.is_match(text) {
                    *text = re.replace_all(text, REDACTED).into_owned();
                    changed = true;
                }
            }
        }
        if let Some(cap) = self.max_content_chars {
            changed |= cut(content, cap);
        }
        if changed {
            PostVerdict::Changed
        } else {
            PostVerdict::Keep
        }
    }
}

/// True when `re` matches the compact JSON of `value` or any string in it.
fn canonical_matches(re: &Regex, value: &serde_json::Value) -> bool {
    // Serialising a Value cannot fail; if it ever did, block (fail closed).
    let json_hit = serde_json::to_string(value).map_or(true, |json| re.is_match(&json));
    json_hit || any_string(value, &mut |s| re.is_match(s))
}

fn any_string(value: &serde_json::Value, f: &mut dyn FnMut(&str) -> bool) -> bool {
    match value {
        serde_json::Value::String(s) => f(s),
        serde_json::Value::Array(items) => items.iter().any(|v| any_string(v, f)),
        serde_json::Value::Object(map) => map.iter().any(|(k, v)| f(k) || any_string(v, f)),
        _ => false,
    }
}

/// Cuts `content` to `cap` characters in total. Returns true when it cut.
fn cut(content: &mut Vec<String>, cap: usize) -> bool {
    let total: usize = content.iter().map(|t| t.chars().count()).sum();
    if total <= cap {
        return false;
    }
    let marker = format!("[... {} characters cut by policy]", total - cap);
    let mut budget = cap;
    let mut kept = 0;
    for text in content.iter_mut() {
        if budget == 0 {
            break;
        }
        let len = text.chars().count();
        if len > budget {
            let end = text
                .char_indices()
                .nth(budget)
                .map_or(text.len(), |(i, _)| i);
            text.truncate(end);
            budget = 0;
        } else {
            budget -= len;
        }
        kept += 1;
    }
    content.truncate(kept);
    match content.last_mut() {
        Some(last) => {
            if !last.is_empty() {
                last.push('\n');
            }
            last.push_str(&marker);
        }
        None => content.push(marker),
    }
    true
}
