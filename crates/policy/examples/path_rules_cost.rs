//! What deny and ask path rules cost per call for a large argument list:
//! 20 rules (deny and ask in turn), each with a glob at `/paths`, and a guard
//! with 20 `deny_paths`, against a list of about 1 MiB of paths that none of
//! them matches (the worst case: every string is looked at).
//!
//! ```text
//! cargo run --release -p toolhost-policy --example path_rules_cost
//! ```
//!
//! A measurement, not a test: it asserts nothing about time.

use std::time::{Duration, Instant};

use toolhost_policy::{CallFacts, Guards, Policy, SandboxMode, SideEffect};

const RULES: usize = 20;
const LIST_BYTES: usize = 1 << 20;
const RUNS: usize = 9;

fn main() {
    let mut src = String::from("version = 1\ndefault = \"allow\"\n");
    for i in 0..RULES {
        let decision = if i % 2 == 0 { "deny" } else { "ask" };
        src.push_str(&format!(
            "[[rules]]\ntool = \"read_many\"\ndecision = \"{decision}\"\nreason = \"r{i}\"\n\
             args = [ {{ pointer = \"/paths\", glob = \"**/secret{i}/**\" }} ]\n"
        ));
    }
    let globs: Vec<String> = (0..RULES)
        .map(|i| format!("\"/etc/private{i}/**\""))
        .collect();
    src.push_str(&format!(
        "[[guards]]\ntool = \"read_many\"\nreason = \"g\"\npointer = \"/paths\"\ndeny_paths = [{}]\n",
        globs.join(", ")
    ));
    let policy = match Policy::from_toml(&src, "bench.toml") {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let guards = Guards::from_policy(&policy);

    // As written, and with a `./` segment (each string then also tested normalised).
    for spelling in ["src/module_{n}/file_{n}.rs", "src/module_{n}/./file_{n}.rs"] {
        let mut paths = Vec::new();
        let mut bytes = 0;
        while bytes < LIST_BYTES {
            let p = spelling.replace("{n}", &paths.len().to_string());
            bytes += p.len() + 3;
            paths.push(serde_json::Value::String(p));
        }
        let n = paths.len();
        let args = serde_json::json!({ "paths": paths });
        let facts = CallFacts::of_call("read_many", &args, SideEffect::Read, SandboxMode::ReadOnly);
        let rules = median(|| {
            let e = policy.evaluate(&facts);
            assert!(e.matched.is_none());
        });
        let guard = median(|| assert!(guards.check(&facts).is_none()));
        println!(
            "{n} paths like {spelling:?} ({} KiB): {RULES} path rules {:.2} ms, \
             a guard of {RULES} deny_paths {:.2} ms (median of {RUNS} calls each)",
            LIST_BYTES / 1024,
            ms(rules),
            ms(guard)
        );
    }
}

fn median(mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let at = Instant::now();
            f();
            at.elapsed()
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
