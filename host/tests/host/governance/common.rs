//! Helpers of the governance tests: hosts over the embedded tools, counting
//! approvers, hooks and observers, audit-log assertions.

use serde_json::Value;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolhost::log::{EventKind, FaultHandle, SessionLog};
use toolhost::policy::{CallFacts, Guard, GuardVerdict, Policy};
use toolhost::{
    ApprovalOutcome, ApprovalRequest, Approver, BoxFuture, CallRequest, CallResult,
    CommandApprover, ContentItem, Descriptor, ErrorCode, Host, HostBuilder, Observer, PostAction,
    PostExecuteHook, RuntimeOptions, SandboxMode,
};

pub use crate::support::cache_dir;

/// The governance tests' pool: small, so pool limits are reached quickly.
pub fn runtime_options() -> RuntimeOptions {
    crate::support::runtime_options_with_pool(4)
}

/// A fresh temporary workspace.
pub fn workspace() -> tempfile::TempDir {
    crate::support::tempdir()
}

/// A builder with the embedded tools, the workspace and the shared cache.
pub fn builder(ws: &Path) -> HostBuilder {
    crate::support::builder_with(ws, runtime_options())
}

/// The bytes of an embedded tool.
pub fn embedded(name: &str) -> Vec<u8> {
    toolhost::EMBEDDED_TOOLS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| b.to_vec())
        .unwrap()
}

pub fn policy(src: &str) -> Policy {
    Policy::from_toml(src, "test-policy.toml").unwrap()
}

/// `write_file {path, content}` in workspace-write.
pub fn write(path: &str, content: &str) -> CallRequest {
    CallRequest::new(
        "write_file",
        serde_json::json!({"path": path, "content": content}),
    )
    .mode(SandboxMode::WorkspaceWrite)
}

/// A host whose policy asks before `write_file` (mode workspace-write).
pub async fn ask_host(outcome: ApprovalOutcome) -> (tempfile::TempDir, Host, Counting) {
    let ws = workspace();
    let approver = Counting::new(outcome);
    let mut b = builder(ws.path());
    b.policy(policy(super::ASK_WRITES))
        .approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    (ws, host, approver)
}

/// A host whose policy asks before `write_file`, with a `command:` approver.
pub async fn command_host(ws: &Path, program: &str, timeout: Duration) -> Host {
    let mut b = builder(ws);
    b.policy(policy(super::ASK_WRITES))
        .approver(Box::new(CommandApprover {
            program: program.to_string(),
            timeout,
        }));
    b.build().await.unwrap()
}

/// Writes an executable `/bin/sh` script and returns its path.
pub fn script(dir: &Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_string()
}

/// All content text of a result.
pub fn text_of(r: &CallResult) -> String {
    r.content.iter().map(ContentItem::as_text).collect()
}

/// The kinds of the call's events, in log order.
pub fn kinds(host: &Host, r: &CallResult) -> Vec<EventKind> {
    host.log()
        .events_for_call(&r.call_id)
        .unwrap()
        .iter()
        .map(|e| e.kind)
        .collect()
}

fn only_event(host: &Host, r: &CallResult, kind: EventKind) -> Value {
    let events: Vec<_> = host
        .log()
        .events_for_call(&r.call_id)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == kind)
        .collect();
    assert_eq!(
        events.len(),
        1,
        "{kind} events of {}: {events:?}",
        r.call_id
    );
    events.into_iter().next().unwrap().payload
}

/// The payload of the call's one `tool/result`.
pub fn result_event(host: &Host, r: &CallResult) -> Value {
    only_event(host, r, EventKind::ToolResult)
}

/// The payload of the call's one `tool/intent`.
pub fn intent_event(host: &Host, r: &CallResult) -> Value {
    only_event(host, r, EventKind::ToolIntent)
}

/// A refusal before dispatch: the code, no intent (so no body), the refusal
/// recorded as the call's result, and nothing of the tool's output.
pub fn assert_refused(host: &Host, r: &CallResult, code: ErrorCode) {
    assert_eq!(r.code(), Some(code), "{r:?}");
    assert!(!r.is_ok());
    assert_eq!(r.canonical, Value::Null);
    assert!(
        text_of(r).starts_with(code.as_str()),
        "the model sees the code: {}",
        text_of(r)
    );
    let k = kinds(host, r);
    assert!(
        !k.contains(&EventKind::ToolIntent),
        "a refused call has an intent: {k:?}"
    );
    assert_eq!(k.first(), Some(&EventKind::ToolCall), "{k:?}");
    assert_eq!(result_event(host, r)["error"]["code"], code.as_str());
}

/// Exactly one `approval/asked` and one `approval/decided`, paired by
/// approval id, joined to the call, in that order, with `outcome`.
/// Returns their payloads.
pub fn assert_pair(host: &Host, r: &CallResult, outcome: &str) -> (Value, Value) {
    let events = host.log().events_for_call(&r.call_id).unwrap();
    let asked: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::ApprovalAsked)
        .collect();
    let decided: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::ApprovalDecided)
        .collect();
    assert_eq!(asked.len(), 1, "approval/asked events: {events:?}");
    assert_eq!(decided.len(), 1, "approval/decided events: {events:?}");
    let (asked, decided) = (asked[0], decided[0]);
    assert!(asked.seq < decided.seq);
    let id = asked.payload["request"]["approval_id"].as_str().unwrap();
    assert!(!id.is_empty());
    assert_eq!(
        decided.payload["approval_id"], id,
        "asked and decided are paired by id"
    );
    assert_eq!(asked.payload["request"]["call_id"], r.call_id.as_str());
    assert_eq!(asked.call_id, r.call_id);
    assert_eq!(decided.call_id, r.call_id);
    assert_eq!(decided.payload["outcome"], outcome, "{:?}", decided.payload);
    (asked.payload.clone(), decided.payload.clone())
}

pub fn assert_no_approval_events(host: &Host, r: &CallResult) {
    let k = kinds(host, r);
    assert!(
        !k.contains(&EventKind::ApprovalAsked) && !k.contains(&EventKind::ApprovalDecided),
        "nobody should have been asked: {k:?}"
    );
}

/// Answers `outcome` and counts how often it was asked.
#[derive(Clone)]
pub struct Counting {
    outcome: ApprovalOutcome,
    count: Arc<AtomicUsize>,
}

impl Counting {
    pub fn new(outcome: ApprovalOutcome) -> Self {
        Counting {
            outcome,
            count: Arc::default(),
        }
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
}

impl Approver for Counting {
    fn name(&self) -> String {
        format!("counting:{}", self.outcome.as_str())
    }
    fn decide<'a>(
        &'a self,
        _: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        self.count.fetch_add(1, Ordering::SeqCst);
        let o = self.outcome;
        Box::pin(async move { (o, None) })
    }
}

pub struct PanickingApprover;

impl Approver for PanickingApprover {
    fn name(&self) -> String {
        "panics".into()
    }
    fn decide<'a>(
        &'a self,
        _: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        Box::pin(async { panic!("approver bug") })
    }
}

/// Panics in `decide` itself, before it returns a future.
pub struct EagerlyPanickingApprover;

impl Approver for EagerlyPanickingApprover {
    fn name(&self) -> String {
        "panics-eagerly".into()
    }
    fn decide<'a>(
        &'a self,
        _: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        panic!("approver bug before the future")
    }
}

/// Never answers (a human who walked away, with no timeout of its own).
pub struct NeverAnswers;

impl Approver for NeverAnswers {
    fn name(&self) -> String {
        "never-answers".into()
    }
    fn decide<'a>(
        &'a self,
        _: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        Box::pin(std::future::pending())
    }
}

/// Approves, but first breaks the session log (a failed durable commit, after
/// which the log refuses writes), so that `approval/decided` cannot be written.
pub struct ApproveThenBreakStorage {
    pub fault: FaultHandle,
    pub poison: Arc<SessionLog>,
}

impl Approver for ApproveThenBreakStorage {
    fn name(&self) -> String {
        "approve-then-break".into()
    }
    fn decide<'a>(
        &'a self,
        _: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        self.fault.fail_from_now();
        assert!(
            self.poison.flush().is_err(),
            "the durable commit should have failed"
        );
        Box::pin(async { (ApprovalOutcome::AllowedOnce, None) })
    }
}

/// Denies calls whose arguments contain a word.
pub struct DenyWord(pub &'static str);

impl Guard for DenyWord {
    fn name(&self) -> &str {
        "deny-word"
    }
    fn check(&self, facts: &CallFacts<'_>) -> GuardVerdict {
        if facts.args.to_string().contains(self.0) {
            GuardVerdict::Deny {
                reason: format!("arguments mention {:?}", self.0),
            }
        } else {
            GuardVerdict::Pass
        }
    }
}

pub struct PanickingGuard;

impl Guard for PanickingGuard {
    fn name(&self) -> &str {
        "panics"
    }
    fn check(&self, _: &CallFacts<'_>) -> GuardVerdict {
        panic!("guard bug")
    }
}

/// Passes every call, but breaks the session log's storage: the guard phase
/// sits before the `approval/asked` write (which carries the held `tool/call`).
/// With `poison`, it also makes a durable commit fail, after which the log
/// refuses every write.
pub struct BreakStorage {
    pub fault: FaultHandle,
    pub poison: Option<Arc<SessionLog>>,
}

impl Guard for BreakStorage {
    fn name(&self) -> &str {
        "break-storage"
    }
    fn check(&self, _: &CallFacts<'_>) -> GuardVerdict {
        self.fault.fail_from_now();
        if let Some(log) = &self.poison {
            let poison = toolhost::log::NewEvent::new(
                "poison",
                toolhost::log::EventKind::ToolCall,
                serde_json::json!({}),
            );
            assert!(
                log.append(&[poison], toolhost::log::Durability::Durable)
                    .is_err(),
                "the durable commit should have failed"
            );
        }
        GuardVerdict::Pass
    }
}

#[derive(Clone)]
pub enum HookKind {
    Keep,
    ReplaceContent(String),
    ReplaceCanonical(Value),
    Block(String),
    Panic,
}

/// A post-execute hook doing `kind`, counting its calls.
#[derive(Clone)]
pub struct CountingHook {
    kind: HookKind,
    count: Arc<AtomicUsize>,
}

impl CountingHook {
    pub fn new(kind: HookKind) -> Self {
        CountingHook {
            kind,
            count: Arc::default(),
        }
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
}

impl PostExecuteHook for CountingHook {
    fn name(&self) -> &str {
        "test-hook"
    }
    fn inspect(&self, _: &Descriptor, _: &CallResult) -> PostAction {
        self.count.fetch_add(1, Ordering::SeqCst);
        match &self.kind {
            HookKind::Keep => PostAction::Keep,
            HookKind::ReplaceContent(t) => {
                PostAction::ReplaceContent(vec![ContentItem::text(t.clone())])
            }
            HookKind::ReplaceCanonical(v) => PostAction::ReplaceCanonical(v.clone()),
            HookKind::Block(r) => PostAction::Block(r.clone()),
            HookKind::Panic => panic!("hook bug"),
        }
    }
}

/// Records the call ids it sees.
#[derive(Clone, Default)]
pub struct CountingObserver {
    pub count: Arc<AtomicUsize>,
    seen: Arc<(Mutex<Vec<String>>, std::sync::Condvar)>,
}

impl CountingObserver {
    /// The ids seen once there are `n` (observers run on their own
    /// threads); fails after 30 s.
    pub fn wait_for(&self, n: usize) -> Vec<String> {
        let (seen, grew) = &*self.seen;
        let (seen, timeout) = grew
            .wait_timeout_while(seen.lock().unwrap(), Duration::from_secs(30), |s| {
                s.len() < n
            })
            .unwrap();
        assert!(
            !timeout.timed_out(),
            "only {} of {n} records came",
            seen.len()
        );
        seen.clone()
    }
}

impl Observer for CountingObserver {
    fn observe(&self, result: &CallResult) {
        self.count.fetch_add(1, Ordering::SeqCst);
        let (seen, grew) = &*self.seen;
        seen.lock().unwrap().push(result.call_id.clone());
        grew.notify_all();
    }
}

pub struct PanickingObserver;

impl Observer for PanickingObserver {
    fn observe(&self, _: &CallResult) {
        panic!("observer bug")
    }
}

/// `toolhost run read_file --args {"path":"a.txt"} --json` plus `extra`.
pub fn cli(ws: &Path, state: &Path, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(crate::support::bin())
        .args([
            "run",
            "read_file",
            "--args",
            r#"{"path":"a.txt"}"#,
            "--json",
            "--workspace",
        ])
        .arg(ws)
        .arg("--state")
        .arg(state)
        .args(extra)
        .env("TOOLHOST_CACHE_DIR", cache_dir())
        .env_remove("TOOLHOST_STATE_DIR")
        .output()
        .unwrap()
}
