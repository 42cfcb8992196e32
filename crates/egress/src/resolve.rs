//! Name resolution and the connect plan: the [`Resolver`] trait,
//! [`StaticResolver`] (a map, for tests) and [`SystemResolver`] (the C
//! library's resolver), and [`connect_plan`], which decides, resolves once,
//! checks every address and returns the only addresses the host may connect
//! to.
//!
//! # Why the resolver is synchronous
//!
//! The crate stays free of any async runtime, and `dyn Resolver` stays
//! possible (an `async fn` in a trait is not object-safe). The system
//! resolver (`getaddrinfo`) is blocking anyway: tokio's own `lookup_host`
//! runs it on a blocking thread, and the host should do the same with
//! [`connect_plan`] (`spawn_blocking`). A host that resolves asynchronously
//! (its own DNS client) need not implement this trait at all: it resolves
//! the name itself and passes the addresses to [`check_resolved`], which is
//! the pure part of the plan.
//!
//! # No rebinding
//!
//! The plan is the result of one lookup. The host must connect to the
//! planned [`SocketAddr`]s only, never hand the host name to another
//! resolver (an HTTP client's own lookup would be a second, unchecked one).

use crate::addr::check_addr;
use crate::decision::{Decision, Refusal};
use crate::grant::{Grant, GrantRef};
use crate::host::Host;
use crate::policy::{NetworkPolicy, RuleGrants};
use crate::request::Request;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A failed lookup.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ResolveError {
    /// What went wrong.
    pub message: String,
}

impl ResolveError {
    /// A lookup error with this message.
    pub fn new(message: impl Into<String>) -> ResolveError {
        ResolveError {
            message: message.into(),
        }
    }
}

/// Resolves a DNS name to socket addresses. See the module docs for why it
/// is synchronous.
pub trait Resolver {
    /// Every address of `host` (a normalised name: lowercase, no trailing
    /// dot), with `port`.
    fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError>;
}

/// A resolver from a fixed map, for tests: no file, no network. Counts its
/// lookups, so a test can tell whether a lookup happened.
#[derive(Debug, Default)]
pub struct StaticResolver {
    names: HashMap<String, Vec<IpAddr>>,
    lookups: AtomicUsize,
}

impl StaticResolver {
    /// An empty map: every name is unknown.
    pub fn new() -> StaticResolver {
        StaticResolver::default()
    }

    /// Maps `name` (compared without case and trailing dot) to `addrs`.
    pub fn with(mut self, name: &str, addrs: &[IpAddr]) -> StaticResolver {
        self.names.insert(normalise(name), addrs.to_vec());
        self
    }

    /// How many lookups were made.
    pub fn lookups(&self) -> usize {
        self.lookups.load(Ordering::Relaxed)
    }
}

fn normalise(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    lower.strip_suffix('.').unwrap_or(&lower).to_string()
}

impl Resolver for StaticResolver {
    fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        self.names
            .get(&normalise(host))
            .map(|addrs| addrs.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
            .ok_or_else(|| ResolveError::new("unknown name"))
    }
}

/// The C library's resolver, through [`std::net::ToSocketAddrs`].
///
/// A name with a dot is looked up as an absolute name (a trailing dot is
/// added): the resolver's search list never turns a granted
/// `api.example.com` into `api.example.com.corp.example`, a host nobody
/// granted, which would get the request and its credential. `/etc/hosts`
/// then matches only single-label names, which keep the search list (a
/// grant of `http://intranet` grants what the machine's resolver makes of
/// `intranet`).
///
/// # Ambient Authority
///
/// Reads the machine's resolver configuration (`/etc/hosts`,
/// `/etc/resolv.conf`, NSS) and sends DNS queries with the process's own
/// network access. It blocks: run it off the async executor.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
        (query_name(host).as_str(), port)
            .to_socket_addrs()
            .map(Iterator::collect)
            .map_err(|e| ResolveError::new(e.to_string()))
    }
}

/// The name [`SystemResolver`] asks for: absolute when `host` has a dot.
fn query_name(host: &str) -> String {
    if host.contains('.') && !host.ends_with('.') {
        format!("{host}.")
    } else {
        host.to_string()
    }
}

/// Where a request may connect: the grant that allowed it and the checked
/// addresses, in the resolver's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectPlan {
    /// The grant that allowed the request.
    pub rule: GrantRef,
    /// The addresses to connect to, each checked, with the request's port.
    pub addrs: Vec<SocketAddr>,
}

/// Decides `request`, resolves its host once (not at all for an address
/// literal) and checks every address.
///
/// Refused: whatever [`NetworkPolicy::decide`] denies; a failed or empty
/// lookup; and a name that resolves to *any* refused address (see
/// [`check_addr`]): one bad address refuses the whole name, since a
/// rebinding attack needs only one.
///
/// An `ask` decision is planned too (resolved and checked), then returned as
/// [`Refusal::ApprovalRequired`] with the checked addresses: nobody is asked
/// about a request the address checks would refuse anyway.
pub fn connect_plan<R: Resolver + ?Sized>(
    request: &Request,
    policy: &NetworkPolicy,
    resolver: &R,
) -> Result<ConnectPlan, Refusal> {
    match policy.decide(request) {
        Decision::Allow { rule } => plan(request, policy.grant(&rule), rule, resolver),
        Decision::Ask { rule } => {
            let plan = plan(request, policy.grant(&rule), rule, resolver)?;
            Err(Refusal::ApprovalRequired {
                rule: plan.rule,
                addrs: plan.addrs,
            })
        }
        Decision::Deny { reason } => Err(Refusal::Denied { reason }),
    }
}

/// As [`connect_plan`], for a request already decided: one whose `ask`
/// decision a human approved (`allowed-once`), or one decided with
/// [`NetworkPolicy::decide_with`] for a call holding `rules` (the grants of
/// the policy rules that matched it; `&[]` for none). `rule` is the grant
/// the decision named. It must still exist in `policy` (or `rules`) and
/// cover `request`, or the plan is refused ([`Refusal::StaleRule`]); an
/// approval never widens a grant.
pub fn connect_plan_approved<R: Resolver + ?Sized>(
    request: &Request,
    policy: &NetworkPolicy,
    rules: &[RuleGrants],
    rule: &GrantRef,
    resolver: &R,
) -> Result<ConnectPlan, Refusal> {
    let grant = policy.grant_with(rule, rules);
    plan(request, grant, rule.clone(), resolver)
}

fn plan<R: Resolver + ?Sized>(
    request: &Request,
    grant: Option<&Grant>,
    rule: GrantRef,
    resolver: &R,
) -> Result<ConnectPlan, Refusal> {
    let Some(grant) = grant.filter(|g| g.matches(request)) else {
        return Err(Refusal::StaleRule { rule });
    };
    let resolved =
        match &request.host {
            Host::Ip(ip) => vec![SocketAddr::new(*ip, request.port)],
            Host::Name(name) => resolver.resolve(name.as_str(), request.port).map_err(|e| {
                Refusal::ResolveFailed {
                    host: request.host.clone(),
                    message: e.message,
                }
            })?,
        };
    let addrs = check_resolved(request, grant, &resolved)?;
    Ok(ConnectPlan { rule, addrs })
}

/// The pure part of a plan: checks addresses resolved for `request`, which
/// `grant` allowed. Every address must pass [`check_addr`], or the whole
/// request is refused; an empty list is [`Refusal::NoAddress`]. Returns the
/// addresses with the request's port (whatever port the resolver put),
/// duplicates removed, order kept.
///
/// An IPv4-mapped address a resolver gives for a name (a dual-stack
/// resolver may) is that IPv4 address: it is checked, and connected, as
/// IPv4. Written by the guest as a literal, a mapped form stays refused
/// unless a grant names it.
pub fn check_resolved(
    request: &Request,
    grant: &Grant,
    resolved: &[SocketAddr],
) -> Result<Vec<SocketAddr>, Refusal> {
    if resolved.is_empty() {
        return Err(Refusal::NoAddress {
            host: request.host.clone(),
        });
    }
    let mut out: Vec<SocketAddr> = Vec::with_capacity(resolved.len());
    for addr in resolved {
        let ip = match (&request.host, addr.ip()) {
            (Host::Name(_), IpAddr::V6(v6)) => v6.to_ipv4_mapped().map_or(addr.ip(), IpAddr::V4),
            (_, ip) => ip,
        };
        check_addr(ip, &request.host, std::slice::from_ref(grant))?;
        let addr = SocketAddr::new(ip, request.port);
        if !out.contains(&addr) {
            out.push(addr);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name with a dot is asked for as an absolute name, so the search
    /// list never applies to it; a single label keeps it (unless written
    /// absolute).
    #[test]
    fn dotted_names_are_looked_up_as_absolute_names() {
        assert_eq!(query_name("api.example.com"), "api.example.com.");
        assert_eq!(query_name("api.example.com."), "api.example.com.");
        assert_eq!(query_name("intranet"), "intranet");
        assert_eq!(query_name("intranet."), "intranet.");
    }

    /// A single-label name still reaches `/etc/hosts` (every machine maps
    /// `localhost`).
    #[test]
    fn a_single_label_still_resolves_through_the_hosts_file() {
        let addrs = SystemResolver.resolve("localhost", 80).unwrap_or_default();
        assert!(addrs.iter().any(|a| a.ip().is_loopback()), "{addrs:?}");
    }
}
