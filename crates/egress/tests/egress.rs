//! The egress corpus: requests against one policy and one static resolver,
//! each with the outcome it must have (a plan with these addresses, a
//! refusal with this code, an approval to ask for, or a URL that does not
//! parse). Then the properties: every spelling of an IPv4 address denotes
//! it, the address checks agree with the standard library's predicates,
//! and no input makes anything panic.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on a set-up error"
)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use toolhost_egress::{
    AddrClass, Credentials, Decision, EgressOutcome, EgressRecord, Grant, GrantList, Host,
    NetworkPolicy, Refusal, Request, RuleGrants, Scheme, StaticResolver, check_addr, classify,
    connect_plan, connect_plan_approved, parse_ipv4_any, redact_url,
};

const POLICY: &str = r#"
version = 1

[network]
allow = [
  "https://api.example.com",
  { url = "https://*.example.org", methods = ["GET", "HEAD"] },
  "https://*.test.example.com",
  "http://127.0.0.5:8080",
  "http://[fd00::5]:8081",
  "http://10.1.2.3",
  "http://localhost:8080",
  "tcp://db.example.net:5432",
]
ask = [
  "https://*.github.com",
  "http://192.168.1.10:9000",
]
"#;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn resolver() -> StaticResolver {
    let r = |s: &[&str]| s.iter().map(|a| ip(a)).collect::<Vec<_>>();
    StaticResolver::new()
        .with("api.example.com", &r(&["93.184.216.34"]))
        .with("a.example.org", &r(&["93.184.216.35"]))
        .with("a.b.example.org", &r(&["93.184.216.36"]))
        .with("db.example.net", &r(&["93.184.216.37"]))
        .with("localhost", &r(&["127.0.0.1", "::1"]))
        .with("api.github.com", &r(&["140.82.112.6"]))
        .with("loop.github.com", &r(&["127.0.0.1"]))
        .with("public.test.example.com", &r(&["93.184.216.34"]))
        .with("nat64ok.test.example.com", &r(&["64:ff9b::5db8:d822"]))
        .with("mappedok.test.example.com", &r(&["::ffff:93.184.216.34"]))
        .with(
            "dual.test.example.com",
            &r(&["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]),
        )
        .with(
            "dup.test.example.com",
            &r(&["93.184.216.34", "93.184.216.34"]),
        )
        .with("loop.test.example.com", &r(&["127.0.0.1"]))
        .with("five.test.example.com", &r(&["127.0.0.5"]))
        .with("ula5.test.example.com", &r(&["fd00::5"]))
        .with("loop2.test.example.com", &r(&["127.3.4.5"]))
        .with("loop6.test.example.com", &r(&["::1"]))
        .with("ten.test.example.com", &r(&["10.0.0.5"]))
        .with("priv172.test.example.com", &r(&["172.20.1.1"]))
        .with("priv192.test.example.com", &r(&["192.168.10.10"]))
        .with("ula.test.example.com", &r(&["fd12:3456:789a::1"]))
        .with("meta.test.example.com", &r(&["169.254.169.254"]))
        .with("meta6.test.example.com", &r(&["fd00:ec2::254"]))
        .with("mapped.test.example.com", &r(&["::ffff:127.0.0.1"]))
        .with("nat64.test.example.com", &r(&["64:ff9b::a9fe:a9fe"]))
        .with("compat.test.example.com", &r(&["::7f00:1"]))
        .with("sixtofour.test.example.com", &r(&["2002:a9fe:a9fe::1"]))
        .with("mixed.test.example.com", &r(&["93.184.216.34", "10.0.0.1"]))
        .with("mixed6.test.example.com", &r(&["2606:4700::1", "fe80::1"]))
        .with("cgnat.test.example.com", &r(&["100.64.1.1"]))
        .with("ll.test.example.com", &r(&["169.254.10.10"]))
        .with("ll6.test.example.com", &r(&["fe80::1"]))
        .with("unspec.test.example.com", &r(&["0.0.0.0"]))
        .with("unspec6.test.example.com", &r(&["::"]))
        .with("mcast.test.example.com", &r(&["239.1.1.1"]))
        .with("bcast.test.example.com", &r(&["255.255.255.255"]))
        .with("doc.test.example.com", &r(&["192.0.2.10"]))
        .with("empty.test.example.com", &[])
}

fn policy() -> NetworkPolicy {
    NetworkPolicy::from_toml(POLICY, "corpus.toml").unwrap()
}

#[derive(Debug)]
enum Expect {
    /// Planned, with exactly these addresses.
    Connect(&'static [&'static str]),
    /// Refused with this code.
    Refused(&'static str),
    /// An ask grant matched.
    Ask,
    /// The URL does not parse: refused before anything else.
    BadUrl,
}

use Expect::{Ask, BadUrl, Connect, Refused};

/// (url, method, expected outcome)
#[rustfmt::skip]
const CORPUS: &[(&str, &str, Expect)] = &[
    // --- refused ranges, as address literals, with no grant naming them ---
    ("http://127.0.0.1/", "GET", Refused("address_refused")),
    ("http://127.255.255.254/", "GET", Refused("address_refused")),
    ("http://[::1]/", "GET", Refused("address_refused")),
    ("http://10.0.0.1/", "GET", Refused("address_refused")),
    ("http://172.16.0.1/", "GET", Refused("address_refused")),
    ("http://172.31.255.255/", "GET", Refused("address_refused")),
    ("http://192.168.0.1/", "GET", Refused("address_refused")),
    ("http://[fc00::1]/", "GET", Refused("address_refused")),
    ("http://[fd12:3456::1]/", "GET", Refused("address_refused")),
    ("http://169.254.1.1/", "GET", Refused("address_refused")),
    ("http://[fe80::1]/", "GET", Refused("address_refused")),
    ("http://100.64.0.1/", "GET", Refused("address_refused")),
    ("http://100.127.255.255/", "GET", Refused("address_refused")),
    ("http://224.0.0.1/", "GET", Refused("address_refused")),
    ("http://[ff02::1]/", "GET", Refused("address_refused")),
    ("http://255.255.255.255/", "GET", Refused("address_refused")),
    ("http://0.0.0.0/", "GET", Refused("address_refused")),
    ("http://0.1.2.3/", "GET", Refused("address_refused")),
    ("http://[::]/", "GET", Refused("address_refused")),
    ("http://192.0.2.1/", "GET", Refused("address_refused")),
    ("http://198.51.100.7/", "GET", Refused("address_refused")),
    ("http://203.0.113.9/", "GET", Refused("address_refused")),
    ("http://[2001:db8::1]/", "GET", Refused("address_refused")),
    ("http://198.18.0.1/", "GET", Refused("address_refused")),
    ("http://240.0.0.1/", "GET", Refused("address_refused")),
    ("http://192.0.0.192/", "GET", Refused("address_refused")),
    ("http://169.254.169.254/latest/meta-data/", "GET", Refused("address_refused")),
    ("http://[fd00:ec2::254]/", "GET", Refused("address_refused")),
    ("http://100.100.100.200/", "GET", Refused("address_refused")),
    // --- IPv6 forms embedding a refused IPv4 address ---
    ("http://[::ffff:127.0.0.1]/", "GET", Refused("address_refused")),
    ("http://[::ffff:7f00:1]/", "GET", Refused("address_refused")),
    ("http://[::ffff:10.0.0.1]/", "GET", Refused("address_refused")),
    ("http://[::ffff:169.254.169.254]/", "GET", Refused("address_refused")),
    ("http://[::127.0.0.1]/", "GET", Refused("address_refused")),
    ("http://[::8.8.8.8]/", "GET", Refused("address_refused")),
    ("http://[64:ff9b::7f00:1]/", "GET", Refused("address_refused")),
    ("http://[64:ff9b::10.0.0.1]/", "GET", Refused("address_refused")),
    ("http://[64:ff9b:1::1]/", "GET", Refused("address_refused")),
    ("http://[2002:7f00:1::]/", "GET", Refused("address_refused")),
    ("http://[2001::1]/", "GET", Refused("address_refused")),
    // --- odd spellings of refused IPv4 addresses ---
    ("http://2130706433/", "GET", Refused("address_refused")),
    ("http://0177.0.0.1/", "GET", Refused("address_refused")),
    ("http://0x7f.1/", "GET", Refused("address_refused")),
    ("http://127.1/", "GET", Refused("address_refused")),
    ("http://0x7f000001/", "GET", Refused("address_refused")),
    ("http://0177.1/", "GET", Refused("address_refused")),
    ("http://0x7F.0.0.01/", "GET", Refused("address_refused")),
    ("http://127.0.0.1./", "GET", Refused("address_refused")),
    ("http://017700000001/", "GET", Refused("address_refused")),
    ("http://0xa9.0xfe.0xa9.0xfe/", "GET", Refused("address_refused")),
    ("http://2852039166/", "GET", Refused("address_refused")),
    ("http://0x0a.0.0.1/", "GET", Refused("address_refused")),
    ("http://10.1/", "GET", Refused("address_refused")),
    ("http://0/", "GET", Refused("address_refused")),
    ("http://0300.0250.0.1/", "GET", Refused("address_refused")),
    ("http://0xA9FEA9FE/", "GET", Refused("address_refused")),
    ("http://192.168.257/", "GET", Refused("address_refused")),
    // --- hosts that end in a number but are no address, and other junk:
    //     never looked up ---
    ("http://1.2.3.4.5/", "GET", BadUrl),
    ("http://256.1.1.1/", "GET", BadUrl),
    ("http://08.0.0.1/", "GET", BadUrl),
    ("http://example.123/", "GET", BadUrl),
    ("http://0x7g.1/", "GET", BadUrl),
    ("http://127.0.0.1%2f/", "GET", BadUrl),
    ("http://[::1%25lo]/", "GET", BadUrl),
    ("http://::1/", "GET", BadUrl),
    ("http://bücher.example.com/", "GET", BadUrl),
    ("http://evil.com\\@api.example.com/", "GET", BadUrl),
    // --- names granted by name that resolve to refused addresses ---
    ("https://loop.test.example.com/", "GET", Refused("address_refused")),
    ("https://loop2.test.example.com/", "GET", Refused("address_refused")),
    ("https://loop6.test.example.com/", "GET", Refused("address_refused")),
    ("https://ten.test.example.com/", "GET", Refused("address_refused")),
    ("https://priv172.test.example.com/", "GET", Refused("address_refused")),
    ("https://priv192.test.example.com/", "GET", Refused("address_refused")),
    ("https://ula.test.example.com/", "GET", Refused("address_refused")),
    ("https://meta.test.example.com/", "GET", Refused("address_refused")),
    ("https://meta6.test.example.com/", "GET", Refused("address_refused")),
    ("https://mapped.test.example.com/", "GET", Refused("address_refused")),
    ("https://nat64.test.example.com/", "GET", Refused("address_refused")),
    ("https://compat.test.example.com/", "GET", Refused("address_refused")),
    ("https://sixtofour.test.example.com/", "GET", Refused("address_refused")),
    ("https://mixed.test.example.com/", "GET", Refused("address_refused")),
    ("https://mixed6.test.example.com/", "GET", Refused("address_refused")),
    ("https://cgnat.test.example.com/", "GET", Refused("address_refused")),
    ("https://ll.test.example.com/", "GET", Refused("address_refused")),
    ("https://ll6.test.example.com/", "GET", Refused("address_refused")),
    ("https://unspec.test.example.com/", "GET", Refused("address_refused")),
    ("https://unspec6.test.example.com/", "GET", Refused("address_refused")),
    ("https://mcast.test.example.com/", "GET", Refused("address_refused")),
    ("https://bcast.test.example.com/", "GET", Refused("address_refused")),
    ("https://doc.test.example.com/", "GET", Refused("address_refused")),
    // "localhost" is granted by name: its addresses stay refused.
    ("http://localhost:8080/", "GET", Refused("address_refused")),
    // 127.0.0.5:8080 and [fd00::5]:8081 are granted by address; a name that
    // resolves to them still does not unlock them.
    ("https://five.test.example.com/", "GET", Refused("address_refused")),
    ("https://ula5.test.example.com/", "GET", Refused("address_refused")),
    ("https://unknown.test.example.com/", "GET", Refused("resolve_failed")),
    ("https://empty.test.example.com/", "GET", Refused("no_address")),
    // --- allowed ---
    ("https://api.example.com/v1?key=x", "GET", Connect(&["93.184.216.34:443"])),
    ("https://api.example.com:443/", "DELETE", Connect(&["93.184.216.34:443"])),
    ("http://127.0.0.5:8080/", "GET", Connect(&["127.0.0.5:8080"])),
    ("http://2130706437:8080/", "GET", Connect(&["127.0.0.5:8080"])),
    ("http://0x7f.5:8080/", "POST", Connect(&["127.0.0.5:8080"])),
    ("http://[fd00::5]:8081/", "GET", Connect(&["[fd00::5]:8081"])),
    ("http://[FD00:0:0::5]:8081/", "GET", Connect(&["[fd00::5]:8081"])),
    ("http://10.1.2.3/", "GET", Connect(&["10.1.2.3:80"])),
    ("http://10.1.2.3:80/", "GET", Connect(&["10.1.2.3:80"])),
    ("https://public.test.example.com/", "GET", Connect(&["93.184.216.34:443"])),
    ("https://nat64ok.test.example.com/", "GET", Connect(&["[64:ff9b::5db8:d822]:443"])),
    ("https://mappedok.test.example.com/", "GET", Connect(&["93.184.216.34:443"])),
    ("https://dual.test.example.com/", "GET", Connect(&["93.184.216.34:443", "[2606:2800:220:1:248:1893:25c8:1946]:443"])),
    ("https://dup.test.example.com/", "GET", Connect(&["93.184.216.34:443"])),
    ("https://a.example.org/", "GET", Connect(&["93.184.216.35:443"])),
    ("https://a.b.example.org/", "HEAD", Connect(&["93.184.216.36:443"])),
    ("https://A.EXAMPLE.ORG./", "GET", Connect(&["93.184.216.35:443"])),
    ("https://user:pw@api.example.com/", "GET", Connect(&["93.184.216.34:443"])),
    ("tcp://db.example.net:5432", "", Connect(&["93.184.216.37:5432"])),
    // --- an exact address grant unlocks that address only ---
    ("http://[::ffff:127.0.0.5]:8080/", "GET", Refused("address_refused")),
    ("http://127.0.0.6:8080/", "GET", Refused("address_refused")),
    ("http://127.0.0.1:8080/", "GET", Refused("address_refused")),
    ("http://127.0.0.5:9999/", "GET", Refused("port_not_granted")),
    ("https://127.0.0.5:8080/", "GET", Refused("scheme_not_granted")),
    ("http://[fd00::6]:8081/", "GET", Refused("address_refused")),
    ("http://10.1.2.4/", "GET", Refused("address_refused")),
    ("https://10.1.2.3/", "GET", Refused("scheme_not_granted")),
    // --- wildcards ---
    ("https://example.org/", "GET", Refused("host_not_granted")),
    ("https://badexample.org/", "GET", Refused("host_not_granted")),
    ("https://a.example.org.evil.com/", "GET", Refused("host_not_granted")),
    ("https://aexample.org/", "GET", Refused("host_not_granted")),
    ("https://test.example.com/", "GET", Refused("host_not_granted")),
    // --- schemes, ports, methods ---
    ("https://api.example.com:8443/", "GET", Refused("port_not_granted")),
    ("http://api.example.com/", "GET", Refused("scheme_not_granted")),
    ("https://a.example.org/", "POST", Refused("method_not_granted")),
    ("https://a.example.org/", "get", Refused("method_not_granted")),
    ("tcp://db.example.net:5433", "", Refused("port_not_granted")),
    ("udp://db.example.net:5432", "", Refused("scheme_not_granted")),
    ("https://evil.com/", "GET", Refused("host_not_granted")),
    ("https://api.example.com.evil.com/", "GET", Refused("host_not_granted")),
    ("https://xapi.example.com/", "GET", Refused("host_not_granted")),
    ("http://allowed.com@evil.com/", "GET", Refused("host_not_granted")),
    // --- ask ---
    ("https://api.github.com/", "GET", Ask),
    ("http://192.168.1.10:9000/", "POST", Ask),
    // An ask grant by name is resolved and checked before anyone is asked.
    ("https://loop.github.com/", "GET", Refused("address_refused")),
    ("http://192.168.1.10:9001/", "POST", Refused("port_not_granted")),
];

/// What a request came to.
#[derive(Debug)]
enum Outcome {
    Connect(Vec<String>),
    Refused(&'static str),
    Ask,
    BadUrl,
}

fn run(policy: &NetworkPolicy, resolver: &StaticResolver, url: &str, method: &str) -> Outcome {
    let method = (!method.is_empty()).then_some(method);
    let Ok(request) = Request::from_url(url, method) else {
        return Outcome::BadUrl;
    };
    match connect_plan(&request, policy, resolver) {
        Ok(plan) => Outcome::Connect(plan.addrs.iter().map(SocketAddr::to_string).collect()),
        Err(Refusal::ApprovalRequired { .. }) => Outcome::Ask,
        Err(r) => Outcome::Refused(r.code()),
    }
}

fn same(got: &Outcome, want: &Expect) -> bool {
    match (got, want) {
        (Outcome::Connect(x), Connect(y)) => x == y,
        (Outcome::Refused(x), Refused(y)) => x == y,
        (Outcome::Ask, Ask) | (Outcome::BadUrl, BadUrl) => true,
        _ => false,
    }
}

#[test]
fn the_corpus() {
    assert!(CORPUS.len() >= 60, "{} cases", CORPUS.len());
    let policy = policy();
    let resolver = resolver();
    let mut failures = Vec::new();
    for (url, method, want) in CORPUS {
        let got = run(&policy, &resolver, url, method);
        if !same(&got, want) {
            failures.push(format!("{url} {method}: want {want:?}, got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn names_are_looked_up_once_and_literals_and_denials_never() {
    let policy = policy();
    for (url, method, want) in CORPUS {
        let Ok(request) = Request::from_url(url, (!method.is_empty()).then_some(*method)) else {
            continue;
        };
        let resolver = resolver();
        let _ = connect_plan(&request, &policy, &resolver);
        let lookups = resolver.lookups();
        let by_name = matches!(request.host, Host::Name(_));
        // Allowed and ask decisions are resolved (once); denials never.
        let decided = !matches!(policy.decide(&request), Decision::Deny { .. });
        let expected = usize::from(by_name && decided);
        assert_eq!(lookups, expected, "{url} {method}: {want:?}");
    }
}

#[test]
fn refusals_say_why() {
    let policy = policy();
    let resolver = resolver();
    let refusal = |url: &str, method: &str| {
        let r = Request::from_url(url, Some(method)).unwrap();
        connect_plan(&r, &policy, &resolver)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        refusal("http://0x7f.1/", "GET"),
        "network access refused: 127.0.0.1 is a loopback address, and no grant names that address"
    );
    assert_eq!(
        refusal("https://meta.test.example.com/", "GET"),
        "network access refused: meta.test.example.com resolves to 169.254.169.254, \
         a cloud metadata endpoint; a grant by name never unlocks such an address"
    );
    assert_eq!(
        refusal("https://nat64.test.example.com/", "GET"),
        "network access refused: nat64.test.example.com resolves to [64:ff9b::a9fe:a9fe], \
         NAT64 form of 169.254.169.254, a cloud metadata endpoint; \
         a grant by name never unlocks such an address"
    );
    assert_eq!(
        refusal("https://a.example.org/", "POST"),
        "network access refused: method POST is not granted for host a.example.org (granted: GET, HEAD)"
    );
    assert_eq!(
        refusal("https://api.example.com:8443/", "GET"),
        "network access refused: port 8443 of host api.example.com is not granted (granted: 443)"
    );
    assert_eq!(
        refusal("http://api.example.com/", "GET"),
        "network access refused: host api.example.com is not granted for http"
    );
    assert_eq!(
        refusal("https://evil.com/", "GET"),
        "network access refused: no grant names host evil.com"
    );
    let off = NetworkPolicy::default();
    let r = Request::from_url("https://api.example.com/", Some("GET")).unwrap();
    let e = connect_plan(&r, &off, &resolver).unwrap_err();
    assert_eq!(e.code(), "network_off");
    assert_eq!(
        e.to_string(),
        "network access refused: the policy grants no network access"
    );
}

#[test]
fn decisions_name_the_grant() {
    let policy = policy();
    let r = Request::from_url("https://a.b.example.org/x", Some("GET")).unwrap();
    let Decision::Allow { rule } = policy.decide(&r) else {
        panic!("not allowed");
    };
    assert_eq!(
        rule.to_string(),
        "network.allow[1] \"https://*.example.org\""
    );
    let r = Request::from_url("https://api.github.com/", Some("GET")).unwrap();
    let Decision::Ask { rule } = policy.decide(&r) else {
        panic!("not ask");
    };
    assert_eq!(rule.to_string(), "network.ask[0] \"https://*.github.com\"");
    let json = serde_json::to_value(policy.decide(&r)).unwrap();
    assert_eq!(json["decision"], "ask");
    assert_eq!(json["rule"]["list"], "ask");
}

#[test]
fn an_approval_plans_only_what_its_grant_covers() {
    let policy = policy();
    let resolver = resolver();
    let r = Request::from_url("http://192.168.1.10:9000/", Some("POST")).unwrap();
    let Err(Refusal::ApprovalRequired { rule, addrs }) = connect_plan(&r, &policy, &resolver)
    else {
        panic!("no approval asked");
    };
    // The exact private address named by the ask grant is unlocked, and
    // already checked before anyone is asked.
    let want: Vec<SocketAddr> = vec!["192.168.1.10:9000".parse().unwrap()];
    assert_eq!(addrs, want);
    // An approval that arrives later plans again, from the grant it names.
    let plan = connect_plan_approved(&r, &policy, &[], &rule, &resolver).unwrap();
    assert_eq!(plan.addrs, want);
    assert_eq!(plan.rule, rule);

    // The same approval does not stretch to another request...
    let other = Request::from_url("http://192.168.1.11:9000/", Some("POST")).unwrap();
    let e = connect_plan_approved(&other, &policy, &[], &rule, &resolver).unwrap_err();
    assert_eq!(e.code(), "stale_rule");
    // ...nor survive a policy whose grant at that index changed.
    let changed = NetworkPolicy::from_toml(
        "[network]\nask = [\"http://192.168.1.12:9000\"]\n",
        "changed.toml",
    )
    .unwrap();
    let e = connect_plan_approved(&r, &changed, &[], &rule, &resolver).unwrap_err();
    assert_eq!(e.code(), "stale_rule");
    // ...nor does an allow decision's grant cover what it does not name.
    let api = Request::from_url("https://api.example.com/", Some("GET")).unwrap();
    let e = connect_plan_approved(&api, &policy, &[], &rule, &resolver).unwrap_err();
    assert_eq!(e.code(), "stale_rule");

    // An ask grant by name whose name resolves to a refused address is
    // refused without asking anyone, and stays refused when approved.
    let gh = Request::from_url("https://evil.github.com/", Some("GET")).unwrap();
    let resolver = resolver.with("evil.github.com", &[ip("127.0.0.1")]);
    let e = connect_plan(&gh, &policy, &resolver).unwrap_err();
    assert_eq!(e.code(), "address_refused");
    let Decision::Ask { rule } = policy.decide(&gh) else {
        panic!("not ask");
    };
    let e = connect_plan_approved(&gh, &policy, &[], &rule, &resolver).unwrap_err();
    assert_eq!(e.code(), "address_refused");
}

/// A call's rule grants: allow grants named `rules[N].network[i]`, after
/// the policy's own `allow` and before its `ask`; planned (and an exact
/// address unlocked) like any other grant; unknown to a call that does not
/// hold them.
#[test]
fn rule_grants_allow_for_the_calls_that_hold_them() {
    let policy = policy();
    let resolver = resolver();
    let rules = [
        RuleGrants::new(0, vec![Grant::parse("https://rules.example.net").unwrap()]),
        RuleGrants::new(
            3,
            vec![
                Grant::with_methods("http://127.0.0.9:7000", Some(&["GET".to_string()])).unwrap(),
                Grant::parse("https://*.github.com").unwrap(),
            ],
        ),
    ];
    let local = Request::from_url("http://127.0.0.9:7000/x", Some("GET")).unwrap();
    // Without the rules: a refused address, no grant names it.
    let e = connect_plan(&local, &policy, &resolver).unwrap_err();
    assert_eq!(e.code(), "address_refused");
    let Decision::Allow { rule } = policy.decide_with(&local, &rules) else {
        panic!("not allowed");
    };
    assert_eq!(rule.list, GrantList::Rule(3));
    assert_eq!(
        rule.to_string(),
        "rules[3].network[0] \"http://127.0.0.9:7000\""
    );
    // The exact address the rule's grant names is unlocked, as a
    // `[network]` grant of it would be.
    let plan = connect_plan_approved(&local, &policy, &rules, &rule, &resolver).unwrap();
    assert_eq!(
        plan.addrs,
        vec!["127.0.0.9:7000".parse::<SocketAddr>().unwrap()]
    );
    // Planned without the rules, the grant does not exist.
    let e = connect_plan_approved(&local, &policy, &[], &rule, &resolver).unwrap_err();
    assert_eq!(e.code(), "stale_rule");
    // Nor with another rule's grants at that place.
    let other = [RuleGrants::new(
        3,
        vec![Grant::parse("http://127.0.0.8:7000").unwrap()],
    )];
    let e = connect_plan_approved(&local, &policy, &other, &rule, &resolver).unwrap_err();
    assert_eq!(e.code(), "stale_rule");
    // A method the rule's grant does not list is refused, and says so.
    let post = Request::from_url("http://127.0.0.9:7000/x", Some("POST")).unwrap();
    let Decision::Deny { reason } = policy.decide_with(&post, &rules) else {
        panic!("not denied");
    };
    assert_eq!(reason.code(), "method_not_granted");
    // A rule's grant is an allow grant: it comes before `[network] ask`...
    let gh = Request::from_url("https://api.github.com/", Some("GET")).unwrap();
    assert!(matches!(policy.decide(&gh), Decision::Ask { .. }));
    let Decision::Allow { rule } = policy.decide_with(&gh, &rules) else {
        panic!("not allowed");
    };
    assert_eq!(
        rule.to_string(),
        "rules[3].network[1] \"https://*.github.com\""
    );
    // ...and after `[network] allow`.
    let api = Request::from_url("https://api.example.com/", Some("GET")).unwrap();
    let both = [RuleGrants::new(
        1,
        vec![Grant::parse("https://api.example.com").unwrap()],
    )];
    let Decision::Allow { rule } = policy.decide_with(&api, &both) else {
        panic!("not allowed");
    };
    assert_eq!(rule.list, GrantList::Allow);
    // A policy without `[network]`: the rules alone grant, and a request
    // they do not cover is refused as a host not granted.
    let off = NetworkPolicy::default();
    let named = Request::from_url("https://rules.example.net/", Some("GET")).unwrap();
    assert!(matches!(
        off.decide_with(&named, &rules),
        Decision::Allow { .. }
    ));
    let Decision::Deny { reason } = off.decide_with(&api, &rules) else {
        panic!("not denied");
    };
    assert_eq!(reason.code(), "host_not_granted");
    let Decision::Deny { reason } = off.decide_with(&api, &[]) else {
        panic!("not denied");
    };
    assert_eq!(reason.code(), "network_off");
    // A call no rule granted anything, under a policy whose rules grant to
    // other calls: refused for its host, not for a policy without network.
    let Decision::Deny { reason } = off.with_rule_grants(true).decide_with(&api, &[]) else {
        panic!("not denied");
    };
    assert_eq!(reason.code(), "host_not_granted");
}

#[test]
fn check_addr_unlocks_only_an_exact_address_grant_for_that_literal() {
    let by_ip = Grant::parse("http://10.0.0.7:8080").unwrap();
    let by_name = Grant::parse("http://internal.example.com:8080").unwrap();
    let addr = ip("10.0.0.7");
    assert!(check_addr(addr, &Host::Ip(addr), std::slice::from_ref(&by_ip)).is_ok());
    // The grant by name never unlocks the address its name resolves to.
    let name = Host::parse("internal.example.com").unwrap();
    assert!(check_addr(addr, &name, std::slice::from_ref(&by_name)).is_err());
    // Not even when an address grant for it exists next to it.
    assert!(check_addr(addr, &name, &[by_name.clone(), by_ip.clone()]).is_err());
    // A grant of another address does not unlock this one.
    let other = ip("10.0.0.8");
    assert!(check_addr(other, &Host::Ip(other), std::slice::from_ref(&by_ip)).is_err());
    // Nor does a grant of the IPv4 address unlock its mapped form.
    let mapped = ip("::ffff:10.0.0.7");
    assert!(check_addr(mapped, &Host::Ip(mapped), std::slice::from_ref(&by_ip)).is_err());
    // Public addresses pass whatever the grants.
    let public = ip("93.184.216.34");
    assert!(check_addr(public, &name, &[]).is_ok());
    // Not in their IPv4-mapped form, unless a grant names that form.
    let mapped = ip("::ffff:93.184.216.34");
    assert!(check_addr(mapped, &Host::Ip(mapped), &[]).is_err());
    let by_mapped = Grant::parse("http://[::ffff:93.184.216.34]").unwrap();
    assert!(check_addr(mapped, &Host::Ip(mapped), std::slice::from_ref(&by_mapped)).is_ok());
}

/// No policy reaches an unspecified address (`0.0.0.0/8`, `::`): a
/// connection to `0.0.0.0` or `::` goes to this host, to whatever listens
/// there. A grant of one is refused when the policy is read, in either
/// list, in any spelling that parses; and a request to one, in any
/// spelling, or to a name that resolves to one, is refused.
#[test]
fn no_policy_reaches_an_unspecified_address() {
    for grant in [
        "http://0.0.0.0",
        "http://[::]",
        "tcp://0.0.0.0:80",
        "udp://[::]:53",
        "http://[0:0::0]",
        "http://[::ffff:0.0.0.0]",
        "http://0",
        "http://0.0.0.0.",
    ] {
        for list in ["allow", "ask"] {
            let src = format!("[network]\n{list} = [{grant:?}]\n");
            match NetworkPolicy::from_toml(&src, "p.toml") {
                Ok(p) => panic!("{list} = [{grant:?}] loaded: {:?}", p.reachable()),
                Err(e) => {
                    let prefix = format!("network.{list}[0]: grant {grant:?}: ");
                    assert!(e.message().starts_with(&prefix), "{e}");
                    assert!(e.message().contains("an unspecified address"), "{e}");
                    assert_eq!(e.line(), 2, "{e}");
                }
            }
        }
    }
    let policy = NetworkPolicy::from_toml(
        "[network]\nallow = [\"http://127.0.0.1\", \"http://[::1]\", \"http://unspec.test.example.com\", \"http://unspec6.test.example.com\"]\n",
        "p.toml",
    )
    .unwrap();
    for url in [
        "http://0.0.0.0/",
        "http://0/",
        "http://0x0/",
        "http://0.0.0.0./",
        "http://[::]/",
        "http://[0:0::0]/",
        "http://[::ffff:0.0.0.0]/",
        "http://unspec.test.example.com/",
        "http://unspec6.test.example.com/",
    ] {
        let request = Request::from_url(url, Some("GET")).unwrap();
        match connect_plan(&request, &policy, &resolver()) {
            Err(r) => assert_eq!(r.code(), "address_refused", "{url}: {r}"),
            Ok(plan) => panic!("{url}: planned {:?}", plan.addrs),
        }
    }
}

#[test]
fn credentials_go_to_their_host_only_and_never_print() {
    let dir = std::env::temp_dir().join(format!("toolhost-egress-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret_file = dir.join("token");
    let secret = "sk-live-0123456789abcdef";
    std::fs::write(&secret_file, format!("{secret}\n")).unwrap();
    let src = format!(
        "[network]\nallow = [\"https://api.example.com\", \"https://other.example.com\"]\n\
         [[credentials]]\nhost = \"api.example.com\"\nheader = \"Authorization\"\n\
         value_file = {:?}\nprefix = \"Bearer \"\n\
         [[credentials]]\nhost = \"10.0.0.9\"\nheader = \"X-Api-Key\"\nvalue_file = {:?}\n",
        secret_file.display().to_string(),
        secret_file.display().to_string(),
    );
    let policy = NetworkPolicy::from_toml(&src, "creds.toml").unwrap();
    let host = |s: &str| Host::parse(s).unwrap();
    let https = |s: &str| (Scheme::Https, host(s), 443);

    let (scheme, h, port) = https("API.Example.com.");
    let spec = policy.credential_for(scheme, &h, port).unwrap();
    assert_eq!(spec.header(), "authorization");
    for other in [
        "other.example.com",
        "x.api.example.com",
        "example.com",
        "api.example.com.evil.com",
        "93.184.216.34",
        "10.0.0.10",
    ] {
        let (scheme, h, port) = https(other);
        assert!(policy.credential_for(scheme, &h, port).is_none(), "{other}");
    }
    // Its origin only: not over plain HTTP, not to another port of the host.
    let api = host("api.example.com");
    for (scheme, port) in [
        (Scheme::Http, 80),
        (Scheme::Http, 443),
        (Scheme::Https, 8443),
    ] {
        assert!(
            policy.credential_for(scheme, &api, port).is_none(),
            "{scheme}:{port}"
        );
    }
    let (scheme, h, port) = https("10.0.0.9");
    assert!(policy.credential_for(scheme, &h, port).is_some());

    let loaded = Credentials::load(policy.credentials()).unwrap();
    let c = loaded.credential_for(Scheme::Https, &api, 443).unwrap();
    assert_eq!(c.header_value().expose(), format!("Bearer {secret}"));
    assert!(loaded.credential_for(Scheme::Http, &api, 80).is_none());
    let (scheme, h, port) = https("other.example.com");
    assert!(loaded.credential_for(scheme, &h, port).is_none());
    // The same address spelled oddly is the same host.
    let (scheme, h, port) = https("10.9");
    assert!(loaded.credential_for(scheme, &h, port).is_some());

    // Nothing printable or serialisable carries the secret.
    let texts = [
        format!("{policy:?}"),
        format!("{loaded:?}"),
        format!("{c:?}"),
        format!("{:?}", c.header_value()),
        serde_json::to_string(c.spec()).unwrap(),
        serde_json::to_string(policy.credentials()).unwrap(),
    ];
    for t in &texts {
        assert!(!t.contains(secret), "{t}");
        assert!(!t.contains("sk-live"), "{t}");
    }
    assert!(format!("{c:?}").contains("[redacted]"));
    assert_eq!(
        loaded.redact(&format!("got {secret} and Bearer {secret}"), "[REDACTED]"),
        "got [REDACTED] and Bearer [REDACTED]"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn records_keep_no_query_and_name_the_rule() {
    let policy = policy();
    let resolver = resolver();
    let r = Request::from_url(
        "https://tok@api.example.com/v1/items?api_key=s3cr3t",
        Some("GET"),
    )
    .unwrap();
    let plan = connect_plan(&r, &policy, &resolver).unwrap();
    let mut rec = EgressRecord::allowed(&r, "/v1/items?api_key=s3cr3t#x", &plan.rule, false);
    rec.status = Some(200);
    rec.bytes_in = 4096;
    rec.bytes_out = 120;
    rec.ms = 7;
    let json = serde_json::to_value(&rec).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "method": "GET",
            "url": "https://api.example.com:443/v1/items",
            "decision": "allowed",
            "rule": "network.allow[0] \"https://api.example.com\"",
            "status": 200,
            "bytes_in": 4096,
            "bytes_out": 120,
            "ms": 7,
        })
    );
    let back: EgressRecord = serde_json::from_value(json).unwrap();
    assert_eq!(back, rec);

    let bad = Request::from_url("http://0x7f.5:8080/admin?x=1", Some("POST")).unwrap();
    let bad = Request::new(Scheme::Http, bad.host, 9999, Some("POST"));
    let refusal = connect_plan(&bad, &policy, &resolver).unwrap_err();
    let rec = EgressRecord::refused(&bad, "/admin?x=1", &refusal);
    assert_eq!(rec.url, "http://127.0.0.5:9999/admin");
    assert!(matches!(
        &rec.outcome,
        EgressOutcome::Refused { code, .. } if code == "port_not_granted"
    ));
    assert_eq!(
        redact_url("https://user:pw@h.example.com:8443/p/a?token=1#frag"),
        "https://h.example.com:8443/p/a"
    );
}

// ---------------------------------------------------------------------------
// Properties (bounded loops over a small deterministic generator).

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `n` written in decimal, octal (leading 0) or hex (0x / 0X).
fn spell(n: u64, style: u64) -> String {
    match style % 4 {
        0 => n.to_string(),
        1 => format!("0{n:o}"),
        2 => format!("0x{n:x}"),
        _ => format!("0X{n:X}"),
    }
}

/// Every short form of an address: 1, 2, 3 or 4 parts, each in a random radix.
fn spellings(addr: Ipv4Addr, rng: &mut Rng) -> Vec<String> {
    let [a, b, c, d] = addr.octets().map(u64::from);
    let forms: [Vec<u64>; 4] = [
        vec![u64::from(u32::from(addr))],
        vec![a, (b << 16) | (c << 8) | d],
        vec![a, b, (c << 8) | d],
        vec![a, b, c, d],
    ];
    forms
        .iter()
        .map(|parts| {
            parts
                .iter()
                .map(|p| spell(*p, rng.below(4)))
                .collect::<Vec<_>>()
                .join(".")
        })
        .collect()
}

#[test]
fn every_spelling_of_an_ipv4_address_denotes_it() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let policy = policy();
    for i in 0..3000 {
        // Half of the time a loopback/private/metadata address, else any.
        let addr = match i % 4 {
            0 => Ipv4Addr::from(0x7f00_0000 | (rng.next() as u32 & 0x00ff_ffff)),
            1 => Ipv4Addr::from(0x0a00_0000 | (rng.next() as u32 & 0x00ff_ffff)),
            _ => Ipv4Addr::from(rng.next() as u32),
        };
        for s in spellings(addr, &mut rng) {
            assert_eq!(parse_ipv4_any(&s), Some(addr), "{s}");
            let host = Host::parse(&s).unwrap();
            assert_eq!(host, Host::Ip(IpAddr::V4(addr)), "{s}");
            // A spelling of a refused address is refused before any lookup.
            if classify(IpAddr::V4(addr)).is_some() {
                let r = Request::from_url(&format!("http://{s}:81/"), Some("GET")).unwrap();
                let resolver = StaticResolver::new();
                let e = connect_plan(&r, &policy, &resolver).unwrap_err();
                assert_eq!(e.code(), "address_refused", "{s}");
                assert_eq!(resolver.lookups(), 0);
            }
        }
    }
}

#[test]
fn the_address_checks_cover_the_standard_predicates() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    for _ in 0..200_000 {
        let v4 = Ipv4Addr::from(rng.next() as u32);
        let std_refuses = v4.is_loopback()
            || v4.is_private()
            || v4.is_link_local()
            || v4.is_multicast()
            || v4.is_broadcast()
            || v4.is_unspecified()
            || v4.is_documentation()
            || v4.octets()[0] == 0;
        if std_refuses {
            assert!(classify(IpAddr::V4(v4)).is_some(), "{v4}");
        }
        // Its NAT64 form agrees with it; the IPv4-mapped and
        // -compatible forms are refused whatever it is.
        let refused = classify(IpAddr::V4(v4)).is_some();
        let mapped = v4.to_ipv6_mapped();
        assert!(classify(IpAddr::V6(mapped)).is_some(), "{mapped}");
        let nat64 = Ipv6Addr::from((0x0064_ff9b_u128 << 96) | u128::from(u32::from(v4)));
        assert_eq!(classify(IpAddr::V6(nat64)).is_some(), refused, "{nat64}");
        let compat = v4.to_ipv6_compatible();
        assert!(classify(IpAddr::V6(compat)).is_some(), "{compat}");
    }
    for _ in 0..200_000 {
        // Bias towards the interesting prefixes.
        let high: u128 = match rng.below(6) {
            0 => 0xfc00,
            1 => 0xfe80,
            2 => 0xff00,
            3 => 0x2001,
            4 => 0x0000,
            _ => u128::from(rng.next() as u16),
        };
        let low = (u128::from(rng.next()) << 64 | u128::from(rng.next())) >> 16;
        let v6 = Ipv6Addr::from((high << 112) | low);
        let std_refuses = v6.is_loopback()
            || v6.is_multicast()
            || v6.is_unspecified()
            || v6.is_unique_local()
            || v6.is_unicast_link_local();
        if std_refuses {
            assert!(classify(IpAddr::V6(v6)).is_some(), "{v6}");
        }
        // Only global unicast (2000::/3) can pass at all.
        if classify(IpAddr::V6(v6)).is_none() {
            assert_eq!(v6.segments()[0] & 0xe000, 0x2000, "{v6}");
        }
    }
    assert_eq!(
        classify(ip("169.254.169.254")).map(|r| r.class),
        Some(AddrClass::CloudMetadata)
    );
}

/// Random text from an alphabet full of URL and TOML syntax.
fn junk(rng: &mut Rng, max: u64) -> String {
    const ALPHABET: &[&str] = &[
        "a",
        "z",
        "0",
        "1",
        "7",
        "9",
        "f",
        "x",
        "X",
        ".",
        ":",
        "/",
        "//",
        "://",
        "[",
        "]",
        "@",
        "?",
        "#",
        "%",
        "*",
        "*.",
        "-",
        "_",
        "\\",
        " ",
        "\n",
        "\"",
        "'",
        "=",
        "{",
        "}",
        ",",
        "é",
        "ü",
        "\u{0}",
        "\u{ff0e}",
        "0x",
        "http",
        "https",
        "tcp",
        "udp",
        "ffff",
        "::",
        "127",
        "255",
        "4294967296",
        "[network]",
        "allow",
        "ask",
        "[[credentials]]",
        "host",
        "methods",
        "GET",
        "url",
        "max_requests",
        "-1",
        "99999999999999999999",
    ];
    let len = rng.below(max);
    (0..len)
        .map(|_| ALPHABET[rng.below(ALPHABET.len() as u64) as usize])
        .collect()
}

#[test]
fn no_input_panics() {
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let policy = policy();
    let resolver = resolver();
    for _ in 0..20_000 {
        let s = junk(&mut rng, 12);
        let _ = Host::parse(&s);
        let _ = Host::parse_canonical(&s);
        let _ = parse_ipv4_any(&s);
        let _ = Grant::parse(&s);
        let _ = Grant::parse(&format!("https://{s}"));
        let _ = Grant::with_methods(&format!("http://{s}"), Some(std::slice::from_ref(&s)));
        let _ = redact_url(&s);
        let _ = redact_url(&format!("https://{s}"));
        for prefix in ["", "http://", "https://", "tcp://", "udp://"] {
            if let Ok(r) = Request::from_url(&format!("{prefix}{s}"), Some(&s)) {
                let _ = policy.decide(&r);
                let _ = connect_plan(&r, &policy, &resolver);
                let _ = r.url_without_query(&s);
                let _ = EgressRecord::refused(
                    &r,
                    &s,
                    &Refusal::NoAddress {
                        host: r.host.clone(),
                    },
                );
            }
        }
        let _ = NetworkPolicy::from_toml(&s, "junk.toml");
        let _ = NetworkPolicy::from_toml(&format!("[network]\nallow = [\"{s}\"]\n"), "junk.toml");
        let _ = NetworkPolicy::from_toml(&format!("[network]\n{s}"), "junk.toml");
        let _ = NetworkPolicy::from_toml(&format!("[[credentials]]\nhost = \"{s}\"\n{s}"), "j");
    }
    // Random bytes, made text.
    for _ in 0..5_000 {
        let bytes: Vec<u8> = (0..rng.below(40)).map(|_| rng.next() as u8).collect();
        let s = String::from_utf8_lossy(&bytes);
        let _ = Host::parse(&s);
        let _ = Grant::parse(&s);
        let _ = Request::from_url(&format!("http://{s}"), None);
        let _ = redact_url(&s);
        let _ = NetworkPolicy::from_toml(&s, "bytes");
    }
}

#[test]
fn every_refusal_serialises_with_its_code() {
    let policy = policy();
    let resolver = resolver();
    let mut seen = std::collections::BTreeSet::new();
    for (url, method, _) in CORPUS {
        let Ok(r) = Request::from_url(url, (!method.is_empty()).then_some(*method)) else {
            continue;
        };
        if let Err(refusal) = connect_plan(&r, &policy, &resolver) {
            let json = serde_json::to_value(&refusal).unwrap();
            assert!(json["kind"].is_string(), "{url}: {json}");
            seen.insert(refusal.code());
            let rec = serde_json::to_value(EgressRecord::refused(&r, "/", &refusal)).unwrap();
            assert_eq!(rec["decision"], "refused");
            assert_eq!(rec["code"], refusal.code());
        }
    }
    let off = connect_plan(
        &Request::from_url("https://x.example.com/", None).unwrap(),
        &NetworkPolicy::default(),
        &resolver,
    )
    .unwrap_err();
    seen.insert(off.code());
    // Each code a policy could lift is one the decision really gives
    // (`not_external` comes from the host, for a tool's declaration).
    for code in toolhost_egress::LIFTABLE_CODES {
        assert!(*code == "not_external" || seen.contains(code), "{code}");
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        [
            "address_refused",
            "approval_required",
            "host_not_granted",
            "method_not_granted",
            "network_off",
            "no_address",
            "port_not_granted",
            "resolve_failed",
            "scheme_not_granted",
        ]
    );
}
