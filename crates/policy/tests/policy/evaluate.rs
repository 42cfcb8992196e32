//! Policy evaluation: the issue's example form, strictest wins, defaults,
//! tool globs, argument and side-effect matchers.

use crate::{facts, load};
use serde_json::json;
use toolhost_policy::{
    ApprovalSetting, Decision, DecisionKind, Evaluation, Policy, Preset, RuleOrigin, RuleRef,
    SandboxMode, SideEffect,
};

/// The example form of the issue, verbatim apart from the comments.
pub const ISSUE_EXAMPLE: &str = r#"
version = 1
preset = "workspace-write"   # optional: read-only | workspace-write | danger-full-access
default = "allow"            # allow | deny | ask, for calls no rule matches
approval = "ask"             # ask | never (never: every ask is refused without asking)
mode = "workspace-write"     # default sandbox mode for calls

[[rules]]
tool = "write_file"          # exact name or glob (globset syntax)
decision = "ask"             # allow | deny | ask
reason = "writes need a human"
args = [ { pointer = "/path", glob = "src/**" }, { pointer = "/content", regex = "TODO" } ]
must_match = [ { tool = "write_file", args = { path = "src/a.rs", content = "x TODO" } } ]
must_not_match = [ { tool = "write_file", args = { path = "docs/a.md", content = "x" } } ]

[[guards]]
tool = "*"
deny_args_matching = "(?i)secret"   # regex over the call's arguments serialised as compact JSON
reason = "no secrets through tools"
must_deny = [ { tool = "anything", args = { note = "my SECRET" } } ]
must_allow = [ { tool = "anything", args = { note = "hello" } } ]

[[guards]]
tool = "*"
pointer = "/path"
deny_paths = ["/etc/**", "**/.git/**"]
reason = "system and git internals are off limits"

[post_execute]
redact = ["sk-[A-Za-z0-9]{20,}"]
max_content_chars = 20000
block_matching = "BEGIN PRIVATE KEY"
"#;

#[test]
fn the_issue_example_loads() {
    let p = load(ISSUE_EXAMPLE);
    assert_eq!(p.preset(), Some(Preset::WorkspaceWrite));
    assert_eq!(p.default_mode(), SandboxMode::WorkspaceWrite);
    assert_eq!(p.approval(), ApprovalSetting::Ask);
    assert_eq!(p.default_decision(), DecisionKind::Allow);
    // The preset's built-in rule comes first, then the file's rule.
    assert_eq!(p.rules().len(), 2);
    assert_eq!(
        p.rules()[0].origin(),
        RuleOrigin::Preset(Preset::WorkspaceWrite)
    );
    assert_eq!(
        p.rules()[1].origin(),
        RuleOrigin::File { index: 0, line: 8 }
    );
    assert_eq!(p.rules()[1].tool_pattern(), "write_file");
    assert_eq!(p.guards().len(), 2);
    assert_eq!(p.post_execute().max_content_chars(), Some(20000));

    let args = json!({"path": "src/lib.rs", "content": "TODO: later"});
    assert_eq!(
        p.evaluate(&facts("write_file", &args, SideEffect::Write)),
        Evaluation {
            decision: Decision::Ask {
                reason: "writes need a human".into()
            },
            matched: Some(RuleRef {
                index: 1,
                origin: RuleOrigin::File { index: 0, line: 8 }
            }),
        }
    );
    let args = json!({"path": "docs/x.md", "content": "TODO"});
    assert_eq!(
        p.evaluate(&facts("write_file", &args, SideEffect::Write)),
        Evaluation {
            decision: Decision::Allow,
            matched: None
        }
    );
}

const OVERLAPPING: &str = r#"
version = 1
default = "deny"

[[rules]]
tool = "*_file"
decision = "allow"

[[rules]]
tool = "write_*"
decision = "ask"
reason = "writes ask"

[[rules]]
tool = "write_file"
decision = "deny"
reason = "no writing into .git"
args = [ { pointer = "/path", glob = "**/.git/**" } ]

[[rules]]
tool = "write_*"
decision = "ask"
reason = "a second ask, later"
"#;

#[test]
fn the_strictest_matching_rule_wins_whatever_the_order() {
    let p = load(OVERLAPPING);
    let git = json!({"path": "repo/.git/config"});
    let e = p.evaluate(&facts("write_file", &git, SideEffect::Write));
    assert_eq!(
        e.decision,
        Decision::Deny {
            reason: "no writing into .git".into()
        }
    );
    assert_eq!(e.matched.map(|m| m.index), Some(2));

    // Allow and two asks match: ask wins, and the first ask is reported.
    let src = json!({"path": "src/a.rs"});
    let e = p.evaluate(&facts("write_file", &src, SideEffect::Write));
    assert_eq!(
        e.decision,
        Decision::Ask {
            reason: "writes ask".into()
        }
    );
    assert_eq!(e.matched.map(|m| m.index), Some(1));

    let e = p.evaluate(&facts("read_file", &src, SideEffect::Read));
    assert_eq!(e.decision, Decision::Allow);
    assert_eq!(e.matched.map(|m| m.index), Some(0));
}

#[test]
fn the_default_applies_when_nothing_matches() {
    let p = load(OVERLAPPING);
    let args = json!({});
    let e = p.evaluate(&facts("grep", &args, SideEffect::Read));
    assert_eq!(e.matched, None);
    assert_eq!(e.decision.kind(), DecisionKind::Deny);
    assert!(e.decision.reason().unwrap().contains("\"grep\""));

    for (default, kind) in [("allow", DecisionKind::Allow), ("ask", DecisionKind::Ask)] {
        let p = load(&format!("version = 1\ndefault = \"{default}\"\n"));
        let e = p.evaluate(&facts("grep", &args, SideEffect::Read));
        assert_eq!((e.decision.kind(), e.matched), (kind, None));
    }
}

#[test]
fn the_built_in_default_is_conservative() {
    let p = Policy::default();
    assert_eq!(p.default_decision(), DecisionKind::Allow);
    assert_eq!(p.approval(), ApprovalSetting::Ask);
    assert_eq!(p.default_mode(), SandboxMode::ReadOnly);
    assert_eq!(p.preset(), None);
    assert!(p.rules().is_empty() && p.guards().is_empty() && p.post_execute().is_empty());
    // A file without preset or keys gets the same values.
    let f = load("version = 1\n");
    assert_eq!(
        (
            f.default_decision(),
            f.approval(),
            f.default_mode(),
            f.rules().len()
        ),
        (
            DecisionKind::Allow,
            ApprovalSetting::Ask,
            SandboxMode::ReadOnly,
            0
        )
    );
}

#[test]
fn tool_patterns_are_exact_names_or_globs() {
    let p = load(
        "version = 1\ndefault = \"deny\"\n[[rules]]\ntool = \"read_file\"\ndecision = \"allow\"\n\
         [[rules]]\ntool = \"list_{dir,files}\"\ndecision = \"allow\"\n[[rules]]\ntool = \"g?ep\"\ndecision = \"allow\"\n",
    );
    let args = json!({});
    let allowed =
        |tool: &str| p.evaluate(&facts(tool, &args, SideEffect::Read)).decision == Decision::Allow;
    assert!(allowed("read_file"));
    assert!(!allowed("read_file2"));
    assert!(!allowed("xread_file"));
    assert!(allowed("list_dir"));
    assert!(allowed("list_files"));
    assert!(!allowed("list_other"));
    assert!(allowed("grep"));
    assert!(!allowed("greep"));
}

#[test]
fn arg_matchers_all_must_match_and_a_missing_pointer_never_matches() {
    let p = load(
        r#"
version = 1
[[rules]]
tool = "write_file"
decision = "deny"
reason = "no TODOs in src"
args = [ { pointer = "/path", glob = "src/**" }, { pointer = "/content", regex = "TODO" } ]

[[rules]]
tool = "fetch"
decision = "ask"
reason = "non-https"
args = [ { pointer = "/req/url", regex = "^http://" } ]
"#,
    );
    let deny = |tool: &str, args: serde_json::Value| {
        p.evaluate(&facts(tool, &args, SideEffect::Write))
            .decision
            .kind()
    };
    assert_eq!(
        deny(
            "write_file",
            json!({"path": "src/a/b.rs", "content": "a TODO"})
        ),
        DecisionKind::Deny
    );
    assert_eq!(
        deny(
            "write_file",
            json!({"path": "src/a/b.rs", "content": "done"})
        ),
        DecisionKind::Allow
    );
    assert_eq!(
        deny("write_file", json!({"path": "lib/a.rs", "content": "TODO"})),
        DecisionKind::Allow
    );
    // Missing pointer: no match.
    assert_eq!(
        deny("write_file", json!({"content": "TODO"})),
        DecisionKind::Allow
    );
    // An array or an object at the pointer matches a deny rule by any
    // value in it.
    assert_eq!(
        deny("write_file", json!({"path": ["src/a"], "content": "TODO"})),
        DecisionKind::Deny
    );
    assert_eq!(
        deny("write_file", json!({"path": ["lib/a"], "content": "TODO"})),
        DecisionKind::Allow
    );
    assert_eq!(
        deny(
            "write_file",
            json!({"path": {"p": "src/a"}, "content": "TODO"})
        ),
        DecisionKind::Deny
    );
    assert_eq!(
        deny(
            "write_file",
            json!({"path": {"p": "lib/a"}, "content": "TODO"})
        ),
        DecisionKind::Allow
    );
    // Nested pointers.
    assert_eq!(
        deny("fetch", json!({"req": {"url": "http://x"}})),
        DecisionKind::Ask
    );
    assert_eq!(
        deny("fetch", json!({"req": {"url": "https://x"}})),
        DecisionKind::Allow
    );
    assert_eq!(
        deny("fetch", json!({"req": "http://x"})),
        DecisionKind::Allow
    );
}

#[test]
fn arg_globs_keep_star_within_a_path_segment() {
    let p = load(
        "version = 1\n[[rules]]\ntool = \"w\"\ndecision = \"deny\"\nreason = \"r\"\nargs = [ { pointer = \"/p\", glob = \"src/*.rs\" } ]\n",
    );
    let kind = |path: &str| {
        let args = json!({"p": path});
        p.evaluate(&facts("w", &args, SideEffect::Write))
            .decision
            .kind()
    };
    assert_eq!(kind("src/a.rs"), DecisionKind::Deny);
    assert_eq!(kind("src/x/a.rs"), DecisionKind::Allow);
}

#[test]
fn write_and_external_rules_match_what_the_tool_declares() {
    let p = load(
        "version = 1\n[[rules]]\ntool = \"*\"\ndecision = \"ask\"\nreason = \"effects ask\"\nside_effect = [\"write\", \"external\"]\n",
    );
    let args = json!({});
    for (effect, kind) in [
        (SideEffect::None, DecisionKind::Allow),
        (SideEffect::Read, DecisionKind::Allow),
        (SideEffect::Write, DecisionKind::Ask),
        (SideEffect::External, DecisionKind::Ask),
    ] {
        assert_eq!(
            p.evaluate(&facts("t", &args, effect)).decision.kind(),
            kind,
            "{effect}"
        );
    }
}

/// Deny and ask rules match any side effect the call may have (what it
/// declares, reading in any mode but `none`, writing in a writable mode);
/// allow rules only the side effect it is seen with. So declaring more than
/// the call may do does not get past a rule about reads, and an allow rule
/// for reads never allows a call that can write.
#[test]
fn side_effect_matchers_follow_what_the_call_may_do() {
    use DecisionKind::{Allow, Ask, Deny};
    use SandboxMode::{DangerFullAccess, None as NoFs, ReadOnly, WorkspaceWrite};
    use SideEffect::{External, None as Nothing, Read, Write};
    let rule = |decision: &str, effects: &str| {
        load(&format!(
            "version = 1\ndefault = \"{}\"\n[[rules]]\ntool = \"*\"\ndecision = \"{decision}\"\n\
             reason = \"r\"\nside_effect = {effects}\n",
            if decision == "allow" { "deny" } else { "allow" }
        ))
    };
    let ask_reads = rule("ask", "[\"read\"]");
    let ask_writes = rule("ask", "[\"write\"]");
    let allow_reads = rule("allow", "[\"read\"]");
    let allow_none = rule("allow", "[\"none\"]");
    // A deny rule about tools that declare `none` still sees them where
    // they are seen as reads.
    let deny_none = rule("deny", "[\"none\"]");
    let args = json!({});
    for (what, policy, declared, mode, kind) in [
        ("ask reads", &ask_reads, Write, ReadOnly, Ask),
        ("ask reads", &ask_reads, External, WorkspaceWrite, Ask),
        ("ask reads", &ask_reads, Nothing, ReadOnly, Ask),
        ("ask reads", &ask_reads, Nothing, NoFs, Allow),
        ("ask reads", &ask_reads, External, NoFs, Allow),
        ("ask writes", &ask_writes, External, DangerFullAccess, Ask),
        ("ask writes", &ask_writes, External, ReadOnly, Allow),
        ("ask writes", &ask_writes, Write, ReadOnly, Ask),
        // Clamped to read-only: it cannot write.
        ("ask writes", &ask_writes, Read, WorkspaceWrite, Allow),
        ("allow reads", &allow_reads, Write, WorkspaceWrite, Deny),
        ("allow reads", &allow_reads, Nothing, ReadOnly, Allow),
        ("allow reads", &allow_reads, Read, ReadOnly, Allow),
        ("allow reads", &allow_reads, Nothing, NoFs, Deny),
        ("allow none", &allow_none, Nothing, ReadOnly, Deny),
        ("allow none", &allow_none, Nothing, NoFs, Allow),
        ("deny none", &deny_none, Nothing, NoFs, Deny),
        ("deny none", &deny_none, Nothing, ReadOnly, Deny),
        ("deny none", &deny_none, Read, ReadOnly, Allow),
    ] {
        let facts = toolhost_policy::CallFacts::of_call("t", &args, declared, mode);
        let seen = policy.evaluate(&facts).decision.kind();
        assert_eq!(seen, kind, "{what}: {declared} in {mode}");
    }
}

#[test]
fn names_round_trip() {
    for e in SideEffect::ALL {
        assert_eq!(e.as_str().parse::<SideEffect>(), Ok(e));
    }
    for p in Preset::ALL {
        assert_eq!(p.as_str().parse::<Preset>(), Ok(p));
    }
    for d in DecisionKind::ALL {
        assert_eq!(d.as_str().parse::<DecisionKind>(), Ok(d));
    }
    assert!("writes".parse::<SideEffect>().is_err());
    assert!("full".parse::<Preset>().is_err());
    assert!(DecisionKind::Deny > DecisionKind::Ask && DecisionKind::Ask > DecisionKind::Allow);
}

/// `.` and `..` in a path argument never widen a rule: an allow rule for
/// `src/**` does not cover `src/../.git/hooks/pre-commit`, and a deny rule
/// for `secrets/**` still covers `./secrets/k`, `a/../secrets/k`,
/// `secrets//k` and `x://../secrets/k`. An allow rule reads text without
/// dot segments (a URL's `//`) as written.
#[test]
fn dot_segments_in_arguments_never_widen_a_rule() {
    let p = load(
        r#"
version = 1
default = "ask"
[[rules]]
tool = "write_file"
decision = "allow"
args = [ { pointer = "/path", glob = "src/**" } ]
[[rules]]
tool = "read_file"
decision = "deny"
reason = "no secrets"
args = [ { pointer = "/path", glob = "secrets/**" } ]
[[rules]]
tool = "http_fetch"
decision = "allow"
args = [ { pointer = "/url", glob = "https://api.example.com/**" } ]
"#,
    );
    let kind = |tool: &str, args: serde_json::Value| {
        p.evaluate(&facts(tool, &args, SideEffect::Write))
            .decision
            .kind()
    };
    assert_eq!(
        kind("write_file", json!({"path": "src/a.rs"})),
        DecisionKind::Allow
    );
    assert_eq!(
        kind(
            "write_file",
            json!({"path": "src/../.git/hooks/pre-commit"})
        ),
        DecisionKind::Ask
    );
    assert_eq!(
        kind("write_file", json!({"path": "src/./a.rs"})),
        DecisionKind::Allow
    );
    assert_eq!(
        kind("read_file", json!({"path": "secrets/k"})),
        DecisionKind::Deny
    );
    assert_eq!(
        kind("read_file", json!({"path": "./secrets/k"})),
        DecisionKind::Deny
    );
    assert_eq!(
        kind("read_file", json!({"path": "a/../secrets/k"})),
        DecisionKind::Deny
    );
    // Empty segments and a trailing `/` name the same path (the sandbox
    // ignores them): a deny rule still covers it, an allow rule does not
    // widen.
    for path in [
        "secrets//k",
        "secrets/k/",
        "./secrets//k",
        "x://../secrets/k",
    ] {
        assert_eq!(
            kind("read_file", json!({ "path": path })),
            DecisionKind::Deny,
            "{path}"
        );
    }
    assert_eq!(
        kind("write_file", json!({"path": "src//a.rs"})),
        DecisionKind::Allow
    );
    // An allow rule reads text without dot segments as written: a trailing
    // `/` or a `//` (a URL, a command line) takes nothing away from it.
    assert_eq!(
        kind("write_file", json!({"path": "src/"})),
        DecisionKind::Allow
    );
    assert_eq!(
        kind("write_file", json!({"path": "src/x://../../.git/config"})),
        DecisionKind::Ask
    );
    assert_eq!(
        kind("write_file", json!({"path": "src/..//.git/config"})),
        DecisionKind::Ask
    );
    assert_eq!(
        kind("read_file", json!({"path": "a/secrets/k"})),
        DecisionKind::Ask
    );
    assert_eq!(
        kind("http_fetch", json!({"url": "https://api.example.com/v1"})),
        DecisionKind::Allow
    );
}

/// A list cannot carry a path past a deny or ask rule: an array matches one
/// when any string in it (at any depth, in any spelling) does. It never
/// matches an allow rule, which stays with single values.
#[test]
fn an_array_matches_a_deny_rule_by_any_element_and_never_an_allow_rule() {
    let p = load(
        r#"
version = 1
default = "ask"
[[rules]]
tool = "read_many"
decision = "deny"
reason = "no secrets"
args = [ { pointer = "/paths", glob = "secrets/**" } ]
[[rules]]
tool = "read_many"
decision = "allow"
args = [ { pointer = "/paths", glob = "src/**" } ]
"#,
    );
    let kind = |args: serde_json::Value| {
        p.evaluate(&facts("read_many", &args, SideEffect::Read))
            .decision
            .kind()
    };
    assert_eq!(
        kind(json!({"paths": ["src/a", "secrets/k"]})),
        DecisionKind::Deny
    );
    assert_eq!(
        kind(json!({"paths": [["src/a"], ["./secrets//k"]]})),
        DecisionKind::Deny
    );
    assert_eq!(
        kind(json!({"paths": ["src/a", "src/b"]})),
        DecisionKind::Ask
    );
    assert_eq!(kind(json!({"paths": "src/a"})), DecisionKind::Allow);
    assert_eq!(kind(json!({"paths": []})), DecisionKind::Ask);
    // Objects, in a list or at the pointer, are looked into (keys and
    // values); they never match an allow rule either.
    assert_eq!(
        kind(json!({"paths": [{"path": "src/a"}, {"path": "secrets/k"}]})),
        DecisionKind::Deny
    );
    assert_eq!(
        kind(json!({"paths": {"from": "src/a", "to": {"at": "./secrets/k"}}})),
        DecisionKind::Deny
    );
    assert_eq!(
        kind(json!({"paths": [{"secrets/k": "src/a"}]})),
        DecisionKind::Deny
    );
    assert_eq!(
        kind(json!({"paths": [{"src/b": "src/a"}]})),
        DecisionKind::Ask
    );
    assert_eq!(kind(json!({"paths": {"path": "src/a"}})), DecisionKind::Ask);
}

/// Numbers and booleans in a list or an object match a deny rule as they
/// would alone: a port in a list is still the port.
#[test]
fn numbers_in_lists_and_objects_match_a_deny_rule() {
    let p = load(
        r#"
version = 1
default = "allow"
[[rules]]
tool = "connect"
decision = "deny"
reason = "no ssh"
args = [ { pointer = "/ports", regex = "^22$" } ]
"#,
    );
    let kind = |args: serde_json::Value| {
        p.evaluate(&facts("connect", &args, SideEffect::External))
            .decision
            .kind()
    };
    assert_eq!(kind(json!({"ports": 22})), DecisionKind::Deny);
    assert_eq!(kind(json!({"ports": [80, 22.0]})), DecisionKind::Deny);
    assert_eq!(kind(json!({"ports": [{"port": 22}]})), DecisionKind::Deny);
    assert_eq!(kind(json!({"ports": [80, 443]})), DecisionKind::Allow);
    assert_eq!(kind(json!({"ports": {"22": 80}})), DecisionKind::Deny);
    assert_eq!(kind(json!({"ports": {"80": 443}})), DecisionKind::Allow);
}
