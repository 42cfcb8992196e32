//! Layers that only narrow: owner-only tools, the fixed order, which layer
//! and rule a trace blames, the subagent default, and property tests over
//! random layer stacks.

use crate::{assert_error, load};
use serde_json::{Value, json};
use toolhost_policy::{
    ApprovalSetting, CallFacts, DEFAULT_SUBAGENT_WITHHELD, Decision, DecisionKind, Policy,
    SandboxMode, SideEffect, Subject,
};

fn facts<'a>(tool: &'a str, args: &'a Value, mode: SandboxMode) -> CallFacts<'a> {
    CallFacts::of_call(tool, args, SideEffect::Write, mode)
}

fn subject<'a>(principal: &'a str, scopes: &'a [String]) -> Subject<'a> {
    Subject { principal, scopes }
}

const OWNERS: &str = r#"
version = 1
[principals]
owners = ["alice"]
owner_only = ["write_*"]
"#;

#[test]
fn owner_only_tools_are_hidden_from_non_owners_only() {
    let p = load(OWNERS);
    let mode = SandboxMode::WorkspaceWrite;
    for owner in ["local", "alice"] {
        assert_eq!(p.hidden("write_file", &subject(owner, &[]), mode), None);
        assert!(p.is_owner(owner));
    }
    let hidden = p.hidden("write_file", &subject("bob", &[]), mode).unwrap();
    assert_eq!(hidden.layer, "global");
    assert!(
        hidden.rule.starts_with("principals.owner_only[0] (line 5)"),
        "{hidden}"
    );
    assert_eq!(p.hidden("read_file", &subject("bob", &[]), mode), None);
    let args = json!({});
    let t = p.trace(&facts("write_file", &args, mode), &subject("bob", &[]));
    assert_eq!(t.hidden, Some(hidden));
}

const STACK: &str = r#"
version = 1
default = "allow"

[principals.groups]
crew = ["bob", "carol"]

[[layers]]
kind = "subagent"
deny = ["spawn_*"]

[[layers]]
kind = "principal"
name = "bob"
default = "ask"
[[layers.rules]]
tool = "read_file"
decision = "allow"

[[layers]]
kind = "group"
name = "crew"
allow = ["read_file", "write_file", "spawn_agent"]

[[layers]]
kind = "agent"
name = "planner"
[[layers.rules]]
tool = "write_file"
decision = "deny"
reason = "the planner only reads"

[[layers]]
kind = "mode"
name = "danger-full-access"
approval = "never"
[[layers.guards]]
name = "no-etc"
tool = "*"
pointer = "/path"
deny_paths = ["/etc/**"]
reason = "not under /etc"
"#;

#[test]
fn layers_apply_in_the_fixed_order_and_only_to_their_subjects() {
    let p = load(STACK);
    let ws = SandboxMode::WorkspaceWrite;
    let args = json!({"path": "a.txt"});
    let none: [String; 0] = [];
    // Not in any layer: the global default.
    let t = p.trace(&facts("write_file", &args, ws), &subject("dave", &none));
    assert_eq!(t.decision, Decision::Allow);
    let layers: Vec<_> = t.steps.iter().map(|s| s.layer.as_str()).collect();
    assert_eq!(layers, ["global"]);

    // bob: group crew (sorted before principal, though written after it).
    let t = p.trace(&facts("write_file", &args, ws), &subject("bob", &none));
    let layers: Vec<_> = t.steps.iter().map(|s| s.layer.as_str()).collect();
    assert_eq!(layers, ["global", "group:crew", "principal:bob"]);
    assert_eq!(t.decision.kind(), DecisionKind::Ask);
    assert_eq!(t.decided_by.layer, "principal:bob");
    assert_eq!(t.decided_by.rule, "layers[1].default");
    // An allow rule inside bob's layer beats bob's own default.
    let t = p.trace(&facts("read_file", &args, ws), &subject("bob", &none));
    assert_eq!(t.decision, Decision::Allow);
    // The group's allow-list hides what it does not name.
    let t = p.trace(&facts("grep", &args, ws), &subject("carol", &none));
    assert_eq!(t.hidden.unwrap().layer, "group:crew");

    // The agent layer applies to its scope and to the scopes below it.
    let planner = ["planner".to_string()];
    let child = ["planner".to_string(), "child".to_string()];
    for scopes in [&planner[..], &child[..]] {
        let t = p.trace(&facts("write_file", &args, ws), &subject("bob", scopes));
        assert_eq!(
            t.decision,
            Decision::Deny {
                reason: "the planner only reads".into()
            }
        );
        assert_eq!(t.decided_by.layer, "agent:planner");
        assert!(t.decided_by.rule.starts_with("layers[3].rules[0] (line"));
    }
    // The subagent layer applies to the child only.
    assert_eq!(
        p.hidden("spawn_agent", &subject("bob", &child), ws)
            .unwrap()
            .layer,
        "subagent"
    );
    assert_eq!(p.hidden("spawn_agent", &subject("bob", &planner), ws), None);

    // The mode layer: its guard and its approval setting.
    let etc = json!({"path": "/etc/passwd"});
    let danger = SandboxMode::DangerFullAccess;
    let t = p.trace(&facts("read_file", &etc, danger), &subject("dave", &none));
    let (blame, denial) = t.guard.unwrap();
    assert_eq!(blame.layer, "mode:danger-full-access");
    assert_eq!(denial.guard, "no-etc");
    assert_eq!(t.approval, ApprovalSetting::Never);
    assert_eq!(t.approval_by.as_deref(), Some("mode:danger-full-access"));
    let t = p.trace(&facts("read_file", &etc, ws), &subject("dave", &none));
    assert_eq!(t.guard, None);
    assert_eq!(t.approval, ApprovalSetting::Ask);
}

#[test]
fn a_later_layer_cannot_reallow_what_an_earlier_one_refused() {
    let p = load(
        r#"
version = 1
[[rules]]
tool = "write_file"
decision = "deny"
reason = "no writes"
[[layers]]
kind = "principal"
name = "bob"
default = "allow"
[[layers.rules]]
tool = "write_file"
decision = "allow"
"#,
    );
    let args = json!({});
    let none: [String; 0] = [];
    let t = p.trace(
        &facts("write_file", &args, SandboxMode::WorkspaceWrite),
        &subject("bob", &none),
    );
    assert_eq!(t.decision.kind(), DecisionKind::Deny);
    assert_eq!(t.decided_by.layer, "global");
    assert_eq!(t.decided_by.rule, "rules[0] (line 3)");
}

#[test]
fn bad_layers_and_principals_are_located() {
    let head = "version = 1\n";
    assert_error(
        &format!("{head}[[layers]]\nkind = \"global\"\n"),
        3,
        &["layers[0].kind", "the file itself"],
    );
    assert_error(
        &format!("{head}[[layers]]\nkind = \"tenant\"\n"),
        3,
        &["unknown layer kind \"tenant\""],
    );
    assert_error(
        &format!("{head}[[layers]]\nkind = \"principal\"\n"),
        2,
        &["layers[0]: a principal layer needs `name`"],
    );
    assert_error(
        &format!("{head}[[layers]]\nkind = \"group\"\nname = \"ops\"\n"),
        4,
        &["group \"ops\" is not declared"],
    );
    assert_error(
        &format!("{head}[[layers]]\nkind = \"mode\"\nname = \"wide-open\"\n"),
        4,
        &["layers[0].name", "wide-open"],
    );
    assert_error(
        &format!("{head}[[layers]]\nkind = \"agent\"\nname = \"a\"\nallow = []\n"),
        5,
        &["layers[0].allow: an empty list hides every tool"],
    );
    assert_error(
        &format!(
            "{head}[[layers]]\nkind = \"agent\"\nname = \"a\"\n[[layers.rules]]\ntool = \"x\"\ndecision = \"deny\"\n"
        ),
        5,
        &["layers[0].rules[0]: a deny rule needs a non-empty reason"],
    );
    assert_error(
        &format!("{head}[principals]\nowners = [\"bad name\"]\n"),
        3,
        &["principals.owners", "not a principal name"],
    );
    assert_error(
        &format!("{head}[principals]\nowner_only = [\"\"]\n"),
        3,
        &["principals.owner_only[0]", "empty tool pattern"],
    );
}

// ─────────────────────── the subagent default ───────────────────────

fn chain(scopes: &[&str]) -> Vec<String> {
    scopes.iter().map(|s| s.to_string()).collect()
}

/// Whether `tool` is hidden from `local` in `scopes`, checked through both
/// `hidden` and `trace` (which must agree), with the blame.
fn hidden_in(p: &Policy, tool: &str, scopes: &[&str]) -> Option<String> {
    let scopes = chain(scopes);
    let s = subject("local", &scopes);
    let args = json!({});
    let by_hidden = p.hidden(tool, &s, SandboxMode::ReadOnly);
    let t = p.trace(&facts(tool, &args, SandboxMode::ReadOnly), &s);
    assert_eq!(by_hidden, t.hidden, "hidden and trace disagree for {tool}");
    by_hidden.map(|b| b.to_string())
}

#[test]
fn subagents_do_not_get_orchestration_tools_by_default() {
    // No file at all, and a file without [subagents]: the built-in set.
    for p in [
        Policy::default(),
        load(
            "version = 1
",
        ),
    ] {
        assert_eq!(p.subagent_withheld(), DEFAULT_SUBAGENT_WITHHELD.to_vec());
        for tool in [
            "sessions_list",
            "session_send",
            "spawn_agent",
            "subagents_kill",
        ] {
            // The top scope and an agent scope keep them; a subagent does not.
            assert_eq!(hidden_in(&p, tool, &[]), None);
            assert_eq!(hidden_in(&p, tool, &["lead"]), None);
            let blame = hidden_in(&p, tool, &["lead", "helper"]).expect("withheld");
            assert!(
                blame.starts_with("layer subagent, the built-in subagent default")
                    && blame.contains("unless a subagent layer opens it"),
                "{blame}"
            );
        }
        // Every other tool stays visible to the subagent.
        assert_eq!(hidden_in(&p, "read_file", &["lead", "helper"]), None);
        assert_eq!(hidden_in(&p, "sessionless", &["lead", "helper"]), None);
    }
}

#[test]
fn a_subagent_layer_opens_withheld_tools_and_nothing_else() {
    let p = load(
        r#"
version = 1
[principals]
owner_only = ["spawn_root"]

[subagents]
withheld = ["spawn_*", "sessions_*"]

[[layers]]
kind = "agent"
name = "lead"
deny = ["spawn_nuke"]

[[layers]]
kind = "subagent"
name = "helper"
open = ["spawn_*"]
"#,
    );
    let helper = ["lead", "helper"];
    let other = ["lead", "other"];
    // Opened for the named subagent only.
    assert_eq!(hidden_in(&p, "spawn_worker", &helper), None);
    let blame = hidden_in(&p, "spawn_worker", &other).expect("withheld");
    assert!(
        blame.starts_with("layer subagent, subagents.withheld[0] (line 7)"),
        "{blame}"
    );
    // What it does not open stays withheld.
    let blame = hidden_in(&p, "sessions_list", &helper).expect("withheld");
    assert!(blame.contains("subagents.withheld[1] (line 7)"), "{blame}");
    // `open` gives back only the default: another layer's deny and
    // owner-only still hide.
    let blame = hidden_in(&p, "spawn_nuke", &helper).expect("denied by the agent layer");
    assert!(
        blame.starts_with("layer agent:lead, layers[0].deny[0]"),
        "{blame}"
    );
    let scopes = chain(&helper);
    assert!(
        p.hidden(
            "spawn_root",
            &subject("bob", &scopes),
            SandboxMode::ReadOnly
        )
        .is_some(),
        "owner-only is not opened"
    );
    // The file's list replaces the built-in one.
    assert_eq!(hidden_in(&p, "subagents_kill", &other), None);
    // `withheld = []` withholds nothing.
    let none = load(
        "version = 1
[subagents]
withheld = []
",
    );
    assert_eq!(hidden_in(&none, "spawn_worker", &other), None);
}

#[test]
fn the_trace_shows_the_subagent_default_as_a_step() {
    let p = load(
        "version = 1
",
    );
    let scopes = chain(&["lead", "helper"]);
    let args = json!({});
    let t = p.trace(
        &facts("spawn_agent", &args, SandboxMode::ReadOnly),
        &subject("local", &scopes),
    );
    let last = t.steps.last().expect("a step");
    assert_eq!(last.layer, "subagent");
    assert!(last.hidden_by.is_some());
    assert_eq!(
        t.hidden.as_ref().map(|b| b.layer.as_str()),
        Some("subagent")
    );
    // A tool nobody withholds adds no step.
    let t = p.trace(
        &facts("read_file", &args, SandboxMode::ReadOnly),
        &subject("local", &scopes),
    );
    assert!(
        t.steps.iter().all(|s| s.layer != "subagent"),
        "{:?}",
        t.steps
    );
}

#[test]
fn open_outside_a_subagent_layer_and_bad_withheld_are_located() {
    let head = "version = 1\n";
    assert_error(
        &format!("{head}[[layers]]\nkind = \"agent\"\nname = \"a\"\nopen = [\"spawn_*\"]\n"),
        5,
        &["layers[0].open", "only a subagent layer opens tools"],
    );
    assert_error(
        &format!("{head}[subagents]\nwithheld = [\"ok\", \"\"]\n"),
        3,
        &["subagents.withheld[1]", "empty tool pattern"],
    );
    assert_error(
        &format!("{head}[subagents]\nopen = [\"x\"]\n"),
        3,
        &["open"],
    );
}

// ─────────────── property: adding a layer never widens ───────────────

/// A small deterministic generator (xorshift64*), so a failure reproduces
/// from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const TOOLS: [&str; 5] = ["alpha", "beta", "gamma", "delta", "spawn_x"];
const PATTERNS: [&str; 8] = [
    "alpha", "beta", "gamma", "*", "a*", "?eta", "[dg]*", "spawn_*",
];
const DECISIONS: [&str; 3] = ["allow", "ask", "deny"];
const PRINCIPALS: [&str; 3] = ["local", "bob", "eve"];
const MODES: [SandboxMode; 2] = [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite];
const PATHS: [&str; 3] = ["src/a", "etc/x", "b"];

fn rules(rng: &mut Rng, table: &str) -> String {
    let mut out = String::new();
    for _ in 0..rng.below(3) {
        out += &format!(
            "[[{table}]]\ntool = \"{}\"\ndecision = \"{}\"\nreason = \"r\"\n",
            rng.pick(&PATTERNS),
            rng.pick(&DECISIONS)
        );
        if rng.chance(40) {
            out += &format!(
                "args = [{{ pointer = \"/path\", glob = \"{}\" }}]\n",
                rng.pick(&["src/**", "etc/*", "b"])
            );
        }
    }
    out
}

fn patterns(rng: &mut Rng, max: usize) -> String {
    let list: Vec<String> = (0..1 + rng.below(max))
        .map(|_| format!("\"{}\"", rng.pick(&PATTERNS)))
        .collect();
    list.join(", ")
}

/// A random layer; `open` lets a subagent layer open withheld tools.
fn random_layer(rng: &mut Rng, open: bool) -> String {
    let (kind, name) = match rng.below(5) {
        0 => ("group", Some("crew")),
        1 => ("principal", Some(rng.pick(&PRINCIPALS))),
        2 => ("agent", Some(rng.pick(&["s1", "s2"]))),
        3 => ("mode", Some(rng.pick(&["read-only", "workspace-write"]))),
        _ => ("subagent", rng.chance(50).then_some("s2")),
    };
    let mut out = format!("[[layers]]\nkind = \"{kind}\"\n");
    if let Some(n) = name {
        out += &format!("name = \"{n}\"\n");
    }
    if rng.chance(30) {
        out += &format!("allow = [{}]\n", patterns(rng, 3));
    }
    if rng.chance(30) {
        out += &format!("deny = [{}]\n", patterns(rng, 2));
    }
    if rng.chance(40) {
        out += &format!("default = \"{}\"\n", rng.pick(&DECISIONS));
    }
    if rng.chance(15) {
        out += &format!("approval = \"{}\"\n", rng.pick(&["ask", "never"]));
    }
    if open && kind == "subagent" && rng.chance(50) {
        out += &format!("open = [{}]\n", patterns(rng, 2));
    }
    out += &rules(rng, "layers.rules");
    if rng.chance(20) {
        out += "[[layers.guards]]\ntool = \"*\"\npointer = \"/path\"\ndeny_paths = [\"etc/**\"]\nreason = \"g\"\n";
    }
    out
}

fn random_global(rng: &mut Rng) -> String {
    let mut out = "version = 1\n".to_string();
    if rng.chance(30) {
        out += &format!(
            "preset = \"{}\"\n",
            rng.pick(&["read-only", "workspace-write"])
        );
    }
    out += &format!("default = \"{}\"\n", rng.pick(&DECISIONS));
    if rng.chance(20) {
        out += "approval = \"never\"\n";
    }
    out += "[principals]\n";
    if rng.chance(40) {
        out += &format!("owner_only = [{}]\n", patterns(rng, 2));
    }
    if rng.chance(30) {
        out += "owners = [\"eve\"]\n";
    }
    out += "[principals.groups]\ncrew = [\"bob\", \"eve\"]\n";
    // The subagent default: built in (which withholds spawn_*), or a list.
    if rng.chance(50) {
        out += &format!("[subagents]\nwithheld = [{}]\n", patterns(rng, 2));
    }
    out += &rules(rng, "rules");
    out
}

/// 0: runs; 1: asks a human; 2: refused. Hidden is reported apart.
fn verdict(p: &Policy, facts: &CallFacts<'_>, subject: &Subject<'_>) -> (bool, u8) {
    let t = p.trace(facts, subject);
    let hidden = t.hidden.is_some();
    assert_eq!(
        hidden,
        p.hidden(facts.tool, subject, facts.mode).is_some(),
        "trace and hidden disagree"
    );
    let rank = match t.decision.kind() {
        _ if hidden || t.guard.is_some() => 2,
        DecisionKind::Deny => 2,
        DecisionKind::Ask if t.approval == ApprovalSetting::Never => 2,
        DecisionKind::Ask => 1,
        DecisionKind::Allow => 0,
    };
    (hidden, rank)
}

#[test]
fn adding_a_layer_never_widens_anything() {
    let scope_chains: [Vec<String>; 3] =
        [vec![], vec!["s1".into()], vec!["s1".into(), "s2".into()]];
    let mut checked = 0usize;
    for seed in 1..=400u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let global = random_global(&mut rng);
        let layers: Vec<String> = (0..rng.below(4))
            .map(|_| random_layer(&mut rng, true))
            .collect();
        // The added layer narrows only: it opens nothing (`open` is the
        // next property's).
        let extra = random_layer(&mut rng, false);
        let at = rng.below(layers.len() + 1);
        let mut wider = layers.clone();
        wider.insert(at, extra.clone());
        // The global part's [principals] tables come before any layer.
        let before_src = format!("{global}{}", layers.concat());
        let after_src = format!("{global}{}", wider.concat());
        let before = load(&before_src);
        let after = load(&after_src);
        for tool in TOOLS {
            for path in PATHS {
                let args = json!({ "path": path });
                for mode in MODES {
                    for principal in PRINCIPALS {
                        for scopes in &scope_chains {
                            let f = facts(tool, &args, mode);
                            let s = subject(principal, scopes);
                            let (h0, r0) = verdict(&before, &f, &s);
                            let (h1, r1) = verdict(&after, &f, &s);
                            assert!(
                                (!h0 || h1) && r1 >= r0,
                                "seed {seed}: adding a layer widened {tool} {args} for {principal} \
                                 in {scopes:?} ({mode}): hidden {h0}->{h1}, rank {r0}->{r1}\n\
                                 --- before ---\n{before_src}\n--- added ---\n{extra}"
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(checked, 400 * 270);
}

/// Where the subagent default removes its list from the global part:
/// `[subagents] withheld = []` in place of whatever it said.
fn without_default(global: &str) -> String {
    let kept: Vec<&str> = global
        .lines()
        .filter(|l| !l.starts_with("[subagents]") && !l.starts_with("withheld"))
        .collect();
    format!("{}\n[subagents]\nwithheld = []\n", kept.join("\n"))
}

#[test]
fn open_only_gives_back_what_the_subagent_default_withheld() {
    let scope_chains: [Vec<String>; 3] = [
        vec!["s1".into()],
        vec!["s1".into(), "s2".into()],
        vec!["s2".into(), "s3".into()],
    ];
    let mut checked = 0usize;
    let mut opened = 0usize;
    for seed in 1..=400u64 {
        let mut rng = Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
        let global = random_global(&mut rng);
        let layers = (0..1 + rng.below(4))
            .map(|_| random_layer(&mut rng, true))
            .collect::<Vec<_>>()
            .concat();
        let with = load(&format!("{global}{layers}"));
        // The same stack with nothing withheld: the widest `open` can go.
        let bare_src = format!("{}{layers}", without_default(&global));
        let bare = load(&bare_src);
        for tool in TOOLS {
            for path in PATHS {
                let args = json!({ "path": path });
                for mode in MODES {
                    for principal in PRINCIPALS {
                        for scopes in &scope_chains {
                            let f = facts(tool, &args, mode);
                            let s = subject(principal, scopes);
                            let (h0, r0) = verdict(&bare, &f, &s);
                            let (h1, r1) = verdict(&with, &f, &s);
                            assert!(
                                (!h0 || h1) && r1 >= r0,
                                "seed {seed}: {tool} {args} for {principal} in {scopes:?} \
                                 ({mode}) is wider with the subagent default than without: \
                                 hidden {h0}->{h1}, rank {r0}->{r1}\n{global}{layers}"
                            );
                            // A subagent sees spawn_x although `spawn_*` is withheld:
                            // some layer opened it.
                            if s.is_subagent()
                                && tool == "spawn_x"
                                && !h1
                                && with.subagent_withheld().contains(&"spawn_*")
                            {
                                opened += 1;
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(checked, 400 * 270);
    assert!(
        opened > 0,
        "no stack opened a withheld tool: the property was not exercised"
    );
}
