//! The pure decision layer of toolhost's call pipeline (DESIGN.md §1, steps 3, 4
//! and 8): policy files, rule evaluation, guards and the post-execute rules a
//! policy file declares.
//!
//! This crate decides; it never acts. It does no I/O: the caller reads the
//! policy file and passes its text to [`Policy::from_toml`], and passes each
//! call's facts to [`Policy::evaluate`] and [`Guards::check`]. Approval,
//! sandboxing and logging belong to the host.
//!
//! The two pre-execute layers differ by construction:
//!
//! * [`Policy::evaluate`] is a pure function returning a three-way
//!   [`Decision`] (allow, ask, deny); when several rules match, the strictest
//!   wins.
//! * [`Guard`]s can only deny: [`GuardVerdict`] has no allow variant, so no
//!   rule, preset, default or approval can re-allow what a guard refuses.
//!
//! Policy also comes in layers that only narrow (profile, global, group,
//! principal, agent, mode, subagent): [`Policy::trace`] runs a call through
//! every layer that applies to its [`Subject`] and says which layer and rule
//! decided; [`Policy::hidden`] says which tools a subject sees; and
//! [`Policy::patch`] applies the file's argument patches.
//!
//! See [`Policy`] for the file format and [`Preset`] for the presets.

#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        reason = "tests fail loudly on a set-up error"
    )
)]

mod arg_globs;
#[cfg(test)]
mod arg_globs_tests;
mod code_mode;
mod decision;
mod error;
mod facts;
mod file;
mod guard;
mod layer;
mod load;
mod matcher;
mod patch;
mod policy;
mod policy_guard;
mod post_execute;
mod preset;
mod principal;
mod rate_limit;
mod rule;
mod side_effect;

pub use code_mode::{CodeMode, DEFAULT_MAX_INNER_CALLS, MAX_MAX_INNER_CALLS, MAX_NESTING};
pub use decision::{ApprovalSetting, Decision, DecisionKind, Evaluation};
pub use error::{PolicyError, UnknownName};
pub use facts::CallFacts;
pub use guard::{Guard, GuardDenial, GuardVerdict, Guards};
pub use layer::{Blame, DEFAULT_SUBAGENT_WITHHELD, LayerKind, LayerStep, Trace};
pub use patch::{AppliedPatch, PatchError, Patched};
pub use policy::Policy;
pub use policy_guard::PolicyGuard;
pub use post_execute::{PostExecuteRules, PostVerdict, REDACTED};
pub use preset::Preset;
pub use principal::{ANONYMOUS_PRINCIPAL, LOCAL_PRINCIPAL, Subject, check_principal_name};
pub use rate_limit::{
    DEFAULT_MAX_CLIENTS, Limit, MAX_MAX_CLIENTS, RateLimits, TokenBucket, ToolLimit,
};
pub use rule::{Rule, RuleOrigin, RuleRef};
pub use side_effect::SideEffect;
pub use toolhost_core::SandboxMode;
/// The network part of a policy (`[network]`, `[[credentials]]`): see
/// [`Policy::network`].
pub use toolhost_egress as egress;
