//! `[rate_limits]`: what loads, and every malformed form rejected with its line.

use crate::{assert_error, load};
use std::time::Duration;

#[test]
fn limits_load_with_bursts_defaulting_to_calls() {
    let p = load(
        "version = 1\n\
         [rate_limits]\n\
         max_clients = 8\n\
         per_client = { calls = 120, per_seconds = 60, burst = 20 }\n\
         [[rate_limits.tools]]\n\
         tool = \"write_*\"\n\
         calls = 10\n\
         per_seconds = 60\n\
         [[rate_limits.tools]]\n\
         tool = \"write_file\"\n\
         calls = 1\n\
         per_seconds = 1\n\
         burst = 5\n",
    );
    let r = p.rate_limits();
    assert!(!r.is_empty());
    assert_eq!(r.max_clients(), 8);
    let c = r.per_client().unwrap();
    assert_eq!(
        (c.calls(), c.per(), c.burst()),
        (120, Duration::from_secs(60), 20)
    );
    assert_eq!(r.tools()[0].limit().burst(), 10, "burst defaults to calls");
    assert_eq!(
        r.tool_limits_for("write_file").collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert_eq!(r.tool_limits_for("write_x").collect::<Vec<_>>(), vec![0]);
    assert_eq!(r.tool_limits_for("read_file").count(), 0);
}

#[test]
fn no_section_limits_nothing() {
    let p = load("version = 1\n");
    assert!(p.rate_limits().is_empty());
    assert_eq!(
        p.rate_limits().max_clients(),
        toolhost_policy::DEFAULT_MAX_CLIENTS
    );
}

#[test]
fn malformed_limits_are_rejected_with_their_line() {
    assert_error(
        "version = 1\n[rate_limits]\nper_client = { calls = 0, per_seconds = 60 }\n",
        3,
        &["rate_limits.per_client.calls", "not a positive count"],
    );
    assert_error(
        "version = 1\n[rate_limits]\nper_client = { calls = 5, per_seconds = 0 }\n",
        3,
        &["rate_limits.per_client.per_seconds", "not between 1"],
    );
    assert_error(
        "version = 1\n[rate_limits]\nper_client = { calls = 5, per_seconds = 9, burst = -1 }\n",
        3,
        &["rate_limits.per_client.burst"],
    );
    assert_error(
        "version = 1\n[rate_limits]\nper_client = { calls = 5, per_seconds = 9, per_minute = 1 }\n",
        3,
        &["unknown field `per_minute`"],
    );
    assert_error(
        "version = 1\n[rate_limits]\n\n[[rate_limits.tools]]\ntool = \"\"\ncalls = 1\nper_seconds = 1\n",
        5,
        &["rate_limits.tools[0].tool", "empty tool pattern"],
    );
    assert_error(
        "version = 1\n[[rate_limits.tools]]\ntool = \"a\"\ncalls = 1\n",
        2,
        &["missing field `per_seconds`"],
    );
    assert_error(
        "version = 1\n[rate_limits]\nmax_clients = 0\nper_client = { calls = 5, per_seconds = 9 }\n",
        3,
        &["rate_limits.max_clients"],
    );
    assert_error(
        "version = 1\n\n[rate_limits]\nmax_clients = 4\n",
        3,
        &["sets no limit"],
    );
}
