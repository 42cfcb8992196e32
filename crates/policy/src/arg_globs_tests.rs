//! Work counted, not timed: a call's deny and ask path rules and a guard's
//! `deny_paths` look at each string of an argument a bounded number of times,
//! whatever the number of rules or globs (`count_glob_eval`).

use crate::arg_globs::ArgGlobs;
use crate::guard::Guards;
use crate::matcher::GLOB_EVALS;
use crate::{CallFacts, DecisionKind, Policy, SandboxMode, SideEffect};
use serde_json::json;

/// Glob evaluations on this thread while `f` runs.
fn glob_evals(f: impl FnOnce()) -> u64 {
    let before = GLOB_EVALS.with(std::cell::Cell::get);
    f();
    GLOB_EVALS.with(std::cell::Cell::get) - before
}

/// A policy of 20 path rules at `/paths` (deny and ask in turn, each glob
/// with a directory stem) and a guard of 20 `deny_paths` there.
fn twenty_of_each() -> Policy {
    let mut src = String::from("version = 1\ndefault = \"allow\"\n");
    for i in 0..20 {
        let decision = if i % 2 == 0 { "deny" } else { "ask" };
        src.push_str(&format!(
            "[[rules]]\ntool = \"read_many\"\ndecision = \"{decision}\"\nreason = \"r{i}\"\n\
             args = [ {{ pointer = \"/paths\", glob = \"**/secret{i}/**\" }} ]\n"
        ));
    }
    let globs: Vec<String> = (0..20).map(|i| format!("\"/etc/private{i}/**\"")).collect();
    src.push_str(&format!(
        "[[guards]]\ntool = \"read_many\"\nreason = \"g\"\npointer = \"/paths\"\n\
         deny_paths = [{}]\n",
        globs.join(", ")
    ));
    Policy::from_toml(&src, "test.toml").unwrap()
}

/// 1000 paths that no rule or guard matches; every other one has a `./`
/// segment, so that it is also tested normalised.
fn paths() -> serde_json::Value {
    let paths: Vec<String> = (0..1000)
        .map(|i| match i % 2 {
            0 => format!("src/m{i}/f{i}.rs"),
            _ => format!("src/m{i}/./f{i}.rs"),
        })
        .collect();
    json!({ "paths": paths })
}

/// One set evaluation per spelling of each string (500 strings have two),
/// not one per rule: 1500, where it was 20 rules × 2 globs × 1500.
#[test]
fn path_rules_look_at_each_spelling_of_each_string_once() {
    let policy = twenty_of_each();
    let args = paths();
    let facts = CallFacts::of_call("read_many", &args, SideEffect::Read, SandboxMode::ReadOnly);
    let mut decision = None;
    let evals = glob_evals(|| decision = Some(policy.evaluate(&facts).decision.kind()));
    assert_eq!(decision, Some(DecisionKind::Allow));
    assert_eq!(evals, 1500);
}

/// A guard tests each string as written, normalised (when that differs) and
/// as a directory: at most three set evaluations per string, not three per
/// glob.
#[test]
fn a_path_guard_looks_at_each_string_at_most_three_times() {
    let policy = twenty_of_each();
    let guards = Guards::from_policy(&policy);
    let args = paths();
    let facts = CallFacts::of_call("read_many", &args, SideEffect::Read, SandboxMode::ReadOnly);
    let mut denial = None;
    let evals = glob_evals(|| denial = guards.check(&facts));
    assert_eq!(denial, None);
    assert_eq!(evals, 2500);
}

/// One set per pointer that a deny or ask rule's glob looks at, however many
/// rules share it; allow rules and regexes are matched on their own.
#[test]
fn one_set_per_pointer_of_the_deny_and_ask_globs() {
    let policy = Policy::from_toml(
        r#"
version = 1
[[rules]]
tool = "*"
decision = "deny"
reason = "r"
args = [ { pointer = "/a", glob = "x/**" }, { pointer = "/b", glob = "y" } ]
[[rules]]
tool = "*"
decision = "ask"
reason = "r"
args = [ { pointer = "/a", glob = "z" } ]
[[rules]]
tool = "*"
decision = "allow"
args = [ { pointer = "/c", glob = "z" } ]
[[rules]]
tool = "*"
decision = "deny"
reason = "r"
args = [ { pointer = "/d", regex = "z" } ]
"#,
        "test.toml",
    )
    .unwrap();
    assert_eq!(ArgGlobs::new(policy.rules()).sets(), 2);
    assert_eq!(ArgGlobs::new(twenty_of_each().rules()).sets(), 1);
}

/// Every rule answers through the sets exactly as it does on its own
/// (`Rule::matches`), for globs of every shape globset treats apart
/// (literals, prefixes, suffixes, extensions, regexes) and values of every
/// shape (spellings, lists, objects, numbers, booleans).
#[test]
fn the_sets_answer_as_each_rule_does_alone() {
    let patterns = [
        "src/**",
        "**/.git/**",
        "secrets/**",
        "*.rs",
        "src/*.rs",
        "**/*.key",
        "/etc/**",
        "a?c",
        "[ab]*",
        "{x,y}/**",
        "**",
        "*",
        "**/node_modules",
        "docs/**/*.md",
        ".env*",
        "*/**",
        "src/*/**",
        "22",
        "true",
        "1000",
        "Makefile",
        "**/Makefile",
        "*.tar.gz",
        "a/b",
    ];
    let mut src = String::from("version = 1\n");
    for (i, g) in patterns.iter().enumerate() {
        for decision in ["deny", "ask", "allow"] {
            src.push_str(&format!(
                "[[rules]]\ntool = \"*\"\ndecision = \"{decision}\"\nreason = \"r{i}\"\n\
                 args = [ {{ pointer = \"/p\", glob = \"{g}\" }} ]\n"
            ));
        }
    }
    let policy = Policy::from_toml(&src, "test.toml").unwrap();
    let texts = [
        "",
        ".",
        "..",
        "/",
        "//",
        "a",
        "abc",
        "bc",
        "src",
        "src/",
        "src/a.rs",
        "src/a/b.rs",
        "./src/a.rs",
        "src/../secrets/k",
        "secrets",
        "secrets/",
        "secrets//k",
        ".git",
        "vendor/x/.git",
        "vendor/x/.git/config",
        "x/.gitignore",
        "a.rs",
        "dir/a.rs",
        "k.key",
        "a/b/c.key",
        "/etc/passwd",
        "/etc",
        "/x/../etc/passwd",
        "x/y",
        "y/z/w",
        "x",
        "node_modules",
        "a/node_modules",
        "docs/a.md",
        "docs/x/y/a.md",
        ".env",
        ".env.local",
        "a/.env",
        "Makefile",
        "src/Makefile",
        "a.tar.gz",
        "b/a.tar.gz",
        "a/b",
        "a//b",
        "a/b/",
        "22",
        "1000",
        "true",
        "ab/../a/b",
        "../a/b",
    ];
    let mut values: Vec<serde_json::Value> = texts.iter().map(|t| json!(t)).collect();
    values.extend([
        json!(22),
        json!(1000.0),
        json!(1e3),
        json!(true),
        json!(null),
        json!([]),
        json!(["src/a", "x/.git"]),
        json!([["./secrets//k"]]),
        json!({"src/a.rs": "Makefile"}),
        json!([{"path": "a/b"}, 22]),
    ]);
    let mut matched = 0;
    for value in values {
        let args = json!({ "p": value });
        for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
            let facts = CallFacts::of_call("t", &args, SideEffect::Write, mode);
            let globs = ArgGlobs::new(policy.rules());
            let mut hits = globs.hits(&args);
            for (i, rule) in policy.rules().iter().enumerate() {
                matched += usize::from(rule.matches(&facts));
                assert_eq!(
                    hits.rule_matches(i, rule, &facts),
                    rule.matches(&facts),
                    "{} {:?} on {args} in {mode}",
                    rule.decision(),
                    patterns[i / 3],
                );
            }
        }
    }
    // Neither all nor nothing: the comparison has both answers to compare.
    assert!((500..5000).contains(&matched), "{matched}");
}
