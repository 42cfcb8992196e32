//! The approval service: asks a human (or a stand-in) about one call.
//!
//! Outcomes are `allowed-once | rejected | cancelled | unavailable`. Only
//! `allowed-once` lets the call continue, and only that call. Every failure
//! of the approver (no channel, timeout, crash, garbage) is `unavailable`:
//! fail closed. Writing the `approval/asked`/`approval/decided` pair is the
//! orchestrator's job, not the approver's.

pub(crate) mod announce;
pub(crate) mod queue;

use serde::{Deserialize, Serialize};
use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::time::Duration;
use toolhost_core::SandboxMode;

/// What an approver is asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// Pairs `approval/asked` with `approval/decided`.
    pub approval_id: String,
    /// The call this approval is for.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The (validated) arguments.
    pub args: serde_json::Value,
    /// Why approval is needed (the rule's reason, or the escalation).
    pub reason: String,
    /// The mode the call would run in if allowed.
    pub mode: SandboxMode,
    /// For an escalation: the justification given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub justification: Option<String>,
    /// The network grants this approval unlocks for this call (the
    /// policy's `ask` grants and the grants of the rules the call matches,
    /// canonical, with the methods each allows: `https://*.github.com:443
    /// (GET, HEAD)`, `... (any method)`); empty when it unlocks none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<String>,
    /// Who made the call (its principal); `None` in a request written by an
    /// older toolhost. An operator endpoint does not let a principal decide
    /// its own call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// What would run: the SHA-256 of the tool's component or program and
    /// the side effect it declares (which decides the network grants it
    /// gets); `None` in a request written by an older toolhost. An answer
    /// carried across a reload (a 2026-07-28 retry) approves only this code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<ApprovedCode>,
}

/// The code an approval request is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovedCode {
    /// SHA-256 (hex) of the component's bytes; for a program tool, of its
    /// program's bytes and of how its manifest runs it
    /// ([`Manifest::approval_digest`](crate::Manifest::approval_digest)).
    pub sha256: String,
    /// The side effect the tool declares.
    pub side_effect: toolhost_core::SideEffect,
}

/// An approver's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalOutcome {
    /// Allowed, for this call only.
    AllowedOnce,
    /// Rejected.
    Rejected,
    /// The human dismissed the question, or the call was cancelled.
    Cancelled,
    /// Nobody could be asked, or the approver failed.
    Unavailable,
}

impl ApprovalOutcome {
    /// The outcome's stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalOutcome::AllowedOnce => "allowed-once",
            ApprovalOutcome::Rejected => "rejected",
            ApprovalOutcome::Cancelled => "cancelled",
            ApprovalOutcome::Unavailable => "unavailable",
        }
    }
}

/// The field of an `approval/asked` event that holds how long its approver
/// may wait, in milliseconds ([`Approver::wait`]).
pub const APPROVAL_WAIT_MS: &str = "wait_ms";

/// `approver`'s name, or a stand-in when asking for it panics.
pub(crate) fn name_of(approver: &dyn Approver) -> String {
    crate::sandbox::state::unpanicked(|| approver.name())
        .unwrap_or_else(|| "(an approver whose name panics)".to_string())
}

/// A boxed future, as approvers return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Decides approval requests. Implementations must not panic; a panic is
/// treated as `unavailable` all the same.
pub trait Approver: Send + Sync {
    /// A short name for logs (`none`, `tty`, `command:...`).
    fn name(&self) -> String;
    /// True when the request reaches another party that may look for it in
    /// the session log: the pipeline then makes `approval/asked` durable
    /// before [`Approver::decide`] is called. Default: false.
    fn durable_request(&self) -> bool {
        false
    }
    /// The single-use grant a decision of this approver consumes (an MCP
    /// approval's `requestState`), if any. The pipeline records it in the
    /// `approval/decided` event and makes that event durable before the
    /// call goes any further, whatever the outcome: the log then holds the
    /// grant's use, and a later attempt to use it again can be refused.
    /// Default: none.
    fn single_use(&self) -> Option<serde_json::Value> {
        None
    }
    /// The longest [`Approver::decide`] waits for a decision, if it waits
    /// at all. The pipeline records it in `approval/asked` (as
    /// [`APPROVAL_WAIT_MS`]), so that another server of a shared log can
    /// tell how long the one that asked may still be waiting (an MCP task's
    /// state). An approver that waits must return its bound, and one that
    /// wraps another must pass on this, [`Approver::durable_request`] and
    /// [`Approver::single_use`]: without it another server falls back to
    /// its own approval timeout, and may report a call still waiting as
    /// never run. Default: none (it answers at once).
    fn wait(&self) -> Option<Duration> {
        None
    }
    /// Decides one request. `detail` of the returned pair explains failures.
    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)>;
}

/// An approver shared (among the hosts of a server, say) is asked as
/// itself: every method passes through, so sharing changes nothing of it.
impl Approver for std::sync::Arc<dyn Approver> {
    fn name(&self) -> String {
        (**self).name()
    }
    fn durable_request(&self) -> bool {
        (**self).durable_request()
    }
    fn single_use(&self) -> Option<serde_json::Value> {
        (**self).single_use()
    }
    fn wait(&self) -> Option<Duration> {
        (**self).wait()
    }
    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        (**self).decide(request)
    }
}

/// No channel: every request is `unavailable`.
#[derive(Debug, Clone, Copy)]
pub struct NoApprover;

impl Approver for NoApprover {
    fn name(&self) -> String {
        "none".into()
    }
    fn decide<'a>(
        &'a self,
        _: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        Box::pin(async {
            (
                ApprovalOutcome::Unavailable,
                Some("no approver is configured".into()),
            )
        })
    }
}

/// Always answers the same (for tests and unattended runs).
#[derive(Debug, Clone, Copy)]
pub struct FixedApprover(pub ApprovalOutcome);

impl Approver for FixedApprover {
    fn name(&self) -> String {
        match self.0 {
            ApprovalOutcome::AllowedOnce => "auto-approve".into(),
            ApprovalOutcome::Rejected => "auto-reject".into(),
            other => format!("fixed:{}", other.as_str()),
        }
    }
    fn decide<'a>(
        &'a self,
        _: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        let o = self.0;
        Box::pin(async move { (o, None) })
    }
}

/// Asks on the controlling terminal (`/dev/tty`): shows tool, arguments,
/// reason and mode, and reads `y`, `n` or nothing (cancel). Without a
/// terminal, `unavailable`.
#[derive(Debug, Clone)]
pub struct TtyApprover {
    /// How long to wait for an answer.
    pub timeout: Duration,
}

impl Approver for TtyApprover {
    fn name(&self) -> String {
        "tty".into()
    }
    fn wait(&self) -> Option<Duration> {
        Some(self.timeout)
    }
    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        let request = request.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            let ask = tokio::task::spawn_blocking(move || ask_tty(&request));
            match tokio::time::timeout(timeout, ask).await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => (
                    ApprovalOutcome::Unavailable,
                    Some("the terminal prompt failed".into()),
                ),
                Err(_) => (
                    ApprovalOutcome::Unavailable,
                    Some("no answer before the timeout".into()),
                ),
            }
        })
    }
}

/// One prompt on the terminal at a time: two calls asking at once would
/// otherwise print their prompts together, and an answer typed after the
/// last prompt could be read by the other call's thread, approving what the
/// person did not read.
static TTY_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn ask_tty(request: &ApprovalRequest) -> (ApprovalOutcome, Option<String>) {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty");
    let Ok(tty) = tty else {
        return (
            ApprovalOutcome::Unavailable,
            Some("no terminal to ask on".into()),
        );
    };
    ask_on(tty, request)
}

/// Asks on `tty` (its turn taken first): prints the request with its
/// approval id and reads one line, byte by byte, so that nothing typed
/// after the answer's newline is consumed here.
fn ask_on(
    mut tty: impl std::io::Read + Write,
    request: &ApprovalRequest,
) -> (ApprovalOutcome, Option<String>) {
    let _turn = TTY_TURN.lock().unwrap_or_else(|p| p.into_inner());
    let args = serde_json::to_string_pretty(&request.args).unwrap_or_default();
    // The reason and the justification (which the model or the caller
    // wrote) are shown with their control characters escaped: an escape
    // sequence or a carriage return could otherwise redraw the prompt.
    let mut prompt = format!(
        "\n── toolhost: approval needed ({}) ──\n  tool:   {}\n  mode:   {}\n  reason: {}\n",
        request.approval_id,
        crate::sandbox::state::printable(&request.tool),
        request.mode,
        crate::sandbox::state::printable(&request.reason)
    );
    if let Some(j) = &request.justification {
        prompt.push_str(&format!(
            "  justification: {}\n",
            crate::sandbox::state::printable(j)
        ));
    }
    prompt.push_str(&format!(
        "  args:\n{}\nAllow this call once? [y/N] ",
        indent(&args)
    ));
    if tty
        .write_all(prompt.as_bytes())
        .and_then(|()| tty.flush())
        .is_err()
    {
        return (
            ApprovalOutcome::Unavailable,
            Some("cannot write to the terminal".into()),
        );
    }
    // An answer is a word: read at most a short line, however much is typed.
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    let ended = loop {
        match tty.read(&mut byte) {
            Ok(0) => break line.is_empty(),
            Ok(_) if byte[0] == b'\n' => break false,
            Ok(_) if line.len() as u64 >= MAX_TTY_ANSWER => {}
            Ok(_) => line.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return (
                    ApprovalOutcome::Unavailable,
                    Some(format!("cannot read the terminal: {e}")),
                );
            }
        }
    };
    if ended {
        return (ApprovalOutcome::Cancelled, Some("end of input".into()));
    }
    match String::from_utf8_lossy(&line)
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "y" | "yes" => (ApprovalOutcome::AllowedOnce, None),
        "" => (ApprovalOutcome::Cancelled, Some("no answer".into())),
        _ => (ApprovalOutcome::Rejected, None),
    }
}

fn indent(s: &str) -> String {
    s.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `PROGRAM` with the request as JSON on stdin and reads a decision on
/// stdout: `{"decision":"allowed-once"}` (or `rejected`, `cancelled`), or the
/// bare word. Anything else, a non-zero exit, a crash or the timeout is
/// `unavailable`.
#[derive(Debug, Clone)]
pub struct CommandApprover {
    /// The program (run directly, not through a shell).
    pub program: String,
    /// How long it may take.
    pub timeout: Duration,
}

/// The most bytes read as the answer at the terminal.
const MAX_TTY_ANSWER: u64 = 1024;

/// The most bytes read from an approver program's stdout.
const MAX_APPROVER_OUTPUT: usize = 64 * 1024;

impl Approver for CommandApprover {
    fn name(&self) -> String {
        format!("command:{}", self.program)
    }
    fn wait(&self) -> Option<Duration> {
        Some(self.timeout)
    }
    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        Box::pin(async move {
            match tokio::time::timeout(self.timeout, run_command(&self.program, request)).await {
                Ok(r) => r,
                Err(_) => (
                    ApprovalOutcome::Unavailable,
                    Some(format!(
                        "approver {} gave no decision within {:?}",
                        self.program, self.timeout
                    )),
                ),
            }
        })
    }
}

async fn run_command(
    program: &str,
    request: &ApprovalRequest,
) -> (ApprovalOutcome, Option<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let unavailable = |d: String| (ApprovalOutcome::Unavailable, Some(d));
    let child = tokio::process::Command::new(program)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return unavailable(format!("cannot start approver {program}: {e}")),
    };
    let body = serde_json::to_vec(request).unwrap_or_default();
    if let Some(mut stdin) = child.stdin.take() {
        // A program that exits without reading its input is still allowed
        // to answer: ignore a broken pipe here.
        let _ = stdin.write_all(&body).await;
        drop(stdin);
    }
    let mut out = Vec::new();
    if let Some(stdout) = child.stdout.take()
        && let Err(e) = stdout
            .take(MAX_APPROVER_OUTPUT as u64)
            .read_to_end(&mut out)
            .await
    {
        return unavailable(format!("cannot read approver output: {e}"));
    }
    let status = match child.wait().await {
        Ok(s) => s,
        Err(e) => return unavailable(format!("approver failed: {e}")),
    };
    if !status.success() {
        return unavailable(format!("approver {program} exited with {status}"));
    }
    match parse_decision(&out) {
        Some(o) => (o, None),
        None => unavailable(format!(
            "approver {program} answered something that is not a decision: {:?}",
            String::from_utf8_lossy(&out)
                .chars()
                .take(120)
                .collect::<String>()
        )),
    }
}

/// Parses an approver's answer. `unavailable` cannot be claimed as a
/// success; unknown words are garbage.
fn parse_decision(out: &[u8]) -> Option<ApprovalOutcome> {
    let text = std::str::from_utf8(out).ok()?.trim();
    let word = if text.starts_with('{') {
        #[derive(Deserialize)]
        struct Answer {
            decision: String,
        }
        serde_json::from_str::<Answer>(text).ok()?.decision
    } else {
        text.to_string()
    };
    match word.as_str() {
        "allowed-once" | "allow" | "approve" | "approved" => Some(ApprovalOutcome::AllowedOnce),
        "rejected" | "reject" | "deny" => Some(ApprovalOutcome::Rejected),
        "cancelled" | "cancel" => Some(ApprovalOutcome::Cancelled),
        _ => None,
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests: a failure is a panic")]
mod tests {
    use super::*;

    fn request(id: &str) -> ApprovalRequest {
        ApprovalRequest {
            approval_id: id.into(),
            call_id: "c".into(),
            tool: "write_file".into(),
            args: serde_json::json!({"path": id}),
            reason: "r".into(),
            mode: SandboxMode::WorkspaceWrite,
            justification: None,
            network: Vec::new(),
            principal: None,
            code: None,
        }
    }

    /// A shared approver is asked as itself: every method of the trait
    /// passes through the `Arc` (one that did not would fall back to the
    /// trait's default without a word).
    #[test]
    fn a_shared_approver_answers_as_itself() {
        struct Own;
        impl Approver for Own {
            fn name(&self) -> String {
                "own".into()
            }
            fn durable_request(&self) -> bool {
                true
            }
            fn single_use(&self) -> Option<serde_json::Value> {
                Some(serde_json::json!("grant"))
            }
            fn wait(&self) -> Option<Duration> {
                Some(Duration::from_secs(7))
            }
            fn decide<'a>(
                &'a self,
                _: &'a ApprovalRequest,
            ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
                Box::pin(async { (ApprovalOutcome::Rejected, Some("own".into())) })
            }
        }
        let shared: std::sync::Arc<dyn Approver> = std::sync::Arc::new(Own);
        let asked: &dyn Approver = &shared;
        assert_eq!(asked.name(), "own");
        assert!(asked.durable_request());
        assert_eq!(asked.single_use(), Some(serde_json::json!("grant")));
        assert_eq!(asked.wait(), Some(Duration::from_secs(7)));
        assert_eq!(
            futures::executor::block_on(asked.decide(&request("a"))),
            (ApprovalOutcome::Rejected, Some("own".into()))
        );
    }

    /// What the model or the caller wrote cannot drive the terminal: an
    /// escape sequence or a carriage return in the justification is shown
    /// escaped.
    #[test]
    fn a_prompt_escapes_control_characters() {
        let (mut term, tty) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut r = request("ctl");
        r.justification = Some("\u{1b}[2J\rall is fine".into());
        r.reason = "r\u{7}".into();
        let asked = std::thread::spawn(move || ask_on(tty, &r));
        let shown = prompt(&mut term);
        std::io::Write::write_all(&mut term, b"n\n").unwrap();
        assert_eq!(asked.join().unwrap().0, ApprovalOutcome::Rejected);
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\r') && !shown.contains('\u{7}'),
            "{shown:?}"
        );
        assert!(
            shown.contains("justification: \\u{1b}[2J\\rall is fine"),
            "{shown}"
        );
    }

    /// Reads from `term` until a whole prompt has come.
    fn prompt(term: &mut std::os::unix::net::UnixStream) -> String {
        use std::io::Read;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&got).contains("[y/N] ") {
            let n = term.read(&mut buf).unwrap_or(0);
            assert!(
                n > 0,
                "the terminal closed: {}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    /// Two calls asking on one terminal at once: the prompts come one at a
    /// time, each names its approval, and each answer goes to the call
    /// whose prompt was on screen.
    #[test]
    fn terminal_prompts_take_turns_and_answers_reach_their_own_call() {
        for _ in 0..20 {
            let (mut term, tty) = std::os::unix::net::UnixStream::pair().unwrap();
            let asks: Vec<_> = ["first", "second"]
                .into_iter()
                .map(|id| {
                    let tty = tty.try_clone().unwrap();
                    std::thread::spawn(move || (id, ask_on(tty, &request(id))))
                })
                .collect();
            let shown = prompt(&mut term);
            let (yes, no) = if shown.contains("(first)") {
                ("first", "second")
            } else {
                ("second", "first")
            };
            assert!(
                !shown.contains(&format!("({no})")),
                "two prompts at once: {shown}"
            );
            term.write_all(b"y\n").unwrap();
            let shown = prompt(&mut term);
            assert!(shown.contains(&format!("({no})")), "{shown}");
            term.write_all(b"n\n").unwrap();
            for ask in asks {
                let (id, (outcome, _)) = ask.join().unwrap();
                let expected = if id == yes {
                    ApprovalOutcome::AllowedOnce
                } else {
                    ApprovalOutcome::Rejected
                };
                assert_eq!(outcome, expected, "{id}");
            }
        }
    }

    #[test]
    fn decisions_parse_strictly() {
        assert_eq!(
            parse_decision(b"allowed-once\n"),
            Some(ApprovalOutcome::AllowedOnce)
        );
        assert_eq!(
            parse_decision(br#"{"decision":"rejected"}"#),
            Some(ApprovalOutcome::Rejected)
        );
        assert_eq!(
            parse_decision(b"cancelled"),
            Some(ApprovalOutcome::Cancelled)
        );
        assert_eq!(parse_decision(b"unavailable"), None);
        assert_eq!(parse_decision(b"yes please"), None);
        assert_eq!(parse_decision(b"\xff\xfe"), None);
        assert_eq!(parse_decision(br#"{"decision":1}"#), None);
        assert_eq!(parse_decision(b""), None);
    }
}
