//! `[rate_limits]`: how many calls a client may make, per interval, with
//! bursts; all of its tools together and per tool. The file's shape, its
//! validation (errors located like every other section) and the token
//! bucket arithmetic live here; the table of buckets, one per client, is
//! the host's (it holds state, this crate never does).
//!
//! ```toml
//! [rate_limits]
//! max_clients = 1024        # optional: most clients tracked at once (default 1024)
//! # each client, every tool together: 120 calls a minute, 20 at once
//! per_client = { calls = 120, per_seconds = 60, burst = 20 }
//! # each client, the tools matching `tool` (exact name or glob); every
//! # matching entry applies, each with its own bucket
//! [[rate_limits.tools]]
//! tool = "write_file"
//! calls = 10
//! per_seconds = 60
//! burst = 2                 # optional: defaults to `calls`
//! ```
//!
//! A limit is a token bucket: it holds at most `burst` calls, and refills
//! at `calls` per `per_seconds`. A call takes one token from every bucket
//! that applies to it, or from none.

use crate::error::LoadError;
use crate::matcher::ToolPattern;
use serde::Deserialize;
use std::time::{Duration, Instant};
use toml::Spanned;

/// The default of `max_clients`.
pub const DEFAULT_MAX_CLIENTS: usize = 1024;

/// The largest `max_clients`: the table of clients is memory the callers
/// make the host hold, and making room in a full table scans it.
pub const MAX_MAX_CLIENTS: usize = 1 << 16;

/// The longest interval a limit may name (a day).
const MAX_PER_SECONDS: i64 = 86_400;

/// `[rate_limits]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRateLimits {
    max_clients: Option<Spanned<i64>>,
    per_client: Option<Spanned<RawLimit>>,
    #[serde(default)]
    tools: Vec<Spanned<RawToolLimit>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimit {
    calls: Spanned<i64>,
    per_seconds: Spanned<i64>,
    burst: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolLimit {
    tool: Spanned<String>,
    calls: Spanned<i64>,
    per_seconds: Spanned<i64>,
    burst: Option<Spanned<i64>>,
}

/// One limit: `calls` per `per`, at most `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    calls: u32,
    per: Duration,
    burst: u32,
}

impl Limit {
    /// A limit of `calls` per `per` with bursts of `burst`; `None` when any
    /// of them is zero.
    pub fn new(calls: u32, per: Duration, burst: u32) -> Option<Limit> {
        (calls > 0 && burst > 0 && !per.is_zero()).then_some(Limit { calls, per, burst })
    }

    /// Calls per interval (the sustained rate).
    pub fn calls(&self) -> u32 {
        self.calls
    }

    /// The interval.
    pub fn per(&self) -> Duration {
        self.per
    }

    /// The most calls at once (the bucket's size).
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// How long one token takes to come back.
    fn refill(&self) -> Duration {
        self.per / self.calls
    }

    /// A full bucket for this limit, as of `now`.
    pub fn bucket(&self, now: Instant) -> TokenBucket {
        TokenBucket {
            limit: *self,
            tokens: f64::from(self.burst),
            at: now,
        }
    }
}

/// The state of one limit for one client: tokens left as of an instant.
/// Pure arithmetic: the caller says what time it is.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenBucket {
    limit: Limit,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// Brings the bucket up to `now` (an earlier `now` changes nothing).
    fn refill_to(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at);
        let gained = elapsed.as_secs_f64() / self.limit.refill().as_secs_f64();
        self.tokens = (self.tokens + gained).min(f64::from(self.limit.burst));
        self.at = self.at.max(now);
    }

    /// `None` when a call may take a token at `now`, else how long until
    /// one is back. Takes nothing.
    pub fn wait(&mut self, now: Instant) -> Option<Duration> {
        self.refill_to(now);
        if self.tokens >= 1.0 {
            return None;
        }
        let missing = 1.0 - self.tokens;
        Some(
            self.limit
                .refill()
                .mul_f64(missing)
                .max(Duration::from_millis(1)),
        )
    }

    /// Takes one token (after [`TokenBucket::wait`] said one is there).
    pub fn take(&mut self, now: Instant) {
        self.refill_to(now);
        self.tokens = (self.tokens - 1.0).max(0.0);
    }

    /// True when the bucket is full at `now`: forgetting it loses nothing.
    pub fn is_full(&mut self, now: Instant) -> bool {
        self.refill_to(now);
        self.tokens >= f64::from(self.limit.burst)
    }
}

/// A limit on the tools whose names match a pattern.
#[derive(Debug, Clone)]
pub struct ToolLimit {
    tool: ToolPattern,
    limit: Limit,
}

impl ToolLimit {
    /// The tool pattern as written.
    pub fn tool(&self) -> &str {
        self.tool.as_str()
    }

    /// The limit.
    pub fn limit(&self) -> Limit {
        self.limit
    }
}

/// The file's `[rate_limits]`; empty (nothing limited) when absent.
#[derive(Debug, Clone)]
pub struct RateLimits {
    max_clients: usize,
    per_client: Option<Limit>,
    tools: Vec<ToolLimit>,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits {
            max_clients: DEFAULT_MAX_CLIENTS,
            per_client: None,
            tools: Vec::new(),
        }
    }
}

impl RateLimits {
    /// True when no limit is set.
    pub fn is_empty(&self) -> bool {
        self.per_client.is_none() && self.tools.is_empty()
    }

    /// The most clients whose buckets are kept at once.
    pub fn max_clients(&self) -> usize {
        self.max_clients
    }

    /// The limit on each client, every tool together.
    pub fn per_client(&self) -> Option<Limit> {
        self.per_client
    }

    /// The per-tool limits, in file order.
    pub fn tools(&self) -> &[ToolLimit] {
        &self.tools
    }

    /// The indexes (into [`RateLimits::tools`]) of the limits on `tool`.
    pub fn tool_limits_for<'a>(&'a self, tool: &'a str) -> impl Iterator<Item = usize> + 'a {
        self.tools
            .iter()
            .enumerate()
            .filter(move |(_, t)| t.tool.matches(tool))
            .map(|(i, _)| i)
    }
}

type Result<T> = std::result::Result<T, LoadError>;

/// Validates `[rate_limits]`.
pub(crate) fn compile(raw: &Spanned<RawRateLimits>) -> Result<RateLimits> {
    let r = raw.get_ref();
    let max_clients = match &r.max_clients {
        None => DEFAULT_MAX_CLIENTS,
        Some(n) => usize::try_from(*n.get_ref())
            .ok()
            .filter(|n| (1..=MAX_MAX_CLIENTS).contains(n))
            .ok_or_else(|| {
                LoadError::new(
                    n.span(),
                    format!(
                        "rate_limits.max_clients: {} is not between 1 and {MAX_MAX_CLIENTS}",
                        n.get_ref()
                    ),
                )
            })?,
    };
    let per_client = r
        .per_client
        .as_ref()
        .map(|l| {
            let l = l.get_ref();
            limit(
                &l.calls,
                &l.per_seconds,
                l.burst.as_ref(),
                "rate_limits.per_client",
            )
        })
        .transpose()?;
    let mut tools = Vec::new();
    for (i, t) in r.tools.iter().enumerate() {
        let key = format!("rate_limits.tools[{i}]");
        let t = t.get_ref();
        let tool = ToolPattern::new(t.tool.get_ref())
            .map_err(|m| LoadError::new(t.tool.span(), format!("{key}.tool: {m}")))?;
        let limit = limit(&t.calls, &t.per_seconds, t.burst.as_ref(), &key)?;
        tools.push(ToolLimit { tool, limit });
    }
    if per_client.is_none() && tools.is_empty() {
        return Err(LoadError::new(
            raw.span(),
            "rate_limits: sets no limit (add `per_client` or `[[rate_limits.tools]]`, or remove the section)",
        ));
    }
    Ok(RateLimits {
        max_clients,
        per_client,
        tools,
    })
}

fn limit(
    calls: &Spanned<i64>,
    per_seconds: &Spanned<i64>,
    burst: Option<&Spanned<i64>>,
    key: &str,
) -> Result<Limit> {
    let count = |n: &Spanned<i64>, name: &str| -> Result<u32> {
        u32::try_from(*n.get_ref())
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                LoadError::new(
                    n.span(),
                    format!(
                        "{key}.{name}: {} is not a positive count (a limit of 0 is a deny rule)",
                        n.get_ref()
                    ),
                )
            })
    };
    let calls_n = count(calls, "calls")?;
    let burst_n = burst.map(|b| count(b, "burst")).transpose()?;
    let secs = *per_seconds.get_ref();
    if !(1..=MAX_PER_SECONDS).contains(&secs) {
        return Err(LoadError::new(
            per_seconds.span(),
            format!("{key}.per_seconds: {secs} is not between 1 and {MAX_PER_SECONDS} (a day)"),
        ));
    }
    let per = Duration::from_secs(secs.unsigned_abs());
    Limit::new(calls_n, per, burst_n.unwrap_or(calls_n))
        .ok_or_else(|| LoadError::new(calls.span(), format!("{key}: not a limit")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(calls: u32, secs: u64, burst: u32) -> Limit {
        Limit::new(calls, Duration::from_secs(secs), burst).unwrap()
    }

    #[test]
    fn a_bucket_allows_its_burst_then_refills_at_the_rate() {
        let t0 = Instant::now();
        let mut b = limit(2, 10, 3).bucket(t0);
        for _ in 0..3 {
            assert_eq!(b.wait(t0), None);
            b.take(t0);
        }
        // Empty: one token comes back every 5 s.
        assert_eq!(b.wait(t0), Some(Duration::from_secs(5)));
        assert_eq!(
            b.wait(t0 + Duration::from_secs(4)),
            Some(Duration::from_secs(1))
        );
        assert_eq!(b.wait(t0 + Duration::from_secs(5)), None);
        b.take(t0 + Duration::from_secs(5));
        assert!(b.wait(t0 + Duration::from_secs(5)).is_some());
        // Never more than the burst, however long it waits.
        assert!(b.is_full(t0 + Duration::from_secs(3600)));
        for _ in 0..3 {
            b.take(t0 + Duration::from_secs(3600));
        }
        assert!(b.wait(t0 + Duration::from_secs(3600)).is_some());
    }

    #[test]
    fn time_going_backwards_gives_nothing() {
        let t0 = Instant::now() + Duration::from_secs(100);
        let mut b = limit(1, 1, 1).bucket(t0);
        b.take(t0);
        assert!(b.wait(t0 - Duration::from_secs(50)).is_some());
        assert!(b.wait(t0).is_some());
    }

    #[test]
    fn zero_is_not_a_limit() {
        assert!(Limit::new(0, Duration::from_secs(1), 1).is_none());
        assert!(Limit::new(1, Duration::ZERO, 1).is_none());
        assert!(Limit::new(1, Duration::from_secs(1), 0).is_none());
    }
}
