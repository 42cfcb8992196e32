//! Approvals of the 2026-07-28 revision, as multi-round-trip requests
//! (MRTR): a `tools/call` that needs an approval ends with an
//! `InputRequiredResult` holding an `elicitation/create` question and a
//! sealed `requestState`; the client retries the call with the answer and
//! the state, and only a state that verifies decides the retry.
//!
//! This module owns the state's format and its checks, and nothing of the
//! pipeline: the approval itself is still asked and decided by
//! [`Host::call`](crate::Host::call), through the two approvers here.
//!
//! - The state is sealed with rmcp's [`RequestStateCodec`] (HMAC-SHA256,
//!   expiry stamped in the token) over {asking call id, tool, argument
//!   digest, mode, nonce}, with the caller's principal as associated data.
//!   Its key comes from an [`ApprovalKeyStore`]: [`KeyFile`], by default
//!   [`APPROVAL_KEY_FILE`] in the state directory (mode 0600), created once.
//! - **Single use, durably.** The retry of a call `C` runs as call `C-mrtr`
//!   ([`CallRequest::call_id`](crate::CallRequest::call_id)); its approver
//!   reports the state as a single-use grant, so `approval/decided` (with
//!   the grant) is durable before the call goes on, whatever the answer. A
//!   state whose `C-mrtr` has any event in the session log was used, also
//!   across a restart; within a process, a claim set refuses a second use
//!   that races the first.
//! - A state that does not verify is refused before the pipeline with a
//!   stable code (`APPROVAL_STATE_INVALID`, `_EXPIRED`, `_REPLAYED`,
//!   `_MISMATCH`); the refusal is logged like any.
//!
//! - Replicas on one PostgreSQL log share the key (`--approval-key`) and a
//!   [`SharedClaims`]: a state's use is also claimed there, in one
//!   statement that only one replica can win, so two replicas that receive
//!   the same state at the same instant cannot both run it.

use super::approval::{elicitation_params, map_elicitation};
use crate::approval::{ApprovalOutcome, ApprovalRequest, Approver, BoxFuture};
use rmcp::model::{
    ElicitResult, InputRequest, InputRequests, InputRequiredResult, InputResponses,
    RequestStateCodec, RequestStateError, SealOptions,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolhost_core::{ErrorCode, SandboxMode};
use toolhost_log::SessionLog;

/// How long an approval state is good for by default.
pub const DEFAULT_APPROVAL_STATE_TTL: Duration = Duration::from_secs(600);

/// The key file's name in a state directory.
pub const APPROVAL_KEY_FILE: &str = "mcp-approval.key";

/// The key of the approval question in `inputRequests` / `inputResponses`.
pub const APPROVAL_INPUT: &str = "approval";

/// The suffix of a retry's call id, after the id of the call that asked.
const RETRY_SUFFIX: &str = "-mrtr";

const KEY_BYTES: usize = 32;

/// Where the key that seals approval states is kept. Every server that
/// must accept another's states (replicas on one PostgreSQL log) reads the
/// same key.
pub trait ApprovalKeyStore: Send + Sync {
    /// The key, created (at random) on first use.
    ///
    /// # Errors
    ///
    /// A message when the key can neither be read nor created.
    fn load_or_create(&self) -> Result<Vec<u8>, String>;
}

/// A key in a file: 32 random bytes, mode 0600, created once (atomically:
/// two servers starting together end up with the same key).
#[derive(Debug, Clone)]
pub struct KeyFile(pub PathBuf);

impl KeyFile {
    /// The key file of a state directory ([`APPROVAL_KEY_FILE`]).
    pub fn in_state_dir(dir: &Path) -> KeyFile {
        KeyFile(dir.join(APPROVAL_KEY_FILE))
    }
}

impl ApprovalKeyStore for KeyFile {
    /// # Ambient Authority
    ///
    /// Reads (or creates) the file in the process's file system namespace.
    fn load_or_create(&self) -> Result<Vec<u8>, String> {
        let path = &self.0;
        if !path.exists() {
            let dir = path.parent().unwrap_or(Path::new("."));
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let mut key = [0u8; KEY_BYTES];
            getrandom::fill(&mut key).map_err(|e| format!("no randomness for the key: {e}"))?;
            // A temporary file is created 0600; it becomes the key only if
            // no other process made one first.
            let mut tmp = tempfile::NamedTempFile::new_in(dir)
                .map_err(|e| format!("cannot write a key in {}: {e}", dir.display()))?;
            std::io::Write::write_all(&mut tmp, &key)
                .and_then(|()| tmp.as_file().sync_all())
                .map_err(|e| format!("cannot write a key in {}: {e}", dir.display()))?;
            match tmp.persist_noclobber(path) {
                Ok(_) => {}
                Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(format!("cannot create {}: {}", path.display(), e.error)),
            }
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            if meta.permissions().mode() & 0o077 != 0 {
                return Err(format!(
                    "{} is readable by others; make it mode 0600",
                    path.display()
                ));
            }
        }
        let key =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if key.len() < KEY_BYTES {
            return Err(format!(
                "{} holds {} bytes; a key has at least {KEY_BYTES}",
                path.display(),
                key.len()
            ));
        }
        Ok(key)
    }
}

/// What a sealed state binds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Bound {
    /// The call that asked.
    call: String,
    tool: String,
    /// SHA-256 of the call's arguments as the client sent them.
    args: String,
    /// SHA-256 of what the human was asked about: the tool, the arguments
    /// after the policy's patches, the mode and the network grants asked
    /// for. A retry is approved only for exactly that.
    asked: String,
    mode: SandboxMode,
    nonce: String,
    /// When the state expires (also stamped, and checked, by the codec).
    expires_ms: u64,
}

/// Where a state's single use is claimed beyond this process: once for all
/// the servers that accept the same states (replicas of one log).
pub trait SharedClaims: Send + Sync {
    /// Claims `key` for at least as long as the state it spends is valid
    /// (`until`, its expiry): `Ok(true)` for the first claim anywhere,
    /// `Ok(false)` for any later one.
    ///
    /// # Errors
    ///
    /// A message when the claim cannot be made (the store is unreachable):
    /// the state is then refused, never run unclaimed.
    fn claim<'a>(
        &'a self,
        key: &'a str,
        until: std::time::SystemTime,
    ) -> BoxFuture<'a, Result<bool, String>>;
}

#[cfg(feature = "postgres")]
impl SharedClaims for toolhost_log::PgApprovals {
    fn claim<'a>(
        &'a self,
        key: &'a str,
        until: std::time::SystemTime,
    ) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            self.claim_once_until(&format!("{key}-state"), "{\"mrtr\":\"used\"}", until)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// Issues and redeems approval states. One per server, shared by its
/// sessions.
pub struct ApprovalStates {
    codec: RequestStateCodec,
    ttl: Duration,
    /// Retry call ids claimed in this process, with their expiry (ms).
    claimed: Mutex<HashMap<String, u64>>,
    /// Claims shared with the other servers of the log, if any.
    shared: Option<std::sync::Arc<dyn SharedClaims>>,
}

impl std::fmt::Debug for ApprovalStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalStates")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl ApprovalStates {
    /// States sealed with the key of `store`, good for `ttl`.
    ///
    /// # Errors
    ///
    /// A message when the key cannot be had.
    pub fn new(store: &dyn ApprovalKeyStore, ttl: Duration) -> Result<ApprovalStates, String> {
        let key = store.load_or_create()?;
        let codec = RequestStateCodec::try_new(key).map_err(|e| e.to_string())?;
        Ok(ApprovalStates {
            codec,
            ttl,
            claimed: Mutex::default(),
            shared: None,
        })
    }

    /// Also claims each state's use in `shared`, which every server that
    /// accepts these states (the same key) must share.
    #[must_use]
    pub fn with_shared_claims(mut self, shared: std::sync::Arc<dyn SharedClaims>) -> Self {
        self.shared = Some(shared);
        self
    }

    /// The result that asks the client about `asked` (the request the
    /// pipeline put to [`AskThroughResult`]), with its sealed state.
    pub(super) fn input_required(
        &self,
        asked: &ApprovalRequest,
        args: &str,
        principal: &str,
    ) -> Result<InputRequiredResult, String> {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).map_err(|e| format!("no randomness for a nonce: {e}"))?;
        let bound = Bound {
            call: asked.call_id.clone(),
            tool: asked.tool.clone(),
            args: args_digest(args),
            asked: asked_digest(asked),
            mode: asked.mode,
            nonce: hex::encode(nonce),
            expires_ms: now_ms().saturating_add(self.ttl.as_millis() as u64),
        };
        let state = self
            .codec
            .seal_json_with(
                &bound,
                &SealOptions::new()
                    .associated_data(principal.as_bytes())
                    .ttl(self.ttl),
            )
            .map_err(|e| e.to_string())?;
        let params = elicitation_params(asked).map_err(|e| e.to_string())?;
        let question: InputRequest = serde_json::from_value(json!({
            "method": "elicitation/create",
            "params": params,
        }))
        .map_err(|e| e.to_string())?;
        let mut requests = InputRequests::new();
        requests.insert(APPROVAL_INPUT.to_string(), question);
        Ok(InputRequiredResult::new(Some(requests), Some(state)))
    }

    /// Checks a retry's state against the call that carries it (`tool`,
    /// the client's `args`, the caller's `principal`) and the session log,
    /// and claims it: the retry's call id and its approver, or the refusal.
    pub(super) async fn redeem(
        &self,
        sealed: &str,
        tool: &str,
        args: &str,
        principal: &str,
        responses: Option<&InputResponses>,
        log: &SessionLog,
    ) -> Result<Redeemed, (ErrorCode, String)> {
        let bound: Bound = self
            .codec
            .open_json_with(sealed, principal.as_bytes())
            .map_err(|e| match e {
                RequestStateError::Expired => (
                    ErrorCode::ApprovalStateExpired,
                    "the approval state has expired; call again to be asked anew".to_string(),
                ),
                other => (
                    ErrorCode::ApprovalStateInvalid,
                    format!(
                        "the approval state was not issued by this server to this caller ({other})"
                    ),
                ),
            })?;
        if bound.tool != tool || bound.args != args_digest(args) {
            return Err((
                ErrorCode::ApprovalStateMismatch,
                format!(
                    "the approval state was issued for another call (of {:?} with other arguments, asked as {})",
                    bound.tool, bound.call
                ),
            ));
        }
        let call_id = format!("{}{RETRY_SUFFIX}", bound.call);
        self.claim(&call_id, bound.expires_ms)?;
        match log.events_for_call(&call_id) {
            Ok(events) if events.is_empty() => {}
            Ok(_) => {
                return Err((
                    ErrorCode::ApprovalStateReplayed,
                    format!("the approval state was already used (call {call_id})"),
                ));
            }
            Err(e) => {
                // The detail stays in the server's log, not in the answer.
                tracing::warn!("approval state {call_id}: cannot read the session log: {e}");
                return Err((
                    ErrorCode::ApprovalStateInvalid,
                    "the session log could not tell whether the state was used".to_string(),
                ));
            }
        }
        if let Some(shared) = &self.shared {
            let until = std::time::UNIX_EPOCH + Duration::from_millis(bound.expires_ms);
            match shared.claim(&call_id, until).await {
                Ok(true) => {}
                Ok(false) => {
                    return Err((
                        ErrorCode::ApprovalStateReplayed,
                        format!(
                            "the approval state was already used (call {call_id}, on another server)"
                        ),
                    ));
                }
                Err(e) => {
                    tracing::warn!("approval state {call_id}: cannot claim its use: {e}");
                    return Err((
                        ErrorCode::ApprovalStateInvalid,
                        "the state's use could not be claimed".to_string(),
                    ));
                }
            }
        }
        let (outcome, detail) = answer(responses);
        Ok(Redeemed {
            call_id,
            approver: AnswerApprover {
                bound,
                outcome,
                detail,
            },
        })
    }

    /// Marks `call_id` as used in this process; refuses one already used.
    fn claim(&self, call_id: &str, expires_ms: u64) -> Result<(), (ErrorCode, String)> {
        let mut claimed = match self.claimed.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        // Expired states are refused by the codec: their claims can go.
        let now = now_ms();
        claimed.retain(|_, expires| *expires >= now);
        if claimed.insert(call_id.to_string(), expires_ms).is_some() {
            return Err((
                ErrorCode::ApprovalStateReplayed,
                format!("the approval state was already used (call {call_id})"),
            ));
        }
        Ok(())
    }
}

/// A state that verified: the retry's call id and who decides it.
#[derive(Debug)]
pub(super) struct Redeemed {
    pub(super) call_id: String,
    pub(super) approver: AnswerApprover,
}

/// The client's answer in `inputResponses`, mapped fail-closed as an
/// elicitation's answer; no answer, or garbage, is `unavailable`.
fn answer(responses: Option<&InputResponses>) -> (ApprovalOutcome, Option<String>) {
    match responses.and_then(|r| r.get(APPROVAL_INPUT)) {
        None => (
            ApprovalOutcome::Unavailable,
            Some(format!("the retry carries no answer to {APPROVAL_INPUT:?}")),
        ),
        Some(v) => match serde_json::from_value::<ElicitResult>(v.clone()) {
            Ok(r) => map_elicitation(&r),
            Err(e) => (
                ApprovalOutcome::Unavailable,
                Some(format!("the answer is not an elicitation result: {e}")),
            ),
        },
    }
}

/// SHA-256 (hex) of a call's arguments as JSON text.
fn args_digest(args: &str) -> String {
    hex::encode(Sha256::digest(args.as_bytes()))
}

/// SHA-256 (hex) of what an approval request asks about (not its ids or
/// its reason's wording).
fn asked_digest(r: &ApprovalRequest) -> String {
    let asked = json!({
        "tool": r.tool,
        "args": r.args,
        "mode": r.mode,
        "network": r.network,
        "code": r.code,
    });
    hex::encode(Sha256::digest(asked.to_string().as_bytes()))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The approver of a first round: it records the question for the server
/// to send as an `InputRequiredResult` and ends the call unapproved (the
/// answer comes with the retry, a call of its own).
#[derive(Default)]
pub(super) struct AskThroughResult {
    asked: Mutex<Option<ApprovalRequest>>,
}

impl AskThroughResult {
    /// The question, if the pipeline asked one.
    pub(super) fn asked(&self) -> Option<ApprovalRequest> {
        match self.asked.lock() {
            Ok(mut a) => a.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        }
    }
}

impl Approver for AskThroughResult {
    fn name(&self) -> String {
        "mcp-mrtr".into()
    }

    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        match self.asked.lock() {
            Ok(mut a) => *a = Some(request.clone()),
            Err(poisoned) => *poisoned.into_inner() = Some(request.clone()),
        }
        let detail = format!(
            "asked the client with an input-required result (MRTR); its answer decides the retry, call {}{RETRY_SUFFIX}",
            request.call_id
        );
        Box::pin(async move { (ApprovalOutcome::Unavailable, Some(detail)) })
    }
}

/// The approver of a retry whose state verified: the client's answer, for
/// the call the state was issued for, consumed once.
#[derive(Debug)]
pub(super) struct AnswerApprover {
    bound: Bound,
    outcome: ApprovalOutcome,
    detail: Option<String>,
}

impl Approver for AnswerApprover {
    fn name(&self) -> String {
        "mcp-mrtr".into()
    }

    fn single_use(&self) -> Option<Value> {
        Some(json!({
            "kind": "mcp-request-state",
            "asked_by": self.bound.call,
            "nonce": self.bound.nonce,
            "expires_ms": self.bound.expires_ms,
        }))
    }

    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        // The pipeline may ask about something else than was answered (the
        // policy or the tools were reloaded in between: another mode, other
        // patched arguments, other network grants): that is no approval.
        let decision = if request.tool != self.bound.tool || request.mode != self.bound.mode {
            (
                ApprovalOutcome::Unavailable,
                Some(format!(
                    "the answer was given for {} in mode {}, not {} in mode {}",
                    self.bound.tool, self.bound.mode, request.tool, request.mode
                )),
            )
        } else if asked_digest(request) != self.bound.asked {
            (
                ApprovalOutcome::Unavailable,
                Some(
                    "the call is no longer what the answer was given for (its arguments after \
                     the policy's patches, the network grants it asks for, or the tool's code or \
                     declared side effect changed); call again to be asked anew"
                        .to_string(),
                ),
            )
        } else {
            (self.outcome, self.detail.clone())
        };
        Box::pin(async move { decision })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Vec<u8>);
    impl ApprovalKeyStore for Fixed {
        fn load_or_create(&self) -> Result<Vec<u8>, String> {
            Ok(self.0.clone())
        }
    }

    fn states(ttl: Duration) -> ApprovalStates {
        match ApprovalStates::new(&Fixed(vec![7; 32]), ttl) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    fn asked() -> ApprovalRequest {
        ApprovalRequest {
            approval_id: "call-s-1-approval".into(),
            call_id: "call-s-1".into(),
            tool: "write_file".into(),
            args: json!({"path": "a"}),
            reason: "writes need a human".into(),
            mode: SandboxMode::WorkspaceWrite,
            justification: None,
            network: Vec::new(),
            principal: None,
            code: Some(crate::approval::ApprovedCode {
                sha256: "ab".repeat(32),
                side_effect: toolhost_core::SideEffect::Write,
            }),
        }
    }

    fn accept() -> InputResponses {
        let mut r = InputResponses::new();
        r.insert(
            APPROVAL_INPUT.into(),
            json!({"action": "accept", "content": {"approve": true}}),
        );
        r
    }

    fn issue(s: &ApprovalStates, args: &str) -> String {
        match s.input_required(&asked(), args, "anonymous") {
            Ok(r) => r.request_state.unwrap_or_default(),
            Err(e) => panic!("{e}"),
        }
    }

    /// `s.redeem` of a `write_file` call by `anonymous`, run to its end.
    fn redeem_write(
        s: &ApprovalStates,
        state: &str,
        args: &str,
        answers: Option<&InputResponses>,
        log: &SessionLog,
    ) -> Result<Redeemed, (ErrorCode, String)> {
        futures::executor::block_on(s.redeem(state, "write_file", args, "anonymous", answers, log))
    }

    fn code(r: Result<Redeemed, (ErrorCode, String)>) -> Option<ErrorCode> {
        r.err().map(|(c, _)| c)
    }

    #[test]
    fn a_state_redeems_once_for_its_own_call() {
        let s = states(DEFAULT_APPROVAL_STATE_TTL);
        let log = SessionLog::in_memory().unwrap_or_else(|e| panic!("{e}"));
        let args = r#"{"path":"a"}"#;
        let state = issue(&s, args);
        let ok = redeem_write(&s, &state, args, Some(&accept()), &log);
        let ok = ok.unwrap_or_else(|(c, m)| panic!("{c}: {m}"));
        assert_eq!(ok.call_id, "call-s-1-mrtr");
        assert_eq!(ok.approver.outcome, ApprovalOutcome::AllowedOnce);
        assert!(ok.approver.single_use().is_some());
        assert_eq!(
            code(redeem_write(&s, &state, args, Some(&accept()), &log)),
            Some(ErrorCode::ApprovalStateReplayed)
        );
    }

    /// The answer approves only what the human was asked about: the same
    /// call whose patched arguments or network grants changed since (a
    /// reloaded policy) is not approved by it.
    #[test]
    fn an_answer_does_not_approve_a_call_that_changed_since() {
        let s = states(DEFAULT_APPROVAL_STATE_TTL);
        let log = SessionLog::in_memory().unwrap_or_else(|e| panic!("{e}"));
        let args = r#"{"path":"a"}"#;
        let redeemed = |_: ()| {
            let state = issue(&s, args);
            redeem_write(&s, &state, args, Some(&accept()), &log)
                .unwrap_or_else(|(c, m)| panic!("{c}: {m}"))
                .approver
        };
        let outcome = |approver: &AnswerApprover, r: &ApprovalRequest| {
            futures::executor::block_on(approver.decide(r)).0
        };
        let approver = redeemed(());
        assert_eq!(outcome(&approver, &asked()), ApprovalOutcome::AllowedOnce);
        let mut patched = asked();
        patched.args = json!({"path": "other"});
        assert_eq!(outcome(&approver, &patched), ApprovalOutcome::Unavailable);
        let mut networked = asked();
        networked.network = vec!["https://example.com".into()];
        assert_eq!(outcome(&approver, &networked), ApprovalOutcome::Unavailable);
        // Another build of the tool (a reload), or one that declares another
        // side effect (and so gets other network grants), is not approved.
        let mut rebuilt = asked();
        if let Some(c) = &mut rebuilt.code {
            c.sha256 = "cd".repeat(32);
        }
        assert_eq!(outcome(&approver, &rebuilt), ApprovalOutcome::Unavailable);
        let mut external = asked();
        if let Some(c) = &mut external.code {
            c.side_effect = toolhost_core::SideEffect::External;
        }
        assert_eq!(outcome(&approver, &external), ApprovalOutcome::Unavailable);
        // Ids and the reason's wording are not what was approved.
        let mut reworded = asked();
        reworded.reason = "another wording".into();
        reworded.approval_id = "x".into();
        assert_eq!(outcome(&approver, &reworded), ApprovalOutcome::AllowedOnce);
    }

    #[test]
    fn altered_foreign_and_mismatched_states_are_refused() {
        let s = states(DEFAULT_APPROVAL_STATE_TTL);
        let log = SessionLog::in_memory().unwrap_or_else(|e| panic!("{e}"));
        let args = r#"{"path":"a"}"#;
        let state = issue(&s, args);
        let mut altered = state.clone().into_bytes();
        let i = altered.len() / 2;
        altered[i] = if altered[i] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(altered).unwrap_or_default();
        let redeem = |st: &str, tool: &str, a: &str, p: &str| {
            code(futures::executor::block_on(s.redeem(
                st,
                tool,
                a,
                p,
                Some(&accept()),
                &log,
            )))
        };
        assert_eq!(
            redeem(&altered, "write_file", args, "anonymous"),
            Some(ErrorCode::ApprovalStateInvalid)
        );
        assert_eq!(
            redeem("garbage", "write_file", args, "anonymous"),
            Some(ErrorCode::ApprovalStateInvalid)
        );
        assert_eq!(
            redeem(&state, "write_file", args, "mallory"),
            Some(ErrorCode::ApprovalStateInvalid)
        );
        assert_eq!(
            redeem(&state, "write_file", r#"{"path":"b"}"#, "anonymous"),
            Some(ErrorCode::ApprovalStateMismatch)
        );
        assert_eq!(
            redeem(&state, "read_file", args, "anonymous"),
            Some(ErrorCode::ApprovalStateMismatch)
        );
        // Another key's state does not verify either.
        let other = ApprovalStates::new(&Fixed(vec![9; 32]), DEFAULT_APPROVAL_STATE_TTL)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            code(redeem_write(&other, &state, args, None, &log)),
            Some(ErrorCode::ApprovalStateInvalid)
        );
    }

    /// Claims shared by two servers (one key): what one used, the other
    /// refuses, whatever its own log and claim set say.
    struct Ledger(Mutex<std::collections::HashSet<String>>, bool);

    impl SharedClaims for Ledger {
        fn claim<'a>(
            &'a self,
            key: &'a str,
            _until: std::time::SystemTime,
        ) -> BoxFuture<'a, Result<bool, String>> {
            Box::pin(async move {
                if !self.1 {
                    return Err("the database is unreachable".to_string());
                }
                let mut used = self.0.lock().unwrap_or_else(|p| p.into_inner());
                Ok(used.insert(key.to_string()))
            })
        }
    }

    #[test]
    fn a_state_used_on_one_server_is_refused_on_another_sharing_claims() {
        let ledger = std::sync::Arc::new(Ledger(Mutex::default(), true));
        let a = states(DEFAULT_APPROVAL_STATE_TTL).with_shared_claims(ledger.clone());
        let b = states(DEFAULT_APPROVAL_STATE_TTL).with_shared_claims(ledger);
        let (log_a, log_b) = (
            SessionLog::in_memory().unwrap_or_else(|e| panic!("{e}")),
            SessionLog::in_memory().unwrap_or_else(|e| panic!("{e}")),
        );
        let args = r#"{"path":"a"}"#;
        let state = issue(&a, args);
        let redeem = |s: &ApprovalStates, log| redeem_write(s, &state, args, Some(&accept()), log);
        assert!(
            redeem(&b, &log_b).is_ok(),
            "a state is good on any server with the key"
        );
        assert_eq!(
            code(redeem(&a, &log_a)),
            Some(ErrorCode::ApprovalStateReplayed)
        );
        // Without the shared store, no use is claimed, and the state is refused.
        let down = states(DEFAULT_APPROVAL_STATE_TTL)
            .with_shared_claims(std::sync::Arc::new(Ledger(Mutex::default(), false)));
        let fresh = issue(&down, args);
        assert_eq!(
            code(redeem_write(&down, &fresh, args, Some(&accept()), &log_a)),
            Some(ErrorCode::ApprovalStateInvalid)
        );
    }

    #[test]
    fn an_expired_state_is_refused() {
        let s = states(Duration::ZERO);
        let log = SessionLog::in_memory().unwrap_or_else(|e| panic!("{e}"));
        let args = "{}";
        let state = issue(&s, args);
        // A TTL of zero has passed once the clock moves on by a millisecond
        // (a bounded wait for a deadline already set).
        let issued = now_ms();
        while now_ms() <= issued {
            std::thread::yield_now();
        }
        assert_eq!(
            code(redeem_write(&s, &state, args, None, &log)),
            Some(ErrorCode::ApprovalStateExpired)
        );
    }

    #[test]
    fn answers_map_fail_closed() {
        assert_eq!(answer(None).0, ApprovalOutcome::Unavailable);
        assert_eq!(answer(Some(&accept())).0, ApprovalOutcome::AllowedOnce);
        let mut r = InputResponses::new();
        r.insert(APPROVAL_INPUT.into(), json!({"action": "decline"}));
        assert_eq!(answer(Some(&r)).0, ApprovalOutcome::Rejected);
        r.insert(APPROVAL_INPUT.into(), json!(42));
        assert_eq!(answer(Some(&r)).0, ApprovalOutcome::Unavailable);
    }

    #[test]
    fn the_key_file_is_created_once_private() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = KeyFile::in_state_dir(dir.path());
        let a = file.load_or_create().unwrap_or_else(|e| panic!("{e}"));
        let b = file.load_or_create().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a, b);
        assert_eq!(a.len(), KEY_BYTES);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(APPROVAL_KEY_FILE))
                .map(|m| m.permissions().mode() & 0o777)
                .unwrap_or_default();
            assert_eq!(mode, 0o600);
        }
    }
}
