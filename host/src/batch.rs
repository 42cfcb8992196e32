//! Batches: the several tool calls of one model step.
//!
//! Every call is admitted in order (lookup, validation, policy, guards,
//! approval); the intents of all admitted calls share one durable commit
//! (group commit); then bodies run — consecutive concurrency-safe calls
//! together, every other call alone and in order — and results are
//! committed in the order the calls were given, whatever order they finish.

use crate::host::{CallRequest, Host};
use crate::orchestrator::{Admitted, intent_payload};
use crate::result::CallResult;
use toolhost_core::ErrorCode;

enum Slot<'h> {
    Done(CallResult),
    Ready(Admitted<'h>),
}

impl Host {
    /// Runs the calls of one step. Returns one result per request, in order.
    pub async fn call_batch(&self, requests: Vec<CallRequest>) -> Vec<CallResult> {
        // Phases 1-5 for each call, in order.
        let mut slots = Vec::with_capacity(requests.len());
        for req in requests {
            let call_id = self.new_call_id();
            let tool = req.tool.clone();
            slots.push(match self.admit(call_id.clone(), req).await {
                Ok(a) => Slot::Ready(a),
                Err((code, message)) => Slot::Done(self.refused(&call_id, &tool, code, message)),
            });
        }
        // 6. one durable commit for every admitted intent.
        let intents: Vec<_> = slots
            .iter()
            .filter_map(|s| match s {
                Slot::Ready(a) => Some((a.call_id.clone(), intent_payload(a))),
                Slot::Done(_) => None,
            })
            .collect();
        if !intents.is_empty() {
            if let Err(e) = self.journal.intents(&intents) {
                slots = slots
                    .into_iter()
                    .map(|s| match s {
                        Slot::Ready(a) => Slot::Done(self.refused(
                            &a.call_id,
                            &a.tool.descriptor.name,
                            ErrorCode::AbortedBeforeDispatch,
                            format!("the intent could not be made durable, so the tool did not run: {e}"),
                        )),
                        done => done,
                    })
                    .collect();
            }
        }
        // 7-8. bodies: runs of concurrency-safe calls overlap; others alone.
        let mut results: Vec<Option<CallResult>> = Vec::with_capacity(slots.len());
        let mut group: Vec<(usize, Admitted<'_>)> = Vec::new();
        for (i, slot) in slots.into_iter().enumerate() {
            match slot {
                Slot::Done(r) => results.push(Some(r)),
                Slot::Ready(a) => {
                    results.push(None);
                    if a.tool.descriptor.concurrency_safe {
                        group.push((i, a));
                    } else {
                        self.run_group(std::mem::take(&mut group), &mut results).await;
                        let r = self.execute(&a).await;
                        results[i] = Some(r);
                    }
                }
            }
        }
        self.run_group(group, &mut results).await;
        // 9. commit in call order.
        results
            .into_iter()
            .flatten()
            .map(|r| self.commit(r))
            .collect()
    }

    async fn run_group(&self, group: Vec<(usize, Admitted<'_>)>, results: &mut [Option<CallResult>]) {
        if group.is_empty() {
            return;
        }
        let futures = group.iter().map(|(_, a)| self.execute(a));
        let done = futures::future::join_all(futures).await;
        for ((i, _), r) in group.iter().zip(done) {
            results[*i] = Some(r);
        }
    }

    /// A refusal whose commit is deferred to the ordered commit phase.
    fn refused(&self, call_id: &str, tool: &str, code: ErrorCode, message: String) -> CallResult {
        CallResult::error(call_id.to_string(), tool.to_string(), code, message, crate::runtime::Receipt::default())
    }
}
