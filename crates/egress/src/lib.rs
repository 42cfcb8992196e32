//! The pure decision layer of toolhost's network egress (DESIGN.md §2b):
//! what a call may reach, which addresses it may never reach, which
//! credential the host attaches, and what is recorded.
//!
//! This crate decides; it never connects. It does no I/O except in the two
//! places marked `# Ambient Authority`: [`CredentialSpec::load`] (reads a
//! secret from the environment or a file) and [`SystemResolver`] (the C
//! library's resolver). The host wires the rest into its wasi:http outgoing
//! handler and wasi:sockets.
//!
//! The flow for one outgoing request:
//!
//! 1. [`Request::from_url`] or [`Request::from_authority`] parses scheme,
//!    host and port. A host is classified by what it denotes: `0x7f.1` is
//!    the address `127.0.0.1` ([`Host::parse`]).
//! 2. [`NetworkPolicy::decide`] returns a [`Decision`]: allow or ask (naming
//!    the grant, [`GrantRef`]) or deny (naming why, [`DenyReason`]). Deny by
//!    default: a policy without `[network]` grants nothing.
//!    [`NetworkPolicy::decide_with`] decides for a call that also holds the
//!    grants of the policy rules it matched ([`RuleGrants`]).
//! 3. [`connect_plan`] (or [`connect_plan_approved`] after an approval)
//!    resolves the name once with a [`Resolver`] and checks every address
//!    ([`check_addr`]): loopback, private, link-local, CGNAT, multicast,
//!    metadata and the like are refused unless a grant names that exact
//!    address; a name never unlocks them. The host connects to the planned
//!    addresses only.
//! 4. [`NetworkPolicy::credential_for`] / [`Credentials::credential_for`]
//!    give the credential of the request's host, if any, to attach in the
//!    host. The guest never sees it: the host masks it
//!    ([`Credentials::mask`]) in what that host's response echoes.
//! 5. [`EgressRecord`] records the request without query, userinfo or
//!    headers.
//!
//! Where things live (each module's own docs say more):
//!
//! * `host`: [`Host`], [`DomainName`], the odd IPv4 spellings ([`parse_ipv4_any`]);
//! * `grant`: [`Grant`], [`Scheme`], [`HostPattern`], [`GrantRef`];
//! * `request`: [`Request`] and its URL / authority parsers;
//! * `policy`: [`NetworkPolicy`], [`NetworkPolicy::decide`], [`Limits`],
//!   [`RuleGrants`];
//! * `config`: the file format ([`NetworkSection`], [`CredentialEntry`]) and loading;
//! * `addr`: the address checks ([`classify`], [`check_addr`]);
//! * `resolve`: [`Resolver`], [`connect_plan`], [`check_resolved`];
//! * `credential`: [`Secret`], [`CredentialSpec`], [`Credentials`];
//! * `scan`: finding a secret in text at a cost independent of how the
//!   text relates to it (a guest chooses much of that text);
//! * `record`: [`EgressRecord`], [`redact_url`];
//! * `decision`: [`Decision`], [`DenyReason`], [`Refusal`] and their codes;
//! * `error`: configuration errors ([`GrantError`], [`ConfigError`], ...).

#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        reason = "tests fail loudly on a set-up error"
    )
)]

mod addr;
mod config;
mod credential;
mod decision;
mod error;
mod grant;
mod host;
mod policy;
mod record;
mod request;
mod resolve;
mod scan;

pub use addr::{AddrClass, AddrRisk, Embedding, check_addr, classify};
pub use config::{CredentialEntry, GrantEntry, GrantTable, NetworkSection};
pub use credential::{
    BoundedReadError, Credential, CredentialError, CredentialSpec, Credentials, MASK_BYTE,
    MAX_SECRET_BYTES, MIN_SECRET_BYTES, Secret, SecretSource, read_bounded,
};
pub use decision::{Decision, DenyReason, LIFTABLE_CODES, Refusal};
pub use error::{
    ConfigError, ConfigProblem, GrantError, HostError, KeyPath, LocatedError, PathSegment, UrlError,
};
pub use grant::{Grant, GrantList, GrantRef, HostPattern, Scheme};
pub use host::{DomainName, Host, parse_ipv4_any};
pub use policy::{Limits, NetworkPolicy, RuleGrants};
pub use record::{
    EgressOutcome, EgressRecord, MAX_METHOD_BYTES, NO_RESPONSE, NOT_SENT, bounded, redact_url,
};
pub use request::Request;
pub use resolve::{
    ConnectPlan, ResolveError, Resolver, StaticResolver, SystemResolver, check_resolved,
    connect_plan, connect_plan_approved,
};
