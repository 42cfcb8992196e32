//! Who made a call, kept with it after admission, and the gate's pass an
//! outer call lends its inner calls: what code mode (`code_mode.rs`) makes
//! its inner calls as, and under.

use super::Refusal;
use crate::approval::Approver;
use std::sync::Arc;
use toolhost_core::ErrorCode;

/// Who made a call: what its inner calls are made as.
#[derive(Clone, Default)]
pub(crate) struct Caller {
    pub scope: Option<String>,
    pub principal: Option<String>,
    pub client: Option<String>,
    pub approver: Option<Arc<dyn Approver>>,
}

/// The outer call's pass at the gate, lent to its inner calls.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lent {
    /// The outer call runs alone (an exclusive pass).
    pub alone: bool,
    /// How many outer calls of code stand above this call (1: one).
    pub depth: u32,
}

impl Lent {
    /// Whether the lent pass covers a body that is (or is not)
    /// concurrency-safe; the refusal when it does not.
    pub(crate) fn covers(self, concurrency_safe: bool) -> Result<(), Refusal> {
        if self.alone || concurrency_safe {
            return Ok(());
        }
        Err((
            ErrorCode::SandboxUnavailable,
            "this tool runs alone, and the code calling it runs in a concurrency-safe call \
             that shares the exclusivity gate: it would wait on its own caller"
                .into(),
        ))
    }
}
