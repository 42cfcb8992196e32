//! A policy file cannot grant an unspecified address (`0.0.0.0/8`, `::`):
//! a connection to `0.0.0.0` or `::` goes to this host, to whatever listens
//! there. Wherever a grant can be written (`[network] allow` and `ask`,
//! a policy rule's `network`), the file is refused at load, the error
//! located at the entry and naming it by its key path.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on a set-up error"
)]

use toolhost_policy::Policy;

/// The entries refused, as TOML values.
const ENTRIES: [&str; 6] = [
    "\"http://0.0.0.0\"",
    "\"http://[::]:8080\"",
    "\"tcp://0.0.0.0:80\"",
    "\"udp://[::]:53\"",
    "\"http://0\"",
    "{ url = \"http://[::ffff:0.0.0.0]\", methods = [\"GET\"] }",
];

#[track_caller]
fn assert_refused(src: &str, line: usize, key: &str) {
    let e = match Policy::from_toml(src, "test.toml") {
        Ok(_) => panic!("policy should be rejected:\n{src}"),
        Err(e) => e,
    };
    assert_eq!(e.line(), line, "{e}");
    assert!(e.message().starts_with(&format!("{key}: grant ")), "{e}");
    assert!(e.message().contains("an unspecified address"), "{e}");
}

#[test]
fn no_list_of_grants_takes_an_unspecified_address() {
    for entry in ENTRIES {
        for list in ["allow", "ask"] {
            let src = format!(
                "version = 1\n\n[network]\n{list} = [\n  \"https://ok.example.com\",\n  {entry},\n]\n"
            );
            assert_refused(&src, 6, &format!("network.{list}[1]"));
        }
        let src = format!(
            "version = 1\n[[rules]]\ntool = \"http_fetch\"\ndecision = \"allow\"\n\
             network = [\n  \"https://ok.example.com\",\n  {entry},\n]\n"
        );
        assert_refused(&src, 7, "rules[0].network[1]");
    }
}
