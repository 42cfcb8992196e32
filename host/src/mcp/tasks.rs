//! Tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663, as rmcp
//! implements it): a `tools/call` from a client that declares the extension
//! returns a task handle at once; `tasks/get` reports progress and then the
//! final result; `tasks/cancel` interrupts the body.
//!
//! A task's id is its call's id, and its state is the session log: this
//! module holds in memory only the tasks running in this process (their
//! interrupt and last progress report), each while its call holds one of the
//! server's call permits. Once the call's result is committed the task is
//! answered from the log, so after a restart a task is what the log says:
//! its result; `TOOL_OUTCOME_UNKNOWN` when recovery found its intent durable
//! and its result missing (never a guess, never run again); `working` while
//! another live writer of a shared log holds its intent; `cancelled` when
//! it never reached its intent (the body never started).
//!
//! A task is visible only to the principal that started it (others are told
//! it does not exist). `tasks/update` is not offered: approvals of a task
//! are asked like those of any call of its session.

use super::convert::to_mcp_result_json;
use crate::sandbox::state::{Interrupt, Progress, ProgressSink};
use rmcp::ErrorData as McpError;
use rmcp::model::{DetailedTask, Task, TaskPayload, TaskStatus};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolhost_log::{EventKind, SessionLog};

/// How often a client should poll a running task.
pub const TASK_POLL_INTERVAL_MS: u64 = 250;

/// The most tasks one client (a bearer token, or an address without
/// tokens; the session over stdio) runs at once: a quarter of the calls a
/// server runs, so that one client's tasks, which hold a call each but no
/// connection, cannot take every call from the others.
pub const MAX_TASKS_PER_CLIENT: usize = super::bounds::MAX_CALLS_IN_FLIGHT / 4;

/// A task running in this process.
struct Running {
    principal: String,
    client: String,
    created_ms: u64,
    interrupt: Interrupt,
    progress: Arc<Mutex<Option<Progress>>>,
}

/// Finishes a task when dropped (see [`Tasks::finish_on_drop`]).
pub(super) struct Finishing {
    tasks: Arc<Tasks>,
    call_id: String,
}

impl Drop for Finishing {
    fn drop(&mut self) {
        self.tasks.finish(&self.call_id);
    }
}

/// The tasks of one server (shared by its sessions).
#[derive(Default)]
pub(super) struct Tasks {
    running: Mutex<HashMap<String, Running>>,
    /// How long a call waits for an approval at most (the server's
    /// approval timeout), for an `approval/asked` that does not record its
    /// approver's own wait: past it, and [`APPROVAL_SETTLED`], an approval
    /// the log shows asked and not decided is nobody's any more.
    approval_wait: Duration,
}

/// How long after an approval wait must have ended its decision may still
/// be missing from the log (a lazy event on its way, clocks of two servers).
const APPROVAL_SETTLED: Duration = Duration::from_secs(60);

impl Tasks {
    /// The tasks of a server whose calls wait at most `approval_wait` for
    /// an approval.
    pub(super) fn new(approval_wait: Duration) -> Tasks {
        Tasks {
            approval_wait,
            ..Tasks::default()
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        match self.running.lock() {
            Ok(r) => r,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Registers the task of call `call_id` (started by `principal` from
    /// `client`, cut off by `interrupt`); its seed state, and the sink its
    /// progress reports go to. `None` when `client` already runs
    /// [`MAX_TASKS_PER_CLIENT`] tasks.
    pub(super) fn start(
        &self,
        call_id: &str,
        principal: &str,
        client: &str,
        interrupt: Interrupt,
    ) -> Option<(Task, ProgressSink)> {
        let progress = Arc::new(Mutex::new(None));
        let created_ms = now_ms();
        let mut running = self.running();
        if running.values().filter(|r| r.client == client).count() >= MAX_TASKS_PER_CLIENT {
            return None;
        }
        running.insert(
            call_id.to_string(),
            Running {
                principal: principal.to_string(),
                client: client.to_string(),
                created_ms,
                interrupt,
                progress: progress.clone(),
            },
        );
        drop(running);
        let sink: ProgressSink = Arc::new(move |p: &Progress| {
            if let Ok(mut last) = progress.lock() {
                *last = Some(p.clone());
            }
        });
        Some((
            task(call_id, TaskStatus::Working, created_ms, created_ms),
            sink,
        ))
    }

    /// The task's call has committed its result: the log answers for it now.
    pub(super) fn finish(&self, call_id: &str) {
        self.running().remove(call_id);
    }

    /// Finishes the task of `call_id` when dropped: held by the task that
    /// runs the call, so a call that panics still gives its client's slot
    /// back (the log then reports the call as it was left).
    pub(super) fn finish_on_drop(self: &Arc<Self>, call_id: &str) -> Finishing {
        Finishing {
            tasks: self.clone(),
            call_id: call_id.to_string(),
        }
    }

    /// `tasks/get`: the task's state, for `principal`.
    pub(super) fn get(
        &self,
        id: &str,
        principal: &str,
        log: &SessionLog,
    ) -> Result<DetailedTask, McpError> {
        if let Some(r) = self.running().get(id).filter(|r| r.principal == principal) {
            let mut t = task(id, TaskStatus::Working, r.created_ms, now_ms());
            if let Some(p) = r.progress.lock().ok().and_then(|p| p.clone()) {
                t = t.with_status_message(progress_text(&p));
            }
            return Ok(DetailedTask::new(t, TaskPayload::Working));
        }
        self.as_logged(id, principal, log)
    }

    /// A task not running here, as the log tells it, with this server's
    /// approval wait for asks that record none.
    fn as_logged(
        &self,
        id: &str,
        principal: &str,
        log: &SessionLog,
    ) -> Result<DetailedTask, McpError> {
        from_log(id, principal, log, self.approval_wait, APPROVAL_SETTLED)
    }

    /// Interrupts every task running in this process (the server is
    /// stopping and nobody will read their results); each body still ends
    /// and records its result, as a cancelled call does.
    pub(super) fn cancel_all(&self) {
        for r in self.running().values() {
            r.interrupt.cancel();
        }
    }

    /// `tasks/cancel`: interrupts a running task of `principal`; a task
    /// that has ended is left as it is.
    pub(super) fn cancel(
        &self,
        id: &str,
        principal: &str,
        log: &SessionLog,
    ) -> Result<(), McpError> {
        if let Some(r) = self.running().get(id).filter(|r| r.principal == principal) {
            r.interrupt.cancel();
            return Ok(());
        }
        let task = self.as_logged(id, principal, log)?;
        if task.task.status == TaskStatus::Working {
            // Not running here, not finished in the log: another server of
            // a shared log runs it, and only that one can interrupt it.
            return Err(McpError::invalid_params(
                format!("task {id:?} runs on another server of this session log; cancel it there"),
                None,
            ));
        }
        Ok(())
    }
}

/// A task that is not running here, as the session log tells it. An
/// approval asked may still be decided for as long as the approver that
/// asked waits (the `wait_ms` its `approval/asked` records; else
/// `approval_wait`, this server's), and `grace` more.
fn from_log(
    id: &str,
    principal: &str,
    log: &SessionLog,
    approval_wait: Duration,
    grace: Duration,
) -> Result<DetailedTask, McpError> {
    let events = log.events_for_call(id).map_err(|e| {
        // The detail (paths, database errors) stays in the server's log.
        tracing::warn!("tasks: cannot read the session log: {e}");
        McpError::internal_error("the session log could not be read", None)
    })?;
    let call = events.iter().find(|e| e.kind == EventKind::ToolCall);
    let owner = call
        .and_then(|c| c.payload.get("principal"))
        .and_then(Value::as_str);
    let (Some(call), Some(owner)) = (call, owner) else {
        return Err(no_task(id));
    };
    if owner != principal {
        return Err(no_task(id));
    }
    let created = call.at_unix_ms;
    let last = events.last().map_or(created, |e| e.at_unix_ms);
    if let Some(result) = events.iter().find(|e| e.kind == EventKind::ToolResult) {
        let mcp = to_mcp_result_json(&result.payload);
        let t = task(id, TaskStatus::Completed, created, last);
        return Ok(DetailedTask::new(t, TaskPayload::Completed { result: mcp }));
    }
    if events.iter().any(|e| e.kind == EventKind::ToolIntent) {
        // Durable intent, no result, not running here: another live writer
        // of a shared log runs it (recovery turns a dead writer's into
        // TOOL_OUTCOME_UNKNOWN, which is then its result).
        let t = task(id, TaskStatus::Working, created, last)
            .with_status_message("running on another server of this log");
        return Ok(DetailedTask::new(t, TaskPayload::Working));
    }
    let count = |kind| events.iter().filter(|e| e.kind == kind).count();
    let last_asked = events
        .iter()
        .filter(|e| e.kind == EventKind::ApprovalAsked)
        .max_by_key(|e| e.at_unix_ms);
    if let Some(asked) = last_asked
        && count(EventKind::ApprovalAsked) > count(EventKind::ApprovalDecided)
    {
        // Asked and not decided. While the wait can last, the server that
        // runs it waits for the approval (a queue shared by the log's
        // servers, say): reported as not run, a client could call again,
        // and then both would run. Past it, the server that asked stopped
        // before any decision, and with no intent the tool did not run.
        let wait = asked
            .payload
            .get(crate::approval::APPROVAL_WAIT_MS)
            .and_then(Value::as_u64)
            .map_or(approval_wait, Duration::from_millis);
        let until =
            u128::from(asked.at_unix_ms).saturating_add(wait.saturating_add(grace).as_millis());
        if u128::from(now_ms()) < until {
            let t = task(id, TaskStatus::Working, created, last)
                .with_status_message("waiting for an approval on another server of this log");
            return Ok(DetailedTask::new(t, TaskPayload::Working));
        }
        let t = task(id, TaskStatus::Cancelled, created, last).with_status_message(
            "the approval asked for was never decided (the server that asked stopped); the tool did not run",
        );
        return Ok(DetailedTask::new(t, TaskPayload::Cancelled));
    }
    let t = task(id, TaskStatus::Cancelled, created, last).with_status_message(
        "the server stopped before the call was dispatched; the tool did not run",
    );
    Ok(DetailedTask::new(t, TaskPayload::Cancelled))
}

fn no_task(id: &str) -> McpError {
    McpError::invalid_params(format!("no task {id:?}"), None)
}

fn task(id: &str, status: TaskStatus, created_ms: u64, updated_ms: u64) -> Task {
    Task::new(id, status, iso8601(created_ms), iso8601(updated_ms))
        .with_poll_interval_ms(TASK_POLL_INTERVAL_MS)
}

fn progress_text(p: &Progress) -> String {
    let amount = match p.total {
        Some(t) => format!("{}/{t}", p.done),
        None => p.done.to_string(),
    };
    match &p.message {
        Some(m) => format!("{amount}: {m}"),
        None => amount,
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `ms` since the Unix epoch as ISO 8601 UTC (`2026-07-28T12:00:00.000Z`).
fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolhost_log::NewEvent;

    #[test]
    fn iso8601_formats_utc() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(iso8601(1_785_240_000_000), "2026-07-28T12:00:00.000Z");
    }

    fn log_with(events: &[(EventKind, Value)]) -> SessionLog {
        let log = SessionLog::in_memory().unwrap_or_else(|e| panic!("{e}"));
        let events: Vec<NewEvent> = events
            .iter()
            .map(|(k, p)| NewEvent::new("call-x-1", *k, p.clone()))
            .collect();
        log.append(&events, toolhost_log::Durability::Durable)
            .unwrap_or_else(|e| panic!("{e}"));
        log
    }

    fn status(r: Result<DetailedTask, McpError>) -> Option<TaskStatus> {
        r.ok().map(|t| t.status())
    }

    #[test]
    fn a_task_not_running_here_is_what_the_log_says() {
        let tasks = Tasks::default();
        let call = (
            EventKind::ToolCall,
            json!({"tool": "t", "principal": "alice"}),
        );
        let intent = (EventKind::ToolIntent, json!({}));
        let unknown = (
            EventKind::ToolResult,
            json!({"status": "error", "error": {"code": "TOOL_OUTCOME_UNKNOWN", "message": "m"},
                   "content": [{"type": "text", "text": "m"}], "recovered": true}),
        );
        let log = log_with(&[call.clone(), intent.clone(), unknown]);
        let t = tasks.get("call-x-1", "alice", &log);
        let t = t.unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(t.status(), TaskStatus::Completed);
        let TaskPayload::Completed { result } = &t.payload else {
            panic!("{t:?}")
        };
        assert_eq!(result.get("isError"), Some(&json!(true)));
        assert_eq!(
            Value::Object(result.clone()).pointer("/_meta/toolhost/code"),
            Some(&json!("TOOL_OUTCOME_UNKNOWN"))
        );
        // Another principal is told there is no such task.
        assert!(tasks.get("call-x-1", "mallory", &log).is_err());
        assert!(tasks.get("call-x-2", "alice", &log).is_err());

        let log = log_with(&[call.clone(), intent]);
        assert_eq!(
            status(tasks.get("call-x-1", "alice", &log)),
            Some(TaskStatus::Working)
        );
        let log = log_with(std::slice::from_ref(&call));
        assert_eq!(
            status(tasks.get("call-x-1", "alice", &log)),
            Some(TaskStatus::Cancelled)
        );
        // Waiting for an approval on another server: not "did not run",
        // which would have the client call again while the first may run.
        let asked = (EventKind::ApprovalAsked, json!({}));
        let log = log_with(&[call.clone(), asked.clone()]);
        assert_eq!(
            status(tasks.get("call-x-1", "alice", &log)),
            Some(TaskStatus::Working)
        );
        // Once no wait can last any more, the server that asked stopped
        // before a decision: the tool did not run (not "working" for good).
        let no_wait = |log: &SessionLog| {
            status(from_log(
                "call-x-1",
                "alice",
                log,
                Duration::ZERO,
                Duration::ZERO,
            ))
        };
        assert_eq!(no_wait(&log), Some(TaskStatus::Cancelled));
        // The wait is the asker's, as its event records it, not this
        // server's: a server with a shorter one (here none) still reports
        // the task working while the approver that asked may wait.
        let waits = |ms: u64| (EventKind::ApprovalAsked, json!({"wait_ms": ms}));
        let log = log_with(&[call.clone(), waits(600_000)]);
        assert_eq!(no_wait(&log), Some(TaskStatus::Working));
        let log = log_with(&[call.clone(), waits(0)]);
        assert_eq!(no_wait(&log), Some(TaskStatus::Cancelled));
        let rejected = (EventKind::ApprovalDecided, json!({"outcome": "rejected"}));
        let log = log_with(&[call, asked, rejected]);
        assert_eq!(
            status(tasks.get("call-x-1", "alice", &log)),
            Some(TaskStatus::Cancelled)
        );
    }

    #[test]
    fn a_running_task_reports_progress_and_can_be_cancelled() {
        let tasks = Tasks::default();
        let log = SessionLog::in_memory().unwrap_or_else(|e| panic!("{e}"));
        let interrupt = Interrupt::default();
        let (seed, sink) = tasks
            .start("call-y-1", "alice", "client-a", interrupt.clone())
            .unwrap_or_else(|| panic!("no room"));
        assert_eq!(seed.status, TaskStatus::Working);
        sink(&Progress {
            done: 3,
            total: Some(10),
            message: Some("reading".into()),
        });
        let t = tasks
            .get("call-y-1", "alice", &log)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(t.task.status_message.as_deref(), Some("3/10: reading"));
        assert!(tasks.cancel("call-y-1", "mallory", &log).is_err());
        assert!(!interrupt.is_cancelled());
        assert!(tasks.cancel("call-y-1", "alice", &log).is_ok());
        assert!(interrupt.is_cancelled());
        tasks.finish("call-y-1");
        assert!(tasks.get("call-y-1", "alice", &log).is_err());
    }

    /// One client runs at most `MAX_TASKS_PER_CLIENT` tasks at once (a task
    /// holds a call but no connection); another client still gets room,
    /// and a finished task makes room again.
    #[test]
    fn one_client_cannot_take_every_call_with_tasks() {
        let tasks = Tasks::default();
        let start = |id: &str, client: &str| {
            tasks
                .start(id, "anonymous", client, Interrupt::default())
                .is_some()
        };
        for n in 0..MAX_TASKS_PER_CLIENT {
            assert!(start(&format!("call-a-{n}"), "token-a"), "{n}");
        }
        assert!(!start("call-a-extra", "token-a"));
        assert!(start("call-b-0", "token-b"));
        tasks.finish("call-a-0");
        assert!(start("call-a-again", "token-a"));
    }

    /// A task whose call panics still gives its client's slot back.
    #[test]
    fn a_task_whose_call_panics_is_finished() {
        let tasks = Arc::new(Tasks::default());
        for n in 0..MAX_TASKS_PER_CLIENT {
            let id = format!("call-p-{n}");
            assert!(
                tasks
                    .start(&id, "anonymous", "token-p", Interrupt::default())
                    .is_some()
            );
            let finishing = tasks.finish_on_drop(&id);
            let ran = std::thread::spawn(move || {
                let _finishing = finishing;
                panic!("the call panicked");
            })
            .join();
            assert!(ran.is_err());
        }
        assert!(tasks.running().is_empty());
        assert!(
            tasks
                .start("call-p-last", "anonymous", "token-p", Interrupt::default())
                .is_some()
        );
    }
}
