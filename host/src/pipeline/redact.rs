//! Redaction of what leaves the host: every loaded credential's secret, and
//! the policy's `[post_execute]` text rules, applied to a call's result, to
//! its progress reports (which leave while the body runs) and to its log
//! records. Used by phases 7-9; decides nothing about whether a call runs.

use crate::result::CallResult;
use crate::tools::descriptor::ContentItem;
use std::sync::Arc;

/// `sink`, with every loaded secret replaced in each report's message, and
/// the policy's `[post_execute]` text rules applied to it (a message that
/// `block_matching` matches is withheld, the others redacted): a report
/// leaves the host while the body runs (an MCP progress notification, a
/// task's status message), before the result is screened.
pub(super) fn redacting_progress(
    sink: Option<crate::sandbox::state::ProgressSink>,
    egress: Option<&Arc<crate::egress::Egress>>,
    rules: &toolhost_policy::PostExecuteRules,
) -> Option<crate::sandbox::state::ProgressSink> {
    let sink = sink?;
    let egress = egress
        .filter(|e| e.credentials.iter().next().is_some())
        .cloned();
    if egress.is_none() && rules.is_empty() {
        return Some(sink);
    }
    let rules = rules.clone();
    Some(Arc::new(move |p: &crate::sandbox::state::Progress| {
        let Some(message) = p.message.as_deref() else {
            return sink(p);
        };
        let message = match &egress {
            Some(e) => e.credentials.redact(message, toolhost_policy::REDACTED),
            None => std::borrow::Cow::Borrowed(message),
        };
        let message = if rules.blocks_text(&message) {
            Some(WITHHELD.to_string())
        } else {
            Some(rules.redact_text(&message).into_owned())
        };
        sink(&crate::sandbox::state::Progress {
            message,
            ..p.clone()
        })
    }))
}

/// What stands for a tool's log message or progress message that the
/// policy's `post_execute.block_matching` matches.
const WITHHELD: &str = "[withheld: matched the policy's post_execute.block_matching]";

/// The policy's `[post_execute]` text rules on a call's log records (which
/// reach an MCP client and the session log beside the content): a record
/// whose message or fields `block_matching` matches is withheld, the
/// others are redacted.
pub(super) fn screen_logs(
    rules: &toolhost_policy::PostExecuteRules,
    logs: &mut [crate::sandbox::state::LogRecord],
) {
    if rules.is_empty() {
        return;
    }
    for log in logs {
        let fields = log.fields.as_ref().map(|f| f.to_string());
        if rules.blocks_text(&log.message)
            || fields.as_deref().is_some_and(|f| rules.blocks_text(f))
        {
            log.message = WITHHELD.to_string();
            log.fields = None;
            continue;
        }
        if let std::borrow::Cow::Owned(m) = rules.redact_text(&log.message) {
            log.message = m;
        }
        if let Some(f) = &mut log.fields {
            redact_json(f, &|s: &mut String| {
                if let std::borrow::Cow::Owned(r) = rules.redact_text(s) {
                    *s = r;
                }
            });
        }
    }
}

/// Replaces every loaded secret in what a result carries (content,
/// canonical, meta, the error message, the receipt's logs and records)
/// with [`REDACTED`](toolhost_policy::REDACTED).
pub(super) fn redact_secrets(
    result: &mut CallResult,
    credentials: &toolhost_policy::egress::Credentials,
) {
    if credentials.iter().next().is_none() {
        return;
    }
    let fix = |s: &mut String| {
        if let std::borrow::Cow::Owned(r) = credentials.redact(s, toolhost_policy::REDACTED) {
            *s = r;
        }
    };
    // Text-bearing blocks and every URI; media bytes are left alone (a
    // secret in them would be encoded, not echoed).
    for item in &mut result.content {
        if let ContentItem::ResourceLink {
            uri,
            name,
            description,
            mime_type,
        } = item
        {
            fix(uri);
            fix(name);
            description.iter_mut().for_each(&fix);
            mime_type.iter_mut().for_each(&fix);
        }
        if let ContentItem::Resource { resource } = item {
            fix(&mut resource.uri);
            resource.mime_type.iter_mut().for_each(&fix);
        }
        if let ContentItem::Image { mime_type, .. } | ContentItem::Audio { mime_type, .. } = item {
            fix(mime_type);
        }
        if let Some(text) = item.text_mut() {
            fix(text);
        }
    }
    redact_json(&mut result.canonical, &fix);
    redact_json(&mut result.meta, &fix);
    if let Some(e) = &mut result.error {
        fix(&mut e.message);
    }
    for log in &mut result.receipt.logs {
        fix(&mut log.message);
        if let Some(f) = &mut log.fields {
            redact_json(f, &fix);
        }
    }
    for record in &mut result.receipt.network {
        fix(&mut record.url);
        // The host's own texts (borrowed) carry nothing to redact.
        if let Some(std::borrow::Cow::Owned(error)) = &mut record.error {
            fix(error);
        }
    }
    for line in &mut result.receipt.denied {
        fix(line);
    }
}

fn redact_json(value: &mut serde_json::Value, fix: &impl Fn(&mut String)) {
    match value {
        serde_json::Value::String(s) => fix(s),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| redact_json(v, fix)),
        serde_json::Value::Object(map) => {
            let old = std::mem::take(map);
            for (mut k, mut v) in old {
                fix(&mut k);
                redact_json(&mut v, fix);
                map.insert(k, v);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly on a set-up error")]
mod tests {
    use super::*;
    use crate::sandbox::Receipt;
    use serde_json::json;

    /// A secret that reaches a tool some other way than a server's echo
    /// (which the host masks first) is redacted from its progress reports,
    /// as they leave the host, and from its log records, message and
    /// fields: with two secrets, one inside the other, no piece of either.
    #[test]
    fn secrets_are_redacted_from_progress_and_logs() {
        let dir = tempfile::tempdir().unwrap();
        let (outer, inner) = ("sk-outer-0123456789", "0123456789");
        let spec = |host: &str, file: &std::path::Path| {
            format!(
                "[[credentials]]\nhost = \"{host}\"\nheader = \"A\"\nvalue_file = {:?}\n",
                file.display().to_string()
            )
        };
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, outer).unwrap();
        std::fs::write(&b, inner).unwrap();
        let network = toolhost_policy::egress::NetworkPolicy::from_toml(
            &format!(
                "[network]\nallow = [\"https://a.example.com\"]\n{}{}",
                spec("a.example.com", &a),
                spec("b.example.com", &b)
            ),
            "t.toml",
        )
        .unwrap();
        let egress = Arc::new(crate::egress::Egress::load(&network, &[], None).unwrap());
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = seen.clone();
        let sink: crate::sandbox::state::ProgressSink =
            Arc::new(move |p: &crate::sandbox::state::Progress| {
                into.lock()
                    .unwrap()
                    .push(p.message.clone().unwrap_or_default());
            });
        let rules = toolhost_policy::PostExecuteRules::default();
        let progress = redacting_progress(Some(sink), Some(&egress), &rules).unwrap();
        progress(&crate::sandbox::state::Progress {
            done: 1,
            total: None,
            message: Some(format!("token {outer}, then {inner}")),
        });
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [format!(
                "token {REDACTED}, then {REDACTED}",
                REDACTED = toolhost_policy::REDACTED
            )]
        );

        let mut result = CallResult::ok(
            "t".into(),
            "c".into(),
            json!(null),
            Vec::new(),
            None,
            Receipt::default(),
        );
        result.receipt.logs.push(crate::sandbox::state::LogRecord {
            level: "info",
            message: format!("got {outer}"),
            fields: Some(json!({"token": outer, "n": [inner]})),
        });
        redact_secrets(&mut result, &egress.credentials);
        let text = serde_json::to_string(&result.receipt.logs).unwrap();
        assert!(!text.contains("outer") && !text.contains(inner), "{text}");
        assert!(text.contains(toolhost_policy::REDACTED), "{text}");
    }

    /// An echoed credential is redacted from every text a resource link
    /// carries (its URI, name, description and MIME type, whose parameters
    /// may be any printable text) and from an image's or audio's MIME type,
    /// not only from text blocks.
    #[test]
    fn resource_links_are_redacted_in_every_field() {
        let dir = tempfile::tempdir().unwrap();
        let secret = "sk-link-0123456789";
        let file = dir.path().join("token");
        std::fs::write(&file, secret).unwrap();
        let policy = toolhost_policy::egress::NetworkPolicy::from_toml(
            &format!(
                "[[credentials]]\nhost = \"api.example.com\"\nheader = \"A\"\nvalue_file = {:?}\n",
                file.display().to_string()
            ),
            "t.toml",
        )
        .unwrap();
        let credentials = toolhost_policy::egress::Credentials::load(policy.credentials()).unwrap();
        let mut result = CallResult::ok(
            "c".into(),
            "t".into(),
            serde_json::Value::Null,
            vec![
                ContentItem::ResourceLink {
                    uri: format!("https://x/{secret}"),
                    name: format!("name {secret}"),
                    description: Some(format!("about {secret}")),
                    mime_type: Some(format!("text/plain; k={secret}")),
                },
                ContentItem::Image {
                    data: "aW1n".into(),
                    mime_type: format!("image/png; k={secret}"),
                },
                ContentItem::Audio {
                    data: "aW1n".into(),
                    mime_type: format!("audio/wav; k={secret}"),
                },
            ],
            None,
            Receipt::default(),
        );
        redact_secrets(&mut result, &credentials);
        let text = serde_json::to_string(&result.content).unwrap();
        assert!(!text.contains(secret), "{text}");
        assert_eq!(text.matches(toolhost_policy::REDACTED).count(), 6, "{text}");
    }
}
