//! The vocabulary of egress outcomes: [`Decision`] (what
//! [`NetworkPolicy::decide`](crate::NetworkPolicy::decide) returns for a
//! request), [`DenyReason`] (why the policy refused it) and [`Refusal`] (any
//! reason a connection does not happen, including the address checks and
//! name resolution).
//!
//! Each refusal has a stable [`code`](Refusal::code) for records and logs.
//! How the host is expected to report them to the guest:
//!
//! | refusal | wasi:http `error-code` | wasi:sockets `error-code` |
//! |---|---|---|
//! | [`Refusal::Denied`] (policy), [`Refusal::ApprovalRequired`] not approved, [`Refusal::StaleRule`] | `HTTP-request-denied` | `access-denied` |
//! | [`Refusal::AddressRefused`], [`DenyReason::AddressRefused`] | `destination-IP-prohibited` | `access-denied` |
//! | [`Refusal::ResolveFailed`], [`Refusal::NoAddress`] | `DNS-error` | `name-unresolvable` |

use crate::addr::{AddrClass, AddrRisk};
use crate::grant::{GrantRef, Scheme};
use crate::host::Host;
use serde::Serialize;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// The policy's answer for one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// An `allow` grant covers the request.
    Allow {
        /// The first grant that covers it.
        rule: GrantRef,
    },
    /// No `allow` grant covers it, an `ask` grant does: it may go only after
    /// a human approves this one call.
    Ask {
        /// The first `ask` grant that covers it.
        rule: GrantRef,
    },
    /// Nothing covers it.
    Deny {
        /// Why.
        reason: DenyReason,
    },
}

impl Decision {
    /// The grant that matched, for allow and ask.
    pub fn rule(&self) -> Option<&GrantRef> {
        match self {
            Decision::Allow { rule } | Decision::Ask { rule } => Some(rule),
            Decision::Deny { .. } => None,
        }
    }
}

/// Why the policy refuses a request, from the most to the least specific
/// finding: the closest grant is named by what it lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum DenyReason {
    /// The policy grants no network access at all.
    NetworkOff,
    /// The policy grants network access, but only to tools that declare the
    /// side effect `external`, and this one does not.
    NotExternal,
    /// The host is an address literal (in whatever spelling) of a refused
    /// range, and no grant names that address. Refused before any lookup.
    AddressRefused {
        /// The address the host denotes.
        addr: IpAddr,
        /// What is risky about it.
        risk: AddrRisk,
    },
    /// No grant names this host.
    HostNotGranted {
        /// The host.
        host: Host,
    },
    /// Grants name this host, but for other schemes.
    SchemeNotGranted {
        /// The host.
        host: Host,
        /// The scheme asked for.
        scheme: Scheme,
    },
    /// Grants name this host and scheme, but for other ports.
    PortNotGranted {
        /// The host.
        host: Host,
        /// The port asked for.
        port: u16,
        /// The ports granted for this host and scheme.
        granted: Vec<u16>,
    },
    /// Grants name this host, scheme and port, but not this method.
    MethodNotGranted {
        /// The host.
        host: Host,
        /// The method asked for (`None` when the request had none).
        method: Option<String>,
        /// The methods granted for this host, scheme and port.
        granted: Vec<String>,
    },
}

impl DenyReason {
    /// A stable code: `network_off`, `not_external`, `address_refused`, `host_not_granted`,
    /// `scheme_not_granted`, `port_not_granted`, `method_not_granted`.
    pub fn code(&self) -> &'static str {
        match self {
            DenyReason::NetworkOff => "network_off",
            DenyReason::NotExternal => "not_external",
            DenyReason::AddressRefused { .. } => "address_refused",
            DenyReason::HostNotGranted { .. } => "host_not_granted",
            DenyReason::SchemeNotGranted { .. } => "scheme_not_granted",
            DenyReason::PortNotGranted { .. } => "port_not_granted",
            DenyReason::MethodNotGranted { .. } => "method_not_granted",
        }
    }
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DenyReason::NetworkOff => f.write_str("the policy grants no network access"),
            DenyReason::NotExternal => f.write_str(
                "the tool does not declare the side effect `external`; only such tools get the \
                 policy's network grants",
            ),
            DenyReason::AddressRefused { addr, risk } if risk.class == AddrClass::Unspecified => {
                write!(
                    f,
                    "{} is {risk}, which no request may reach",
                    Host::Ip(*addr)
                )
            }
            DenyReason::AddressRefused { addr, risk } => write!(
                f,
                "{} is {risk}, and no grant names that address",
                Host::Ip(*addr)
            ),
            DenyReason::HostNotGranted { host } => write!(f, "no grant names host {host}"),
            DenyReason::SchemeNotGranted { host, scheme } => {
                write!(f, "host {host} is not granted for {scheme}")
            }
            DenyReason::PortNotGranted {
                host,
                port,
                granted,
            } => {
                let list: Vec<String> = granted.iter().map(u16::to_string).collect();
                write!(
                    f,
                    "port {port} of host {host} is not granted (granted: {})",
                    list.join(", ")
                )
            }
            DenyReason::MethodNotGranted {
                host,
                method,
                granted,
            } => write!(
                f,
                "method {} is not granted for host {host} (granted: {})",
                method.as_deref().unwrap_or("(none)"),
                granted.join(", ")
            ),
        }
    }
}

/// The refusal codes a policy could lift: each [`DenyReason`]'s (by a
/// grant; `not_external` by a grant once the tool declares `external`)
/// and `approval_required` (by an approval). A request refused with any
/// other code (a name that resolves nowhere, a malformed request, a method
/// the host never sends, a limit) no policy changes.
pub const LIFTABLE_CODES: &[&str] = &[
    "network_off",
    "not_external",
    "address_refused",
    "host_not_granted",
    "scheme_not_granted",
    "port_not_granted",
    "method_not_granted",
    "approval_required",
];

/// Why a request or connection does not happen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Refusal {
    /// The policy refused it.
    #[error("network access refused: {reason}")]
    Denied {
        /// Why.
        reason: DenyReason,
    },
    /// The request needs an approval first (an `ask` grant). Its addresses
    /// were already resolved and checked, so a human is only asked about a
    /// request that would really go: after an `allowed-once`, connect to
    /// `addrs` (or plan again with
    /// [`connect_plan_approved`](crate::connect_plan_approved), for an
    /// approval that arrives later).
    #[error("network access to this host needs approval ({rule})")]
    ApprovalRequired {
        /// The `ask` grant.
        rule: GrantRef,
        /// The checked addresses to connect to once approved.
        addrs: Vec<SocketAddr>,
    },
    /// The grant given to plan a request does not exist in the policy or does
    /// not cover the request.
    #[error("{rule} does not cover this request")]
    StaleRule {
        /// The grant given.
        rule: GrantRef,
    },
    /// The address a connection would go to is refused (see
    /// [`check_addr`](crate::check_addr)).
    #[error("network access refused: {host} {}", describe_addr(host, addr, risk))]
    AddressRefused {
        /// The host the request named.
        host: Host,
        /// The address refused.
        addr: IpAddr,
        /// What is risky about it.
        risk: AddrRisk,
    },
    /// Name resolution failed.
    #[error("could not resolve {host}: {message}")]
    ResolveFailed {
        /// The host.
        host: Host,
        /// The resolver's message.
        message: String,
    },
    /// Name resolution found no address.
    #[error("{host} has no address")]
    NoAddress {
        /// The host.
        host: Host,
    },
}

fn describe_addr(host: &Host, addr: &IpAddr, risk: &AddrRisk) -> String {
    let literal = Host::Ip(*addr);
    if risk.class == AddrClass::Unspecified {
        format!("is {literal}, {risk}, which no request may reach, whatever the grants")
    } else if *host == literal {
        format!("is {risk}, and no grant names that address")
    } else {
        format!("resolves to {literal}, {risk}; a grant by name never unlocks such an address")
    }
}

impl Refusal {
    /// A stable code: the [`DenyReason::code`] for policy refusals, else
    /// `approval_required`, `stale_rule`, `address_refused`,
    /// `resolve_failed`, `no_address`.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Denied { reason } => reason.code(),
            Refusal::ApprovalRequired { .. } => "approval_required",
            Refusal::StaleRule { .. } => "stale_rule",
            Refusal::AddressRefused { .. } => "address_refused",
            Refusal::ResolveFailed { .. } => "resolve_failed",
            Refusal::NoAddress { .. } => "no_address",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::classify;

    #[test]
    fn address_refusals_say_whether_a_name_led_there() {
        let addr: IpAddr = "10.0.0.5".parse().unwrap();
        let risk = classify(addr).unwrap();
        let by_name = Refusal::AddressRefused {
            host: Host::parse("internal.example.com").unwrap(),
            addr,
            risk,
        };
        assert_eq!(
            by_name.to_string(),
            "network access refused: internal.example.com resolves to 10.0.0.5, \
             a private address; a grant by name never unlocks such an address"
        );
        let literal = Refusal::AddressRefused {
            host: Host::Ip(addr),
            addr,
            risk,
        };
        assert_eq!(
            literal.to_string(),
            "network access refused: 10.0.0.5 is a private address, and no grant names that address"
        );
        assert_eq!(literal.code(), "address_refused");
    }
}
