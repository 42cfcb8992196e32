//! Presets: their defaults, their built-in rules, and explicit overrides.

use crate::{facts, load};
use serde_json::json;
use toolhost_policy::{ApprovalSetting, DecisionKind, Preset, RuleOrigin, SandboxMode, SideEffect};

fn kinds(preset: &str) -> Vec<DecisionKind> {
    let p = load(&format!("version = 1\npreset = \"{preset}\"\n"));
    let args = json!({});
    SideEffect::ALL
        .into_iter()
        .map(|e| p.evaluate(&facts("t", &args, e)).decision.kind())
        .collect()
}

#[test]
fn each_preset_sets_its_defaults() {
    use ApprovalSetting as A;
    use SandboxMode as M;
    for (name, preset, mode, approval) in [
        ("read-only", Preset::ReadOnly, M::ReadOnly, A::Ask),
        (
            "workspace-write",
            Preset::WorkspaceWrite,
            M::WorkspaceWrite,
            A::Ask,
        ),
        (
            "danger-full-access",
            Preset::DangerFullAccess,
            M::DangerFullAccess,
            A::Never,
        ),
    ] {
        let p = load(&format!("version = 1\npreset = \"{name}\"\n"));
        assert_eq!(p.preset(), Some(preset));
        assert_eq!(p.default_mode(), mode);
        assert_eq!(p.approval(), approval);
        assert_eq!(p.default_decision(), DecisionKind::Allow);
    }
}

#[test]
fn each_preset_adds_its_built_in_rule() {
    use DecisionKind::{Allow, Ask};
    // Side effects in order: none, read, write, external.
    assert_eq!(kinds("read-only"), [Allow, Allow, Ask, Ask]);
    assert_eq!(kinds("workspace-write"), [Allow, Allow, Allow, Ask]);
    assert_eq!(kinds("danger-full-access"), [Allow, Allow, Allow, Allow]);

    let p = load("version = 1\npreset = \"read-only\"\n");
    let args = json!({});
    let e = p.evaluate(&facts("t", &args, SideEffect::Write));
    assert_eq!(
        e.matched.map(|m| m.origin),
        Some(RuleOrigin::Preset(Preset::ReadOnly))
    );
    assert!(e.decision.reason().unwrap().contains("read-only preset"));
}

#[test]
fn explicit_keys_override_the_preset() {
    let p = load(
        "version = 1\npreset = \"danger-full-access\"\nmode = \"read-only\"\napproval = \"ask\"\ndefault = \"deny\"\n",
    );
    assert_eq!(p.preset(), Some(Preset::DangerFullAccess));
    assert_eq!(p.default_mode(), SandboxMode::ReadOnly);
    assert_eq!(p.approval(), ApprovalSetting::Ask);
    assert_eq!(p.default_decision(), DecisionKind::Deny);
    let args = json!({});
    assert_eq!(
        p.evaluate(&facts("t", &args, SideEffect::None))
            .decision
            .kind(),
        DecisionKind::Deny
    );
}

#[test]
fn a_file_rule_cannot_relax_the_preset_rule() {
    let p = load(
        "version = 1\npreset = \"workspace-write\"\n[[rules]]\ntool = \"fetch\"\ndecision = \"allow\"\n",
    );
    let args = json!({});
    assert_eq!(
        p.evaluate(&facts("fetch", &args, SideEffect::External))
            .decision
            .kind(),
        DecisionKind::Ask
    );
}
