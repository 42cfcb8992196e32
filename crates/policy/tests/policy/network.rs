//! `[network]` and `[[credentials]]` are part of the policy file: loaded
//! into [`Policy::network`], errors located like every other key, and no
//! preset or mode implies a grant.

use crate::{assert_error, load};
use toolhost_policy::egress::{Decision, Request};

#[test]
fn network_sections_load_into_the_policy() {
    let p = load(
        r#"version = 1
preset = "danger-full-access"

[network]
allow = ["http://127.0.0.1:8080", { url = "https://api.example.com", methods = ["GET"] }]
ask = ["https://*.github.com"]
max_requests = 3

[[credentials]]
host = "api.example.com"
header = "Authorization"
value_env = "EXAMPLE_TOKEN"
prefix = "Bearer "
"#,
    );
    let net = p.network();
    assert_eq!(net.allow().len(), 2);
    assert_eq!(net.ask().len(), 1);
    assert_eq!(net.limits().max_requests, 3);
    assert_eq!(net.credentials().len(), 1);
    let get = Request::from_url("https://api.example.com/v1", Some("GET")).unwrap();
    assert!(matches!(net.decide(&get), Decision::Allow { .. }));
    let post = Request::from_url("https://api.example.com/v1", Some("POST")).unwrap();
    assert!(matches!(net.decide(&post), Decision::Deny { .. }));
}

#[test]
fn no_mode_or_preset_implies_network() {
    for preset in ["read-only", "workspace-write", "danger-full-access"] {
        let p = load(&format!(
            "version = 1\npreset = \"{preset}\"\nmode = \"danger-full-access\"\n"
        ));
        assert!(!p.network().is_enabled(), "{preset}");
        let r = Request::from_url("https://example.com/", Some("GET")).unwrap();
        assert!(
            matches!(p.network().decide(&r), Decision::Deny { .. }),
            "{preset}"
        );
    }
    assert!(!toolhost_policy::Policy::default().network().is_enabled());
}

#[test]
fn network_errors_name_the_item_and_its_line() {
    assert_error(
        "version = 1\n[network]\nallow = [\n  \"https://ok.example.com\",\n  \"htp://bad\",\n]\n",
        5,
        &["network.allow[1]", "unknown scheme \"htp\""],
    );
    assert_error(
        "version = 1\n[network]\nalow = []\n",
        3,
        &["unknown key `alow`"],
    );
    assert_error(
        "version = 1\n\n[[credentials]]\nhost = \"*.example.com\"\nheader = \"A\"\nvalue_env = \"V\"\n",
        4,
        &["credentials[0].host", "wildcards"],
    );
    // The rest of the file is still checked first, with its own lines.
    assert_error(
        "version = 1\nbogus = 1\n[network]\nallow = [\"htp://bad\"]\n",
        2,
        &["unknown field `bogus`"],
    );
}
