//! The operator's approval endpoints of the HTTP server (`serve --http
//! --approver queue`): the two-phase approvals of
//! [`QueueApprover`](crate::QueueApprover), listed and decided over HTTP.
//!
//! - `GET /approvals`: the pending requests, as `toolhost approvals list --json`;
//! - `POST /approvals/ID` with `{"decision": "allow" | "reject" | "cancel"}`:
//!   200 when the decision stands, 409 (with the one that stands) when the
//!   request was already decided, 404 when no such request is pending.
//!
//! Only an owner may use them: the request's bearer token must map to a
//! principal the policy counts as an owner. Without `--tokens` there is no
//! way to tell an operator from the client whose call waits, so the
//! endpoints refuse (403) rather than let a client approve its own calls.

use super::peer::Caller;
use crate::approval::ApprovalOutcome;
use crate::approval::queue::{ApprovalQueue, DecideError};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use hyper::body::Incoming;
use serde_json::{Value, json};
use std::convert::Infallible;

/// Where the endpoints live.
pub const APPROVALS_PATH: &str = "/approvals";

/// The most bytes of a decision body.
const MAX_BODY: usize = 64 << 10;

type Body = BoxBody<Bytes, Infallible>;

fn reply(status: StatusCode, body: &Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response<Body> {
    reply(status, &json!({ "error": message.to_string() }))
}

/// Serves one request under [`APPROVALS_PATH`] for `caller` (already
/// admitted by the front door), deciding in `queue` (for replicas of a
/// PostgreSQL log, shared: any replica decides any replica's request).
pub(super) async fn handle(
    queue: &ApprovalQueue,
    is_owner: impl Fn(&str) -> bool,
    caller: Option<&Caller>,
    request: Request<Incoming>,
) -> Response<Body> {
    let Some(caller) = caller else {
        return error(
            StatusCode::FORBIDDEN,
            "the approval endpoints need --tokens: a token that maps to an owner",
        );
    };
    if !is_owner(&caller.0) {
        return error(
            StatusCode::FORBIDDEN,
            format!("principal {:?} is not an owner", caller.0),
        );
    }
    let path = request.uri().path().to_string();
    let id = path
        .strip_prefix(APPROVALS_PATH)
        .unwrap_or_default()
        .trim_start_matches('/')
        .to_string();
    match (request.method(), id.is_empty()) {
        (&Method::GET, true) => match queue.pending().await {
            Ok(pending) => reply(StatusCode::OK, &json!(pending)),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        },
        (&Method::POST, false) => {
            let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => return error(StatusCode::PAYLOAD_TOO_LARGE, "the body is too large"),
            };
            let decision = serde_json::from_slice::<Value>(&body).ok().and_then(|v| {
                v.get("decision")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            });
            let outcome = match decision.as_deref() {
                Some("allow") => ApprovalOutcome::AllowedOnce,
                Some("reject") => ApprovalOutcome::Rejected,
                Some("cancel") => ApprovalOutcome::Cancelled,
                _ => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "expected {\"decision\": \"allow\" | \"reject\" | \"cancel\"}",
                    );
                }
            };
            // A principal never decides its own call: the agent that made it
            // may hold the same token. Only a request the pending list
            // shows, with its principal, can be decided here: one not
            // listed yet (its call is still registering it) could not be
            // checked. Fail closed: a request that cannot be checked is not
            // decided.
            let pending = match queue.pending().await {
                Ok(pending) => pending,
                Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
            };
            let Some(request) = pending
                .iter()
                .find(|r| r.approval_id.eq_ignore_ascii_case(&id))
            else {
                return match queue.decision(&id).await {
                    Ok(Some(decision)) => reply(
                        StatusCode::CONFLICT,
                        &json!({ "error": "already decided", "decision": decision }),
                    ),
                    Ok(None) => error(
                        StatusCode::NOT_FOUND,
                        format!("no approval request {id:?} is pending"),
                    ),
                    Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
                };
            };
            if request.principal.as_deref() == Some(&caller.0) {
                return error(
                    StatusCode::FORBIDDEN,
                    format!(
                        "principal {:?} made this call and cannot decide it: give the agent and the operator different tokens, or decide with `toolhost approvals` on the host",
                        caller.0
                    ),
                );
            }
            let id = request.approval_id.clone();
            match queue.decide(&id, outcome, &caller.0).await {
                Ok(()) => reply(
                    StatusCode::OK,
                    &json!({ "id": id, "outcome": outcome, "by": caller.0 }),
                ),
                Err(DecideError::AlreadyDecided { decision, .. }) => reply(
                    StatusCode::CONFLICT,
                    &json!({ "error": "already decided", "decision": decision }),
                ),
                Err(e @ DecideError::Unknown(_)) => error(StatusCode::NOT_FOUND, e),
                Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
            }
        }
        _ => error(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET /approvals, or POST /approvals/ID",
        ),
    }
}
