//! Code mode (issue 47): the `python` interpreter tool's code calls the
//! host's tools (`from host import tools`), each call a governed call of
//! its own: the caller's visibility, the policy's deny and ask rules, the
//! outer call's approver, the log naming the parent, the bound on inner
//! calls.
//!
//! Needs `TOOLHOST_PYTHON_TOOL_DIR` (scripts/install-python-interpreter);
//! without it the test does nothing, except under CI, where it fails.
//! One test, so that the interpreter is compiled once.

use super::*;
use toolhost::log::EventKind;
use toolhost::{ApprovalOutcome, CallResult, FixedApprover, Host, Limits, Status};

const POLICY: &str = r#"
version = 1
mode = "workspace-write"
[principals]
owners = ["alice"]
owner_only = ["grep"]
[[rules]]
tool = "list_dir"
decision = "deny"
reason = "no listing from code"
[[rules]]
tool = "sleep"
decision = "ask"
reason = "sleeping needs a human"
[[rules]]
tool = "write_file"
decision = "ask"
reason = "writes need a human"
"#;

async fn code_host(dir: &std::path::Path, ws: &std::path::Path, rules: &str) -> Host {
    code_host_within(dir, ws, rules, Duration::from_secs(120)).await
}

async fn code_host_within(
    dir: &std::path::Path,
    ws: &std::path::Path,
    rules: &str,
    deadline: Duration,
) -> Host {
    let mut b = builder(ws);
    b.program_tool_file(dir.join("python.tool.toml"))
        .policy(policy(rules))
        .approver(Box::new(FixedApprover(ApprovalOutcome::Rejected)))
        .limits(Limits {
            deadline,
            max_memory: 1 << 30,
            ..Limits::default()
        });
    b.build()
        .await
        .unwrap_or_else(|e| panic!("the host loads: {e}"))
}

async fn run(host: &Host, code: &str, principal: &str) -> CallResult {
    let req = CallRequest::new("python", json!({ "code": code })).principal(principal);
    host.call(req).await
}

fn stdout(r: &CallResult) -> String {
    r.canonical["stdout"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_mode_inner_calls_are_governed_calls() {
    let Some(dir) = crate::support::python_tool_dir() else {
        return;
    };
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "alpha\nbeta\n").unwrap();
    let host = code_host(&dir, ws.path(), POLICY).await;

    // Three tools in a loop, a deny rule on one: the code catches
    // POLICY_DENIED and the others complete.
    let code = r#"
from host import tools
import host
calls = [("read_file", {"path": "a.txt"}), ("list_dir", {"path": "."}),
         ("grep", {"pattern": "beta", "path": "a.txt"})]
for name, args in calls:
    try:
        v = getattr(tools, name)(**args)
        print(name, "ok", sorted(v))
    except host.ToolError as e:
        print(name, "refused", e.kind, str(e).split(":")[0])
"#;
    let r = run(&host, code, "alice").await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(
        stdout(&r),
        "read_file ok ['bytes', 'content', 'path']\nlist_dir refused denied POLICY_DENIED\n\
         grep ok ['matches', 'truncated']\n",
        "{r:?}"
    );
    // The receipt lists the inner calls; the log pairs each inner intent
    // with one result and names the parent.
    let inner = &r.receipt.inner_calls;
    assert_eq!(inner.len(), 3, "{inner:?}");
    let events = host.log().events().unwrap();
    for (i, call) in inner.iter().enumerate() {
        let id = call["call_id"].as_str().unwrap();
        let mine: Vec<_> = events.iter().filter(|e| e.call_id == id).collect();
        assert_eq!(mine[0].kind, EventKind::ToolCall);
        assert_eq!(mine[0].payload["parent"], r.call_id.as_str(), "{mine:?}");
        assert_eq!(mine[0].payload["principal"], "alice");
        let count = |k: EventKind| mine.iter().filter(|e| e.kind == k).count();
        assert_eq!(count(EventKind::ToolResult), 1, "{i}: {mine:?}");
        let intents = count(EventKind::ToolIntent);
        assert_eq!(intents, if i == 1 { 0 } else { 1 }, "{i}: {mine:?}");
    }
    assert_eq!(inner[1]["code"], "POLICY_DENIED");

    // An ask rule on an inner call, the outer call's approver rejecting.
    // A call the interpreter's shared gate pass cannot cover (write_file
    // runs alone) is refused before anyone is asked.
    let code = r#"
from host import tools
import host
for call in (lambda: tools.sleep(ms=1), lambda: tools.write_file(path="b.txt", content="x")):
    try:
        call()
    except host.ToolError as e:
        print(e.kind, str(e).split(":")[0])
"#;
    let r = run(&host, code, "alice").await;
    assert_eq!(
        stdout(&r),
        "denied APPROVAL_REJECTED\ndenied SANDBOX_UNAVAILABLE\n",
        "{r:?}"
    );
    assert!(!ws.path().join("b.txt").exists());
    let asked = host.log().events().unwrap();
    let asked = asked.iter().filter(|e| e.kind == EventKind::ApprovalAsked);
    assert_eq!(asked.count(), 1, "only sleep was asked about");

    // An owner-only tool is invisible to a non-owner's code, listed or called.
    let code = r#"
from host import tools
import host
print("grep" in dir(tools), "read_file" in dir(tools))
try:
    tools.grep(pattern="x", path="a.txt")
except AttributeError:
    print("no grep")
"#;
    let r = run(&host, code, "bob").await;
    assert_eq!(stdout(&r), "False True\nno grep\n", "{r:?}");

    // The interpreter calling itself is refused.
    let r = run(
        &host,
        "from host import tools\nprint('python' in dir(tools))",
        "alice",
    )
    .await;
    assert_eq!(stdout(&r), "False\n", "{r:?}");

    // A loop of 10^6 inner calls ends at the bound, with a stable code.
    let code = r#"
from host import tools
import host
n = 0
try:
    for _ in range(10**6):
        tools.read_file(path="a.txt")
        n += 1
except host.ToolError as e:
    print(n, e.kind, str(e).split(":")[0])
"#;
    let r = run(&host, code, "alice").await;
    assert_eq!(stdout(&r), "1000 budget_exceeded RATE_LIMITED\n", "{r:?}");
    assert_eq!(r.receipt.inner_calls.len(), 1000);
    assert_eq!(r.receipt.inner_calls_dropped, 0);
    // And the host keeps serving.
    let r = run(&host, "print(1 + 1)", "alice").await;
    assert_eq!(stdout(&r), "2\n", "{r:?}");

    // The policy's [code_mode] bounds: fewer inner calls, and nesting.
    let bounded = "version = 1\nmode = \"workspace-write\"\n[code_mode]\n\
                   max_inner_calls = 5\nallow_nesting = [\"python\"]\n";
    let host = code_host(&dir, ws.path(), bounded).await;
    let code = r#"
from host import tools
import host
print(tools.python(code="print(7)")["stdout"].strip())
n = 0
try:
    while True:
        tools.read_file(path="a.txt")
        n += 1
except host.ToolError as e:
    print(n, e.kind)
"#;
    let r = run(&host, code, "alice").await;
    assert_eq!(stdout(&r), "7\n4 budget_exceeded\n", "{r:?}");
    assert_eq!(r.receipt.inner_calls[0]["tool"], "python");

    // The interpreter is concurrency-safe and holds a shared pass at the
    // gate while its code waits: an inner call that must run alone
    // (write_file) is refused at once, not left waiting on its caller.
    let code = r#"
from host import tools
import host
try:
    tools.write_file(path="b.txt", content="x")
except host.ToolError as e:
    print(e.kind, str(e).split(":")[0])
"#;
    let started = Instant::now();
    let r = run(&host, code, "alice").await;
    assert_eq!(stdout(&r), "denied SANDBOX_UNAVAILABLE\n", "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(!ws.path().join("b.txt").exists());

    // Inner calls share the outer call's deadline: the second sleep would
    // end past it, and is ended with the outer call, its result logged once.
    let rules = "version = 1\n";
    let host = code_host_within(&dir, ws.path(), rules, Duration::from_secs(3)).await;
    let code = "from host import tools\ntools.sleep(ms=1500)\ntools.sleep(ms=10000)";
    let started = Instant::now();
    let r = run(&host, code, "alice").await;
    assert_eq!(r.code(), Some(ErrorCode::Timeout), "{r:?}");
    assert!(started.elapsed() < Duration::from_millis(4500), "{r:?}");
    let events = host.log().events().unwrap();
    let inner: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolCall && e.payload["parent"] == r.call_id.as_str())
        .map(|e| e.call_id.clone())
        .collect();
    assert_eq!(inner.len(), 2, "{events:?}");
    for id in &inner {
        let results = events
            .iter()
            .filter(|e| &e.call_id == id && e.kind == EventKind::ToolResult)
            .count();
        assert_eq!(results, 1, "{id}: {events:?}");
    }
}
