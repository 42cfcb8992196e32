//! Every malformed form is rejected whole, with the problem and its line.

use crate::{assert_error, reject};

#[test]
fn syntax_errors_are_located() {
    let e = reject("version = 1\nmode = \n");
    assert_eq!((e.line(), e.column()), (2, 8), "{e}");
    let e = reject("version = 1\n\n[rules\n");
    assert_eq!(e.line(), 3, "{e}");
    // Syntax errors are reported once, without toml's multi-line snippet.
    assert!(!e.to_string().contains('\n'), "{e}");
}

#[test]
fn version_is_required_and_must_be_one() {
    assert_error("mode = \"read-only\"\n", 1, &["missing `version = 1`"]);
    assert_error(
        "# comment\nversion = 2\nnew_feature = true\n",
        2,
        &["written for a newer toolhost", "version 2"],
    );
    assert_error("\nversion = 0\n", 2, &["unsupported version 0"]);
    assert_error("\nversion = \"1\"\n", 2, &["unsupported version"]);
}

#[test]
fn unknown_keys_are_named_with_their_line() {
    assert_error("version = 1\nbogus = 2\n", 2, &["unknown field `bogus`"]);
    assert_error(
        "version = 1\n[[rules]]\ntool = \"a\"\ndecision = \"allow\"\nextra = 1\n",
        5,
        &["unknown field `extra`"],
    );
    assert_error(
        "version = 1\n[[rules]]\ntool = \"a\"\ndecision = \"allow\"\nargs = [ { pointer = \"/a\", globx = \"x\" } ]\n",
        5,
        &["unknown field `globx`"],
    );
    assert_error(
        "version = 1\n[[guards]]\ntool = \"*\"\nreason = \"r\"\ndeny_args_matching = \"x\"\nallow = true\n",
        6,
        &["unknown field `allow`"],
    );
    assert_error(
        "version = 1\n[post_execute]\nredact = []\nbad = 1\n",
        4,
        &["unknown field `bad`"],
    );
    assert_error(
        "version = 1\n[[rules]]\ntool = \"a\"\ndecision = \"allow\"\nmust_match = [ { tool = \"a\", arg = {} } ]\n",
        5,
        &["unknown field `arg`"],
    );
}

#[test]
fn unknown_names_are_rejected() {
    assert_error(
        "version = 1\n\ndefault = \"maybe\"\n",
        3,
        &["default", "unknown decision \"maybe\""],
    );
    assert_error(
        "version = 1\napproval = \"sometimes\"\n",
        2,
        &["approval", "\"sometimes\""],
    );
    assert_error(
        "version = 1\nmode = \"full\"\n",
        2,
        &["mode", "unknown sandbox mode \"full\""],
    );
    assert_error(
        "version = 1\npreset = \"yolo\"\n",
        2,
        &["preset", "unknown preset \"yolo\""],
    );
    assert_error(
        "version = 1\n[[rules]]\ntool = \"a\"\ndecision = \"perhaps\"\n",
        4,
        &["rules[0].decision", "unknown decision \"perhaps\""],
    );
    assert_error(
        "version = 1\n[[rules]]\ntool = \"a\"\ndecision = \"allow\"\nside_effect = [\"read\", \"network\"]\n",
        5,
        &["rules[0].side_effect", "unknown side effect \"network\""],
    );
    assert_error(
        "version = 1\n[[rules]]\ntool = \"a\"\ndecision = \"allow\"\nside_effect = []\n",
        5,
        &["empty list never matches"],
    );
}

#[test]
fn bad_tool_patterns_are_rejected() {
    assert_error(
        "version = 1\n[[rules]]\ntool = \"\"\ndecision = \"allow\"\n",
        3,
        &["rules[0].tool", "empty tool pattern"],
    );
    assert_error(
        "version = 1\n[[rules]]\ntool = \"a\"\ndecision = \"allow\"\n[[rules]]\ntool = \"[ab\"\ndecision = \"allow\"\n",
        6,
        &["rules[1].tool", "invalid tool glob"],
    );
    assert_error(
        "version = 1\n[[guards]]\ntool = \"  \"\nreason = \"r\"\ndeny_args_matching = \"x\"\n",
        3,
        &["guards[0].tool", "empty tool pattern"],
    );
}

#[test]
fn bad_arg_matchers_are_rejected() {
    let head = "version = 1\n[[rules]]\ntool = \"a\"\ndecision = \"allow\"\n";
    assert_error(
        &format!("{head}args = [ {{ pointer = \"path\", glob = \"x\" }} ]\n"),
        5,
        &["rules[0].args[0].pointer", "must start with \"/\""],
    );
    assert_error(
        &format!("{head}args = [ {{ pointer = \"/p\" }} ]\n"),
        5,
        &["rules[0].args[0]", "needs `glob` or `regex`"],
    );
    assert_error(
        &format!(
            "{head}args = [\n  {{ pointer = \"/p\", glob = \"x\" }},\n  {{ pointer = \"/p\", glob = \"x\", regex = \"y\" }},\n]\n"
        ),
        7,
        &["rules[0].args[1]", "not both"],
    );
    assert_error(
        &format!("{head}args = [ {{ pointer = \"/p\", glob = \"a[\" }} ]\n"),
        5,
        &["rules[0].args[0].glob", "invalid glob"],
    );
    assert_error(
        &format!("{head}\nargs = [ {{ pointer = \"/p\", regex = \"(unclosed\" }} ]\n"),
        6,
        &["rules[0].args[0].regex", "invalid regex", "unclosed group"],
    );
}

#[test]
fn deny_and_ask_rules_need_a_reason() {
    assert_error(
        "version = 1\n[[rules]]\ntool = \"a\"\ndecision = \"deny\"\n",
        2,
        &["rules[0]", "deny rule needs a non-empty reason"],
    );
    assert_error(
        "version = 1\n[[rules]]\ntool = \"a\"\ndecision = \"ask\"\nreason = \"  \"\n",
        5,
        &["rules[0]", "ask rule needs a non-empty reason"],
    );
    // An allow rule may omit it.
    crate::load("version = 1\n[[rules]]\ntool = \"a\"\ndecision = \"allow\"\n");
}

#[test]
fn missing_required_keys_point_at_the_table() {
    assert_error(
        "version = 1\n\n[[rules]]\ntool = \"a\"\n",
        3,
        &["missing field `decision`"],
    );
    assert_error(
        "version = 1\n[[guards]]\ntool = \"a\"\ndeny_args_matching = \"x\"\n",
        2,
        &["missing field `reason`"],
    );
}

#[test]
fn bad_guards_are_rejected() {
    let head = "version = 1\n[[guards]]\ntool = \"*\"\nreason = \"r\"\n";
    assert_error(head, 2, &["guards[0]", "never denies"]);
    assert_error(
        &format!("{head}deny_args_matching = \"(?i\"\n"),
        5,
        &["guards[0].deny_args_matching", "invalid regex"],
    );
    assert_error(
        &format!("{head}deny_paths = [\"/etc/**\"]\n"),
        5,
        &["guards[0].deny_paths", "needs `pointer`"],
    );
    assert_error(
        &format!("{head}deny_args_matching = \"x\"\npointer = \"/p\"\n"),
        6,
        &["guards[0].pointer", "deny_paths"],
    );
    assert_error(
        &format!("{head}deny_paths = [\"/etc/**\"]\npointer = \"p\"\n"),
        6,
        &["guards[0].pointer", "must start with \"/\""],
    );
    assert_error(
        &format!("{head}pointer = \"/p\"\ndeny_paths = [\n  \"/etc/**\",\n  \"a[\",\n]\n"),
        8,
        &["guards[0].deny_paths", "invalid glob"],
    );
    assert_error(
        "version = 1\n[[guards]]\ntool = \"*\"\nreason = \"\"\ndeny_args_matching = \"x\"\n",
        4,
        &["guards[0].reason", "non-empty reason"],
    );
}

#[test]
fn bad_post_execute_is_rejected() {
    assert_error(
        "version = 1\n[post_execute]\nredact = [\"ok\", \"(bad\"]\n",
        3,
        &["post_execute.redact", "invalid regex"],
    );
    assert_error(
        "version = 1\n[post_execute]\nredact = [\"x*\"]\n",
        3,
        &["post_execute.redact", "matches the empty string"],
    );
    assert_error(
        "version = 1\n[post_execute]\n\nmax_content_chars = -1\n",
        4,
        &["post_execute.max_content_chars", "-1"],
    );
    assert_error(
        "version = 1\n[post_execute]\nblock_matching = \"[\"\n",
        3,
        &["post_execute.block_matching", "invalid regex"],
    );
}

#[test]
fn a_bad_item_late_in_the_file_rejects_the_whole_file() {
    let src = "version = 1\ndefault = \"deny\"\n[[rules]]\ntool = \"read_file\"\ndecision = \"allow\"\n\
               [[rules]]\ntool = \"write_file\"\ndecision = \"allow\"\n[post_execute]\nmax_content_chars = -5\n";
    assert_error(src, 10, &["max_content_chars"]);
}

/// Patterns too large to compile cheaply are errors with their line, not a
/// panic or megabytes of matcher: a glob of 200,000 `?` (globset panics on
/// it), a glob or regex past the length cap, and a short regex whose
/// automaton is past the size cap.
#[test]
fn oversized_patterns_are_rejected_not_compiled() {
    let huge = "?".repeat(200_000);
    assert_error(
        &format!("version = 1\n[[rules]]\ntool = \"{huge}\"\ndecision = \"allow\"\n"),
        3,
        &["rules[0].tool", "too long"],
    );
    let head = "version = 1\n[[rules]]\ntool = \"a\"\ndecision = \"allow\"\n";
    assert_error(
        &format!("{head}args = [ {{ pointer = \"/p\", glob = \"{huge}\" }} ]\n"),
        5,
        &["rules[0].args[0].glob", "too long"],
    );
    let long_regex = "a".repeat(5000);
    assert_error(
        &format!("{head}args = [ {{ pointer = \"/p\", regex = \"{long_regex}\" }} ]\n"),
        5,
        &["rules[0].args[0].regex", "too long"],
    );
    assert_error(
        &format!("{head}args = [ {{ pointer = \"/p\", regex = '\\w{{2000}}' }} ]\n"),
        5,
        &["rules[0].args[0].regex", "invalid regex"],
    );
    // Within the caps, large patterns still load.
    let fine = "?".repeat(4000);
    crate::load(&format!(
        "version = 1\n[[rules]]\ntool = \"{fine}\"\ndecision = \"allow\"\n"
    ));
}
