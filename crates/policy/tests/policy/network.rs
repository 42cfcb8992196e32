//! `[network]` and `[[credentials]]` are part of the policy file: loaded
//! into [`Policy::network`], errors located like every other key, and no
//! preset or mode implies a grant. A rule's `network` grants the calls it
//! matches, its entries read as `[network] allow`'s.

use crate::{assert_error, facts, load, reject};
use serde_json::json;
use toolhost_policy::SideEffect;
use toolhost_policy::egress::{Decision, GrantList, Request};

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

const RULE_GRANTS: &str = r#"version = 1
default = "allow"

[[rules]]
tool = "read_file"
decision = "allow"

[[rules]]
tool = "http_fetch"
decision = "allow"
args = [{ pointer = "/url", glob = "http://127.0.0.1:8080/**" }]
network = ["http://127.0.0.1:8080", { url = "https://api.example.com", methods = ["get"] }]

[[rules]]
tool = "fetch_*"
decision = "ask"
reason = "fetches need a human"
network = ["https://*.example.org"]
"#;

#[test]
fn a_rule_grants_network_to_the_calls_it_matches() {
    let p = load(RULE_GRANTS);
    // The policy's own [network] grants nothing.
    assert!(!p.network().is_enabled());
    let all: Vec<usize> = p.rule_grants().map(|r| r.rule()).collect();
    assert_eq!(all, [1, 2], "named by their place among [[rules]]");
    let rule = p.rules()[1].network().unwrap();
    assert_eq!(rule.grants().len(), 2);
    assert_eq!(rule.grants()[1].methods(), Some(&["GET".to_string()][..]));

    // A call the rule matches holds its grants...
    let args = json!({"url": "http://127.0.0.1:8080/items"});
    let granted = p.network_grants(&facts("http_fetch", &args, SideEffect::External));
    assert_eq!(granted.len(), 1);
    assert_eq!(granted[0].rule(), 1);
    let get = Request::from_url("http://127.0.0.1:8080/items", Some("GET")).unwrap();
    let Decision::Allow { rule } = p.network().decide_with(&get, &granted) else {
        panic!("not allowed");
    };
    assert_eq!(rule.list, GrantList::Rule(1));
    // In JSON a rule's list reads as in the file, as the others do.
    let json = serde_json::to_value(&rule).unwrap();
    assert_eq!(json["list"], "rules[1].network", "{json}");
    let allow = GrantList::Allow;
    assert_eq!(serde_json::to_value(allow).unwrap(), "allow");
    assert_eq!(
        rule.to_string(),
        "rules[1].network[0] \"http://127.0.0.1:8080\""
    );
    // ...and no other call does: other arguments, another tool.
    let other = json!({"url": "http://127.0.0.1:9090/"});
    assert!(
        p.network_grants(&facts("http_fetch", &other, SideEffect::External))
            .is_empty()
    );
    assert!(
        p.network_grants(&facts("read_file", &args, SideEffect::External))
            .is_empty()
    );
    assert!(matches!(
        p.network().decide_with(&get, &[]),
        Decision::Deny { .. }
    ));
    // An ask rule's grants, for the calls it matches (which are asked).
    let ask = p.network_grants(&facts("fetch_page", &args, SideEffect::External));
    assert_eq!(ask.iter().map(|r| r.rule()).collect::<Vec<_>>(), [2]);
    assert!(p.may_grant_network("fetch_page"));
    assert!(p.may_grant_network("http_fetch"));
    assert!(!p.may_grant_network("read_file"));
}

#[test]
fn a_rules_network_entries_fail_as_network_allows_do() {
    let rule = |network: &str| {
        format!(
            "version = 1\n[[rules]]\ntool = \"http_fetch\"\ndecision = \"allow\"\nnetwork = [\n  \"https://ok.example.com\",\n  {network},\n]\n"
        )
    };
    // Line 7: the second entry. The message is [network] allow's, named
    // by the rule's key.
    for (entry, needle) in [
        (
            "\"htp://bad\"",
            "grant \"htp://bad\": unknown scheme \"htp\"",
        ),
        (
            "\"https://*.github.io\"",
            "\"github.io\" is a public suffix",
        ),
        ("\"https://*.com\"", "grant \"https://*.com\""),
        (
            "\"http://x.example.com:0\"",
            "grant \"http://x.example.com:0\"",
        ),
        ("\"tcp://10.0.0.1\"", "grant \"tcp://10.0.0.1\""),
        (
            "{ url = \"https://x.example.com\", method = [\"GET\"] }",
            "unknown field `method`",
        ),
        (
            "{ url = \"https://x.example.com\", methods = [] }",
            "grant \"https://x.example.com\"",
        ),
        ("3", "a grant: a pattern"),
    ] {
        let src = rule(entry);
        let e = reject(&src);
        assert_eq!(e.line(), 7, "{entry}: {e}");
        assert!(
            e.message().starts_with("rules[0].network[1]: "),
            "{entry}: {e}"
        );
        assert!(e.message().contains(needle), "{entry}: {e}");
        // The same entry in [network] allow fails with the same words.
        let in_network = reject(&format!("version = 1\n[network]\nallow = [{entry}]\n"));
        let words = in_network.message().strip_prefix("network.allow[0]");
        assert!(words.is_some(), "{in_network}");
        assert_eq!(e.message().strip_prefix("rules[0].network[1]"), words);
    }
    assert_error(
        "version = 1\n[[rules]]\ntool = \"x\"\ndecision = \"allow\"\nnetwork = \"https://a.example.com\"\n",
        5,
        &["expected an array of grants: network = ["],
    );
}

#[test]
fn a_rule_that_could_grant_nothing_is_an_error() {
    assert_error(
        "version = 1\n\n[[rules]]\ntool = \"http_fetch\"\ndecision = \"deny\"\nreason = \"no\"\nnetwork = [\"https://api.example.com\"]\n",
        7,
        &["rules[0].network: a deny rule grants nothing"],
    );
    assert_error(
        "version = 1\n[[rules]]\ntool = \"http_fetch\"\ndecision = \"allow\"\nside_effect = [\"read\", \"write\"]\nnetwork = [\"https://api.example.com\"]\n",
        6,
        &["rules[0].network: network reaches only tools that declare side effect external"],
    );
    assert_error(
        "version = 1\n[[rules]]\ntool = \"http_fetch\"\ndecision = \"ask\"\nreason = \"r\"\nside_effect = [\"none\"]\nnetwork = [\"https://api.example.com\"]\n",
        7,
        &["side effect external"],
    );
    // An ask rule about reads asks before external tools' calls that may
    // read, but its grants go only to calls it matches strictly, by the
    // side effect they are seen with: never `read` for an external tool.
    assert_error(
        "version = 1\n[[rules]]\ntool = \"http_fetch\"\ndecision = \"ask\"\nreason = \"r\"\nside_effect = [\"read\"]\nnetwork = [\"https://api.example.com\"]\n",
        7,
        &["side effect external"],
    );
    // A layer only narrows: its rules grant no network.
    assert_error(
        "version = 1\n[[layers]]\nkind = \"principal\"\nname = \"bob\"\n[[layers.rules]]\ntool = \"http_fetch\"\ndecision = \"allow\"\nnetwork = [\"https://api.example.com\"]\n",
        8,
        &["layers[0].rules[0].network: a layer only narrows"],
    );
}

/// A rule's grants go to the calls it matches as an allow rule matches
/// them, whatever its decision: an `ask` rule's looser matching (any leaf
/// inside an object or a list, `dir/**` matching `dir`) still makes such a
/// call ask, but hands it no grant.
#[test]
fn an_ask_rules_grants_need_a_strict_match() {
    let p = load(
        r#"version = 1
default = "allow"

[[rules]]
tool = "http_fetch"
decision = "ask"
reason = "docs fetches need a human"
args = [{ pointer = "/headers", regex = "^x-token$" }, { pointer = "/url", glob = "https://docs.example.com/**" }]
network = ["https://docs.example.com"]
"#,
    );
    // The pointer names an object: an ask rule matches a leaf inside it
    // (so the call asks), an allow rule never does (so no grant).
    let loose = json!({"url": "https://docs.example.com/a", "headers": {"k": "x-token"}});
    let f = facts("http_fetch", &loose, SideEffect::External);
    assert!(p.rules()[0].matches(&f), "the ask rule applies");
    assert!(p.network_grants(&f).is_empty(), "but grants nothing");
    // `dir/**` matching `dir` itself is the loose reading too.
    let bare = json!({"url": "https://docs.example.com", "headers": "x-token"});
    let f = facts("http_fetch", &bare, SideEffect::External);
    assert!(p.rules()[0].matches(&f));
    assert!(p.network_grants(&f).is_empty());
    // A call both readings match holds the grant.
    let strict = json!({"url": "https://docs.example.com/a", "headers": "x-token"});
    let f = facts("http_fetch", &strict, SideEffect::External);
    assert_eq!(p.network_grants(&f).len(), 1);
}
