//! Post-execute rules from the file: redaction, the content cap with its
//! marker, blocking on content and on canonical; canonical is never edited.

use crate::load;
use serde_json::json;
use toolhost_policy::{Policy, PostVerdict};

fn policy(section: &str) -> Policy {
    load(&format!("version = 1\n[post_execute]\n{section}"))
}

#[test]
fn redaction_edits_content_and_never_canonical() {
    let p = policy("redact = [\"sk-[A-Za-z0-9]{20,}\", \"hunter2\"]\n");
    let key = "sk-abcdefghijklmnopqrstuvwxyz";
    let mut content = vec![format!("key={key} pw=hunter2"), "nothing here".to_string()];
    let canonical = json!({"key": key});
    let before = canonical.clone();
    assert_eq!(
        p.post_execute().apply(&mut content, &canonical),
        PostVerdict::Changed
    );
    assert_eq!(content, ["key=[REDACTED] pw=[REDACTED]", "nothing here"]);
    // canonical is taken by shared reference and still holds the secret.
    assert_eq!(canonical, before);
    assert_eq!(canonical["key"], key);

    let mut clean = vec!["short sk-123".to_string()];
    assert_eq!(
        p.post_execute().apply(&mut clean, &json!(null)),
        PostVerdict::Keep
    );
    assert_eq!(clean, ["short sk-123"]);
}

#[test]
fn the_cap_cuts_with_a_marker_saying_how_much() {
    let p = policy("max_content_chars = 10\n");
    let mut content = vec!["0123456789abcdef".to_string()];
    assert_eq!(
        p.post_execute().apply(&mut content, &json!({})),
        PostVerdict::Changed
    );
    assert_eq!(content, ["0123456789\n[... 6 characters cut by policy]"]);

    // Across blocks, in characters (not bytes): later blocks are dropped.
    let mut content = vec![
        "ééééé".to_string(),
        "abcdefgh".to_string(),
        "gone".to_string(),
    ];
    assert_eq!(
        p.post_execute().apply(&mut content, &json!({})),
        PostVerdict::Changed
    );
    assert_eq!(
        content,
        ["ééééé", "abcde\n[... 7 characters cut by policy]"]
    );

    let mut exact = vec!["0123456789".to_string()];
    assert_eq!(
        p.post_execute().apply(&mut exact, &json!({})),
        PostVerdict::Keep
    );
    assert_eq!(exact, ["0123456789"]);

    let zero = policy("max_content_chars = 0\n");
    let mut content = vec!["abc".to_string()];
    assert_eq!(
        zero.post_execute().apply(&mut content, &json!({})),
        PostVerdict::Changed
    );
    assert_eq!(content, ["[... 3 characters cut by policy]"]);
}

#[test]
fn block_matching_checks_content() {
    let p = policy("block_matching = \"BEGIN PRIVATE KEY\"\nredact = [\"KEY\"]\n");
    let mut content = vec![
        "fine".to_string(),
        "-----BEGIN PRIVATE KEY-----".to_string(),
    ];
    let before = content.clone();
    let verdict = p.post_execute().apply(&mut content, &json!({"ok": true}));
    let PostVerdict::Blocked { reason } = verdict else {
        panic!("expected a block, got {verdict:?}");
    };
    assert!(reason.contains("content block 2"), "{reason}");
    assert!(
        !reason.contains("PRIVATE"),
        "the reason must not echo the match: {reason}"
    );
    // Blocking runs before redaction, and leaves the content as it was.
    assert_eq!(content, before);
}

#[test]
fn block_matching_checks_canonical_even_when_content_is_clean() {
    let p = policy("block_matching = \"BEGIN PRIVATE KEY\\n\"\n");
    let mut content = vec!["a summary".to_string()];
    // The regex contains a newline: it matches the unescaped string inside
    // canonical, not only canonical's JSON text.
    let canonical = json!({"files": [{"text": "-----BEGIN PRIVATE KEY\nMII..."}]});
    let verdict = p.post_execute().apply(&mut content, &canonical);
    assert!(
        matches!(&verdict, PostVerdict::Blocked { reason } if reason.contains("canonical")),
        "{verdict:?}"
    );
    let mut content = vec!["a summary".to_string()];
    assert_eq!(
        p.post_execute().apply(&mut content, &json!({"files": []})),
        PostVerdict::Keep
    );
}

#[test]
fn no_section_keeps_everything() {
    let p = load("version = 1\n");
    assert!(p.post_execute().is_empty());
    let mut content = vec!["x".repeat(100_000)];
    assert_eq!(
        p.post_execute().apply(&mut content, &json!({})),
        PostVerdict::Keep
    );
}
