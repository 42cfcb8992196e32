//! Principals, policy layers, `Host::explain` and argument patches through
//! the library and the command line (issue 18). MCP transports are covered
//! in `mcp_protocol` (stdio) and `mcp_http`.

use super::*;
use toolhost::log::EventKind;
use toolhost::{Answer, ApprovalRequest, Approver, BoxFuture, CallResult, Host, Observer};

const OWNER_ONLY: &str = r#"
version = 1
mode = "workspace-write"
[principals]
owners = ["alice"]
owner_only = ["write_file"]
"#;

fn names(tools: &[&toolhost::RegisteredTool]) -> Vec<String> {
    tools.iter().map(|t| t.descriptor.name.clone()).collect()
}

#[tokio::test]
async fn owner_only_tools_are_hidden_from_and_refused_for_non_owners() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.policy(policy(OWNER_ONLY));
    let host = b.build().await.unwrap();
    let bob = names(&host.tools_for(None, Some("bob"), None));
    assert!(!bob.contains(&"write_file".to_string()), "{bob:?}");
    assert!(bob.contains(&"read_file".to_string()), "{bob:?}");
    for owner in [None, Some("alice")] {
        let seen = names(&host.tools_for(None, owner, None));
        assert!(
            seen.contains(&"write_file".to_string()),
            "{owner:?}: {seen:?}"
        );
    }

    let r = host.call(write("bob.txt", "x").principal("bob")).await;
    assert_refused(&host, &r, ErrorCode::PolicyDenied);
    let msg = &r.error.as_ref().unwrap().message;
    assert!(
        msg.contains("principal \"bob\"")
            && msg.contains("[layer global, principals.owner_only[0] (line 6)"),
        "the refusal names the layer and rule: {msg}"
    );
    // The log's result names them too, and records who asked.
    assert_eq!(result_event(&host, &r)["error"]["message"], msg.as_str());
    let call = host.log().events_for_call(&r.call_id).unwrap();
    assert_eq!(call[0].payload["principal"], "bob");
    assert!(!ws.path().join("bob.txt").exists(), "the body ran");

    for (owner, file) in [(None, "local.txt"), (Some("alice"), "alice.txt")] {
        let mut req = write(file, "x");
        req.principal = owner.map(String::from);
        let ok = host.call(req).await;
        assert!(ok.is_ok(), "{owner:?}: {:?}", ok.error);
        assert!(ws.path().join(file).exists());
    }
}

#[test]
fn owner_only_through_the_cli() {
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let file = state.path().join("owners.toml");
    std::fs::write(&file, OWNER_ONLY).unwrap();
    let list = |principal: &str| {
        let out = std::process::Command::new(crate::support::bin())
            .args(["list", "--json", "--policy", file.to_str().unwrap()])
            .args(["--principal", principal])
            .env("TOOLHOST_CACHE_DIR", cache_dir())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let tools: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        tools
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert!(!list("bob").contains(&"write_file".to_string()));
    assert!(list("alice").contains(&"write_file".to_string()));

    let run = |principal: &str| {
        std::process::Command::new(crate::support::bin())
            .args(["run", "write_file", "--json", "--policy"])
            .arg(&file)
            .args(["--args", r#"{"path":"out.txt","content":"x"}"#])
            .args(["--principal", principal, "--workspace"])
            .arg(ws.path())
            .arg("--state")
            .arg(state.path())
            .env("TOOLHOST_CACHE_DIR", cache_dir())
            .output()
            .unwrap()
    };
    let out = run("bob");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["error"]["code"], "POLICY_DENIED", "{r}");
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
    let out = run("alice");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(ws.path().join("out.txt").exists());

    // A principal name that is not one is a usage error.
    let out = run("bob smith");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// A mode layer hides a tool in the mode the call runs in, not only in the
/// mode it asked for: `read_file` declares `read`, so a call asked in
/// `workspace-write` runs read-only, where the layer denies it.
#[tokio::test]
async fn a_mode_layer_hides_a_tool_in_the_mode_its_call_is_clamped_to() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "a").unwrap();
    let mut b = builder(ws.path());
    b.policy(policy(
        "version = 1\nmode = \"workspace-write\"\n[[layers]]\nkind = \"mode\"\nname = \"read-only\"\ndeny = [\"read_file\"]\n",
    ));
    let host = b.build().await.unwrap();
    for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
        // Not offered either: listing agrees with calling.
        let listed = names(&host.tools_for(None, None, Some(mode)));
        assert!(
            !listed.contains(&"read_file".to_string()),
            "{mode}: {listed:?}"
        );
        assert!(
            listed.contains(&"write_file".to_string()),
            "{mode}: {listed:?}"
        );
        let r = host
            .call(CallRequest::new("read_file", json!({"path": "a.txt"})).mode(mode))
            .await;
        assert_refused(&host, &r, ErrorCode::PolicyDenied);
        let msg = &r.error.as_ref().unwrap().message;
        assert!(msg.contains("layer mode:read-only"), "{mode}: {msg}");
    }
}

#[tokio::test]
async fn a_layer_refusal_names_its_layer_and_rule_in_the_log() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.policy(policy(
        r#"
version = 1
mode = "workspace-write"
[[layers]]
kind = "agent"
name = "reader"
[[layers.rules]]
tool = "write_file"
decision = "deny"
reason = "the reader agent does not write"
"#,
    ))
    .scope("reader", ScopeSpec::default());
    let host = b.build().await.unwrap();
    let r = host.call(write("out.txt", "x").scope("reader")).await;
    assert_refused(&host, &r, ErrorCode::PolicyDenied);
    let logged = result_event(&host, &r)["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        logged,
        "the reader agent does not write [layer agent:reader, layers[0].rules[0] (line 7)]"
    );
    // The same call from the global scope is not in that layer.
    let ok = host.call(write("out.txt", "x")).await;
    assert!(ok.is_ok(), "{:?}", ok.error);
}

// ─────────────── explain agrees with what a real call does ───────────────

/// One refusal path of the governance suite: a host and a call.
pub(super) struct Case {
    pub(super) name: &'static str,
    policy: &'static str,
    approver: Option<ApprovalOutcome>,
    guard: bool,
    scope: bool,
    pub(super) request: CallRequest,
}

fn case(name: &'static str, policy: &'static str, request: CallRequest) -> Case {
    Case {
        name,
        policy,
        approver: None,
        guard: false,
        scope: false,
        request,
    }
}

const DENY_WRITES: &str = "version = 1\nmode = \"workspace-write\"\n[[rules]]\ntool = \"write_*\"\ndecision = \"deny\"\nreason = \"no writes in this session\"\n";
const SECRETS_GUARD: &str = "version = 1\nmode = \"workspace-write\"\n[[guards]]\nname = \"no-secrets-dir\"\ntool = \"write_file\"\nreason = \"nothing under secrets/\"\ndeny_paths = [\"secrets/**\"]\npointer = \"/path\"\n";
const NEVER: &str = "version = 1\nmode = \"workspace-write\"\napproval = \"never\"\n[[rules]]\ntool = \"write_file\"\ndecision = \"ask\"\nreason = \"writes need a human\"\n";
const PLAIN: &str = "version = 1\nmode = \"workspace-write\"\n";
const LAYERED: &str = r#"
version = 1
mode = "workspace-write"
[principals]
owner_only = ["write_file"]
[[layers]]
kind = "principal"
name = "bob"
deny = ["list_dir"]
[[layers]]
kind = "mode"
name = "read-only"
[[layers.guards]]
name = "no-dotfiles"
tool = "read_file"
pointer = "/path"
deny_paths = [".*"]
reason = "no dotfiles when reading"
[[layers]]
kind = "mode"
name = "danger-full-access"
approval = "never"
[[patches]]
tool = "write_file"
pointer = "/path"
force = 5
"#;

pub(super) fn cases() -> Vec<Case> {
    let ask = |name, outcome, request| Case {
        approver: Some(outcome),
        ..case(name, ASK_WRITES, request)
    };
    let read = |path: &str| CallRequest::new("read_file", json!({ "path": path }));
    vec![
        case(
            "unknown tool",
            PLAIN,
            CallRequest::new("no_such_tool", json!({})),
        ),
        case(
            "bad json",
            ASK_WRITES,
            CallRequest {
                tool: "write_file".into(),
                args: r#"{"path": "out.txt", "content": "#.into(),
                ..CallRequest::default()
            },
        ),
        case(
            "schema violation",
            ASK_WRITES,
            CallRequest::new("write_file", json!({"path": 5, "content": "x"})),
        ),
        case("policy deny", DENY_WRITES, write("out.txt", "x")),
        case(
            "guard deny",
            SECRETS_GUARD,
            write("./secrets/../secrets/k", "x"),
        ),
        Case {
            guard: true,
            ..case("library guard", PLAIN, write("out.txt", "forbidden"))
        },
        ask(
            "approval rejected",
            ApprovalOutcome::Rejected,
            write("out.txt", "x"),
        ),
        ask(
            "approval cancelled",
            ApprovalOutcome::Cancelled,
            write("o.txt", "x"),
        ),
        ask(
            "approval unavailable",
            ApprovalOutcome::Unavailable,
            write("o", "x"),
        ),
        case("no approver", ASK_WRITES, write("out.txt", "x")),
        case("approval never", NEVER, write("out.txt", "x")),
        case(
            "escalation not wider",
            PLAIN,
            write("out.txt", "x").escalate(SandboxMode::ReadOnly, "why not"),
        ),
        case(
            "escalation without justification",
            PLAIN,
            write("out.txt", "x").escalate(SandboxMode::DangerFullAccess, " "),
        ),
        case(
            "escalation under approval never",
            NEVER,
            read("a.txt").escalate(SandboxMode::DangerFullAccess, "need it"),
        ),
        case(
            "tool needs a wider mode",
            PLAIN,
            write("out.txt", "x").mode(SandboxMode::ReadOnly),
        ),
        Case {
            scope: true,
            ..case(
                "hidden by a scope",
                PLAIN,
                write("out.txt", "x").scope("reader"),
            )
        },
        case("undeclared scope", PLAIN, read("a.txt").scope("nobody")),
        case(
            "owner-only",
            LAYERED,
            write("out.txt", "x").principal("bob"),
        ),
        case(
            "principal layer deny",
            LAYERED,
            CallRequest::new("list_dir", json!({"path": "."})).principal("bob"),
        ),
        case(
            "mode layer guard",
            LAYERED,
            read(".env").mode(SandboxMode::ReadOnly),
        ),
        case(
            "mode layer approval never",
            LAYERED,
            read("a.txt").escalate(SandboxMode::DangerFullAccess, "need it"),
        ),
        case("patch breaks the schema", LAYERED, write("out.txt", "x")),
        // Controls: calls that run.
        case("allowed", PLAIN, read("a.txt")),
        ask(
            "allowed once",
            ApprovalOutcome::AllowedOnce,
            write("ok.txt", "x"),
        ),
    ]
}

async fn host_for(c: &Case, ws: &std::path::Path) -> Host {
    builder_for(c, ws).build().await.unwrap()
}

/// The builder of `c`'s host, not built yet.
pub(super) fn builder_for(c: &Case, ws: &std::path::Path) -> toolhost::HostBuilder {
    let mut b = builder(ws);
    b.policy(policy(c.policy));
    if let Some(outcome) = c.approver {
        b.approver(Box::new(Counting::new(outcome)));
    }
    if c.guard {
        b.guard(Box::new(DenyWord("forbidden")));
    }
    if c.scope {
        b.scope(
            "reader",
            ScopeSpec {
                allow: Some(vec!["read_file".into()]),
                ..ScopeSpec::default()
            },
        );
    }
    b
}

#[tokio::test]
async fn explain_agrees_with_the_real_call_on_every_refusal_path() {
    let mut refusals = std::collections::BTreeSet::new();
    for c in cases() {
        let ws = workspace();
        std::fs::write(ws.path().join("a.txt"), "hello").unwrap();
        let host = host_for(&c, ws.path()).await;
        let explained = host.explain(&c.request);
        assert!(
            host.log().events().unwrap().is_empty(),
            "{}: explain recorded something",
            c.name
        );
        let r = host.call(c.request.clone()).await;
        let asked = host
            .log()
            .events_for_call(&r.call_id)
            .unwrap()
            .into_iter()
            .find(|e| e.kind == EventKind::ApprovalAsked);
        match (&explained.answer, &asked, &r.error) {
            (Answer::Refused { code, message }, None, Some(e)) => {
                assert_eq!((*code, message), (e.code, &e.message), "{}", c.name);
                refusals.insert(e.code.as_str());
            }
            (Answer::Ask { reason, approver }, Some(asked), _) => {
                assert_eq!(
                    asked.payload["request"]["reason"],
                    reason.as_str(),
                    "{}",
                    c.name
                );
                assert_eq!(asked.payload["approver"], approver.as_str(), "{}", c.name);
                if let Some(e) = &r.error {
                    refusals.insert(e.code.as_str());
                }
            }
            (Answer::Allow, None, None) => {}
            other => panic!("{}: explain and the call disagree: {other:?}", c.name),
        }
    }
    // Every code a call can be refused with before its body runs.
    let expected = [
        "APPROVAL_CANCELLED",
        "APPROVAL_REJECTED",
        "APPROVAL_UNAVAILABLE",
        "ESCALATION_INVALID",
        "GUARD_DENIED",
        "INVALID_ARGS",
        "POLICY_DENIED",
        "SANDBOX_UNAVAILABLE",
        "UNKNOWN_TOOL",
    ];
    assert_eq!(refusals.into_iter().collect::<Vec<_>>(), expected);
}

#[test]
fn explain_through_the_cli_names_each_layer() {
    let state = tempfile::tempdir().unwrap();
    let ws = workspace();
    let file = state.path().join("layered.toml");
    std::fs::write(&file, LAYERED).unwrap();
    let out = std::process::Command::new(crate::support::bin())
        .args(["explain", "list_dir", "--args", r#"{"path":"."}"#])
        .args(["--principal", "bob", "--json", "--policy"])
        .arg(&file)
        .arg("--workspace")
        .arg(ws.path())
        .arg("--state")
        .arg(state.path())
        .env("TOOLHOST_CACHE_DIR", cache_dir())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let layers: Vec<&str> = e["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["layer"].as_str().unwrap())
        .collect();
    // `list_dir` declares `read`: asked in workspace-write, it would run
    // read-only, so the read-only mode layer applies too.
    assert_eq!(layers, ["global", "principal:bob", "mode:read-only"], "{e}");
    assert_eq!(e["mode"], "read-only", "{e}");
    assert_eq!(e["layers"][1]["visible"], false, "{e}");
    assert_eq!(e["layers"][1]["hidden_by"], "layers[0].deny[0] (line 9)");
    assert_eq!(e["answer"]["status"], "refused");
    assert_eq!(e["answer"]["code"], "POLICY_DENIED");
    // Nothing ran and nothing was recorded in the state directory.
    let log = std::process::Command::new(crate::support::bin())
        .args(["log", "--json", "--state"])
        .arg(state.path())
        .output()
        .unwrap();
    assert!(log.stdout.is_empty(), "{log:?}");
}

// ───────────────────────────── argument patches ─────────────────────────────

const PATCHES: &str = r#"
version = 1
mode = "workspace-write"
[[rules]]
tool = "write_file"
decision = "ask"
reason = "writes need a human"
[[patches]]
tool = "write_file"
pointer = "/path"
rewrite_prefix = { from = "/tmp/", to = "scratch/" }
"#;

/// Allows, and keeps what it was shown.
#[derive(Clone, Default)]
struct Recording(Arc<std::sync::Mutex<Vec<ApprovalRequest>>>);

impl Approver for Recording {
    fn name(&self) -> String {
        "recording".into()
    }
    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        self.0.lock().unwrap().push(request.clone());
        Box::pin(async { (ApprovalOutcome::AllowedOnce, None) })
    }
}

/// Never answers.
struct Silent;

impl Approver for Silent {
    fn name(&self) -> String {
        "silent".into()
    }
    fn decide<'a>(
        &'a self,
        _: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        Box::pin(std::future::pending())
    }
}

/// A call dropped while it waits for its approval (a caller's timeout)
/// still leaves the asked/decided pair in the log: `cancelled`, and the
/// body never ran.
#[tokio::test]
async fn a_call_dropped_while_waiting_for_approval_closes_the_pair() {
    let ws = workspace();
    let mut b = builder(ws.path());
    b.policy(policy(crate::governance::ASK_WRITES))
        .approver(Box::new(Silent));
    let host = b.build().await.unwrap();
    let req = write("dropped.txt", "x");
    let call_id = "call-dropped-while-asking".to_string();
    let dropped = tokio::time::timeout(
        std::time::Duration::from_millis(200),
        host.call(CallRequest {
            call_id: Some(call_id.clone()),
            ..req
        }),
    )
    .await;
    assert!(dropped.is_err(), "the call was expected to wait");
    let events = host.log().events_for_call(&call_id).unwrap();
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&EventKind::ApprovalAsked), "{kinds:?}");
    let decided = events
        .iter()
        .find(|e| e.kind == EventKind::ApprovalDecided)
        .unwrap_or_else(|| panic!("no approval/decided: {kinds:?}"));
    assert_eq!(decided.payload["outcome"], "cancelled");
    assert!(!kinds.contains(&EventKind::ToolIntent), "{kinds:?}");
    // And the call ends: its result is the log's last word on it.
    assert_cancelled_result(&events, "dropped while waiting for approval");
    assert!(!ws.path().join("dropped.txt").exists());
}

/// The last of a call's `events` is its one `tool/result`: `CANCELLED`,
/// its message containing `why`.
fn assert_cancelled_result(events: &[toolhost::log::Event], why: &str) {
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    let results = kinds
        .iter()
        .filter(|k| **k == EventKind::ToolResult)
        .count();
    assert_eq!(results, 1, "{kinds:?}");
    let last = events.last().unwrap();
    assert_eq!(last.kind, EventKind::ToolResult, "{kinds:?}");
    assert_eq!(
        last.payload["error"]["code"], "CANCELLED",
        "{}",
        last.payload
    );
    assert!(
        last.payload["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(why)),
        "{}",
        last.payload
    );
}

/// A batch dropped while one of its calls waits for approval leaves no
/// call without a result, and writes them in call order: a call refused
/// before keeps its refusal, a call admitted before (whose intent the batch
/// had not written yet) ends `CANCELLED`, and the waiting call ends
/// `CANCELLED` with its pair closed; no body ran.
#[tokio::test]
async fn a_batch_dropped_while_a_call_waits_for_approval_ends_every_call() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "a").unwrap();
    let mut b = builder(ws.path());
    b.policy(policy(crate::governance::ASK_WRITES))
        .approver(Box::new(Silent));
    let host = b.build().await.unwrap();
    let unknown = CallRequest::new("no_such_tool", serde_json::json!({}));
    let read = CallRequest::new("read_file", serde_json::json!({"path": "a.txt"}))
        .mode(toolhost::SandboxMode::ReadOnly);
    let batch = host.call_batch(vec![unknown, read, write("dropped.txt", "x")]);
    let asked = || crate::support::logged(&host, EventKind::ApprovalAsked) > 0;
    crate::support::drop_when(batch, "its approval is asked", asked).await;
    let events = host.log().events().unwrap();
    let call_of = |tool: &str| {
        let calls: Vec<&str> = events
            .iter()
            .filter(|e| e.kind == EventKind::ToolCall && e.payload["tool"] == tool)
            .map(|e| e.call_id.as_str())
            .collect();
        assert_eq!(calls.len(), 1, "{tool}: {events:?}");
        host.log().events_for_call(calls[0]).unwrap()
    };
    let (unknown, read, write) = (
        call_of("no_such_tool"),
        call_of("read_file"),
        call_of("write_file"),
    );
    let last = |events: &[toolhost::log::Event]| events.last().unwrap().clone();
    assert_eq!(last(&unknown).kind, EventKind::ToolResult);
    assert_eq!(last(&unknown).payload["error"]["code"], "UNKNOWN_TOOL");
    assert_cancelled_result(&read, "the batch was dropped");
    assert_cancelled_result(&write, "dropped while waiting for approval");
    assert_eq!(
        write
            .iter()
            .find(|e| e.kind == EventKind::ApprovalDecided)
            .map(|e| e.payload["outcome"].clone()),
        Some(serde_json::json!("cancelled"))
    );
    // The results in call order.
    let seqs = [last(&unknown).seq, last(&read).seq, last(&write).seq];
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(!events.iter().any(|e| e.kind == EventKind::ToolIntent));
    assert_eq!(host.log().pending_calls().unwrap(), Vec::<String>::new());
    assert!(!ws.path().join("dropped.txt").exists());
}

/// Keeps the canonical path of every result (what the body saw).
#[derive(Clone, Default)]
struct SeenPaths(Arc<std::sync::Mutex<Vec<String>>>);

impl Observer for SeenPaths {
    fn observe(&self, r: &CallResult) {
        if let Some(p) = r.canonical["path"].as_str() {
            self.0.lock().unwrap().push(p.to_string());
        }
    }
}

impl toolhost::PostExecuteHook for SeenPaths {
    fn name(&self) -> &str {
        "seen-paths"
    }
    fn inspect(&self, _: &toolhost::Descriptor, r: &CallResult) -> toolhost::PostAction {
        self.observe(r);
        toolhost::PostAction::Keep
    }
}

#[tokio::test]
async fn patched_arguments_reach_the_approver_the_intent_and_the_body() {
    let ws = workspace();
    std::fs::create_dir(ws.path().join("scratch")).unwrap();
    let approver = Recording::default();
    let seen = SeenPaths::default();
    let mut b = builder(ws.path());
    b.policy(policy(PATCHES))
        .approver(Box::new(approver.clone()))
        .post_execute(Box::new(seen.clone()));
    let host = b.build().await.unwrap();
    let r = host.call(write("/tmp/note.txt", "hi")).await;
    assert!(r.is_ok(), "{:?}", r.error);
    // The body wrote where the patch pointed, not where the caller asked.
    assert_eq!(
        std::fs::read_to_string(ws.path().join("scratch/note.txt")).unwrap(),
        "hi"
    );
    assert_eq!(seen.0.lock().unwrap().as_slice(), ["scratch/note.txt"]);
    let shown = approver.0.lock().unwrap().clone();
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0].args["path"], "scratch/note.txt");
    assert!(
        shown[0].reason.contains(
            "patches[0] (line 8) set /path from \"/tmp/note.txt\" to \"scratch/note.txt\""
        ),
        "the approver is told what changed: {}",
        shown[0].reason
    );
    let intent = intent_event(&host, &r);
    assert_eq!(intent["args"]["path"], "scratch/note.txt");
    assert_eq!(intent["original_args"]["path"], "/tmp/note.txt");
    assert_eq!(intent["patches"][0]["patch"], "patches[0] (line 8)");
    assert_eq!(intent["patches"][0]["before"], "/tmp/note.txt");

    // A call no patch touches records no originals.
    let plain = host.call(write("plain.txt", "x")).await;
    assert!(plain.is_ok(), "{:?}", plain.error);
    assert!(intent_event(&host, &plain).get("original_args").is_none());
}

#[tokio::test]
async fn a_patch_that_breaks_the_schema_refuses_before_approval() {
    let ws = workspace();
    let approver = Counting::new(ApprovalOutcome::AllowedOnce);
    let mut b = builder(ws.path());
    b.policy(policy(&format!(
        "{ASK_WRITES}[[patches]]\ntool = \"write_file\"\npointer = \"/path\"\nforce = 5\n"
    )))
    .approver(Box::new(approver.clone()));
    let host = b.build().await.unwrap();
    let r = host.call(write("out.txt", "x")).await;
    assert_refused(&host, &r, ErrorCode::InvalidArgs);
    let msg = &r.error.as_ref().unwrap().message;
    assert!(
        msg.contains("the patches (patches[0] (line 9))") && msg.contains("/path"),
        "{msg}"
    );
    assert_eq!(approver.count(), 0, "nobody is asked about a broken call");
    assert_no_approval_events(&host, &r);
    assert!(!ws.path().join("out.txt").exists(), "the body ran");
}

/// A library argument hook: rewrites `path` under `hooked/`, blocks
/// `content` "stop", breaks the schema on "break", panics on "panic".
struct PathHook;

impl toolhost::ArgsHook for PathHook {
    fn name(&self) -> &str {
        "path-hook"
    }
    fn before_call(
        &self,
        tool: &toolhost::Descriptor,
        args: &serde_json::Value,
    ) -> toolhost::ArgsAction {
        if tool.name != "write_file" {
            return toolhost::ArgsAction::Keep;
        }
        match args["content"].as_str() {
            Some("stop") => toolhost::ArgsAction::Block("no stopping".into()),
            Some("break") => toolhost::ArgsAction::Replace(json!({"path": 1, "content": "x"})),
            Some("panic") => panic!("hook bug"),
            _ => {
                let mut a = args.clone();
                a["path"] = json!(format!("hooked/{}", args["path"].as_str().unwrap_or("")));
                toolhost::ArgsAction::Replace(a)
            }
        }
    }
}

#[tokio::test]
async fn argument_hooks_rewrite_after_the_policy_patches_or_block_before_approval() {
    let ws = workspace();
    std::fs::create_dir_all(ws.path().join("hooked/scratch")).unwrap();
    let approver = Recording::default();
    let mut b = builder(ws.path());
    b.policy(policy(PATCHES))
        .approver(Box::new(approver.clone()))
        .args_hook(Box::new(PathHook));
    let host = b.build().await.unwrap();
    let r = host.call(write("/tmp/n.txt", "hi")).await;
    assert!(r.is_ok(), "{:?}", r.error);
    // The policy's patch first, then the hook.
    assert!(ws.path().join("hooked/scratch/n.txt").exists());
    let intent = intent_event(&host, &r);
    assert_eq!(intent["original_args"]["path"], "/tmp/n.txt");
    assert_eq!(intent["patches"][1]["patch"], "hook path-hook");
    assert_eq!(intent["args"]["path"], "hooked/scratch/n.txt");
    assert_eq!(
        approver.0.lock().unwrap()[0].args["path"],
        "hooked/scratch/n.txt"
    );

    for (content, code, needle) in [
        (
            "stop",
            ErrorCode::PolicyDenied,
            "blocked by argument hook path-hook: no stopping",
        ),
        (
            "break",
            ErrorCode::InvalidArgs,
            "the patches (hook path-hook)",
        ),
        (
            "panic",
            ErrorCode::PolicyDenied,
            "path-hook: the hook panicked",
        ),
    ] {
        let r = host.call(write("x.txt", content)).await;
        assert_refused(&host, &r, code);
        let msg = &r.error.as_ref().unwrap().message;
        assert!(msg.contains(needle), "{content}: {msg}");
        assert_no_approval_events(&host, &r);
    }
    assert_eq!(
        approver.0.lock().unwrap().len(),
        1,
        "refused calls are never asked"
    );
    assert!(!ws.path().join("hooked/x.txt").exists(), "the body ran");
}
