//! Batches: the several tool calls of one model step.
//!
//! Every call is admitted in order (lookup, validation, policy, guards,
//! approval); the intents of all admitted calls share one durable commit
//! (group commit); then bodies run — consecutive concurrency-safe calls
//! together (at most as many at once as the runtime's pool holds), every
//! other call alone and in order — and results are committed in the order
//! the calls were given, whatever order they finish. A result is committed
//! as soon as every result before it is, so a crash loses as little as it can.

use super::pipeline::{Admitted, Ending, Unfinished, aborted};
use super::{CallRequest, Host};
use crate::audit::CallStart;
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
            ));
            let admitted = self.admit(call_id, req, call.start()).await;
            slots.push(match admitted {
                Ok(a) => {
                    call.admitted();
                    Slot::Ready(a)
                }
                Err((code, message)) => Slot::Done(call.refused(code, message)),
            });
        }
        // 6. one durable commit for every admitted intent.
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
                    if let Slot::Ready(_) = slot {
                        call.opened();
                    }
                }
            }
            Err(e) => {
                slots = slots
                    .into_iter()
                    .map(|s| match s {
                        Slot::Ready(a) => Slot::Done(aborted(&a, &e)),
                        done => done,
                    })
                    .collect();
            }
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
            while let Some(r) = done.next().await {
                // Committed here, by the call's guard, not in `finish`: a
                // later call that ends first waits for the ones before it.
                results.push(match calls.next() {
                    Some(call) => call.end(r),
                    None => r,
                });
            }
        }
        crate::crashpoint::reached("after-result");
        results
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
