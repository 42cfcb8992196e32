//! [`NetworkPolicy`]: the loaded network grants, limits and credential
//! specs of one policy, and [`NetworkPolicy::decide`], the pure decision for
//! one request.
//!
//! A `NetworkPolicy` is immutable once built; the default grants nothing
//! (deny by default). Loading lives in [`crate::config`].

use crate::addr::classify;
use crate::credential::CredentialSpec;
use crate::decision::{Decision, DenyReason};
use crate::grant::{Grant, GrantList, GrantRef, Scheme};
use crate::host::Host;
use crate::request::Request;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Per-call limits on egress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Limits {
    /// At most this many requests (or connections) per call.
    pub max_requests: u32,
    /// At most this many response body bytes per call, all requests summed.
    pub max_response_bytes: u64,
    /// Each request's timeout, in milliseconds; the call's own deadline
    /// still applies on top.
    pub request_timeout_ms: u64,
}

impl Limits {
    /// The default `max_requests`: 32.
    pub const DEFAULT_MAX_REQUESTS: u32 = 32;
    /// The default `max_response_bytes`: 8 MiB.
    pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 8 * 1024 * 1024;
    /// The default `request_timeout_ms`: 30 seconds.
    pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;

    /// The per-request timeout as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_requests: Limits::DEFAULT_MAX_REQUESTS,
            max_response_bytes: Limits::DEFAULT_MAX_RESPONSE_BYTES,
            request_timeout_ms: Limits::DEFAULT_REQUEST_TIMEOUT_MS,
        }
    }
}

/// The network part of a policy: `allow` and `ask` grants, per-call limits,
/// an extra CA file, and credential specs (where the host reads each
/// secret; never the secrets themselves).
///
/// See [`NetworkSection`](crate::NetworkSection) and
/// [`CredentialEntry`](crate::CredentialEntry) for the file format.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkPolicy {
    pub(crate) allow: Vec<Grant>,
    pub(crate) ask: Vec<Grant>,
    pub(crate) limits: Limits,
    pub(crate) ca_file: Option<PathBuf>,
    pub(crate) credentials: Vec<CredentialSpec>,
    /// Whether some policy rule grants network to the calls it matches:
    /// a call without any grant is then refused for its host, not for a
    /// policy that grants nothing.
    pub(crate) rules_grant: bool,
}

impl NetworkPolicy {
    /// A policy with these `allow` grants and nothing else (for example from
    /// `exec --allow-net URL_PATTERN` flags).
    pub fn from_grants(allow: Vec<Grant>) -> NetworkPolicy {
        NetworkPolicy {
            allow,
            ..NetworkPolicy::default()
        }
    }

    /// This policy, knowing whether some of the file's rules grant network
    /// (to the calls they match): see [`RuleGrants`].
    pub fn with_rule_grants(mut self, some: bool) -> NetworkPolicy {
        self.rules_grant = some;
        self
    }

    /// This policy with `limits` (per call), as the `[network]` section's
    /// `max_requests`, `max_response_bytes` and `request_timeout_ms` set
    /// them.
    pub fn with_limits(mut self, limits: Limits) -> NetworkPolicy {
        self.limits = limits;
        self
    }

    /// This policy trusting the certificates of `ca_file` (PEM) beside the
    /// system's roots, as the `[network]` section's `ca_file` does.
    pub fn with_ca_file(mut self, ca_file: Option<PathBuf>) -> NetworkPolicy {
        self.ca_file = ca_file;
        self
    }

    /// Decides one request. Pure: the result depends only on `self` and
    /// `request`.
    ///
    /// The first `allow` grant that covers scheme, host, port and method
    /// allows it; else the first `ask` grant that covers it asks. Otherwise
    /// it is denied, and the reason names what the closest grants lack: a
    /// host that is a refused address literal, no grant for the host, the
    /// scheme, the port, or the method.
    ///
    /// The address checks on resolved addresses are not part of this: see
    /// [`connect_plan`](crate::connect_plan).
    pub fn decide(&self, request: &Request) -> Decision {
        self.decide_with(request, &[])
    }

    /// Decides one request of a call that also holds `rules`, the grants of
    /// the policy rules that matched it. Pure, as [`NetworkPolicy::decide`]:
    /// the first `allow` grant that covers the request allows it, else the
    /// first grant of `rules` (in order) does, else the first `ask` grant
    /// asks; otherwise it is denied, the reason looking at every grant.
    pub fn decide_with(&self, request: &Request, rules: &[RuleGrants]) -> Decision {
        if let Some(index) = self.allow.iter().position(|g| g.matches(request)) {
            return Decision::Allow {
                rule: self.grant_ref(GrantList::Allow, index),
            };
        }
        for r in rules {
            if let Some(index) = r.grants.iter().position(|g| g.matches(request)) {
                return Decision::Allow {
                    rule: r.grant_ref(index),
                };
            }
        }
        if let Some(index) = self.ask.iter().position(|g| g.matches(request)) {
            return Decision::Ask {
                rule: self.grant_ref(GrantList::Ask, index),
            };
        }
        Decision::Deny {
            reason: self.deny_reason(request, rules),
        }
    }

    fn deny_reason(&self, request: &Request, rules: &[RuleGrants]) -> DenyReason {
        let host = &request.host;
        let for_host: Vec<&Grant> = self
            .grants()
            .chain(rules.iter().flat_map(|r| r.grants.iter()))
            .filter(|g| g.matches_host(host))
            .collect();
        if for_host.is_empty() {
            if let Host::Ip(addr) = host
                && let Some(risk) = classify(*addr)
            {
                return DenyReason::AddressRefused { addr: *addr, risk };
            }
            if self.allow.is_empty()
                && self.ask.is_empty()
                && !self.rules_grant
                && rules.iter().all(|r| r.grants.is_empty())
            {
                return DenyReason::NetworkOff;
            }
            return DenyReason::HostNotGranted { host: host.clone() };
        }
        let for_scheme: Vec<&Grant> = for_host
            .into_iter()
            .filter(|g| g.scheme() == request.scheme)
            .collect();
        if for_scheme.is_empty() {
            return DenyReason::SchemeNotGranted {
                host: host.clone(),
                scheme: request.scheme,
            };
        }
        let mut ports: Vec<u16> = for_scheme.iter().map(|g| g.port()).collect();
        ports.sort_unstable();
        ports.dedup();
        if !ports.contains(&request.port) {
            return DenyReason::PortNotGranted {
                host: host.clone(),
                port: request.port,
                granted: ports,
            };
        }
        let mut methods: Vec<String> = Vec::new();
        for g in for_scheme.iter().filter(|g| g.port() == request.port) {
            for m in g.methods().unwrap_or_default() {
                if !methods.contains(m) {
                    methods.push(m.clone());
                }
            }
        }
        DenyReason::MethodNotGranted {
            host: host.clone(),
            method: request.method.clone(),
            granted: methods,
        }
    }

    fn grant_ref(&self, list: GrantList, index: usize) -> GrantRef {
        let pattern = self
            .list(list)
            .get(index)
            .map(|g| g.as_str().to_string())
            .unwrap_or_default();
        GrantRef {
            list,
            index,
            pattern,
        }
    }

    fn list(&self, list: GrantList) -> &[Grant] {
        match list {
            GrantList::Allow => &self.allow,
            GrantList::Ask => &self.ask,
            GrantList::Rule(_) => &[],
        }
    }

    /// The grant a [`GrantRef`] names, if it exists and its pattern is
    /// still the one named. A rule's grant is not the policy's own: see
    /// [`NetworkPolicy::grant_with`].
    pub fn grant(&self, rule: &GrantRef) -> Option<&Grant> {
        self.grant_with(rule, &[])
    }

    /// As [`NetworkPolicy::grant`], for a call that also holds `rules`
    /// (as given to [`NetworkPolicy::decide_with`]).
    pub fn grant_with<'a>(&'a self, rule: &GrantRef, rules: &'a [RuleGrants]) -> Option<&'a Grant> {
        let list = match rule.list {
            GrantList::Rule(n) => rules
                .iter()
                .find(|r| r.rule == n)
                .map_or(&[][..], |r| &r.grants[..]),
            list => self.list(list),
        };
        list.get(rule.index).filter(|g| g.as_str() == rule.pattern)
    }

    /// True when at least one grant exists (`allow` or `ask`).
    pub fn is_enabled(&self) -> bool {
        !(self.allow.is_empty() && self.ask.is_empty())
    }

    /// The `allow` grants, in file order.
    pub fn allow(&self) -> &[Grant] {
        &self.allow
    }

    /// The `ask` grants, in file order.
    pub fn ask(&self) -> &[Grant] {
        &self.ask
    }

    /// Every grant: `allow` first, then `ask`.
    pub fn grants(&self) -> impl Iterator<Item = &Grant> {
        self.allow.iter().chain(&self.ask)
    }

    /// What a call may reach, for its intent record: every grant in
    /// canonical form (`https://api.example.com:443`), `ask` grants
    /// prefixed with `ask:`.
    pub fn reachable(&self) -> Vec<String> {
        self.allow
            .iter()
            .map(Grant::canonical)
            .chain(self.ask.iter().map(|g| format!("ask:{}", g.canonical())))
            .collect()
    }

    /// The per-call limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The extra CA file, as written (never read by this crate).
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    /// Every credential spec, in file order.
    pub fn credentials(&self) -> &[CredentialSpec] {
        &self.credentials
    }

    /// The credential of the origin `scheme://host:port`, if any. Exact
    /// match only: a credential for `https://api.example.com` is not sent
    /// to `x.api.example.com`, to `example.com`, to the address
    /// `api.example.com` resolves to, over plain `http`, or to another port.
    pub fn credential_for(
        &self,
        scheme: Scheme,
        host: &Host,
        port: u16,
    ) -> Option<&CredentialSpec> {
        self.credentials
            .iter()
            .find(|c| c.applies_to(scheme, host, port))
    }
}

/// The network grants of one policy rule (`network = [...]` in a
/// `[[rules]]` entry): `allow` grants that only the calls this rule
/// matches hold, named `rules[N].network[i]`. Written and parsed as the
/// entries of `[network] allow` are ([`GrantEntry::grant_from_toml`](crate::GrantEntry::grant_from_toml)).
///
/// Cheap to clone (the grants are shared). Which rules match a call is the
/// policy's business; a call's requests are then decided with
/// [`NetworkPolicy::decide_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleGrants {
    rule: usize,
    grants: Arc<[Grant]>,
}

impl RuleGrants {
    /// The grants of the file's `[[rules]]` entry at 0-based position
    /// `rule`, in the order written.
    pub fn new(rule: usize, grants: Vec<Grant>) -> RuleGrants {
        RuleGrants {
            rule,
            grants: grants.into(),
        }
    }

    /// The rule's 0-based position among the file's `[[rules]]`.
    pub fn rule(&self) -> usize {
        self.rule
    }

    /// The grants, in the order written.
    pub fn grants(&self) -> &[Grant] {
        &self.grants
    }

    fn grant_ref(&self, index: usize) -> GrantRef {
        GrantRef {
            list: GrantList::Rule(self.rule),
            index,
            pattern: self
                .grants
                .get(index)
                .map(|g| g.as_str().to_string())
                .unwrap_or_default(),
        }
    }
}
