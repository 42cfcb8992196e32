//! Guards: the deny-only layer that runs after policy evaluation and before
//! approval (DESIGN.md §1, step 4).
//!
//! Monotonic by type: [`GuardVerdict`] has only `Pass` and `Deny`, there is no
//! variant a guard could return to allow a call. A guard never sees the policy
//! decision, so no rule, preset, default or approval can re-allow what a guard
//! refuses. [`Guards`] fails closed: a guard that panics counts as a denial.

use crate::facts::CallFacts;
use crate::policy::Policy;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// What a guard says about a call. There is deliberately no `Allow`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GuardVerdict {
    /// This guard has no objection; the call still needs every other layer.
    Pass,
    /// The call must not run.
    Deny {
        /// Why, for the model and the log.
        reason: String,
    },
}

/// A deny-only check on a call.
///
/// Implementations must be pure: the same facts give the same verdict.
pub trait Guard: Send + Sync {
    /// A short name for logs and [`GuardDenial::guard`].
    fn name(&self) -> &str;

    /// Checks one call.
    fn check(&self, facts: &CallFacts<'_>) -> GuardVerdict;
}

/// The first denial of [`Guards::check`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GuardDenial {
    /// The name of the guard that denied.
    pub guard: String,
    /// Its reason.
    pub reason: String,
}

impl fmt::Display for GuardDenial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "guard {} denied the call: {}", self.guard, self.reason)
    }
}

/// An ordered set of guards. The first denial in registration order wins.
#[derive(Default)]
pub struct Guards {
    guards: Vec<Box<dyn Guard>>,
}

impl Guards {
    /// No guards: every call passes this layer.
    pub fn new() -> Self {
        Guards::default()
    }

    /// The guards a policy file declares, in file order.
    pub fn from_policy(policy: &Policy) -> Self {
        let mut guards = Guards::new();
        for g in policy.guards() {
            guards.push(Box::new(g.clone()));
        }
        guards
    }

    /// Adds a guard after the ones already registered.
    pub fn push(&mut self, guard: Box<dyn Guard>) -> &mut Self {
        self.guards.push(guard);
        self
    }

    /// How many guards are registered.
    pub fn len(&self) -> usize {
        self.guards.len()
    }

    /// True when no guard is registered.
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty()
    }

    /// Runs the guards in registration order and returns the first denial, or
    /// `None` when every guard passes.
    ///
    /// A guard that panics denies the call (fail closed). This relies on
    /// unwinding; a build with `panic = "abort"` stops the host instead.
    pub fn check(&self, facts: &CallFacts<'_>) -> Option<GuardDenial> {
        self.guards.iter().find_map(|guard| {
            match catch_unwind(AssertUnwindSafe(|| guard.check(facts))) {
                Ok(GuardVerdict::Pass) => None,
                Ok(GuardVerdict::Deny { reason }) => Some(GuardDenial {
                    guard: guard_name(guard.as_ref()),
                    reason,
                }),
                Err(payload) => {
                    let what = payload
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "no message".to_string());
                    Some(GuardDenial {
                        guard: guard_name(guard.as_ref()),
                        reason: format!("the guard panicked ({what}); failing closed"),
                    })
                }
            }
        })
    }
}

/// The guard's name, or a placeholder when even `name` panics.
fn guard_name(guard: &dyn Guard) -> String {
    catch_unwind(AssertUnwindSafe(|| guard.name().to_string()))
        .unwrap_or_else(|_| "<guard whose name panicked>".to_string())
}

impl fmt::Debug for Guards {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.guards.iter().map(|g| guard_name(g.as_ref())))
            .finish()
    }
}
