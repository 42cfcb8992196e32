//! The rate limiter of the pipeline: the policy's `[rate_limits]` applied
//! per client, right after lookup and before validation costs anything.
//! A refusal is `RATE_LIMITED`, recorded like any refusal.
//!
//! A client is who the caller says it is ([`CallRequest::client`]): the MCP
//! server names what it can verify (stdio: the session, `mcp-stdio`; HTTP:
//! the bearer token, else the remote address), a library caller names its
//! own callers or is [`LIBRARY_CLIENT`]. The table holds at most `max_clients` clients: when
//! it is full, clients whose buckets are all full are forgotten first
//! (that loses nothing), then the least recently seen one (whose next call
//! then starts from a full bucket). Nothing a client sends makes the table
//! grow beyond that.
//!
//! [`CallRequest::client`]: super::CallRequest::client

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolhost_core::ErrorCode;
use toolhost_policy::{RateLimits, TokenBucket};

/// The client of calls that name none.
pub const LIBRARY_CLIENT: &str = "library";

/// The longest client name kept; longer ones are cut (names come from the
/// host's own callers, but the table must not hold arbitrary text).
const MAX_CLIENT_NAME: usize = 128;

/// The buckets of one client.
struct Client {
    all: Option<TokenBucket>,
    /// By index into [`RateLimits::tools`].
    tools: HashMap<usize, TokenBucket>,
    /// When the client was last seen (for eviction).
    seen: Instant,
}

/// `[rate_limits]` and the buckets of the clients seen.
pub(crate) struct RateLimiter {
    limits: RateLimits,
    clients: Mutex<HashMap<Arc<str>, Client>>,
}

impl RateLimiter {
    pub(crate) fn new(limits: RateLimits) -> Arc<RateLimiter> {
        Arc::new(RateLimiter {
            limits,
            clients: Mutex::default(),
        })
    }

    /// The limiter of a host that replaces `previous` (a reload): the same
    /// buckets when the limits did not change, so that a reload does not
    /// hand every client a fresh burst; new ones otherwise.
    pub(crate) fn successor(previous: &Arc<RateLimiter>, limits: RateLimits) -> Arc<RateLimiter> {
        if same_limits(&previous.limits, &limits) {
            previous.clone()
        } else {
            RateLimiter::new(limits)
        }
    }

    /// Takes a token from every bucket that applies to a call of `tool` by
    /// `client`, or from none and says why not.
    pub(crate) fn admit(
        &self,
        client: Option<&str>,
        tool: &str,
        now: Instant,
    ) -> Result<(), (ErrorCode, String)> {
        if self.limits.is_empty() {
            return Ok(());
        }
        let name = client.unwrap_or(LIBRARY_CLIENT);
        let name = match name.char_indices().nth(MAX_CLIENT_NAME) {
            Some((at, _)) => &name[..at],
            None => name,
        };
        let mut clients = crate::sandbox::state::lock(&self.clients);
        if !clients.contains_key(name) && clients.len() >= self.limits.max_clients() {
            make_room(&mut clients, now);
        }
        let entry = clients.entry(Arc::from(name)).or_insert_with(|| Client {
            all: None,
            tools: HashMap::new(),
            seen: now,
        });
        entry.seen = now;
        let limits = &self.limits;
        if let Some(limit) = limits.per_client() {
            let all = entry.all.get_or_insert_with(|| limit.bucket(now));
            if let Some(wait) = all.wait(now) {
                return Err(refusal(
                    format!(
                        "this client made more than {} calls in {} (bursts of {})",
                        limit.calls(),
                        seconds(limit.per()),
                        limit.burst()
                    ),
                    wait,
                ));
            }
        }
        for i in limits.tool_limits_for(tool) {
            let Some(t) = limits.tools().get(i) else {
                continue;
            };
            let limit = t.limit();
            let bucket = entry.tools.entry(i).or_insert_with(|| limit.bucket(now));
            if let Some(wait) = bucket.wait(now) {
                return Err(refusal(
                    format!(
                        "this client made more than {} calls of {tool} in {} (bursts of {}; limit on {:?})",
                        limit.calls(),
                        seconds(limit.per()),
                        limit.burst(),
                        t.tool()
                    ),
                    wait,
                ));
            }
        }
        // Every bucket has a token: take them all.
        if let Some(all) = entry.all.as_mut() {
            all.take(now);
        }
        for i in limits.tool_limits_for(tool) {
            if let Some(b) = entry.tools.get_mut(&i) {
                b.take(now);
            }
        }
        Ok(())
    }

    /// Clients tracked now.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.clients.lock().map(|c| c.len()).unwrap_or_default()
    }
}

/// Frees at least one slot: forgets every client whose buckets are full,
/// else the least recently seen client.
fn make_room(clients: &mut HashMap<Arc<str>, Client>, now: Instant) {
    let before = clients.len();
    clients.retain(|_, c| {
        let all_full = c.all.as_mut().is_none_or(|b| b.is_full(now));
        !(all_full && c.tools.values_mut().all(|b| b.is_full(now)))
    });
    if clients.len() < before {
        return;
    }
    let oldest = clients
        .iter()
        .min_by_key(|(_, c)| c.seen)
        .map(|(name, _)| name.clone());
    if let Some(name) = oldest {
        clients.remove(&name);
    }
}

fn refusal(what: String, wait: Duration) -> (ErrorCode, String) {
    (
        ErrorCode::RateLimited,
        format!("{what}; retry in {:.1} s", wait.as_secs_f64().max(0.1)),
    )
}

fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs())
}

fn same_limits(a: &RateLimits, b: &RateLimits) -> bool {
    a.max_clients() == b.max_clients()
        && a.per_client() == b.per_client()
        && a.tools().len() == b.tools().len()
        && a.tools()
            .iter()
            .zip(b.tools())
            .all(|(x, y)| x.tool() == y.tool() && x.limit() == y.limit())
}

#[cfg(test)]
#[path = "rate_tests.rs"]
mod tests;
