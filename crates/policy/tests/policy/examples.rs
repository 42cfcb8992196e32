//! Examples in the policy file are checked at load: passing ones load, failing
//! ones reject the file naming the rule or guard, the example and its line.

use crate::{assert_error, load};

const RULE: &str = "version = 1\n[[rules]]\ntool = \"write_file\"\ndecision = \"ask\"\nreason = \"r\"\n\
                    side_effect = [\"write\"]\nargs = [ { pointer = \"/path\", glob = \"src/**\" } ]\n";

#[test]
fn passing_rule_examples_load() {
    load(&format!(
        "{RULE}must_match = [ {{ tool = \"write_file\", args = {{ path = \"src/a.rs\" }}, side_effect = \"write\" }} ]\n\
         must_not_match = [\n  {{ tool = \"write_file\", args = {{ path = \"docs/a.md\" }}, side_effect = \"write\" }},\n  \
         {{ tool = \"write_file\", args = {{ path = \"src/a.rs\" }}, side_effect = \"read\" }},\n  \
         {{ tool = \"read_file\", args = {{ path = \"src/a.rs\" }}, side_effect = \"write\" }},\n]\n"
    ));
}

#[test]
fn a_failing_must_match_names_the_rule_the_example_and_the_line() {
    assert_error(
        &format!(
            "{RULE}must_match = [\n  {{ tool = \"write_file\", args = {{ path = \"src/a.rs\" }}, side_effect = \"write\" }},\n  \
             {{ tool = \"write_file\", args = {{ path = \"lib/a.rs\" }}, side_effect = \"write\" }},\n]\n"
        ),
        10,
        &[
            "rules[0]",
            "\"write_file\"",
            "must_match[1]",
            "lib/a.rs",
            "does not match",
        ],
    );
}

#[test]
fn a_failing_must_not_match_is_rejected() {
    assert_error(
        &format!(
            "{RULE}\nmust_not_match = [ {{ tool = \"write_file\", args = {{ path = \"src/x\" }}, side_effect = \"write\" }} ]\n"
        ),
        9,
        &["rules[0]", "must_not_match[0]", "matches the rule"],
    );
}

#[test]
fn example_side_effect_defaults_to_none() {
    // The rule requires side_effect write; an example without one is "none".
    assert_error(
        &format!(
            "{RULE}must_match = [ {{ tool = \"write_file\", args = {{ path = \"src/a.rs\" }} }} ]\n"
        ),
        8,
        &["must_match[0]", "does not match"],
    );
    assert_error(
        &format!(
            "{RULE}must_match = [ {{ tool = \"write_file\", side_effect = \"scribble\" }} ]\n"
        ),
        8,
        &["rules[0].must_match[0].side_effect", "unknown side effect"],
    );
}

/// Examples are judged as the host runs the call: a tool that declares
/// `none` is seen as `read` in any mode but `none` (it can read there).
#[test]
fn examples_are_judged_as_the_host_runs_the_call() {
    let reads = "version = 1\nmode = \"read-only\"\n[[rules]]\ntool = \"*\"\ndecision = \"ask\"\n\
                 reason = \"r\"\nside_effect = [\"read\"]\n";
    load(&format!(
        "{reads}must_match = [ {{ tool = \"t\" }}, {{ tool = \"t\", mode = \"danger-full-access\" }} ]\n\
         must_not_match = [ {{ tool = \"t\", mode = \"none\" }} ]\n"
    ));
    assert_error(
        &format!("{reads}must_not_match = [ {{ tool = \"t\", side_effect = \"none\" }} ]\n"),
        8,
        &["must_not_match[0]", "matches the rule"],
    );
}

const GUARD: &str = "version = 1\n[[guards]]\nname = \"no-env\"\ntool = \"*\"\nreason = \"r\"\n\
                     pointer = \"/path\"\ndeny_paths = [\"**/.env\"]\n";

#[test]
fn passing_guard_examples_load() {
    load(&format!(
        "{GUARD}must_deny = [ {{ tool = \"read_file\", args = {{ path = \"app/.env\" }} }} ]\n\
         must_allow = [ {{ tool = \"read_file\", args = {{ path = \"app/env.rs\" }} }}, {{ tool = \"x\" }} ]\n"
    ));
}

#[test]
fn failing_guard_examples_name_the_guard_the_example_and_the_line() {
    assert_error(
        &format!(
            "{GUARD}must_deny = [ {{ tool = \"read_file\", args = {{ path = \"app/env\" }} }} ]\n"
        ),
        8,
        &["guard no-env", "must_deny[0]", "app/env", "is not denied"],
    );
    assert_error(
        &format!(
            "{GUARD}\n\nmust_allow = [ {{ tool = \"read_file\", args = {{ path = \".env\" }} }} ]\n"
        ),
        10,
        &["guard no-env", "must_allow[0]", "is denied"],
    );
}
