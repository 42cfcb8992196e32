//! Argument patches: each operation, file order, what is reported, and the
//! load errors.

use crate::{assert_error, load};
use serde_json::json;

const PATCHES: &str = r#"
version = 1

[[patches]]
tool = "grep"
pointer = "/max_results"
clamp = { min = 1, max = 50 }

[[patches]]
tool = "grep"
pointer = "/case_sensitive"
set = true

[[patches]]
tool = "*"
pointer = "/path"
rewrite_prefix = { from = "/tmp/", to = "scratch/" }

[[patches]]
tool = "write_*"
pointer = "/mode"
force = "0644"
"#;

#[test]
fn patches_rewrite_in_file_order_and_report_before_and_after() {
    let p = load(PATCHES);
    let patched = p
        .patch("grep", &json!({"max_results": 500, "path": "/tmp/x"}))
        .unwrap()
        .unwrap();
    assert_eq!(
        patched.args,
        json!({"max_results": 50, "case_sensitive": true, "path": "scratch/x"})
    );
    let what: Vec<String> = patched.applied.iter().map(ToString::to_string).collect();
    assert_eq!(
        what,
        [
            "patches[0] (line 4) set /max_results from 500 to 50",
            "patches[1] (line 9) set /case_sensitive to true",
            "patches[2] (line 14) set /path from \"/tmp/x\" to \"scratch/x\"",
        ]
    );
    // `set` leaves a present value alone; clamp leaves a value in range.
    let same = json!({"max_results": 7, "case_sensitive": false, "path": "src"});
    assert_eq!(p.patch("grep", &same).unwrap(), None);
    // The minimum, and `force` over a present value.
    let low = p
        .patch("grep", &json!({"max_results": -3, "case_sensitive": false}))
        .unwrap()
        .unwrap();
    assert_eq!(low.args["max_results"], json!(1));
    let forced = p
        .patch("write_file", &json!({"mode": "0777"}))
        .unwrap()
        .unwrap();
    assert_eq!(forced.args, json!({"mode": "0644"}));
    // Another tool: only the "*" patch.
    assert_eq!(p.patch("read_file", &json!({"path": "b"})).unwrap(), None);
}

/// A patch cannot be passed by how the value is spelled: `set` fills a
/// `null` (a field left out), a clamp refuses a value it cannot read as a
/// number, and compares integers exactly (as floats, 2^53 + 1 is 2^53).
#[test]
fn patches_hold_whatever_the_value_looks_like() {
    let p = load(PATCHES);
    let patched = p
        .patch("grep", &json!({"case_sensitive": null, "max_results": 5}))
        .unwrap()
        .unwrap();
    assert_eq!(patched.args["case_sensitive"], json!(true));
    for smuggled in [json!("500"), json!([500]), json!({"n": 500}), json!(true)] {
        let e = p
            .patch("grep", &json!({"max_results": smuggled}))
            .unwrap_err();
        assert!(e.to_string().contains("not a number to clamp"), "{e}");
    }
    // A null is no number to clamp, and none the tool could read as one.
    assert_eq!(
        p.patch(
            "grep",
            &json!({"max_results": null, "case_sensitive": true})
        )
        .unwrap(),
        None
    );
    let big = load(
        "version = 1\n[[patches]]\ntool = \"t\"\npointer = \"/n\"\nclamp = { max = 9007199254740992 }\n",
    );
    let over: serde_json::Value = serde_json::from_str(r#"{"n": 9007199254740993}"#).unwrap();
    let clamped = big.patch("t", &over).unwrap().unwrap();
    assert_eq!(clamped.args["n"], json!(9007199254740992_u64));
    let at: serde_json::Value = serde_json::from_str(r#"{"n": 9007199254740992}"#).unwrap();
    assert_eq!(big.patch("t", &at).unwrap(), None);
    let float: serde_json::Value = serde_json::from_str(r#"{"n": 1e300}"#).unwrap();
    assert!(big.patch("t", &float).unwrap().is_some());
}

#[test]
fn a_patch_whose_field_has_no_object_parent_fails_closed() {
    let p = load("version = 1\n[[patches]]\ntool = \"t\"\npointer = \"/opts/level\"\nforce = 1\n");
    let e = p.patch("t", &json!({"opts": "fast"})).unwrap_err();
    assert_eq!(e.patch, "patches[0] (line 2)");
    assert!(e.to_string().contains("\"/opts\" is not an object"), "{e}");
    let ok = p.patch("t", &json!({"opts": {}})).unwrap().unwrap();
    assert_eq!(ok.args, json!({"opts": {"level": 1}}));
}

#[test]
fn bad_patches_are_located() {
    let head = "version = 1\n[[patches]]\ntool = \"t\"\npointer = \"/x\"\n";
    assert_error(head, 2, &["patches[0]: a patch has exactly one of"]);
    assert_error(
        &format!("{head}set = 1\nforce = 2\n"),
        2,
        &["exactly one of"],
    );
    assert_error(
        &format!("{head}clamp = {{}}\n"),
        5,
        &["patches[0].clamp: needs `min`, `max`"],
    );
    assert_error(
        &format!("{head}clamp = {{ min = 5, max = 1 }}\n"),
        5,
        &["min 5 is larger than max 1"],
    );
    assert_error(
        &format!("{head}clamp = {{ max = \"ten\" }}\n"),
        5,
        &["patches[0].clamp.max: expected a number"],
    );
    assert_error(
        &format!("{head}rewrite_prefix = {{ from = \"\", to = \"a\" }}\n"),
        5,
        &["an empty prefix would match every string"],
    );
    assert_error(
        "version = 1\n[[patches]]\ntool = \"t\"\npointer = \"x\"\nset = 1\n",
        4,
        &["patches[0].pointer", "must start with \"/\""],
    );
    assert_error(
        "version = 1\n[[patches]]\ntool = \"t\"\npointer = \"/x\"\nreplace = 1\n",
        5,
        &["unknown field `replace`"],
    );
}
