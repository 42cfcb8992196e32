//! Batches: the several tool calls of one model step.
//!
//! Every call is admitted in order (lookup, validation, policy, guards,
//! approval); the intents of all admitted calls share one durable commit
//! (group commit); then bodies run — consecutive concurrency-safe calls
//! together (at most as many at once as the runtime's pool holds), every
//! other call alone and in order — and results are committed in the order
//! the calls were given, whatever order they finish. A result is committed
//! as soon as every result before it is, so a crash loses as little as it can.

use super::pipeline::{Admitted, DROPPED_WHILE_ASKING, Unresolved, aborted};
use super::{CallRequest, Host};
use crate::audit::CallStart;
use crate::result::CallResult;
use futures::StreamExt;
use toolhost_core::ErrorCode;

enum Slot<'h> {
    /// Ended before dispatch (refused, or the checkpoint failed).
    Done(CallResult, CallStart),
    /// Its intent is durable; its body may run.
    Ready(Admitted<'h>),
}

impl Slot<'_> {
    fn exclusive(&self) -> bool {
        matches!(self, Slot::Ready(a) if !a.tool.descriptor.concurrency_safe)
    }
}

impl Host {
    /// Runs the calls of one step. Returns one result per request, in order.
    ///
    /// Bodies of consecutive concurrency-safe calls overlap; a call that is
    /// not concurrency-safe runs alone, after every call before it ended and
    /// before any call after it starts. Results are committed to the session
    /// log in request order.
    pub async fn call_batch(&self, requests: Vec<CallRequest>) -> Vec<CallResult> {
        // Phases 1-5 for each call, in order.
        let mut slots = Vec::with_capacity(requests.len());
        let mut unended = Unended {
            host: self,
            calls: Vec::with_capacity(requests.len()),
        };
        for req in requests {
            let req = req.bounded();
            let call_id = self.new_call_id();
            let tool = req.tool.clone();
            let start = CallStart::new(req.principal.as_deref(), req.scope.as_deref());
            unended.calls.push(Ending::Unended(Box::new(UnendedCall {
                call_id: call_id.clone(),
                tool: tool.clone(),
                start: start.clone(),
                refusal: None,
                admitted: false,
            })));
            let admitted = self.admit(call_id.clone(), req, start.clone()).await;
            slots.push(match admitted {
                Ok(a) => {
                    unended.admitted();
                    Slot::Ready(a)
                }
                Err((code, message)) => {
                    let r = refused(&call_id, &tool, code, message);
                    unended.refused(&r);
                    Slot::Done(r, start)
                }
            });
        }
        // 6. one durable commit for every admitted intent.
        let ready: Vec<&Admitted<'_>> = slots
            .iter()
            .filter_map(|s| match s {
                Slot::Ready(a) => Some(a),
                Slot::Done(..) => None,
            })
            .collect();
        let checked = self.checkpoint(&ready);
        drop(ready);
        // The calls whose intents are written: each result is committed
        // through its call's guard, and if this batch is dropped before
        // that, the guard commits TOOL_OUTCOME_UNKNOWN (in its place among
        // the batch's other unended calls).
        if checked.is_ok() {
            for (slot, ending) in slots.iter().zip(unended.calls.iter_mut()) {
                if let Slot::Ready(_) = slot
                    && let Ending::Unended(call) = std::mem::replace(ending, Ending::Ended)
                {
                    let UnendedCall {
                        call_id,
                        tool,
                        start,
                        ..
                    } = *call;
                    *ending = Ending::Open(Unresolved::new(self, call_id, tool, start));
                }
            }
        }
        if let Err(e) = checked {
            slots = slots
                .into_iter()
                .map(|s| match s {
                    Slot::Ready(a) => {
                        let r = aborted(&a, &e);
                        Slot::Done(r, a.start)
                    }
                    done => done,
                })
                .collect();
        }
        // 7-9. bodies, in runs: a run of calls that may overlap (refusals
        // included, they are already done), or one exclusive call. Inside a
        // run, `buffered` starts up to `limit` bodies at once and yields
        // their results in call order, each committed as soon as it is next.
        let limit = usize::try_from(self.runtime.options().max_concurrent_calls)
            .unwrap_or(1)
            .max(1);
        let mut results = Vec::with_capacity(slots.len());
        let mut slots = slots.into_iter().peekable();
        while let Some(first) = slots.next() {
            let mut run = vec![first];
            if !run[0].exclusive() {
                while let Some(next) = slots.next_if(|s| !s.exclusive()) {
                    run.push(next);
                }
            }
            let mut done = futures::stream::iter(run)
                .map(|slot| self.finish(slot))
                .buffered(limit);
            while let Some((r, start)) = done.next().await {
                // Committed here, not in `finish`: a later call that ends
                // first waits for the ones before it.
                let ending = unended
                    .calls
                    .get_mut(results.len())
                    .map(|e| std::mem::replace(e, Ending::Ended));
                results.push(match ending {
                    Some(Ending::Open(call)) => call.resolve(r),
                    _ => self.commit(r, &start),
                });
            }
        }
        crate::crashpoint::reached("after-result");
        results
    }

    /// Phases 7-8 of one slot: the body, if it may run. Not committed.
    async fn finish(&self, slot: Slot<'_>) -> (CallResult, CallStart) {
        match slot {
            Slot::Done(r, start) => (r, start),
            Slot::Ready(a) => {
                let r = self.execute(&a).await;
                crate::crashpoint::reached("after-body");
                (r, a.start)
            }
        }
    }
}

/// How each call of a batch ends, in call order, if the batch is dropped
/// before its result is committed (a caller's timeout, a transport that
/// drops its handler): each is ended in call order, with its refusal,
/// `CANCELLED` (dropped while waiting for its approval, or admitted and
/// dropped before its intent), or, its intent written, by its `Unresolved`
/// guard (`TOOL_OUTCOME_UNKNOWN`). No call of the batch stays without a
/// result.
struct Unended<'h> {
    host: &'h Host,
    calls: Vec<Ending<'h>>,
}

enum Ending<'h> {
    /// Not at its intent: ended here.
    Unended(Box<UnendedCall>),
    /// Its intent written: ended by its guard.
    Open(Unresolved<'h>),
    /// Its result committed.
    Ended,
}

struct UnendedCall {
    call_id: String,
    tool: String,
    start: CallStart,
    /// Its refusal, once admission refused it.
    refusal: Option<CallResult>,
    /// Admitted: its body may run once the batch's intents are written.
    admitted: bool,
}

impl Unended<'_> {
    /// The last call (being admitted) was admitted.
    fn admitted(&mut self) {
        if let Some(Ending::Unended(call)) = self.calls.last_mut() {
            call.admitted = true;
        }
    }

    /// The last call (being admitted) was refused with `r`.
    fn refused(&mut self, r: &CallResult) {
        if let Some(Ending::Unended(call)) = self.calls.last_mut() {
            call.refusal = Some(r.clone());
        }
    }
}

impl Drop for Unended<'_> {
    fn drop(&mut self) {
        for ending in self.calls.drain(..) {
            let call = match ending {
                Ending::Unended(call) => call,
                // Its guard commits its result as it goes.
                Ending::Open(open) => {
                    drop(open);
                    continue;
                }
                Ending::Ended => continue,
            };
            let result = match call.refusal {
                Some(refusal) => refusal,
                None => {
                    let message = if call.admitted {
                        "the batch was dropped by its caller before this call's intent was \
                         written; its body never ran"
                    } else {
                        DROPPED_WHILE_ASKING
                    };
                    refused(
                        &call.call_id,
                        &call.tool,
                        ErrorCode::Cancelled,
                        message.into(),
                    )
                }
            };
            self.host.commit(result, &call.start);
        }
    }
}

/// A refusal whose commit is deferred to the ordered commit phase.
fn refused(call_id: &str, tool: &str, code: ErrorCode, message: String) -> CallResult {
    CallResult::error(
        call_id.to_string(),
        tool.to_string(),
        code,
        message,
        crate::runtime::Receipt::default(),
    )
}
