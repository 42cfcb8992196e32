//! Guards are deny-only and monotonic: whatever allows a call, a matching guard
//! still denies it; a panicking guard denies; the first denial wins.
//!
//! `GuardVerdict` has no allow variant, so "a guard re-allows" cannot even be
//! written: that half of monotonicity is checked by the compiler.

use crate::{facts, load};
use serde_json::json;
use toolhost_policy::{
    CallFacts, Decision, Guard, GuardDenial, GuardVerdict, Guards, Policy, SideEffect,
};

const SECRET_GUARD: &str = r#"
[[guards]]
name = "no-secrets"
tool = "*"
deny_args_matching = "(?i)secret"
reason = "no secrets through tools"
"#;

#[test]
fn a_matching_guard_denies_whatever_allowed_the_call() {
    let ways_to_allow = [
        (
            "an allow rule",
            "version = 1\ndefault = \"deny\"\n[[rules]]\ntool = \"t\"\ndecision = \"allow\"\n",
        ),
        ("the default", "version = 1\ndefault = \"allow\"\n"),
        (
            "the read-only preset",
            "version = 1\npreset = \"read-only\"\n",
        ),
        (
            "the workspace-write preset",
            "version = 1\npreset = \"workspace-write\"\n",
        ),
        (
            "the danger-full-access preset",
            "version = 1\npreset = \"danger-full-access\"\n",
        ),
    ];
    let args = json!({"note": "the SECRET is 42"});
    let benign = json!({"note": "hello"});
    for (how, head) in ways_to_allow {
        let policy = load(&format!("{head}{SECRET_GUARD}"));
        let call = facts("t", &args, SideEffect::Read);
        assert_eq!(
            policy.evaluate(&call).decision,
            Decision::Allow,
            "{how} allows"
        );
        let guards = Guards::from_policy(&policy);
        assert_eq!(
            guards.check(&call),
            Some(GuardDenial {
                guard: "no-secrets".into(),
                reason: "no secrets through tools".into()
            }),
            "guard must deny despite {how}"
        );
        assert_eq!(
            guards.check(&facts("t", &benign, SideEffect::Read)),
            None,
            "{how}"
        );
    }
}

#[test]
fn the_built_in_default_policy_has_no_guards() {
    let guards = Guards::from_policy(&Policy::default());
    assert!(guards.is_empty());
    let args = json!({"secret": 1});
    assert_eq!(guards.check(&facts("t", &args, SideEffect::Read)), None);
}

struct Panics;
impl Guard for Panics {
    fn name(&self) -> &str {
        "panics"
    }
    fn check(&self, _: &CallFacts<'_>) -> GuardVerdict {
        panic!("boom")
    }
}

struct DenyAll(&'static str);
impl Guard for DenyAll {
    fn name(&self) -> &str {
        self.0
    }
    fn check(&self, _: &CallFacts<'_>) -> GuardVerdict {
        GuardVerdict::Deny {
            reason: format!("{} says no", self.0),
        }
    }
}

struct PassAll;
impl Guard for PassAll {
    fn name(&self) -> &str {
        "pass"
    }
    fn check(&self, _: &CallFacts<'_>) -> GuardVerdict {
        GuardVerdict::Pass
    }
}

#[test]
fn a_panicking_guard_denies() {
    let mut guards = Guards::new();
    guards.push(Box::new(PassAll)).push(Box::new(Panics));
    let args = json!({});
    let denial = guards.check(&facts("t", &args, SideEffect::None)).unwrap();
    assert_eq!(denial.guard, "panics");
    assert!(
        denial.reason.contains("panicked") && denial.reason.contains("boom"),
        "{denial}"
    );
}

#[test]
fn the_first_denial_in_registration_order_wins() {
    let policy = load(&format!("version = 1\n{SECRET_GUARD}"));
    let mut guards = Guards::from_policy(&policy);
    guards
        .push(Box::new(DenyAll("first-custom")))
        .push(Box::new(DenyAll("second-custom")));
    assert_eq!(guards.len(), 3);
    let secret = json!({"x": "secret"});
    assert_eq!(
        guards
            .check(&facts("t", &secret, SideEffect::None))
            .unwrap()
            .guard,
        "no-secrets"
    );
    let plain = json!({"x": "plain"});
    assert_eq!(
        guards
            .check(&facts("t", &plain, SideEffect::None))
            .unwrap()
            .guard,
        "first-custom"
    );
}

#[test]
fn guard_tool_patterns_limit_what_they_check() {
    let policy = load(
        "version = 1\n[[guards]]\ntool = \"write_*\"\ndeny_args_matching = \"x\"\nreason = \"r\"\n",
    );
    let guards = Guards::from_policy(&policy);
    let args = json!({"a": "x"});
    assert!(
        guards
            .check(&facts("write_file", &args, SideEffect::Write))
            .is_some()
    );
    assert!(
        guards
            .check(&facts("read_file", &args, SideEffect::Read))
            .is_none()
    );
    // Unnamed file guards are named by position.
    assert_eq!(
        guards
            .check(&facts("write_file", &args, SideEffect::Write))
            .unwrap()
            .guard,
        "guards[0]"
    );
}

#[test]
fn path_guards_see_through_dot_segments_and_arrays() {
    let policy = load(
        r#"
version = 1
[[guards]]
tool = "*"
pointer = "/path"
deny_paths = ["/etc/**", "**/.git/**"]
reason = "off limits"
"#,
    );
    let guards = Guards::from_policy(&policy);
    let denied = |args: serde_json::Value| {
        guards
            .check(&facts("t", &args, SideEffect::Write))
            .is_some()
    };
    assert!(denied(json!({"path": "/etc/passwd"})));
    assert!(denied(json!({"path": ".git/config"})));
    assert!(denied(json!({"path": "a/.git/hooks/pre-commit"})));
    assert!(denied(json!({"path": "/tmp/../etc/shadow"})));
    assert!(denied(json!({"path": "a/./.git/x"})));
    assert!(denied(json!({"path": ["ok.txt", "/etc/hosts"]})));
    // Objects too: a list of `{path}` objects, or an object at the pointer.
    assert!(denied(
        json!({"path": [{"path": "ok.txt"}, {"path": "/etc/hosts"}]})
    ));
    assert!(denied(json!({"path": {"from": "ok.txt", "to": ".git/x"}})));
    // A map keyed by path: the keys are paths too.
    assert!(denied(
        json!({"path": [{"path": "ok.txt"}, {"/etc/hosts": 1}]})
    ));
    assert!(!denied(json!({"path": {"ok.txt": "src/a"}})));
    // The protected directories themselves, however spelled.
    assert!(denied(json!({"path": ".git"})));
    assert!(denied(json!({"path": "src/.git/"})));
    assert!(denied(json!({"path": "./src/../.git"})));
    assert!(denied(json!({"path": "/etc"})));
    assert!(!denied(json!({"path": "src/main.rs"})));
    assert!(!denied(json!({"path": ".github"})));
    assert!(!denied(json!({"path": "src"})));
    assert!(!denied(json!({"other": "/etc/passwd"})));
    let d = guards
        .check(&facts(
            "t",
            &json!({"path": "/etc/passwd"}),
            SideEffect::Write,
        ))
        .unwrap();
    assert!(
        d.reason.starts_with("off limits") && d.reason.contains("/etc/**"),
        "{d}"
    );
}

#[test]
fn policies_and_guards_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Policy>();
    assert_send_sync::<Guards>();
}
