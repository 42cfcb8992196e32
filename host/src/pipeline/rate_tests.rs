#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on a set-up error"
)]

use super::*;
use toolhost_policy::Policy;

fn limiter(section: &str) -> Arc<RateLimiter> {
    let policy = Policy::from_toml(&format!("version = 1\n{section}"), "test.toml").unwrap();
    RateLimiter::new(policy.rate_limits().clone())
}

fn code(r: Result<(), (ErrorCode, String)>) -> Option<ErrorCode> {
    r.err().map(|(c, _)| c)
}

#[test]
fn each_client_has_its_own_burst_and_refill() {
    let l = limiter("[rate_limits]\nper_client = { calls = 1, per_seconds = 10, burst = 2 }\n");
    let t0 = Instant::now();
    assert_eq!(code(l.admit(Some("a"), "x", t0)), None);
    assert_eq!(code(l.admit(Some("a"), "y", t0)), None);
    let refused = l.admit(Some("a"), "x", t0).unwrap_err();
    assert_eq!(refused.0, ErrorCode::RateLimited);
    assert!(refused.1.contains("retry in 10.0 s"), "{}", refused.1);
    // Another client is not affected.
    assert_eq!(code(l.admit(Some("b"), "x", t0)), None);
    // One token back after 10 s, not two.
    let t1 = t0 + Duration::from_secs(10);
    assert_eq!(code(l.admit(Some("a"), "x", t1)), None);
    assert_eq!(
        code(l.admit(Some("a"), "x", t1)),
        Some(ErrorCode::RateLimited)
    );
}

#[test]
fn a_tool_limit_refuses_without_spending_the_client_bucket() {
    let l = limiter(
        "[rate_limits]\nper_client = { calls = 3, per_seconds = 60 }\n\
         [[rate_limits.tools]]\ntool = \"write_*\"\ncalls = 1\nper_seconds = 60\n",
    );
    let t0 = Instant::now();
    assert_eq!(code(l.admit(None, "write_file", t0)), None);
    let (c, message) = l.admit(None, "write_file", t0).unwrap_err();
    assert_eq!(c, ErrorCode::RateLimited);
    assert!(
        message.contains("write_file") && message.contains("\"write_*\""),
        "{message}"
    );
    // The refused call took nothing: two calls of the client's 3 are left.
    assert_eq!(code(l.admit(None, "read_file", t0)), None);
    assert_eq!(code(l.admit(None, "read_file", t0)), None);
    assert_eq!(
        code(l.admit(None, "read_file", t0)),
        Some(ErrorCode::RateLimited)
    );
}

#[test]
fn no_limits_admit_everything_and_track_nobody() {
    let l = limiter("");
    let t0 = Instant::now();
    for i in 0..100 {
        assert_eq!(code(l.admit(Some(&i.to_string()), "x", t0)), None);
    }
    assert_eq!(l.tracked(), 0);
}

#[test]
fn the_client_table_is_capped() {
    let l =
        limiter("[rate_limits]\nmax_clients = 4\nper_client = { calls = 1, per_seconds = 3600 }\n");
    let t0 = Instant::now();
    for i in 0..1000u32 {
        let now = t0 + Duration::from_millis(u64::from(i));
        assert_eq!(code(l.admit(Some(&format!("c{i}")), "x", now)), None);
        assert!(l.tracked() <= 4);
    }
    // The most recent clients are still limited.
    let now = t0 + Duration::from_secs(1);
    assert_eq!(
        code(l.admit(Some("c999"), "x", now)),
        Some(ErrorCode::RateLimited)
    );
}

#[test]
fn full_buckets_are_forgotten_before_anyone_is_evicted() {
    let l =
        limiter("[rate_limits]\nmax_clients = 2\nper_client = { calls = 1, per_seconds = 10 }\n");
    let t0 = Instant::now();
    assert_eq!(code(l.admit(Some("idle"), "x", t0)), None);
    let t1 = t0 + Duration::from_secs(5);
    assert_eq!(code(l.admit(Some("busy"), "x", t1)), None);
    // At t0+10 s "idle" is full again and "busy" is not: a new client
    // pushes out "idle", and "busy" stays limited.
    let t2 = t0 + Duration::from_secs(10);
    assert_eq!(code(l.admit(Some("new"), "x", t2)), None);
    assert_eq!(
        code(l.admit(Some("busy"), "x", t2)),
        Some(ErrorCode::RateLimited)
    );
}

#[test]
fn long_client_names_are_cut() {
    let l = limiter("[rate_limits]\nper_client = { calls = 1, per_seconds = 60 }\n");
    let t0 = Instant::now();
    let long = "a".repeat(10_000);
    assert_eq!(code(l.admit(Some(&long), "x", t0)), None);
    let other = format!("{}b", "a".repeat(9_999));
    // Same first 128 characters: the same client.
    assert_eq!(
        code(l.admit(Some(&other), "x", t0)),
        Some(ErrorCode::RateLimited)
    );
}

#[test]
fn a_reload_with_the_same_limits_keeps_the_buckets() {
    let section = "[rate_limits]\nper_client = { calls = 1, per_seconds = 60 }\n";
    let l = limiter(section);
    let t0 = Instant::now();
    assert_eq!(code(l.admit(None, "x", t0)), None);
    let same = Policy::from_toml(&format!("version = 1\n{section}"), "t").unwrap();
    let next = RateLimiter::successor(&l, same.rate_limits().clone());
    assert_eq!(
        code(next.admit(None, "x", t0)),
        Some(ErrorCode::RateLimited)
    );
    let other = Policy::from_toml(
        "version = 1\n[rate_limits]\nper_client = { calls = 2, per_seconds = 60 }\n",
        "t",
    )
    .unwrap();
    let changed = RateLimiter::successor(&l, other.rate_limits().clone());
    assert_eq!(code(changed.admit(None, "x", t0)), None);
}
