//! Governance of the call pipeline (DESIGN.md §1): every refusal path with its
//! stable code, the order of the phases (validation before approval, guards
//! before approval, checkpoint before the body), every approval outcome and
//! its audit pair, audit-write failures, one-call escalation, scoped
//! visibility, post-execute rules and hooks, and policy files through the CLI.
//!
//! Each test that refuses a call which would write a file proves that the body
//! did not run by checking the host file system.

mod approvals;
mod audit;
mod code_mode;
pub(crate) mod common;
mod layers;

use common::*;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use toolhost::log::{EventKind, FailingStorage, MemStorage, Op, SessionLog};
use toolhost::{
    ApprovalOutcome, CallRequest, ContentItem, ErrorCode, HostError, Interrupt, NoApprover,
    RegistryError, SandboxMode, ScopeSpec,
};

pub(crate) const ASK_WRITES: &str = r#"
version = 1
mode = "workspace-write"

[[rules]]
tool = "write_file"
decision = "ask"
reason = "writes need a human"
"#;

// ───────────────────────────── refusal paths ─────────────────────────────

#[tokio::test]
async fn unknown_tool_is_refused_with_the_visible_names() {
    let ws = workspace();
    let host = builder(ws.path()).build().await.unwrap();
    let r = host.call(CallRequest::new("no_such_tool", json!({}))).await;
    assert_refused(&host, &r, ErrorCode::UnknownTool);
    let msg = &r.error.as_ref().unwrap().message;
    assert!(
        msg.contains("read_file") && msg.contains("write_file"),
        "lists the available tools: {msg}"
    );
}

/// What a client names freely is recorded cut to a bound: a 1 MiB tool name, scope
/// or justification does not put a megabyte in the session log (each went in whole,
/// with nothing to throttle an unknown tool's refusals).
#[tokio::test]
async fn huge_names_are_cut_before_they_are_recorded() {
    let ws = workspace();
    let host = builder(ws.path()).build().await.unwrap();
    let huge = "a".repeat(1 << 20);
    let r = host.call(CallRequest::new(huge.clone(), json!({}))).await;
    assert_eq!(r.code(), Some(ErrorCode::UnknownTool), "{:?}", r.error);
    let r = host
        .call(
            CallRequest::new("read_file", json!({"path": "a"}))
                .scope(huge.clone())
                .escalate(SandboxMode::DangerFullAccess, huge.clone()),
        )
        .await;
    assert!(!r.is_ok());
    let r = host
        .call_batch(vec![CallRequest::new(huge.clone(), json!({}))])
        .await;
    assert_eq!(r[0].code(), Some(ErrorCode::UnknownTool));
    let recorded: usize = host
        .log()
        .events()
        .unwrap()
        .iter()
        .map(|e| e.payload.to_string().len())
        .sum();
    assert!(recorded < 64 << 10, "{recorded} bytes recorded");
}

/// A whole number spelled as a float passes the schema's `integer`, and the
/// tool reads it as the integer: `sleep` (Rust, `u64`) refused `1.0` after
/// dispatch (TOOL_ERROR invalid-args).
#[tokio::test]
async fn whole_floats_reach_the_tool_as_integers() {
    let ws = workspace();
    let host = builder(ws.path()).build().await.unwrap();
    for args in [r#"{"ms": 1.0}"#, r#"{"ms": 1e0}"#] {
        let r = host
            .call(CallRequest {
                args: args.to_string(),
                ..CallRequest::new("sleep", json!(null))
            })
            .await;
        assert!(r.is_ok(), "{args}: {r:?}");
        assert_eq!(r.canonical["slept_ms"], 1, "{args}");
    }
    let r = host
        .call(CallRequest::new("sleep", json!({"ms": 1.5})))
        .await;
    assert_eq!(r.code(), Some(ErrorCode::InvalidArgs), "{:?}", r.error);
}

#[tokio::test]
async fn bad_json_is_invalid_args_and_never_reaches_the_approver() {
    let ws = workspace();
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    b.policy(policy(ASK_WRITES))
        .approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    let r = host
        .call(CallRequest {
            tool: "write_file".into(),
            args: r#"{"path": "out.txt", "content": "#.into(),
            mode: Some(SandboxMode::WorkspaceWrite),
            ..CallRequest::default()
        })
        .await;
    assert_refused(&host, &r, ErrorCode::InvalidArgs);
    assert!(
        r.error.as_ref().unwrap().message.contains("not valid JSON"),
        "{:?}",
        r.error
    );
    assert_eq!(
        approver.count(),
        0,
        "an invalid call must never reach the approver"
    );
    assert_no_approval_events(&host, &r);
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn schema_violation_is_invalid_args_naming_the_path_and_never_asks() {
    let ws = workspace();
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    b.policy(policy(ASK_WRITES))
        .approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    let r = host
        .call(
            CallRequest::new("write_file", json!({"path": 5, "content": "x"}))
                .mode(SandboxMode::WorkspaceWrite),
        )
        .await;
    assert_refused(&host, &r, ErrorCode::InvalidArgs);
    let msg = &r.error.as_ref().unwrap().message;
    assert!(
        msg.contains("/path"),
        "the message names the failing path: {msg}"
    );
    // An unknown property is a schema violation too (the tools deny unknown fields).
    let r2 = host
        .call(
            CallRequest::new(
                "write_file",
                json!({"path": "out.txt", "content": "x", "mode": "0777"}),
            )
            .mode(SandboxMode::WorkspaceWrite),
        )
        .await;
    assert_refused(&host, &r2, ErrorCode::InvalidArgs);
    assert_eq!(
        approver.count(),
        0,
        "an invalid call must never reach the approver"
    );
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
    assert!(!ws.path().join("5").exists(), "the body ran");
}

#[tokio::test]
async fn policy_deny_refuses_before_the_body() {
    let ws = workspace();
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    b.policy(policy(
        r#"
version = 1
mode = "workspace-write"
[[rules]]
tool = "write_*"
decision = "deny"
reason = "no writes in this session"
"#,
    ))
    .approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    let r = host.call(write("out.txt", "hello")).await;
    assert_refused(&host, &r, ErrorCode::PolicyDenied);
    assert!(
        r.error
            .as_ref()
            .unwrap()
            .message
            .contains("no writes in this session")
    );
    assert_eq!(approver.count(), 0);
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn guard_deny_refuses_before_the_body() {
    let ws = workspace();
    std::fs::create_dir(ws.path().join("secrets")).unwrap();
    let mut b = builder(ws.path());
    b.policy(policy(
        r#"
version = 1
mode = "workspace-write"
[[guards]]
name = "no-secrets-dir"
tool = "write_file"
reason = "nothing may be written under secrets/"
deny_paths = ["secrets/**"]
pointer = "/path"
"#,
    ));
    let host = b.build().await.unwrap();
    // `./secrets/../secrets/key` is normalised before matching.
    for path in ["secrets/key.txt", "./secrets/../secrets/key.txt"] {
        let r = host.call(write(path, "hunter2")).await;
        assert_refused(&host, &r, ErrorCode::GuardDenied);
        assert!(
            r.error.as_ref().unwrap().message.contains("no-secrets-dir"),
            "{:?}",
            r.error
        );
    }
    assert!(!ws.path().join("secrets/key.txt").exists(), "the body ran");
    // Control: the same host does write elsewhere.
    let ok = host.call(write("public.txt", "fine")).await;
    assert!(ok.is_ok(), "{:?}", ok.error);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("public.txt")).unwrap(),
        "fine"
    );
}

#[tokio::test]
async fn approval_rejected_refuses_before_the_body() {
    let (ws, host, approver) = ask_host(ApprovalOutcome::Rejected).await;
    let r = host.call(write("out.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::ApprovalRejected);
    assert_pair(&host, &r, "rejected");
    assert_eq!(approver.count(), 1);
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn approval_cancelled_refuses_before_the_body() {
    let (ws, host, approver) = ask_host(ApprovalOutcome::Cancelled).await;
    let r = host.call(write("out.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::ApprovalCancelled);
    assert_pair(&host, &r, "cancelled");
    assert_eq!(approver.count(), 1);
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn approval_unavailable_from_the_approver_refuses_before_the_body() {
    let (ws, host, approver) = ask_host(ApprovalOutcome::Unavailable).await;
    let r = host.call(write("out.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::ApprovalUnavailable);
    assert_pair(&host, &r, "unavailable");
    assert_eq!(approver.count(), 1);
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn no_approver_is_approval_unavailable_and_still_records_the_pair() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.policy(policy(ASK_WRITES)).approver(Box::new(NoApprover));
    let host = b.build().await.unwrap();
    let r = host.call(write("out.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::ApprovalUnavailable);
    // The orchestrator asks the NoApprover like any other and records its answer.
    let (asked, decided) = assert_pair(&host, &r, "unavailable");
    assert_eq!(asked["approver"], "none");
    // It answers at once: no wait to record.
    assert!(asked.get("wait_ms").is_none(), "{asked}");
    assert!(
        decided["detail"].as_str().unwrap().contains("no approver"),
        "{decided}"
    );
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn the_default_builder_has_no_approver() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.policy(policy(ASK_WRITES));
    let host = b.build().await.unwrap();
    let r = host.call(write("out.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::ApprovalUnavailable);
    assert_pair(&host, &r, "unavailable");
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn approval_never_is_approval_unavailable_without_asking() {
    let ws = workspace();
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    b.policy(policy(
        r#"
version = 1
mode = "workspace-write"
approval = "never"
[[rules]]
tool = "write_file"
decision = "ask"
reason = "writes need a human"
"#,
    ))
    .approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    let r = host.call(write("out.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::ApprovalUnavailable);
    assert!(
        r.error.as_ref().unwrap().message.contains("never"),
        "{:?}",
        r.error
    );
    assert_eq!(approver.count(), 0, "approval = \"never\" must not ask");
    // Nobody was asked, so there is no asked/decided pair; the refusal is in tool/result.
    assert_no_approval_events(&host, &r);
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn escalation_that_is_not_wider_is_invalid_and_never_asks() {
    let ws = workspace();
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    b.approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    for (mode, to) in [
        (SandboxMode::WorkspaceWrite, SandboxMode::WorkspaceWrite),
        (SandboxMode::WorkspaceWrite, SandboxMode::ReadOnly),
        (SandboxMode::DangerFullAccess, SandboxMode::None),
    ] {
        let r = host
            .call(
                CallRequest::new("write_file", json!({"path": "out.txt", "content": "x"}))
                    .mode(mode)
                    .escalate(to, "because"),
            )
            .await;
        assert_refused(&host, &r, ErrorCode::EscalationInvalid);
        assert!(
            r.error.as_ref().unwrap().message.contains("not wider"),
            "{:?}",
            r.error
        );
        assert_no_approval_events(&host, &r);
    }
    assert_eq!(approver.count(), 0);
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn escalation_without_justification_is_invalid_and_never_asks() {
    let ws = workspace();
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    b.approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    for justification in ["", "   \n\t"] {
        let r = host
            .call(
                CallRequest::new("write_file", json!({"path": "out.txt", "content": "x"}))
                    .mode(SandboxMode::ReadOnly)
                    .escalate(SandboxMode::WorkspaceWrite, justification),
            )
            .await;
        assert_refused(&host, &r, ErrorCode::EscalationInvalid);
        assert!(
            r.error.as_ref().unwrap().message.contains("justification"),
            "{:?}",
            r.error
        );
        assert_no_approval_events(&host, &r);
    }
    assert_eq!(approver.count(), 0);
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn tool_needing_a_wider_mode_is_sandbox_unavailable_and_never_asks() {
    let ws = workspace();
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    b.policy(policy(ASK_WRITES))
        .approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    for mode in [SandboxMode::None, SandboxMode::ReadOnly] {
        let r = host
            .call(
                CallRequest::new("write_file", json!({"path": "out.txt", "content": "x"}))
                    .mode(mode),
            )
            .await;
        assert_refused(&host, &r, ErrorCode::SandboxUnavailable);
        assert!(
            r.error
                .as_ref()
                .unwrap()
                .message
                .contains("workspace-write"),
            "{:?}",
            r.error
        );
    }
    assert_eq!(
        approver.count(),
        0,
        "nobody is asked about a call that cannot run as described"
    );
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

/// Post-execute runs after the body, so the body's effect on the workspace
/// has happened; what blocking guarantees is that the result (canonical and
/// content) is withheld from the model and from the log.
#[tokio::test]
async fn post_execute_block_withholds_the_result() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.policy(policy(
        r#"
version = 1
mode = "workspace-write"
[post_execute]
block_matching = "classified"
"#,
    ));
    let host = b.build().await.unwrap();
    let r = host.call(write("classified.txt", "x")).await;
    assert_eq!(r.code(), Some(ErrorCode::PostExecuteBlocked), "{r:?}");
    assert!(!r.is_ok());
    assert_eq!(
        r.canonical,
        serde_json::Value::Null,
        "a blocked canonical must not be delivered"
    );
    assert!(
        !text_of(&r).contains("wrote"),
        "the tool's content leaked: {}",
        text_of(&r)
    );
    // The body did run (its intent was durable first): blocking cannot undo effects.
    assert!(kinds(&host, &r).contains(&EventKind::ToolIntent));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("classified.txt")).unwrap(),
        "x"
    );
    let logged = result_event(&host, &r);
    assert_eq!(logged["error"]["code"], "POST_EXECUTE_BLOCKED");
    assert_eq!(logged["canonical"], serde_json::Value::Null);
}

// ────────────────────────── guards are monotonic ──────────────────────────

const GUARD: &str = r#"
[[guards]]
name = "no-forbidden"
tool = "*"
reason = "forbidden files are off limits"
deny_args_matching = "forbidden"
"#;

#[tokio::test]
async fn guard_beats_an_allow_rule() {
    let ws = workspace();
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    b.policy(policy(&format!(
        r#"
version = 1
mode = "workspace-write"
[[rules]]
tool = "write_file"
decision = "allow"
{GUARD}"#
    )))
    .approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    let r = host.call(write("forbidden.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::GuardDenied);
    assert!(!ws.path().join("forbidden.txt").exists(), "the body ran");
    assert_eq!(approver.count(), 0);
    let ok = host.call(write("allowed.txt", "x")).await;
    assert!(ok.is_ok(), "control: {:?}", ok.error);
}

#[tokio::test]
async fn guard_beats_every_preset() {
    for preset in ["read-only", "workspace-write", "danger-full-access"] {
        let ws = workspace();
        let approver = Counting::new(ApprovalOutcome::AllowedOnce);
        let mut b = builder(ws.path());
        b.policy(policy(&format!(
            "version = 1\npreset = \"{preset}\"\n{GUARD}"
        )))
        .approver(Box::new(approver.clone()));
        let host = b.build().await.unwrap();
        // In the preset's own mode and in workspace-write.
        for mode in [None, Some(SandboxMode::WorkspaceWrite)] {
            let r = host
                .call(CallRequest {
                    mode,
                    ..CallRequest::new(
                        "write_file",
                        json!({"path": "forbidden.txt", "content": "x"}),
                    )
                })
                .await;
            assert_refused(&host, &r, ErrorCode::GuardDenied);
            assert_eq!(
                approver.count(),
                0,
                "preset {preset}: the approver was asked about a guarded call"
            );
        }
        assert!(
            !ws.path().join("forbidden.txt").exists(),
            "preset {preset}: the body ran"
        );
        // Control: the same host, preset and approver let an unguarded write through.
        let ok = host.call(write("allowed.txt", "x")).await;
        assert!(ok.is_ok(), "preset {preset} control: {:?}", ok.error);
        assert!(ws.path().join("allowed.txt").exists(), "preset {preset}");
    }
}

#[tokio::test]
async fn guard_beats_the_default_allow_and_a_library_guard_too() {
    let ws = workspace();
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    // Policy::default(): default allow, no rules. Only a library guard.
    b.guard(Box::new(DenyWord("forbidden")))
        .approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    assert_eq!(
        host.policy().default_decision(),
        toolhost::policy::DecisionKind::Allow
    );
    let r = host.call(write("forbidden.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::GuardDenied);
    assert!(
        r.error.as_ref().unwrap().message.contains("deny-word"),
        "{:?}",
        r.error
    );
    assert_eq!(approver.count(), 0);
    assert!(!ws.path().join("forbidden.txt").exists(), "the body ran");
    let ok = host.call(write("allowed.txt", "x")).await;
    assert!(ok.is_ok(), "control: {:?}", ok.error);
}

#[tokio::test]
async fn guard_beats_an_approving_approver_and_an_escalation() {
    let ws = workspace();
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    b.policy(policy(&format!("{ASK_WRITES}\n{GUARD}")))
        .approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    let r = host.call(write("forbidden.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::GuardDenied);
    let r = host
        .call(
            CallRequest::new(
                "write_file",
                json!({"path": "forbidden.txt", "content": "x"}),
            )
            .mode(SandboxMode::ReadOnly)
            .escalate(SandboxMode::WorkspaceWrite, "I really need to"),
        )
        .await;
    assert_refused(&host, &r, ErrorCode::GuardDenied);
    assert_eq!(
        approver.count(),
        0,
        "the approver was asked about a guarded call"
    );
    assert!(!ws.path().join("forbidden.txt").exists(), "the body ran");
    // Control: the approver does approve unguarded calls.
    let ok = host.call(write("allowed.txt", "x")).await;
    assert!(ok.is_ok(), "control: {:?}", ok.error);
    assert_eq!(approver.count(), 1);
}

#[tokio::test]
async fn guard_beats_a_later_post_execute_hook() {
    let ws = workspace();
    let hook = CountingHook::new(HookKind::ReplaceContent("all good".into()));
    let mut b = builder(ws.path());
    b.policy(policy(&format!(
        "version = 1\nmode = \"workspace-write\"\n{GUARD}"
    )))
    .post_execute(Box::new(hook.clone()));
    let host = b.build().await.unwrap();
    let r = host.call(write("forbidden.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::GuardDenied);
    assert!(!text_of(&r).contains("all good"));
    assert_eq!(
        hook.count(),
        0,
        "a post-execute hook ran for a guarded call"
    );
    assert!(!ws.path().join("forbidden.txt").exists(), "the body ran");
}

#[tokio::test]
async fn a_panicking_guard_denies() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.policy(policy("version = 1\nmode = \"workspace-write\"\n"))
        .guard(Box::new(PanickingGuard));
    let host = b.build().await.unwrap();
    let r = host.call(write("out.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::GuardDenied);
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

// ─────────────────────────── approval outcomes ───────────────────────────

#[tokio::test]
async fn allowed_once_runs_that_call_only() {
    let (ws, host, approver) = ask_host(ApprovalOutcome::AllowedOnce).await;
    let r = host.call(write("out.txt", "approved")).await;
    assert!(r.is_ok(), "{:?}", r.error);
    let (asked, _) = assert_pair(&host, &r, "allowed-once");
    assert_eq!(asked["request"]["tool"], "write_file");
    assert_eq!(asked["request"]["reason"], "writes need a human");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "approved"
    );
    // The pair comes before the intent, the intent before the result.
    let k = kinds(&host, &r);
    let pos = |kind| k.iter().position(|x| *x == kind).unwrap();
    assert!(pos(EventKind::ApprovalDecided) < pos(EventKind::ToolIntent));
    assert!(pos(EventKind::ToolIntent) < pos(EventKind::ToolResult));
    // The approval does not carry over: the next call asks again.
    let r2 = host.call(write("out2.txt", "again")).await;
    assert!(r2.is_ok(), "{:?}", r2.error);
    assert_eq!(
        approver.count(),
        2,
        "allowed-once must apply to one call only"
    );
    assert_pair(&host, &r2, "allowed-once");
}

#[tokio::test]
async fn command_approver_receives_the_request_on_stdin() {
    let ws = workspace();
    let dir = tempfile::tempdir().unwrap();
    let captured = dir.path().join("request.json");
    let program = script(
        dir.path(),
        "approve.sh",
        &format!(
            "cat > '{}'\necho '{{\"decision\":\"allowed-once\"}}'",
            captured.display()
        ),
    );
    let host = command_host(ws.path(), &program, Duration::from_secs(20)).await;
    let r = host.call(write("out.txt", "via command")).await;
    assert!(r.is_ok(), "{:?}", r.error);
    let (asked, _) = assert_pair(&host, &r, "allowed-once");
    // How long the approver may wait, for other servers of a shared log.
    assert_eq!(asked["wait_ms"], 20_000, "{asked}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "via command"
    );
    let request: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&captured).unwrap()).unwrap();
    assert_eq!(request["tool"], "write_file");
    assert_eq!(
        request["args"],
        json!({"path": "out.txt", "content": "via command"})
    );
    assert_eq!(request["reason"], "writes need a human");
    assert_eq!(request["mode"], "workspace-write");
    assert_eq!(request["call_id"], r.call_id);
    assert!(request["approval_id"].is_string());
}

#[tokio::test]
async fn command_approver_rejecting() {
    let ws = workspace();
    let dir = tempfile::tempdir().unwrap();
    let program = script(dir.path(), "reject.sh", "cat >/dev/null\necho rejected");
    let host = command_host(ws.path(), &program, Duration::from_secs(20)).await;
    let r = host.call(write("out.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::ApprovalRejected);
    assert_pair(&host, &r, "rejected");
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn command_approver_timeout_is_unavailable() {
    let ws = workspace();
    let dir = tempfile::tempdir().unwrap();
    let program = script(dir.path(), "slow.sh", "exec sleep 30");
    let host = command_host(ws.path(), &program, Duration::from_millis(300)).await;
    let started = Instant::now();
    let r = host.call(write("out.txt", "x")).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the approver's timeout was not enforced"
    );
    assert_refused(&host, &r, ErrorCode::ApprovalUnavailable);
    let (_, decided) = assert_pair(&host, &r, "unavailable");
    assert!(
        decided["detail"]
            .as_str()
            .unwrap()
            .contains("no decision within"),
        "{decided}"
    );
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn command_approver_crash_is_unavailable() {
    let ws = workspace();
    let dir = tempfile::tempdir().unwrap();
    // Exits 1, even after printing a valid decision.
    let exits = script(
        dir.path(),
        "exit1.sh",
        "cat >/dev/null\necho allowed-once\nexit 1",
    );
    // Killed by a signal.
    let killed = script(dir.path(), "killed.sh", "echo allowed-once\nkill -9 $$");
    for program in [exits, killed] {
        let host = command_host(ws.path(), &program, Duration::from_secs(20)).await;
        let r = host.call(write("out.txt", "x")).await;
        assert_refused(&host, &r, ErrorCode::ApprovalUnavailable);
        let (_, decided) = assert_pair(&host, &r, "unavailable");
        assert!(
            decided["detail"].as_str().unwrap().contains("exited"),
            "{program}: {decided}"
        );
        assert!(
            !ws.path().join("out.txt").exists(),
            "{program}: the body ran"
        );
    }
}

#[tokio::test]
async fn command_approver_garbage_is_unavailable() {
    let ws = workspace();
    let dir = tempfile::tempdir().unwrap();
    for (name, body) in [
        ("maybe.sh", "cat >/dev/null\necho maybe"),
        ("claims.sh", "cat >/dev/null\necho unavailable"),
        ("empty.sh", "cat >/dev/null"),
        (
            "json.sh",
            "cat >/dev/null\necho '{\"decision\":\"allowed-twice\"}'",
        ),
    ] {
        let program = script(dir.path(), name, body);
        let host = command_host(ws.path(), &program, Duration::from_secs(20)).await;
        let r = host.call(write("out.txt", "x")).await;
        assert_refused(&host, &r, ErrorCode::ApprovalUnavailable);
        let (_, decided) = assert_pair(&host, &r, "unavailable");
        assert!(
            decided["detail"]
                .as_str()
                .unwrap()
                .contains("not a decision"),
            "{name}: {decided}"
        );
        assert!(!ws.path().join("out.txt").exists(), "{name}: the body ran");
    }
}

#[tokio::test]
async fn missing_command_approver_is_unavailable() {
    let ws = workspace();
    let host = command_host(ws.path(), "/nonexistent/approver", Duration::from_secs(5)).await;
    let r = host.call(write("out.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::ApprovalUnavailable);
    assert_pair(&host, &r, "unavailable");
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn a_panicking_approver_is_unavailable() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.policy(policy(ASK_WRITES))
        .approver(Box::new(PanickingApprover));
    let host = b.build().await.unwrap();
    let r = host.call(write("out.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::ApprovalUnavailable);
    assert_pair(&host, &r, "unavailable");
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn an_approver_panicking_before_its_future_is_unavailable() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.policy(policy(ASK_WRITES))
        .approver(Box::new(EagerlyPanickingApprover));
    let host = b.build().await.unwrap();
    let r = host.call(write("out.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::ApprovalUnavailable);
    assert_pair(&host, &r, "unavailable");
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn cancelling_a_call_while_it_waits_for_approval_is_approval_cancelled() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.policy(policy(ASK_WRITES))
        .approver(Box::new(NeverAnswers));
    let host = b.build().await.unwrap();
    let interrupt = Interrupt::default();
    let canceller = interrupt.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        canceller.cancel();
    });
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        host.call(write("out.txt", "x").interrupt(interrupt)),
    )
    .await
    .expect("the cancelled call kept waiting for the approver");
    assert_refused(&host, &r, ErrorCode::ApprovalCancelled);
    assert_pair(&host, &r, "cancelled");
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn a_call_cancelled_before_approval_is_not_asked() {
    let ws = workspace();
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    b.policy(policy(ASK_WRITES))
        .approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    let interrupt = Interrupt::default();
    interrupt.cancel();
    let r = host.call(write("out.txt", "x").interrupt(interrupt)).await;
    assert_refused(&host, &r, ErrorCode::Cancelled);
    assert_eq!(
        approver.count(),
        0,
        "nobody should be asked about a cancelled call"
    );
    assert_no_approval_events(&host, &r);
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

// ─────────────────────────── audit write failures ───────────────────────────
//
// The audit events (`tool/call`, `approval/asked`, `approval/decided`) are
// lazy commits: they reach storage with the next durable commit, which is the
// call's intent (DESIGN.md §5). A storage that fails under them is therefore
// noticed at the checkpoint, and the call ends ABORTED_BEFORE_DISPATCH. Once
// a write has failed, the log refuses every later write: then the audit
// append itself fails, and the orchestrator refuses at that point.

/// A session log over a storage that fails the chosen operations on demand.
fn faulty_log(ops: &[Op]) -> (Arc<SessionLog>, toolhost::log::FaultHandle) {
    let storage = FailingStorage::healthy(MemStorage::new(), ops);
    let fault = storage.handle();
    (
        Arc::new(SessionLog::open_with_backend(storage).unwrap()),
        fault,
    )
}

#[tokio::test]
async fn storage_failing_under_the_approval_audit_aborts_before_dispatch() {
    let ws = workspace();
    let (log, fault) = faulty_log(&Op::ALL);
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    // The guard runs after tool/call was recorded and before approval/asked:
    // the storage breaks at exactly that point.
    b.policy(policy(ASK_WRITES))
        .approver(Box::new(approver.clone()))
        .guard(Box::new(BreakStorage {
            fault,
            poison: None,
        }))
        .session_log(log);
    let host = b.build().await.unwrap();
    let r = host.call(write("out.txt", "x")).await;
    assert_eq!(r.code(), Some(ErrorCode::AbortedBeforeDispatch), "{r:?}");
    assert!(
        r.error.as_ref().unwrap().message.contains("intent"),
        "{:?}",
        r.error
    );
    assert!(
        !ws.path().join("out.txt").exists(),
        "the body ran although its approval is not durable"
    );
}

#[tokio::test]
async fn approval_asked_that_cannot_be_written_refuses_without_asking() {
    let ws = workspace();
    let (log, fault) = faulty_log(&Op::ALL);
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    // Between tool/call and approval/asked, a failed durable commit makes the
    // log refuse writes: approval/asked cannot be appended.
    b.policy(policy(ASK_WRITES))
        .approver(Box::new(approver.clone()))
        .guard(Box::new(BreakStorage {
            fault,
            poison: Some(log.clone()),
        }))
        .session_log(log);
    let host = b.build().await.unwrap();
    let r = host.call(write("out.txt", "x")).await;
    assert_eq!(r.code(), Some(ErrorCode::ApprovalUnavailable), "{r:?}");
    assert!(
        r.error
            .as_ref()
            .unwrap()
            .message
            .contains("approval request could not be recorded"),
        "{:?}",
        r.error
    );
    assert_eq!(
        approver.count(),
        0,
        "the approver was asked although approval/asked was not written"
    );
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

#[tokio::test]
async fn approval_decided_that_cannot_be_written_refuses() {
    let ws = workspace();
    let (log, fault) = faulty_log(&Op::ALL);
    let mut b = builder(ws.path());
    b.policy(policy(ASK_WRITES))
        .approver(Box::new(ApproveThenBreakStorage {
            fault,
            poison: log.clone(),
        }))
        .session_log(log);
    let host = b.build().await.unwrap();
    let r = host.call(write("out.txt", "x")).await;
    assert_eq!(r.code(), Some(ErrorCode::ApprovalUnavailable), "{r:?}");
    assert!(
        r.error
            .as_ref()
            .unwrap()
            .message
            .contains("approval decision could not be recorded"),
        "{:?}",
        r.error
    );
    assert!(
        !ws.path().join("out.txt").exists(),
        "an approval that was not recorded let the body run"
    );
}

#[tokio::test]
async fn intent_that_cannot_be_made_durable_aborts_before_dispatch() {
    let ws = workspace();
    // Only fsync fails: the lazy audit events are committed, the durable intent is not.
    let (log, fault) = faulty_log(&[Op::SyncData]);
    fault.fail_from_now();
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    b.policy(policy(ASK_WRITES))
        .approver(Box::new(approver.clone()))
        .session_log(log);
    let host = b.build().await.unwrap();
    let r = host.call(write("out.txt", "x")).await;
    assert_eq!(r.code(), Some(ErrorCode::AbortedBeforeDispatch), "{r:?}");
    assert!(
        r.error
            .as_ref()
            .unwrap()
            .message
            .contains("intent could not be made durable"),
        "{:?}",
        r.error
    );
    assert_eq!(
        approver.count(),
        1,
        "approval happens before the checkpoint"
    );
    assert!(
        !ws.path().join("out.txt").exists(),
        "the body ran without a durable intent"
    );

    // An allowed call (no approval) fails the same way.
    let r = host.call(CallRequest::new("sleep", json!({"ms": 0}))).await;
    assert_eq!(r.code(), Some(ErrorCode::AbortedBeforeDispatch), "{r:?}");
}

#[tokio::test]
async fn after_a_log_failure_every_call_refuses_before_dispatch() {
    let ws = workspace();
    let (log, fault) = faulty_log(&Op::ALL);
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    b.policy(policy(ASK_WRITES))
        .approver(Box::new(approver.clone()))
        .session_log(log);
    let host = b.build().await.unwrap();
    let ok = host.call(write("before.txt", "x")).await;
    assert!(ok.is_ok(), "control: {:?}", ok.error);
    fault.fail_from_now();
    let r = host.call(write("first.txt", "x")).await;
    assert_eq!(r.code(), Some(ErrorCode::AbortedBeforeDispatch), "{r:?}");
    assert_eq!(approver.count(), 2);
    // The log now refuses writes: the call's record and its approval
    // request cannot be written, so nobody is asked.
    let r = host.call(write("second.txt", "x")).await;
    assert_eq!(r.code(), Some(ErrorCode::ApprovalUnavailable), "{r:?}");
    assert!(
        r.error
            .as_ref()
            .unwrap()
            .message
            .contains("approval request could not be recorded"),
        "{:?}",
        r.error
    );
    // A call that needs no approval cannot make its intent durable.
    let r = host.call(CallRequest::new("sleep", json!({"ms": 0}))).await;
    assert_eq!(r.code(), Some(ErrorCode::AbortedBeforeDispatch), "{r:?}");
    assert_eq!(
        approver.count(),
        2,
        "nobody is asked about a call that cannot be recorded"
    );
    assert!(!ws.path().join("first.txt").exists(), "the body ran");
    assert!(!ws.path().join("second.txt").exists(), "the body ran");
}

// ─────────────────────────────── escalation ───────────────────────────────

#[tokio::test]
async fn approved_escalation_applies_to_one_call_only() {
    let ws = workspace();
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    // Policy::default(): read-only mode, default allow.
    b.approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    assert_eq!(host.policy().default_mode(), SandboxMode::ReadOnly);
    let r = host
        .call(
            CallRequest::new(
                "write_file",
                json!({"path": "escalated.txt", "content": "once"}),
            )
            .escalate(
                SandboxMode::WorkspaceWrite,
                "the user asked me to save the notes",
            ),
        )
        .await;
    assert!(r.is_ok(), "{:?}", r.error);
    assert_eq!(approver.count(), 1);
    let (asked, _) = assert_pair(&host, &r, "allowed-once");
    assert_eq!(asked["request"]["mode"], "workspace-write");
    assert_eq!(
        asked["request"]["justification"],
        "the user asked me to save the notes"
    );
    assert_eq!(intent_event(&host, &r)["mode"], "workspace-write");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("escalated.txt")).unwrap(),
        "once"
    );

    // The next call, same host, no escalation: back to read-only.
    let r2 = host
        .call(CallRequest::new(
            "write_file",
            json!({"path": "after.txt", "content": "twice"}),
        ))
        .await;
    assert_refused(&host, &r2, ErrorCode::SandboxUnavailable);
    let r3 = host
        .call(
            CallRequest::new(
                "write_file",
                json!({"path": "escalated.txt", "content": "overwritten"}),
            )
            .mode(SandboxMode::ReadOnly),
        )
        .await;
    assert_refused(&host, &r3, ErrorCode::SandboxUnavailable);
    assert!(!ws.path().join("after.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws.path().join("escalated.txt")).unwrap(),
        "once"
    );
    assert_eq!(approver.count(), 1);
}

#[tokio::test]
async fn escalation_needs_an_approval_every_time() {
    for (approver, code, outcome) in [
        (
            Counting::new(ApprovalOutcome::Rejected),
            ErrorCode::ApprovalRejected,
            "rejected",
        ),
        (
            Counting::new(ApprovalOutcome::Cancelled),
            ErrorCode::ApprovalCancelled,
            "cancelled",
        ),
        (
            Counting::new(ApprovalOutcome::Unavailable),
            ErrorCode::ApprovalUnavailable,
            "unavailable",
        ),
    ] {
        let ws = workspace();
        let mut b = builder(ws.path());
        b.approver(Box::new(approver.clone()));
        let host = b.build().await.unwrap();
        let r = host
            .call(
                CallRequest::new("write_file", json!({"path": "out.txt", "content": "x"}))
                    .mode(SandboxMode::ReadOnly)
                    .escalate(SandboxMode::WorkspaceWrite, "please"),
            )
            .await;
        assert_refused(&host, &r, code);
        assert_pair(&host, &r, outcome);
        assert_eq!(approver.count(), 1);
        assert!(
            !ws.path().join("out.txt").exists(),
            "{outcome}: the body ran"
        );
    }
}

#[tokio::test]
async fn escalation_under_approval_never_is_refused() {
    let ws = workspace();
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    b.policy(policy("version = 1\napproval = \"never\"\n"))
        .approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    let r = host
        .call(
            CallRequest::new("write_file", json!({"path": "out.txt", "content": "x"}))
                .escalate(SandboxMode::WorkspaceWrite, "please"),
        )
        .await;
    assert_refused(&host, &r, ErrorCode::ApprovalUnavailable);
    assert_eq!(approver.count(), 0);
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

// ─────────────────────────────── visibility ───────────────────────────────

#[tokio::test]
async fn a_scope_shows_and_resolves_only_its_tools() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "hello").unwrap();
    let mut b = builder(ws.path());
    b.policy(policy("version = 1\nmode = \"workspace-write\"\n"))
        .scope(
            "reader",
            ScopeSpec {
                allow: Some(vec!["read_file".into()]),
                ..ScopeSpec::default()
            },
        );
    let host = b.build().await.unwrap();
    let listed: Vec<&str> = host
        .tools(Some("reader"))
        .iter()
        .map(|t| t.descriptor.name.as_str())
        .collect();
    assert_eq!(listed, ["read_file"]);
    assert_eq!(host.tools(None).len(), 6);

    let hidden = host.call(write("out.txt", "x").scope("reader")).await;
    assert_refused(&host, &hidden, ErrorCode::UnknownTool);
    let msg = &hidden.error.as_ref().unwrap().message;
    // The message may echo the name asked for, but lists only visible tools.
    let listed = msg.split("available tools:").nth(1).unwrap_or_default();
    assert_eq!(
        listed.trim(),
        "read_file",
        "the refusal lists a hidden tool: {msg}"
    );
    assert!(!ws.path().join("out.txt").exists(), "a hidden tool ran");

    let visible = host
        .call(CallRequest::new("read_file", json!({"path": "a.txt"})).scope("reader"))
        .await;
    assert!(visible.is_ok(), "{:?}", visible.error);
    assert_eq!(visible.canonical["content"], "hello");

    // The tool exists globally.
    let global = host.call(write("out.txt", "x")).await;
    assert!(global.is_ok(), "{:?}", global.error);

    // An undeclared scope resolves nothing.
    let r = host
        .call(CallRequest::new("read_file", json!({"path": "a.txt"})).scope("nobody"))
        .await;
    assert_refused(&host, &r, ErrorCode::UnknownTool);
}

#[tokio::test]
async fn policy_runs_for_every_scope() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "hello").unwrap();
    let mut b = builder(ws.path());
    b.policy(policy(
        r#"
version = 1
[[rules]]
tool = "read_file"
decision = "deny"
reason = "reading is off today"
[[guards]]
tool = "list_dir"
reason = "no listing"
deny_args_matching = "."
"#,
    ))
    .scope(
        "reader",
        ScopeSpec {
            allow: Some(vec!["read_file".into(), "list_dir".into()]),
            ..ScopeSpec::default()
        },
    );
    let host = b.build().await.unwrap();
    for scope in [None, Some("reader")] {
        let r = host
            .call(CallRequest {
                scope: scope.map(String::from),
                ..CallRequest::new("read_file", json!({"path": "a.txt"}))
            })
            .await;
        assert_refused(&host, &r, ErrorCode::PolicyDenied);
        let r = host
            .call(CallRequest {
                scope: scope.map(String::from),
                ..CallRequest::new("list_dir", json!({"path": "."}))
            })
            .await;
        assert_refused(&host, &r, ErrorCode::GuardDenied);
    }
}

#[tokio::test]
async fn restricting_an_unknown_tool_is_a_configuration_error() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.scope(
        "reader",
        ScopeSpec {
            allow: Some(vec!["read_file".into(), "read_fiel".into()]),
            ..ScopeSpec::default()
        },
    );
    match b.build().await {
        Err(HostError::Registry(RegistryError::UnknownRestriction { scope, name })) => {
            assert_eq!((scope.as_str(), name.as_str()), ("reader", "read_fiel"));
        }
        other => panic!("expected UnknownRestriction, got {:?}", other.map(|_| ())),
    }
    let mut b = builder(ws.path());
    b.scope(
        "hider",
        ScopeSpec {
            deny: vec!["no_such_tool".into()],
            ..ScopeSpec::default()
        },
    );
    assert!(
        matches!(
            b.build().await,
            Err(HostError::Registry(
                RegistryError::UnknownRestriction { .. }
            ))
        ),
        "a deny list naming an unknown tool must fail the build"
    );
}

#[tokio::test]
async fn an_empty_allow_list_is_a_configuration_error() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.scope(
        "nothing",
        ScopeSpec {
            allow: Some(Vec::new()),
            ..ScopeSpec::default()
        },
    );
    match b.build().await {
        Err(HostError::Registry(RegistryError::EmptyRestriction(s))) => assert_eq!(s, "nothing"),
        other => panic!("expected EmptyRestriction, got {:?}", other.map(|_| ())),
    }
}

#[tokio::test]
async fn two_components_offering_one_name_collide_at_load() {
    let ws = workspace();
    let bytes = embedded("read_file");
    let mut b = toolhost::HostBuilder::new();
    b.workspace(ws.path())
        .runtime_options(runtime_options())
        .tool_bytes("first-copy", bytes.clone())
        .tool_bytes("second-copy", bytes);
    match b.build().await {
        Err(e @ HostError::Registry(RegistryError::Collision { .. })) => {
            let msg = e.to_string();
            assert!(
                msg.contains("first-copy")
                    && msg.contains("second-copy")
                    && msg.contains("read_file"),
                "{msg}"
            );
        }
        other => panic!("expected a collision, got {:?}", other.map(|_| ())),
    }
}

/// Components load concurrently but are registered in order: among several
/// broken sources the first one is reported, every time, and good ones
/// loaded around them do not change that.
#[tokio::test]
async fn concurrent_loading_reports_the_first_broken_source_in_order() {
    let ws = workspace();
    for round in 0..5 {
        let mut b = toolhost::HostBuilder::new();
        b.workspace(ws.path())
            .runtime_options(runtime_options())
            .tool_bytes("good-read", embedded("read_file"))
            .tool_bytes("broken-first", b"\0asm not a component".to_vec())
            .tool_bytes("good-list", embedded("list_dir"))
            .tool_bytes("broken-second", b"not wasm at all".to_vec());
        match b.build().await {
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("broken-first") && !msg.contains("broken-second"),
                    "round {round}: {msg}"
                );
            }
            Ok(_) => panic!("round {round}: a broken source was accepted"),
        }
    }
    // And every good source of a build ends up registered, in order.
    let mut b = toolhost::HostBuilder::new();
    b.workspace(ws.path()).runtime_options(runtime_options());
    for name in ["read_file", "write_file", "list_dir", "grep", "sleep"] {
        b.tool_bytes(name, embedded(name));
    }
    let host = b.build().await.unwrap();
    let names: Vec<_> = host
        .tools(None)
        .iter()
        .map(|t| t.descriptor.name.clone())
        .collect();
    for name in ["read_file", "write_file", "list_dir", "grep", "sleep"] {
        assert!(names.contains(&name.to_string()), "{names:?}");
    }
}

// ─────────────────────────────── post-execute ───────────────────────────────

const SECRET: &str = "sk-ABCDEFGHIJKLMNOPQRSTUVWX";

/// Redaction edits only `content` (what the model reads). `canonical` (for
/// programs, policy and audit) and the session log keep the secret: to keep it
/// out of every view, block the result instead.
#[tokio::test]
async fn redaction_hides_from_the_model_only() {
    let ws = workspace();
    std::fs::write(ws.path().join("env.txt"), format!("API_KEY={SECRET}\n")).unwrap();
    let mut b = builder(ws.path());
    b.policy(policy(
        "version = 1\n[post_execute]\nredact = [\"sk-[A-Za-z0-9]{20,}\"]\n",
    ));
    let host = b.build().await.unwrap();
    let r = host
        .call(CallRequest::new("read_file", json!({"path": "env.txt"})))
        .await;
    assert!(r.is_ok(), "{:?}", r.error);
    assert_eq!(text_of(&r), "API_KEY=[REDACTED]\n");
    assert!(!text_of(&r).contains(SECRET));
    // Documented: canonical still has it, and so does the audit log.
    assert_eq!(r.canonical["content"], format!("API_KEY={SECRET}\n"));
    assert_eq!(
        result_event(&host, &r)["canonical"]["content"],
        format!("API_KEY={SECRET}\n")
    );
}

/// A model in a strict function-calling mode sends `null` for the optional
/// arguments it leaves out (strict schemas make them required and
/// nullable): such a `null` reads as the argument left out. A `null` for a
/// required argument is still refused.
#[tokio::test]
async fn a_null_for_an_optional_argument_reads_as_left_out() {
    let ws = workspace();
    let host = builder(ws.path()).build().await.unwrap();
    let call = |args: serde_json::Value| {
        host.call(CallRequest::new("http_fetch", args).mode(SandboxMode::None))
    };
    let r = call(
        json!({"url": "http://127.0.0.1:1/", "method": null, "headers": null,
                        "body": null, "max_body_bytes": null}),
    )
    .await;
    // Past validation: the tool ran (and was refused the network).
    assert_eq!(r.code(), Some(ErrorCode::ToolError), "{r:?}");
    let event = result_event(&host, &r);
    assert!(
        event["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("HTTP-request-denied"),
        "{event}"
    );
    let r = call(json!({"url": null})).await;
    assert_eq!(r.code(), Some(ErrorCode::InvalidArgs), "{r:?}");
}

/// A tool's error message reaches the model too: the policy's text rules
/// apply to it as to content (here, `grep`'s error quotes the pattern it
/// could not compile, which carries the secret).
#[tokio::test]
async fn redaction_reaches_a_tools_error_message() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.policy(policy(
        "version = 1\n[post_execute]\nredact = [\"sk-[A-Za-z0-9]{20,}\"]\n",
    ));
    let host = b.build().await.unwrap();
    let r = host
        .call(CallRequest::new(
            "grep",
            json!({"pattern": format!("{SECRET}("), "path": "."}),
        ))
        .await;
    assert_eq!(r.code(), Some(ErrorCode::ToolError), "{r:?}");
    let message = &r.error.as_ref().unwrap().message;
    assert!(!message.contains(SECRET), "{message}");
    assert!(message.contains("[REDACTED]"), "{message}");
    assert!(!text_of(&r).contains(SECRET));
}

/// Puts a text block, an image and an embedded text resource in the
/// content, each carrying the secret.
struct MixedContentHook;

impl toolhost::PostExecuteHook for MixedContentHook {
    fn name(&self) -> &str {
        "mixed"
    }
    fn inspect(&self, _: &toolhost::Descriptor, _: &toolhost::CallResult) -> toolhost::PostAction {
        let content = serde_json::from_value(json!([
            {"type": "text", "text": format!("key {SECRET}")},
            {"type": "image", "data": "aW1n", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "test://r", "text": format!("also {SECRET}")}},
        ]))
        .unwrap();
        toolhost::PostAction::ReplaceContent(content)
    }
}

/// The policy's text rules reach every block that carries text (text and
/// embedded text resources) and leave the others, in place and in order.
#[tokio::test]
async fn redaction_reaches_text_in_every_block_and_leaves_media_alone() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "plain\n").unwrap();
    let mut b = builder(ws.path());
    b.policy(policy(
        "version = 1\n[post_execute]\nredact = [\"sk-[A-Za-z0-9]{20,}\"]\n",
    ))
    .post_execute(Box::new(MixedContentHook));
    let host = b.build().await.unwrap();
    let r = host
        .call(CallRequest::new("read_file", json!({"path": "a.txt"})))
        .await;
    assert!(r.is_ok(), "{:?}", r.error);
    assert_eq!(
        serde_json::to_value(&r.content).unwrap(),
        json!([
            {"type": "text", "text": "key [REDACTED]"},
            {"type": "image", "data": "aW1n", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "test://r", "text": "also [REDACTED]"}},
        ])
    );
}

#[tokio::test]
async fn max_content_chars_cuts_content_not_canonical() {
    let ws = workspace();
    let long = "a".repeat(50);
    std::fs::write(ws.path().join("long.txt"), &long).unwrap();
    let mut b = builder(ws.path());
    b.policy(policy(
        "version = 1\n[post_execute]\nmax_content_chars = 10\n",
    ));
    let host = b.build().await.unwrap();
    let r = host
        .call(CallRequest::new("read_file", json!({"path": "long.txt"})))
        .await;
    assert!(r.is_ok(), "{:?}", r.error);
    let text = text_of(&r);
    assert!(
        text.starts_with(&"a".repeat(10)) && !text.contains(&"a".repeat(11)),
        "{text}"
    );
    assert!(text.contains("40 characters cut by policy"), "{text}");
    assert_eq!(r.canonical["content"], long);
}

#[tokio::test]
async fn block_matching_withholds_content_and_canonical() {
    let ws = workspace();
    std::fs::write(
        ws.path().join("key.pem"),
        "-----BEGIN PRIVATE KEY-----\nMIIE\n",
    )
    .unwrap();
    std::fs::write(ws.path().join("ok.txt"), "harmless").unwrap();
    let mut b = builder(ws.path());
    b.policy(policy(
        "version = 1\n[post_execute]\nblock_matching = \"BEGIN PRIVATE KEY\"\n",
    ));
    let host = b.build().await.unwrap();
    let r = host
        .call(CallRequest::new("read_file", json!({"path": "key.pem"})))
        .await;
    assert_eq!(r.code(), Some(ErrorCode::PostExecuteBlocked), "{r:?}");
    assert_eq!(r.canonical, serde_json::Value::Null);
    assert!(!serde_json::to_string(&r).unwrap().contains("MIIE"));
    for e in host.log().events_for_call(&r.call_id).unwrap() {
        assert!(
            !e.payload.to_string().contains("MIIE"),
            "the blocked text reached the log: {e:?}"
        );
    }
    let ok = host
        .call(CallRequest::new("read_file", json!({"path": "ok.txt"})))
        .await;
    assert!(ok.is_ok(), "control: {:?}", ok.error);
}

#[tokio::test]
async fn a_hook_can_replace_content_and_canonical_stays() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "original").unwrap();
    let mut b = builder(ws.path());
    b.post_execute(Box::new(CountingHook::new(HookKind::ReplaceContent(
        "summarised".into(),
    ))));
    let host = b.build().await.unwrap();
    let r = host
        .call(CallRequest::new("read_file", json!({"path": "a.txt"})))
        .await;
    assert!(r.is_ok(), "{:?}", r.error);
    assert_eq!(r.content, vec![ContentItem::text("summarised")]);
    assert_eq!(r.canonical["content"], "original");
    assert_eq!(result_event(&host, &r)["content"][0]["text"], "summarised");
}

#[tokio::test]
async fn a_hook_replacing_canonical_is_validated_against_the_output_schema() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "original").unwrap();
    // Valid replacement: accepted.
    let mut b = builder(ws.path());
    let valid = json!({"path": "a.txt", "content": "rewritten", "bytes": 9});
    b.post_execute(Box::new(CountingHook::new(HookKind::ReplaceCanonical(
        valid.clone(),
    ))));
    let host = b.build().await.unwrap();
    let r = host
        .call(CallRequest::new("read_file", json!({"path": "a.txt"})))
        .await;
    assert!(r.is_ok(), "{:?}", r.error);
    assert_eq!(r.canonical, valid);

    // Schema-breaking replacement: the orchestrator blocks the result.
    let mut b = builder(ws.path());
    let later = CountingHook::new(HookKind::Keep);
    b.post_execute(Box::new(CountingHook::new(HookKind::ReplaceCanonical(
        json!({"path": 1}),
    ))))
    .post_execute(Box::new(later.clone()));
    let host = b.build().await.unwrap();
    let r = host
        .call(CallRequest::new("read_file", json!({"path": "a.txt"})))
        .await;
    assert_eq!(r.code(), Some(ErrorCode::PostExecuteBlocked), "{r:?}");
    assert!(
        r.error.as_ref().unwrap().message.contains("output schema"),
        "{:?}",
        r.error
    );
    assert_eq!(r.canonical, serde_json::Value::Null);
    assert!(!text_of(&r).contains("original"));
    assert_eq!(later.count(), 0, "hooks after a block do not run");
}

#[tokio::test]
async fn a_panicking_hook_blocks() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "original").unwrap();
    let mut b = builder(ws.path());
    b.post_execute(Box::new(CountingHook::new(HookKind::Panic)));
    let host = b.build().await.unwrap();
    let r = host
        .call(CallRequest::new("read_file", json!({"path": "a.txt"})))
        .await;
    assert_eq!(r.code(), Some(ErrorCode::PostExecuteBlocked), "{r:?}");
    assert!(
        r.error.as_ref().unwrap().message.contains("panicked"),
        "{:?}",
        r.error
    );
    assert_eq!(r.canonical, serde_json::Value::Null);
    assert!(!text_of(&r).contains("original"));
}

#[tokio::test]
async fn a_hook_block_is_post_execute_blocked() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "original").unwrap();
    let mut b = builder(ws.path());
    b.post_execute(Box::new(CountingHook::new(HookKind::Block(
        "not for the model".into(),
    ))));
    let host = b.build().await.unwrap();
    let r = host
        .call(CallRequest::new("read_file", json!({"path": "a.txt"})))
        .await;
    assert_eq!(r.code(), Some(ErrorCode::PostExecuteBlocked), "{r:?}");
    assert!(
        r.error
            .as_ref()
            .unwrap()
            .message
            .contains("not for the model")
    );
    assert_eq!(r.canonical, serde_json::Value::Null);
}

#[tokio::test]
async fn a_panicking_observer_changes_nothing() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "original").unwrap();
    let before = CountingObserver::default();
    let after = CountingObserver::default();
    let mut b = builder(ws.path());
    b.observer(Box::new(before.clone()))
        .observer(Box::new(PanickingObserver))
        .observer(Box::new(after.clone()));
    let host = b.build().await.unwrap();
    let r = host
        .call(CallRequest::new("read_file", json!({"path": "a.txt"})))
        .await;
    assert!(r.is_ok(), "{:?}", r.error);
    assert_eq!(r.canonical["content"], "original");
    assert_eq!(text_of(&r), "original");
    // Refusals are observed too.
    let refused = host.call(CallRequest::new("nope", json!({}))).await;
    assert_eq!(refused.code(), Some(ErrorCode::UnknownTool));
    // Observers run on their own threads: wait (bounded) for both records.
    let both = vec![r.call_id.clone(), refused.call_id.clone()];
    for o in [&before, &after] {
        assert_eq!(o.wait_for(2), both, "an observer missed a record");
    }
    assert_eq!(after.count.load(Ordering::SeqCst), 2);
    assert_eq!(host.observer_drops(), 0);
}

// ─────────────────────────────── the CLI ───────────────────────────────

#[test]
fn cli_rejects_a_bad_policy_naming_the_line() {
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "hello").unwrap();
    let file = state.path().join("bad.toml");
    std::fs::write(
        &file,
        "version = 1\n\n[[rules]]\ntool = \"read_file\"\ndecision = \"maybe\"\nreason = \"x\"\n",
    )
    .unwrap();
    let out = cli(
        ws.path(),
        state.path(),
        &["--policy", file.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.toml:5:"),
        "the error names the file and line: {stderr}"
    );
    assert!(stderr.contains("maybe"), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "no result is printed for a configuration error"
    );
}

#[test]
fn cli_deny_policy_exits_1_with_policy_denied() {
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "hello").unwrap();
    // Control: without a policy the call succeeds.
    let out = cli(ws.path(), state.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ok: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ok["status"], "ok");
    assert_eq!(ok["canonical"]["content"], "hello");

    let file = state.path().join("deny.toml");
    std::fs::write(
        &file,
        "version = 1\n[[rules]]\ntool = \"read_*\"\ndecision = \"deny\"\nreason = \"no reading\"\n",
    )
    .unwrap();
    let out = cli(
        ws.path(),
        state.path(),
        &["--policy", file.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout.trim().lines().count(),
        1,
        "exactly one JSON object: {stdout}"
    );
    let r: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(r["status"], "error");
    assert_eq!(r["error"]["code"], "POLICY_DENIED");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no reading"),
        "{r}"
    );
    assert_eq!(r["tool"], "read_file");
    assert_eq!(r["canonical"], serde_json::Value::Null);
}

/// Puts a secret into the model content, and may panic in `name`.
struct LeakyHook {
    name_panics: bool,
}

impl toolhost::PostExecuteHook for LeakyHook {
    fn name(&self) -> &str {
        if self.name_panics {
            panic!("hook name bug");
        }
        "leaky"
    }
    fn inspect(&self, _: &toolhost::Descriptor, _: &toolhost::CallResult) -> toolhost::PostAction {
        toolhost::PostAction::ReplaceContent(vec![toolhost::ContentItem::text(format!(
            "leaked {SECRET}"
        ))])
    }
}

#[tokio::test]
async fn the_policy_has_the_last_word_over_library_hooks() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "plain\n").unwrap();
    let mut b = builder(ws.path());
    b.policy(policy(
        "version = 1\n[post_execute]\nredact = [\"sk-[A-Za-z0-9]{20,}\"]\n",
    ))
    .post_execute(Box::new(LeakyHook { name_panics: false }));
    let host = b.build().await.unwrap();
    let r = host
        .call(CallRequest::new("read_file", json!({"path": "a.txt"})))
        .await;
    assert!(r.is_ok(), "{:?}", r.error);
    // The hook's content is redacted by the policy that runs after it.
    assert_eq!(text_of(&r), "leaked [REDACTED]");
}

#[tokio::test]
async fn a_hook_whose_name_panics_is_caught_and_the_host_survives() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "plain\n").unwrap();
    let mut b = builder(ws.path());
    b.post_execute(Box::new(LeakyHook { name_panics: true }));
    let host = b.build().await.unwrap();
    let r = host
        .call(CallRequest::new("read_file", json!({"path": "a.txt"})))
        .await;
    // The panic in `name` is caught: the hook's action applies (no policy
    // here), and no panic escapes the call.
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(text_of(&r), format!("leaked {SECRET}"));
    let again = host
        .call(CallRequest::new("read_file", json!({"path": "a.txt"})))
        .await;
    assert!(again.is_ok(), "the next call works: {again:?}");
}

// ───────────────────────────── the builder ─────────────────────────────

/// A builder's configuration moves into the host it builds: a second
/// `build` is an error, never a host that silently lacks the approver,
/// guards, hooks or tools of the first.
#[tokio::test]
async fn a_second_build_is_an_error_not_a_host_without_configuration() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.policy(policy(ASK_WRITES));
    let first = b.build().await.unwrap();
    assert!(!first.tools(None).is_empty());
    match b.build().await {
        Err(HostError::AlreadyBuilt) => {}
        Err(e) => panic!("expected AlreadyBuilt, got {e}"),
        Ok(h) => panic!(
            "a second build returned a host with tools {:?}",
            h.tools(None)
                .iter()
                .map(|t| &t.descriptor.name)
                .collect::<Vec<_>>()
        ),
    }
}

// ───────────────────────────── rate limits ─────────────────────────────

const RATE_LIMITED_WRITES: &str = r#"
version = 1
mode = "workspace-write"

[rate_limits]
per_client = { calls = 3, per_seconds = 3600 }

[[rate_limits.tools]]
tool = "write_file"
calls = 1
per_seconds = 3600
"#;

#[tokio::test]
async fn a_client_over_its_limit_is_rate_limited_before_validation_and_logged() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.policy(policy(RATE_LIMITED_WRITES));
    let host = b.build().await.unwrap();
    let first = host.call(write("a.txt", "1").client("alice")).await;
    assert!(first.is_ok(), "{first:?}");
    // The second write breaks the per-tool limit, even with arguments that
    // would fail validation: the limit is checked before they are.
    let mut second = write("b.txt", "2").client("alice");
    second.args = r#"{"path": "b.txt", "content": "#.into();
    let r = host.call(second).await;
    assert_refused(&host, &r, ErrorCode::RateLimited);
    let msg = &r.error.as_ref().unwrap().message;
    assert!(
        msg.contains("write_file") && msg.contains("retry in"),
        "{msg}"
    );
    assert!(!ws.path().join("b.txt").exists(), "the body ran");
    // Another client has its own buckets.
    let bob = host.call(write("c.txt", "3").client("bob")).await;
    assert!(bob.is_ok(), "{bob:?}");
    // Alice's other tools count against her per-client limit of 3 calls;
    // the refused call took no token from it.
    let read = |p: &str| {
        CallRequest::new("read_file", json!({ "path": p }))
            .mode(SandboxMode::WorkspaceWrite)
            .client("alice")
    };
    for _ in 0..2 {
        let ok = host.call(read("a.txt")).await;
        assert!(ok.is_ok(), "{ok:?}");
    }
    let over = host.call(read("a.txt")).await;
    assert_refused(&host, &over, ErrorCode::RateLimited);
    // Calls without a client share one bucket, apart from named clients.
    let anon = host
        .call(
            CallRequest::new("read_file", json!({ "path": "a.txt" }))
                .mode(SandboxMode::WorkspaceWrite),
        )
        .await;
    assert!(anon.is_ok(), "{anon:?}");
}

/// A compile cache inside the workspace is refused, as a state directory
/// there is: a tool that may write the workspace could rewrite the compiled
/// code the host maps and runs natively. Also through a symlink, and for a
/// cache directory that does not exist yet.
#[tokio::test]
async fn a_compile_cache_inside_the_workspace_is_refused() {
    let ws = workspace();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(ws.path(), outside.path().join("link")).unwrap();
    for cache in [
        ws.path().join(".cache"),
        ws.path().to_path_buf(),
        outside.path().join("link/sub/cache"),
    ] {
        let mut b = toolhost::HostBuilder::new();
        b.embedded_tools()
            .workspace(ws.path())
            .runtime_options(toolhost::RuntimeOptions {
                cache_dir: Some(cache.clone()),
                ..toolhost::RuntimeOptions::default()
            });
        match b.build().await {
            Err(HostError::UnsafeState(m)) => assert!(m.contains("compile cache"), "{m}"),
            Err(e) => panic!("{}: {e}", cache.display()),
            Ok(_) => panic!(
                "{}: a cache inside the workspace was accepted",
                cache.display()
            ),
        }
    }
    // Beside the workspace it is fine.
    let mut b = toolhost::HostBuilder::new();
    b.embedded_tools()
        .workspace(ws.path())
        .runtime_options(toolhost::RuntimeOptions {
            cache_dir: Some(crate::support::cache_dir()),
            ..toolhost::RuntimeOptions::default()
        });
    assert!(b.build().await.is_ok());
}

/// The scratch directories of `workspace-write` calls are made under
/// `TMPDIR`: where that is inside the workspace, a call could read or
/// change another call's scratch directory, so such a call is refused
/// `SANDBOX_UNAVAILABLE` before its body; calls that make no scratch
/// directory (here `read-only`) still run.
#[test]
fn a_workspace_write_call_is_refused_where_the_workspace_holds_tmpdir() {
    let ws = workspace();
    let tmp = ws.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::write(ws.path().join("a.txt"), "a").unwrap();
    let state = crate::support::tempdir();
    let run = |tool: &str, args: &str, mode: &str, tmpdir: &std::path::Path| {
        std::process::Command::new(crate::support::bin())
            .args(["run", tool, "--json", "--args", args, "--mode", mode])
            .arg("--workspace")
            .arg(ws.path())
            .arg("--state")
            .arg(state.path())
            .env("TMPDIR", tmpdir)
            .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
            .output()
            .unwrap()
    };
    let read = run("read_file", r#"{"path":"a.txt"}"#, "read-only", &tmp);
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let write = run(
        "write_file",
        r#"{"path":"b.txt","content":"b"}"#,
        "workspace-write",
        &tmp,
    );
    let out: serde_json::Value = serde_json::from_slice(&write.stdout).unwrap();
    assert_eq!(out["error"]["code"], "SANDBOX_UNAVAILABLE", "{out}");
    let message = out["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("scratch directories' home"), "{message}");
    assert!(!ws.path().join("b.txt").exists());
    // With TMPDIR elsewhere, the same call runs.
    let write = run(
        "write_file",
        r#"{"path":"b.txt","content":"b"}"#,
        "workspace-write",
        state.path(),
    );
    assert!(
        write.status.success(),
        "{}",
        String::from_utf8_lossy(&write.stderr)
    );
    assert!(ws.path().join("b.txt").exists());
}

/// Explaining a call takes none of the client's rate-limit tokens: a
/// client with one call left may ask for explanations and still make it.
#[tokio::test]
async fn explaining_a_call_does_not_use_up_the_rate_limit() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.policy(policy(RATE_LIMITED_WRITES));
    let host = b.build().await.unwrap();
    for _ in 0..5 {
        let e = host.explain(&write("a.txt", "1").client("carol"));
        assert_eq!(e.answer, toolhost::Answer::Allow, "{e:?}");
    }
    let first = host.call(write("a.txt", "1").client("carol")).await;
    assert!(first.is_ok(), "{first:?}");
    let r = host.call(write("b.txt", "2").client("carol")).await;
    assert_eq!(r.code(), Some(ErrorCode::RateLimited), "{r:?}");
}
