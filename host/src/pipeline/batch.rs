//! Batches: the several tool calls of one model step.
//!
//! Every call is admitted in order (lookup, validation, policy, guards,
//! approval); the intents of all admitted calls share one durable commit
//! (group commit); then bodies run — consecutive concurrency-safe calls
//! together (at most as many at once as the runtime's pool holds), every
//! other call alone and in order — and results are committed in the order
//! the calls were given, whatever order they finish. A result is committed
//! as soon as every result before it is, so a crash loses as little as it can.

use super::checkpoint::{Admitted, aborted};
use super::commit::Unfinished;
use super::{CallRequest, Host};
use crate::hooks::CallStart;
use crate::result::CallResult;
use futures::StreamExt;

enum Slot<'h> {
    /// Ended before dispatch (refused, or the checkpoint failed).
    Done(CallResult),
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
        // Phases 1-5 for each call, in order. Each call has its guard from
        // here on: if the batch is dropped before its result (a caller's
        // timeout, a transport that drops its handler), every call not
        // ended yet is ended, in call order, with what it has reached.
        let mut slots = Vec::with_capacity(requests.len());
        let mut calls = Ending::with_capacity(requests.len());
        for req in requests {
            let req = req.bounded();
            let call_id = self.new_call_id();
            let start = CallStart::new(req.principal.as_deref(), req.scope.as_deref());
            // In the batch's calls before its admission: dropped while it
            // waits for its approval, it still ends after the calls before it.
            let call = calls.push(Unfinished::new(
                self,
                call_id.clone(),
                req.tool.clone(),
                start,
                true,
            ));
            let admitted = self.admit(call_id, req, call.start(), None).await;
            slots.push(match admitted {
                Ok(a) => {
                    call.admitted();
                    Slot::Ready(a)
                }
                Err((code, message)) => {
                    let refusal = call.refusal(code, message);
                    call.settled(&refusal);
                    Slot::Done(refusal)
                }
            });
        }
        // 6. one durable commit for every admitted intent.
        let slots = self.checkpoint_slots(slots, &mut calls);
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
            while let Some(r) = done.next().await {
                // Committed here, by the call's guard, not in `finish`: a
                // later call that ends first waits for the ones before it.
                let Some(call) = calls.next() else {
                    // Each slot was pushed with its guard: not reached.
                    tracing::error!(call_id = %r.call_id, "a batch's call has no guard; its result is not recorded");
                    results.push(r);
                    continue;
                };
                results.push(call.end(r));
            }
        }
        crate::crashpoint::reached("after-result");
        results
    }

    /// Phase 6 for the batch's admitted calls, in one durable commit: each
    /// call's guard is told its intent is written, or the call ends
    /// `ABORTED_BEFORE_DISPATCH`.
    fn checkpoint_slots<'h>(
        &'h self,
        mut slots: Vec<Slot<'h>>,
        calls: &mut Ending<'h>,
    ) -> Vec<Slot<'h>> {
        let ready: Vec<&Admitted<'_>> = slots
            .iter()
            .filter_map(|s| match s {
                Slot::Ready(a) => Some(a),
                Slot::Done(_) => None,
            })
            .collect();
        let checked = self.checkpoint(&ready);
        drop(ready);
        match checked {
            // The calls whose intents are written: dropped before their
            // result, their guards commit TOOL_OUTCOME_UNKNOWN.
            Ok(()) => {
                for (slot, call) in slots.iter().zip(calls.iter_mut()) {
                    if let Slot::Ready(a) = slot {
                        call.opened(a);
                    }
                }
            }
            Err(e) => {
                slots = slots
                    .into_iter()
                    .zip(calls.iter_mut())
                    .map(|(s, call)| match s {
                        Slot::Ready(a) => {
                            let abort = aborted(&a, &e);
                            call.settled(&abort);
                            Slot::Done(abort)
                        }
                        done => done,
                    })
                    .collect();
            }
        }
        slots
    }

    /// Phases 7-8 of one slot: the body, if it may run. Not committed.
    async fn finish(&self, slot: Slot<'_>) -> CallResult {
        match slot {
            Slot::Done(r) => r,
            Slot::Ready(a) => {
                let r = self.execute(&a).await;
                crate::crashpoint::reached("after-body");
                r
            }
        }
    }
}

/// The calls of a batch that are not ended yet, in call order: dropped,
/// each is ended in that order by its [`Unfinished`] guard.
struct Ending<'h>(std::collections::VecDeque<Unfinished<'h>>);

impl<'h> Ending<'h> {
    fn with_capacity(n: usize) -> Ending<'h> {
        Ending(std::collections::VecDeque::with_capacity(n))
    }

    /// The next call of the batch, `call`, last in order.
    fn push(&mut self, call: Unfinished<'h>) -> &mut Unfinished<'h> {
        self.0.push_back(call);
        let last = self.0.len() - 1;
        &mut self.0[last]
    }

    /// The calls, in order, to move through the stages.
    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Unfinished<'h>> {
        self.0.iter_mut()
    }

    /// The first call not ended yet.
    fn next(&mut self) -> Option<Unfinished<'h>> {
        self.0.pop_front()
    }
}

/// Written out, though a `VecDeque` drops its items front to back too:
/// the order is what this guard is for.
impl Drop for Ending<'_> {
    fn drop(&mut self) {
        while let Some(call) = self.0.pop_front() {
            drop(call);
        }
    }
}
