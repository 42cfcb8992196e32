//! Approvals through the client: [`McpApprover`] turns an `ask` into an
//! `elicitation/create` form when the client declared the elicitation
//! capability, and maps the answer fail-closed. It owns no queue: each ask
//! is one request to the client, awaited with a timeout.

use super::peer::PeerSlot;
use crate::approval::{ApprovalOutcome, ApprovalRequest, Approver, BoxFuture};
use crate::sandbox::state::cut;
use rmcp::Peer;
use rmcp::model::{
    CancelledNotificationParam, ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ServerRequest,
};
use rmcp::service::PeerRequestOptions;
use rmcp::service::RoleServer;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

fn client_elicits(peer: &Peer<RoleServer>) -> bool {
    peer.peer_info()
        .is_some_and(|info| info.capabilities.elicitation.is_some())
}

/// Asks the MCP client through `elicitation/create` when the client declared
/// the elicitation capability; otherwise asks the fallback (the configured
/// `--approver`). The client's answer maps as: accept with `approve: true`
/// → allowed-once; accept with `approve: false` → rejected; decline →
/// rejected; cancel (dismissed) → cancelled; an accept without a boolean
/// `approve`, an error or the timeout → unavailable (fail closed).
pub struct McpApprover {
    peer: PeerSlot,
    fallback: Arc<dyn Approver>,
    timeout: Duration,
}

impl std::fmt::Debug for McpApprover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpApprover")
            .field("fallback", &self.fallback.name())
            .finish_non_exhaustive()
    }
}

impl McpApprover {
    /// An approver that asks the client of `peer` (once it has initialized
    /// and if it elicits), else `fallback`, waiting at most `timeout`.
    pub(super) fn new(peer: PeerSlot, fallback: Arc<dyn Approver>, timeout: Duration) -> Self {
        McpApprover {
            peer,
            fallback,
            timeout,
        }
    }

    /// An approver that asks the client of `peer` (if it elicits), else
    /// `fallback`: the approver of one call, made by that peer.
    pub(super) fn for_peer(
        peer: Peer<RoleServer>,
        fallback: Arc<dyn Approver>,
        timeout: Duration,
    ) -> Self {
        let slot = std::sync::OnceLock::new();
        let _ = slot.set(peer);
        McpApprover::new(Arc::new(slot), fallback, timeout)
    }

    fn client(&self) -> Option<&Peer<RoleServer>> {
        self.peer.get().filter(|p| client_elicits(p))
    }

    /// The longest an elicitation takes, its cancellation included.
    fn limit(&self) -> Duration {
        self.timeout.saturating_add(ELICITATION_GRACE)
    }
}

impl Approver for McpApprover {
    fn name(&self) -> String {
        match self.client() {
            Some(_) => "mcp-elicitation".into(),
            None => self.fallback.name(),
        }
    }

    fn durable_request(&self) -> bool {
        self.client().is_none() && self.fallback.durable_request()
    }

    fn single_use(&self) -> Option<serde_json::Value> {
        self.client()
            .is_none()
            .then(|| self.fallback.single_use())?
    }

    fn wait(&self) -> Option<Duration> {
        match self.client() {
            Some(_) => Some(self.limit()),
            None => self.fallback.wait(),
        }
    }

    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        let Some(peer) = self.client().cloned() else {
            return self.fallback.decide(request);
        };
        Box::pin(async move {
            let params = match elicitation_params(request) {
                Ok(p) => p,
                Err(e) => {
                    return (
                        ApprovalOutcome::Unavailable,
                        Some(format!("cannot build the elicitation: {e}")),
                    );
                }
            };
            // rmcp's own timeout ends the wait for the answer, and then
            // sends the client a cancellation, which waits for the session
            // without a bound: a client that stopped reading its stream
            // would hold the call for good. So the whole exchange is bounded.
            let asking = elicit(&peer, params, self.timeout);
            let limit = self.limit();
            match tokio::time::timeout(limit, asking).await {
                Ok(Ok(answer)) => map_elicitation(&answer),
                Ok(Err(e)) => (
                    ApprovalOutcome::Unavailable,
                    Some(format!("the client gave no answer: {e}")),
                ),
                Err(_) => (
                    ApprovalOutcome::Unavailable,
                    Some(format!(
                        "the client's session did not take the question or its cancellation within {limit:?}"
                    )),
                ),
            }
        })
    }
}

/// Asks the client `params`, waiting at most `timeout` for its answer. When
/// the wait is dropped first (the call was cancelled, or its time is up),
/// the client is told the question is withdrawn (`notifications/cancelled`
/// for it), which also lets rmcp forget the request: otherwise its answer
/// slot stayed in the session for as long as the session lasted.
async fn elicit(
    peer: &Peer<RoleServer>,
    params: ElicitRequestParams,
    timeout: Duration,
) -> Result<ElicitResult, rmcp::ServiceError> {
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    let handle = peer
        .send_cancellable_request(request, PeerRequestOptions::with_timeout(timeout))
        .await?;
    let mut withdraw = Withdraw(Some((peer.clone(), handle.id.clone())));
    let answer = handle.await_response().await;
    withdraw.0 = None;
    match answer? {
        ClientResult::ElicitResult(r) => Ok(r),
        _ => Err(rmcp::ServiceError::UnexpectedResponse),
    }
}

/// Withdraws an elicitation whose wait is dropped (see [`elicit`]).
struct Withdraw(Option<(Peer<RoleServer>, rmcp::model::RequestId)>);

impl Drop for Withdraw {
    fn drop(&mut self) {
        let Some((peer, id)) = self.0.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let cancelled = CancelledNotificationParam::new(
                Some(id),
                Some("the call no longer waits for this answer".into()),
            );
            let _ = tokio::time::timeout(ELICITATION_GRACE, peer.notify_cancelled(cancelled)).await;
        });
    }
}

/// How long past the approval timeout an elicitation may take to end: the
/// time rmcp has to send the client the cancellation of an unanswered one.
const ELICITATION_GRACE: std::time::Duration = super::logging::LOG_FORWARD_LIMIT;

/// The most bytes of a call's arguments a question shows.
const MAX_ARGS_SHOWN: usize = 4000;

/// The most characters of one string value a question shows.
const MAX_VALUE_SHOWN: usize = 200;

/// The most items of one array a question shows.
const MAX_ITEMS_SHOWN: usize = 16;

/// `args` as a human can take them in at a glance: every key is kept (a
/// long `content` must not push `path` out of sight), each long string is
/// cut to its start with how much was left out, long arrays to their first
/// items, and nesting below a few levels to a marker. The digest the
/// approval is bound to covers the whole arguments; this is only what is
/// shown.
fn shortened(args: &Value, depth: usize) -> Value {
    match args {
        Value::String(s) if s.chars().count() > MAX_VALUE_SHOWN => {
            let head: String = s.chars().take(MAX_VALUE_SHOWN).collect();
            let rest = s.chars().count() - MAX_VALUE_SHOWN;
            Value::String(format!("{head}… [{rest} more characters]"))
        }
        Value::Array(items) if depth < 4 => {
            let mut shown: Vec<Value> = items
                .iter()
                .take(MAX_ITEMS_SHOWN)
                .map(|v| shortened(v, depth + 1))
                .collect();
            if items.len() > MAX_ITEMS_SHOWN {
                shown.push(Value::String(format!(
                    "… [{} more items]",
                    items.len() - MAX_ITEMS_SHOWN
                )));
            }
            Value::Array(shown)
        }
        Value::Object(map) if depth < 4 => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), shortened(v, depth + 1)))
                .collect(),
        ),
        Value::Array(_) | Value::Object(_) => Value::String("[nested deeper]".into()),
        other => other.clone(),
    }
}

/// The most top-level arguments a question lists one by one.
const MAX_KEYS_SHOWN: usize = 32;

/// The arguments as a question shows them: one line per top-level
/// argument (plain values first, then nested ones), each [`shortened`] and
/// cut to its share of [`MAX_ARGS_SHOWN`], so that no argument, however
/// long or deeply nested, pushes another out of sight.
fn args_text(args: &Value) -> String {
    let Value::Object(map) = args else {
        let text = serde_json::to_string(&shortened(args, 0)).unwrap_or_default();
        return format!("  {}", cut(&text, MAX_ARGS_SHOWN));
    };
    let share = (MAX_ARGS_SHOWN / map.len().clamp(1, MAX_KEYS_SHOWN)).max(80);
    let nested = |v: &Value| matches!(v, Value::Array(_) | Value::Object(_));
    let ordered = map
        .iter()
        .filter(|(_, v)| !nested(v))
        .chain(map.iter().filter(|(_, v)| nested(v)));
    let mut lines: Vec<String> = ordered
        .take(MAX_KEYS_SHOWN)
        .map(|(k, v)| {
            let text = serde_json::to_string(&shortened(v, 1)).unwrap_or_default();
            // The name is the client's too: JSON-quoted, so that it cannot
            // break the line and write a `path:` or `mode:` of its own.
            let name = serde_json::to_string(&cut(k, 80)).unwrap_or_default();
            format!("  {name}: {}", cut(&text, share))
        })
        .collect();
    if map.len() > MAX_KEYS_SHOWN {
        lines.push(format!(
            "  … [{} more arguments]",
            map.len() - MAX_KEYS_SHOWN
        ));
    }
    lines.join("\n")
}

pub(super) fn elicitation_params(
    request: &ApprovalRequest,
) -> Result<ElicitRequestParams, serde_json::Error> {
    let mut message = format!(
        "toolhost asks for approval.\ntool: {}\nargs:\n{}\nreason: {}\nmode: {}",
        request.tool,
        args_text(&request.args),
        request.reason,
        request.mode
    );
    if let Some(j) = &request.justification {
        message.push_str(&format!("\njustification: {j}"));
    }
    message.push_str("\nAllow this call once?");
    serde_json::from_value(json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                "approve": {
                    "type": "boolean",
                    "title": "Approve",
                    "description": format!("Allow this one call of {}", request.tool),
                }
            },
            "required": ["approve"],
        },
    }))
}

pub(super) fn map_elicitation(answer: &ElicitResult) -> (ApprovalOutcome, Option<String>) {
    match answer.action {
        ElicitationAction::Accept => match answer
            .content
            .as_ref()
            .and_then(|c| c.get("approve"))
            .and_then(Value::as_bool)
        {
            Some(true) => (ApprovalOutcome::AllowedOnce, None),
            Some(false) => (
                ApprovalOutcome::Rejected,
                Some("the user answered approve = false".into()),
            ),
            None => (
                ApprovalOutcome::Unavailable,
                Some("the client accepted without a boolean \"approve\" field".into()),
            ),
        },
        ElicitationAction::Decline => (ApprovalOutcome::Rejected, Some("the user declined".into())),
        ElicitationAction::Cancel => (
            ApprovalOutcome::Cancelled,
            Some("the user dismissed the question".into()),
        ),
        _ => (
            ApprovalOutcome::Unavailable,
            Some("the client answered with an unknown action".into()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolhost_core::SandboxMode;

    /// A `write_file` approval request with `args`.
    fn asking(args: Value) -> ApprovalRequest {
        ApprovalRequest {
            approval_id: "a".into(),
            call_id: "c".into(),
            tool: "write_file".into(),
            args,
            reason: "writes need a human".into(),
            mode: SandboxMode::WorkspaceWrite,
            justification: None,
            network: Vec::new(),
            principal: None,
            code: None,
        }
    }

    #[test]
    fn elicitation_answers_map_fail_closed() {
        let accept = |v: Value| ElicitResult::new(ElicitationAction::Accept).with_content(v);
        assert_eq!(
            map_elicitation(&accept(json!({"approve": true}))).0,
            ApprovalOutcome::AllowedOnce
        );
        assert_eq!(
            map_elicitation(&accept(json!({"approve": false}))).0,
            ApprovalOutcome::Rejected
        );
        assert_eq!(
            map_elicitation(&accept(json!({"approve": "yes"}))).0,
            ApprovalOutcome::Unavailable
        );
        assert_eq!(
            map_elicitation(&ElicitResult::new(ElicitationAction::Accept)).0,
            ApprovalOutcome::Unavailable
        );
        assert_eq!(
            map_elicitation(&ElicitResult::new(ElicitationAction::Decline)).0,
            ApprovalOutcome::Rejected
        );
        assert_eq!(
            map_elicitation(&ElicitResult::new(ElicitationAction::Cancel)).0,
            ApprovalOutcome::Cancelled
        );
    }

    /// A long value does not push another argument out of the question: a
    /// 3000-character `content` sorts before `path`, and the path the call
    /// would write is still shown.
    #[test]
    fn elicitation_shows_every_argument_however_long_one_is() {
        let r = asking(
            json!({"content": "x".repeat(3000), "path": ".git/hooks/pre-commit",
                         "list": (0..100).collect::<Vec<u32>>(),
                         "edits": (0..16).map(|_| json!({"old": "o".repeat(200), "new": "n".repeat(200)}))
                             .collect::<Vec<_>>()}),
        );
        let v = elicitation_params(&r)
            .ok()
            .and_then(|p| serde_json::to_value(p).ok())
            .unwrap_or_default();
        let msg = v["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains(r#"  "path": ".git/hooks/pre-commit""#),
            "{msg}"
        );
        assert!(msg.contains("[2800 more characters]"), "{msg}");
        assert!(msg.contains("[84 more items]"), "{msg}");
        assert!(msg.contains(r#"  "edits": [{"#), "{msg}");
        assert!(msg.len() < MAX_ARGS_SHOWN + 500, "{}", msg.len());
    }

    /// An argument's name cannot write lines of its own into the question.
    #[test]
    fn elicitation_argument_names_cannot_fake_lines() {
        let r = asking(json!({"x\n  path: \"README.md\"\nmode: none": 1, "path": ".git/config"}));
        let v = elicitation_params(&r)
            .ok()
            .and_then(|p| serde_json::to_value(p).ok())
            .unwrap_or_default();
        let msg = v["message"].as_str().unwrap_or_default();
        assert!(!msg.contains("\n  path: \"README.md\""), "{msg}");
        assert!(!msg.lines().any(|l| l == "mode: none"), "{msg}");
        assert!(msg.contains(r#"  "path": ".git/config""#), "{msg}");
    }

    #[test]
    fn elicitation_names_tool_args_reason_mode() {
        let r = asking(json!({"path": "x.txt"}));
        let p = elicitation_params(&r);
        let v = p
            .ok()
            .and_then(|p| serde_json::to_value(p).ok())
            .unwrap_or_default();
        let msg = v
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        for needle in [
            "write_file",
            "x.txt",
            "writes need a human",
            "workspace-write",
        ] {
            assert!(msg.contains(needle), "{needle} missing from {msg}");
        }
        assert_eq!(
            v.pointer("/requestedSchema/properties/approve/type"),
            Some(&json!("boolean"))
        );
    }

    /// A server with nothing of its own to offer: the session the
    /// elicitation goes through.
    struct Quiet;
    impl rmcp::ServerHandler for Quiet {}

    /// A client that declared elicitation and then stopped reading its
    /// stream: the question never leaves the session, nor does the
    /// cancellation rmcp sends after its own timeout. The approval still
    /// ends, unavailable, at the approval timeout plus the grace.
    #[tokio::test(start_paused = true)]
    async fn an_elicitation_the_session_never_takes_ends_at_its_bound() {
        let info: rmcp::model::InitializeRequestParams = serde_json::from_value(json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "stalled", "version": "1"},
        }))
        .unwrap_or_else(|e| panic!("client info: {e}"));
        // A 16-byte pipe whose far end is kept open but never read: the
        // session's first write of the question blocks for good.
        let (ours, theirs) = tokio::io::duplex(16);
        let running = rmcp::service::serve_directly(Quiet, ours, Some(info));
        let timeout = Duration::from_secs(5);
        let approver = McpApprover::for_peer(
            running.peer().clone(),
            Arc::new(crate::approval::FixedApprover(ApprovalOutcome::AllowedOnce)),
            timeout,
        );
        assert_eq!(approver.name(), "mcp-elicitation");
        let started = tokio::time::Instant::now();
        let request = asking(json!({"path": "x.txt"}));
        let asked = approver.decide(&request);
        let (outcome, reason) = tokio::time::timeout(timeout * 10, asked)
            .await
            .unwrap_or_else(|_| panic!("the approval still waits for the session"));
        assert_eq!(outcome, ApprovalOutcome::Unavailable, "{reason:?}");
        assert_eq!(started.elapsed(), timeout + ELICITATION_GRACE);
        // What the approval recorded it may wait is what it waited.
        assert_eq!(approver.wait(), Some(started.elapsed()));
        assert!(
            reason
                .as_deref()
                .is_some_and(|r| r.contains("did not take")),
            "{reason:?}"
        );
        drop(theirs);
    }
}
