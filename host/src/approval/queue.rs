//! Two-phase approvals decided from elsewhere: [`QueueApprover`] registers
//! each request in the state directory and waits; another process lists
//! and decides them ([`pending_approvals`], [`decide_approval`];
//! `toolhost approvals list|decide`).
//!
//! Order: the pipeline writes `approval/asked` to the session log durably
//! ([`Approver::durable_request`]) before the approver publishes the request
//! file, so nobody can be told about a request the log does not hold.
//!
//! Exactly one decision per request, whoever races: a decision is published
//! by hard-linking a complete file to `<id>.decision.json`, which fails if
//! one exists. The waiting side publishes `unavailable` (by `timeout`) the
//! same way when its wait ends, so a `decide` racing the timeout either wins
//! (and the call uses it) or is told the request was already decided. A
//! decided request stays answerable (a second `decide` learns the first
//! decision) for [`GRACE`], then its files are removed.
//!
//! A request whose process died while it was pending is decided
//! `unavailable` (by `recovered`) by the next process that opens the state
//! directory ([`recover_pending_approvals`]); its call never ran (no intent
//! was written before the approval).
//!
//! With the session log in PostgreSQL (replicas of one log), the requests
//! live in the database instead ([`ApprovalQueue::Postgres`], the table of
//! `toolhost_log::PgApprovals`): a request asked on one replica is listed and
//! decided through any replica or `toolhost approvals`, with the same
//! exactly-one-decision rule. Nothing of it is kept per state directory or
//! per process, so no replica holds a secret the others lack. A replica
//! that starts decides `unavailable` only the requests of its own identity
//! and of replicas whose lease expired, never those a live replica waits for.

use crate::approval::{ApprovalOutcome, ApprovalRequest, Approver, BoxFuture};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How long a decided request stays answerable.
pub const GRACE: Duration = Duration::from_secs(600);

/// How often a waiting approver looks for a decision.
const POLL: Duration = Duration::from_millis(25);

/// A recorded decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecision {
    /// The outcome.
    pub outcome: ApprovalOutcome,
    /// Who decided: an operator's name, `timeout` or `recovered`.
    pub by: String,
}

/// Why [`decide_approval`] did not record a decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecideError {
    /// No request with this id (never made, or past its grace window).
    #[error("no approval request {0:?} is pending")]
    Unknown(String),
    /// The request already has a decision (another decide, or its wait ended).
    #[error("approval {id:?} was already decided: {} (by {})", .decision.outcome.as_str(), .decision.by)]
    AlreadyDecided {
        /// The request.
        id: String,
        /// The decision that stands.
        decision: ApprovalDecision,
    },
    /// The state directory could not be read or written.
    #[error("approvals in {dir}: {detail}")]
    Io {
        /// The approvals directory.
        dir: String,
        /// What failed.
        detail: String,
    },
}

/// Where the requests of a [`QueueApprover`] wait for their decisions.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ApprovalQueue {
    /// In a state directory (`STATE/approvals`): one machine.
    Dir(PathBuf),
    /// In the PostgreSQL database of a log shared by replicas.
    #[cfg(feature = "postgres")]
    Postgres(std::sync::Arc<toolhost_log::PgApprovals>),
}

impl ApprovalQueue {
    /// The requests still waiting for a decision, oldest first.
    ///
    /// # Errors
    ///
    /// [`DecideError::Io`] when the queue cannot be read.
    pub async fn pending(&self) -> Result<Vec<ApprovalRequest>, DecideError> {
        match self {
            ApprovalQueue::Dir(state) => pending_approvals(state),
            #[cfg(feature = "postgres")]
            ApprovalQueue::Postgres(pg) => {
                let texts = pg.pending().await.map_err(|e| pg_io(pg, e))?;
                Ok(texts
                    .iter()
                    .filter_map(|t| serde_json::from_str(t).ok())
                    .collect())
            }
        }
    }

    /// The decision of request `id`, if it has one.
    ///
    /// # Errors
    ///
    /// [`DecideError::Io`] when the queue cannot be read.
    pub async fn decision(&self, id: &str) -> Result<Option<ApprovalDecision>, DecideError> {
        if !check_id(id) {
            return Ok(None);
        }
        match self {
            ApprovalQueue::Dir(state) => Ok(read_decision(&approvals_dir(state), id)),
            #[cfg(feature = "postgres")]
            ApprovalQueue::Postgres(pg) => match pg.decision(id).await.map_err(|e| pg_io(pg, e))? {
                Some(text) => serde_json::from_str(&text)
                    .map(Some)
                    .map_err(|e| pg_io(pg, format!("a decision of {id} cannot be read: {e}"))),
                None => Ok(None),
            },
        }
    }

    /// Decides request `id` as `by`; see [`decide_approval`].
    ///
    /// # Errors
    ///
    /// As [`decide_approval`].
    pub async fn decide(
        &self,
        id: &str,
        outcome: ApprovalOutcome,
        by: &str,
    ) -> Result<(), DecideError> {
        match self {
            ApprovalQueue::Dir(state) => decide_approval(state, id, outcome, by),
            #[cfg(feature = "postgres")]
            ApprovalQueue::Postgres(pg) => {
                if !check_id(id) {
                    return Err(DecideError::Unknown(id.to_string()));
                }
                let decision = ApprovalDecision {
                    outcome,
                    by: by.to_string(),
                };
                match pg_publish(pg, id, &decision).await? {
                    None => Ok(()),
                    Some(Some(decision)) => Err(DecideError::AlreadyDecided {
                        id: id.to_string(),
                        decision,
                    }),
                    Some(None) => Err(DecideError::Unknown(id.to_string())),
                }
            }
        }
    }

    /// Decides `unavailable` (by `recovered`) the requests nobody waits for any more
    /// (see [`recover_pending_approvals`]; in PostgreSQL only this replica's identity's
    /// and those of replicas whose lease expired). Returns their ids.
    ///
    /// # Errors
    ///
    /// [`DecideError::Io`] when the queue cannot be read or written.
    pub async fn recover(&self) -> Result<Vec<String>, DecideError> {
        match self {
            ApprovalQueue::Dir(state) => recover_pending_approvals(state),
            #[cfg(feature = "postgres")]
            ApprovalQueue::Postgres(pg) => {
                let decision = ApprovalDecision {
                    outcome: ApprovalOutcome::Unavailable,
                    by: "recovered".into(),
                };
                let text = serde_json::to_string(&decision).map_err(|e| pg_io(pg, e))?;
                pg.recover(&text, GRACE).await.map_err(|e| pg_io(pg, e))
            }
        }
    }
}

#[cfg(feature = "postgres")]
fn pg_io(pg: &toolhost_log::PgApprovals, e: impl std::fmt::Display) -> DecideError {
    DecideError::Io {
        dir: format!("{pg:?}"),
        detail: e.to_string(),
    }
}

/// Publishes `decision` for `id` unless one exists: `None` when it stands, else
/// `Some` of the one that does (`None` inside: no such request).
#[cfg(feature = "postgres")]
async fn pg_publish(
    pg: &toolhost_log::PgApprovals,
    id: &str,
    decision: &ApprovalDecision,
) -> Result<Option<Option<ApprovalDecision>>, DecideError> {
    let text = serde_json::to_string(decision).map_err(|e| pg_io(pg, e))?;
    match pg.decide(id, &text).await.map_err(|e| pg_io(pg, e))? {
        toolhost_log::Decided::Stands => Ok(None),
        toolhost_log::Decided::Already(d) => serde_json::from_str(&d)
            .map(|d| Some(Some(d)))
            .map_err(|e| pg_io(pg, format!("a decision of {id} cannot be read: {e}"))),
        _ => Ok(Some(None)),
    }
}

/// Waits for decisions made by another process through the state directory
/// (or, for replicas of a PostgreSQL log, through the database).
#[derive(Debug, Clone)]
pub struct QueueApprover {
    queue: ApprovalQueue,
    timeout: Duration,
}

impl QueueApprover {
    /// Requests go to `state_dir/approvals`; each waits at most `timeout`.
    pub fn new(state_dir: &Path, timeout: Duration) -> QueueApprover {
        QueueApprover::on(ApprovalQueue::Dir(state_dir.to_path_buf()), timeout)
    }

    /// Requests go to `queue`; each waits at most `timeout`.
    pub fn on(queue: ApprovalQueue, timeout: Duration) -> QueueApprover {
        QueueApprover { queue, timeout }
    }
}

/// Where the requests of a state directory live.
pub fn approvals_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("approvals")
}

fn request_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.request.json"))
}

fn decision_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.decision.json"))
}

fn io(dir: &Path, e: impl std::fmt::Display) -> DecideError {
    DecideError::Io {
        dir: dir.display().to_string(),
        detail: e.to_string(),
    }
}

/// A request id is a file name part: letters, digits, `-` and `_` only.
fn check_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Writes `bytes` to a fresh temporary file in `dir`.
fn temp_file(dir: &Path, bytes: &[u8]) -> Result<PathBuf, DecideError> {
    use std::io::Write;
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(|e| io(dir, e))?;
    file.write_all(bytes).map_err(|e| io(dir, e))?;
    file.as_file().sync_all().map_err(|e| io(dir, e))?;
    let (_, path) = file.keep().map_err(|e| io(dir, e))?;
    Ok(path)
}

fn read_decision(dir: &Path, id: &str) -> Option<ApprovalDecision> {
    let text = std::fs::read(decision_path(dir, id)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Publishes `decision` for `id` unless one exists; the one that stands.
fn publish(dir: &Path, id: &str, decision: &ApprovalDecision) -> Result<bool, DecideError> {
    let bytes = serde_json::to_vec(decision).map_err(|e| io(dir, e))?;
    let temp = temp_file(dir, &bytes)?;
    let linked = std::fs::hard_link(&temp, decision_path(dir, id));
    let _ = std::fs::remove_file(&temp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io(dir, e)),
    }
}

/// Decides request `id` as `by`. Exactly one decision per request stands:
/// a second one, or one after the wait ended, is [`DecideError::AlreadyDecided`].
pub fn decide_approval(
    state_dir: &Path,
    id: &str,
    outcome: ApprovalOutcome,
    by: &str,
) -> Result<(), DecideError> {
    let dir = approvals_dir(state_dir);
    if !check_id(id) || !request_path(&dir, id).is_file() {
        return Err(DecideError::Unknown(id.to_string()));
    }
    let decision = ApprovalDecision {
        outcome,
        by: by.to_string(),
    };
    if publish(&dir, id, &decision)? {
        return Ok(());
    }
    match read_decision(&dir, id) {
        Some(decision) => Err(DecideError::AlreadyDecided {
            id: id.to_string(),
            decision,
        }),
        None => Err(io(&dir, "a decision file exists but cannot be read")),
    }
}

/// The requests still waiting for a decision, oldest first.
pub fn pending_approvals(state_dir: &Path) -> Result<Vec<ApprovalRequest>, DecideError> {
    let dir = approvals_dir(state_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&dir, e)),
    };
    let mut pending = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_suffix(".request.json") else {
            continue;
        };
        if decision_path(&dir, id).exists() {
            continue;
        }
        let modified = entry
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        if let Ok(text) = std::fs::read(entry.path())
            && let Ok(request) = serde_json::from_slice::<ApprovalRequest>(&text)
        {
            pending.push((modified, request));
        }
    }
    pending.sort_by_key(|(m, r)| (*m, r.approval_id.clone()));
    Ok(pending.into_iter().map(|(_, r)| r).collect())
}

/// Decides every pending request `unavailable` (by `recovered`): for a
/// process that has just taken the state directory, whose predecessor died
/// while it waited. Returns the ids. Also removes requests decided longer
/// than [`GRACE`] ago.
pub fn recover_pending_approvals(state_dir: &Path) -> Result<Vec<String>, DecideError> {
    let dir = approvals_dir(state_dir);
    let mut recovered = Vec::new();
    for request in pending_approvals(state_dir)? {
        let decision = ApprovalDecision {
            outcome: ApprovalOutcome::Unavailable,
            by: "recovered".into(),
        };
        if publish(&dir, &request.approval_id, &decision)? {
            recovered.push(request.approval_id);
        }
    }
    sweep(&dir);
    Ok(recovered)
}

/// Removes the files of requests decided more than [`GRACE`] ago.
fn sweep(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_suffix(".decision.json") else {
            continue;
        };
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age > GRACE);
        if old {
            let _ = std::fs::remove_file(request_path(dir, id));
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The decision a wait that timed out publishes.
/// A request whose wait has not ended: if the wait is dropped first (the
/// call was cancelled), the request is decided `cancelled` by `cancelled`,
/// so that it does not stay pending for good, and no operator can decide it
/// after its call has gone.
struct Unfinished {
    queue: QueueOf,
    finished: bool,
}

/// Where an [`Unfinished`] request is decided.
enum QueueOf {
    Dir(PathBuf, String),
    #[cfg(feature = "postgres")]
    Postgres(std::sync::Arc<toolhost_log::PgApprovals>, String),
}

impl Unfinished {
    fn new(queue: QueueOf) -> Unfinished {
        Unfinished {
            queue,
            finished: false,
        }
    }

    /// The wait ended: nothing to do on drop.
    fn finish(&mut self) {
        self.finished = true;
    }
}

fn cancelled() -> ApprovalDecision {
    ApprovalDecision {
        outcome: ApprovalOutcome::Cancelled,
        by: "cancelled".into(),
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        match &mut self.queue {
            QueueOf::Dir(dir, id) => {
                // An operator's decision that got in first stands.
                let _ = publish(dir, id, &cancelled());
            }
            #[cfg(feature = "postgres")]
            QueueOf::Postgres(pg, id) => {
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    let (pg, id) = (pg.clone(), std::mem::take(id));
                    handle.spawn(async move {
                        let _ = pg_publish(&pg, &id, &cancelled()).await;
                    });
                }
            }
        }
    }
}

fn timed_out() -> ApprovalDecision {
    ApprovalDecision {
        outcome: ApprovalOutcome::Unavailable,
        by: "timeout".into(),
    }
}

impl QueueApprover {
    /// Asks `decided` every [`POLL`] until it gives a decision, or until
    /// this approver's timeout has passed (`None`).
    async fn poll_decision<F, Fut>(
        &self,
        mut decided: F,
    ) -> Result<Option<ApprovalDecision>, DecideError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Option<ApprovalDecision>, DecideError>>,
    {
        // A timeout past what an instant can hold waits without end (it
        // would otherwise overflow the addition, and the approver panic).
        let deadline = tokio::time::Instant::now().checked_add(self.timeout);
        loop {
            if let Some(d) = decided().await? {
                return Ok(Some(d));
            }
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                return Ok(None);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn await_decision(
        &self,
        request: &ApprovalRequest,
    ) -> Result<ApprovalDecision, DecideError> {
        match &self.queue {
            ApprovalQueue::Dir(state) => self.wait_in_dir(&approvals_dir(state), request).await,
            #[cfg(feature = "postgres")]
            ApprovalQueue::Postgres(pg) => self.wait_in_pg(pg, request).await,
        }
    }

    #[cfg(feature = "postgres")]
    async fn wait_in_pg(
        &self,
        pg: &std::sync::Arc<toolhost_log::PgApprovals>,
        request: &ApprovalRequest,
    ) -> Result<ApprovalDecision, DecideError> {
        let id = &request.approval_id;
        if !check_id(id) {
            return Err(pg_io(pg, format!("approval id {id:?} is not a plain name")));
        }
        let text = serde_json::to_string(request).map_err(|e| pg_io(pg, e))?;
        // A request of this id exists already (a call id used twice): its
        // decision, if it has one, belongs to another call, so this call is
        // not approved by it.
        if !pg.register(id, &text).await.map_err(|e| pg_io(pg, e))? {
            return Err(pg_io(pg, format!("approval {id} was already asked once")));
        }
        let mut unfinished = Unfinished::new(QueueOf::Postgres(pg.clone(), id.clone()));
        let decided = self
            .poll_decision(|| async {
                match pg.decision(id).await.map_err(|e| pg_io(pg, e))? {
                    Some(d) => serde_json::from_str(&d).map(Some).map_err(|e| pg_io(pg, e)),
                    None => Ok(None),
                }
            })
            .await?;
        unfinished.finish();
        if let Some(d) = decided {
            return Ok(d);
        }
        let timeout = timed_out();
        match pg_publish(pg, id, &timeout).await? {
            None => Ok(timeout),
            Some(Some(d)) => Ok(d),
            Some(None) => Err(pg_io(pg, format!("request {id} vanished while waiting"))),
        }
    }

    async fn wait_in_dir(
        &self,
        dir: &Path,
        request: &ApprovalRequest,
    ) -> Result<ApprovalDecision, DecideError> {
        let id = &request.approval_id;
        if !check_id(id) {
            return Err(io(dir, format!("approval id {id:?} is not a file name")));
        }
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        sweep(dir);
        // Registered: a complete request file appears at once, or not at all.
        let bytes = serde_json::to_vec(request).map_err(|e| io(dir, e))?;
        let temp = temp_file(dir, &bytes)?;
        // Never over an earlier request of the same id (a call id used
        // twice): its decision, if it has one, belongs to another call.
        // The link fails if the request exists; a decision left after its
        // request was swept is checked too.
        let linked = if decision_path(dir, id).exists() {
            Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists))
        } else {
            std::fs::hard_link(&temp, request_path(dir, id))
        };
        let _ = std::fs::remove_file(&temp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(io(dir, format!("approval {id} was already asked once")));
            }
            Err(e) => return Err(io(dir, e)),
        }
        let mut unfinished = Unfinished::new(QueueOf::Dir(dir.to_path_buf(), id.clone()));
        let decided = self
            .poll_decision(|| std::future::ready(Ok(read_decision(dir, id))))
            .await;
        unfinished.finish();
        if let Some(d) = decided? {
            return Ok(d);
        }
        // The wait is over: timeout, unless a decision got in first.
        let timeout = timed_out();
        if publish(dir, id, &timeout)? {
            return Ok(timeout);
        }
        read_decision(dir, id).ok_or_else(|| io(dir, "a decision file exists but cannot be read"))
    }
}

impl Approver for QueueApprover {
    fn name(&self) -> String {
        "queue".into()
    }

    fn wait(&self) -> Option<std::time::Duration> {
        Some(self.timeout)
    }

    fn durable_request(&self) -> bool {
        true
    }

    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, (ApprovalOutcome, Option<String>)> {
        Box::pin(async move {
            match self.await_decision(request).await {
                Ok(d) if d.by == "timeout" => (
                    d.outcome,
                    Some(format!(
                        "nobody decided within {:?} (toolhost approvals decide)",
                        self.timeout
                    )),
                ),
                Ok(d) => (d.outcome, Some(format!("decided by {}", d.by))),
                Err(e) => (ApprovalOutcome::Unavailable, Some(e.to_string())),
            }
        })
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests: a failure is a panic")]
mod tests {
    use super::*;

    fn request(id: &str) -> ApprovalRequest {
        ApprovalRequest {
            approval_id: id.into(),
            call_id: "call-1".into(),
            tool: "write_file".into(),
            args: serde_json::json!({}),
            reason: "r".into(),
            mode: toolhost_core::SandboxMode::WorkspaceWrite,
            justification: None,
            network: Vec::new(),
            principal: None,
            code: None,
        }
    }

    /// A decide racing the end of the wait: exactly one decision stands,
    /// and both sides agree on it.
    #[test]
    fn a_decide_racing_the_timeout_has_one_winner() {
        let state = tempfile::tempdir().unwrap();
        let dir = approvals_dir(state.path());
        std::fs::create_dir_all(&dir).unwrap();
        let mut decider_won = 0;
        for i in 0..200 {
            let id = format!("r{i}");
            std::fs::write(
                request_path(&dir, &id),
                serde_json::to_vec(&request(&id)).unwrap(),
            )
            .unwrap();
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
            let (b, s, id2) = (barrier.clone(), state.path().to_path_buf(), id.clone());
            let decider = std::thread::spawn(move || {
                b.wait();
                decide_approval(&s, &id2, ApprovalOutcome::AllowedOnce, "op")
            });
            barrier.wait();
            let timeout = timed_out();
            let waiter_won = publish(&dir, &id, &timeout).unwrap();
            let decided = decider.join().unwrap();
            let stands = read_decision(&dir, &id).unwrap();
            match decided {
                Ok(()) => {
                    assert!(!waiter_won);
                    assert_eq!(stands.outcome, ApprovalOutcome::AllowedOnce);
                    decider_won += 1;
                }
                Err(DecideError::AlreadyDecided { decision, .. }) => {
                    assert!(waiter_won);
                    assert_eq!(decision, timeout);
                    assert_eq!(stands, timeout);
                }
                Err(e) => panic!("{e}"),
            }
        }
        // Both outcomes are possible; neither side may ever see two.
        assert!(decider_won <= 200);
    }

    /// Returns once a request is pending in `state` (at most 30 s).
    async fn until_pending(state: &Path) {
        let registered = async {
            while pending_approvals(state).unwrap().is_empty() {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), registered)
            .await
            .unwrap();
    }

    /// A wait dropped before any decision (its call was cancelled) decides
    /// the request `cancelled`: it is no longer pending, and an operator's
    /// later decision is refused instead of approving a call that is gone.
    #[tokio::test]
    async fn a_cancelled_wait_leaves_its_request_decided_cancelled() {
        let state = tempfile::tempdir().unwrap();
        let approver = QueueApprover::new(state.path(), Duration::from_secs(60));
        let asked = request("c1");
        let waiting = tokio::spawn({
            let asked = asked.clone();
            async move { approver.decide(&asked).await }
        });
        // The request is registered, then the wait is dropped.
        until_pending(state.path()).await;
        waiting.abort();
        assert!(waiting.await.unwrap_err().is_cancelled());
        assert!(pending_approvals(state.path()).unwrap().is_empty());
        let dir = approvals_dir(state.path());
        assert_eq!(read_decision(&dir, "c1"), Some(cancelled()));
        assert!(matches!(
            decide_approval(state.path(), "c1", ApprovalOutcome::AllowedOnce, "op"),
            Err(DecideError::AlreadyDecided { .. })
        ));
    }

    /// A timeout too long for an instant to hold waits for the decision
    /// (the deadline's addition overflowed, and every ask ended "the
    /// approver panicked").
    #[tokio::test]
    async fn a_timeout_past_any_instant_waits_for_the_decision() {
        let state = tempfile::tempdir().unwrap();
        let approver = QueueApprover::new(state.path(), Duration::from_secs(u64::MAX));
        let asked = request("long");
        let waiting = tokio::spawn(async move { approver.decide(&asked).await });
        until_pending(state.path()).await;
        decide_approval(state.path(), "long", ApprovalOutcome::AllowedOnce, "op").unwrap();
        assert_eq!(waiting.await.unwrap().0, ApprovalOutcome::AllowedOnce);
    }

    /// An approval id asked a second time (a call id used twice) is not
    /// approved by the first request's decision, which still stands for
    /// ten minutes: the second wait is refused at once (fail closed) and
    /// the first request is left as it was.
    #[tokio::test]
    async fn a_second_request_of_one_id_is_not_decided_by_the_first_decision() {
        let state = tempfile::tempdir().unwrap();
        let approver = QueueApprover::new(state.path(), Duration::from_secs(60));
        let first = request("twice");
        let waiting = tokio::spawn({
            let (approver, first) = (approver.clone(), first.clone());
            async move { approver.decide(&first).await }
        });
        until_pending(state.path()).await;
        decide_approval(state.path(), "twice", ApprovalOutcome::AllowedOnce, "op").unwrap();
        assert_eq!(waiting.await.unwrap().0, ApprovalOutcome::AllowedOnce);

        let mut second = request("twice");
        second.args = serde_json::json!({"path": "elsewhere"});
        let (outcome, why) = approver.decide(&second).await;
        assert_eq!(outcome, ApprovalOutcome::Unavailable, "{why:?}");
        assert!(why.unwrap_or_default().contains("already asked once"));
        let dir = approvals_dir(state.path());
        let kept: ApprovalRequest =
            serde_json::from_slice(&std::fs::read(request_path(&dir, "twice")).unwrap()).unwrap();
        assert_eq!(kept.args, first.args);
    }

    #[test]
    fn ids_that_are_not_file_names_are_unknown() {
        let state = tempfile::tempdir().unwrap();
        for id in ["", "../x", "a/b", "a.b"] {
            assert_eq!(
                decide_approval(state.path(), id, ApprovalOutcome::AllowedOnce, "op"),
                Err(DecideError::Unknown(id.to_string()))
            );
        }
    }
}
