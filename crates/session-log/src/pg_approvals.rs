//! Two-phase approval requests in PostgreSQL (feature `postgres`): the store behind
//! `--approver queue` when the session log is shared by replicas, so that a request
//! asked on one replica is listed and decided through any of them (or `toolhost
//! approvals` anywhere) and the waiting replica sees the decision.
//!
//! This module owns the table `toolhost_approvals` (schema version 2). It stores the
//! request and the decision as the host's JSON, uninterpreted; what a decision means
//! is the host's business. It must not let a type of `tokio-postgres` escape.
//!
//! Exactly one decision per request: a decision is written only where none is
//! (`decision IS NULL` in the same statement), so an operator racing the waiting
//! replica's timeout, or two operators on two replicas, cannot both win.
//!
//! Calls are async and run on the caller's tokio runtime (the connection task is
//! spawned there); the connection is made at the first call and remade after it closes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_postgres::{Client, Config};

use crate::error::LogError;
use crate::pg_engine::{PgOptions, checked_config, connect, from_pg};

/// What [`PgApprovals::decide`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decided {
    /// The decision was recorded: it stands.
    Stands,
    /// A decision was already recorded (the one that stands, as given).
    Already(String),
    /// No request with this id in this log.
    Unknown,
}

/// The approval requests of one log in PostgreSQL, written as one replica.
pub struct PgApprovals {
    config: Config,
    schema: String,
    log: String,
    replica: String,
    op_timeout: Duration,
    client: Mutex<Option<Arc<Client>>>,
    /// When this handle last removed old rows (seconds since the Unix
    /// epoch; see [`PgApprovals::sweep_if_due`]).
    swept_at: std::sync::atomic::AtomicU64,
}

/// How often, at most, a handle removes old rows while it registers
/// requests and claims.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// How long after its decision (or, for a claim, after the time it is kept
/// for) a row is kept by the sweep that registrations and claims run: as
/// long as the host keeps a decided request for a late reader.
pub const KEEP_DECIDED: Duration = Duration::from_secs(600);

impl std::fmt::Debug for PgApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgApprovals")
            .field("schema", &self.schema)
            .field("log", &self.log)
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

impl PgApprovals {
    /// The requests of `options.log` at `url`, asked as `options.replica` (the identity
    /// the replica's [`PgEngine`](crate::PgEngine) registered: its lease says whether a
    /// request's waiter is alive). Connects at the first call, creating or upgrading the
    /// schema as a writer would.
    ///
    /// # Errors
    ///
    /// [`LogError::Invalid`] for a malformed URL, schema name or an empty log or replica.
    pub fn new(url: &str, options: &PgOptions) -> Result<PgApprovals, LogError> {
        let mut config = checked_config(url, options)?;
        config.application_name(format!("toolhost {} approvals", options.replica));
        Ok(PgApprovals {
            config,
            schema: options.schema.clone(),
            log: options.log.clone(),
            replica: options.replica.clone(),
            op_timeout: options.op_timeout,
            client: Mutex::new(None),
            swept_at: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The connection, made (again) if there is none or it closed.
    async fn client(&self) -> Result<Arc<Client>, LogError> {
        if let Ok(held) = self.client.lock()
            && let Some(c) = held.as_ref()
            && !c.is_closed()
        {
            return Ok(c.clone());
        }
        let fresh = Arc::new(
            self.bounded(connect(&self.config, &self.schema, true))
                .await?,
        );
        if let Ok(mut held) = self.client.lock() {
            *held = Some(fresh.clone());
        }
        Ok(fresh)
    }

    async fn bounded<T>(
        &self,
        fut: impl Future<Output = Result<T, LogError>>,
    ) -> Result<T, LogError> {
        match tokio::time::timeout(self.op_timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(LogError::Storage(format!(
                "PostgreSQL did not answer within {:.1} s; the operation's outcome is unknown",
                self.op_timeout.as_secs_f64()
            ))),
        }
    }

    /// Registers request `id` (its JSON `request`), waited for by this replica:
    /// `true` when it was registered now, `false` when a request of that id
    /// already exists (which keeps its first text and its decision, if any: the
    /// caller must not wait on it as its own).
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] when the database cannot be reached or refuses the write.
    pub async fn register(&self, id: &str, request: &str) -> Result<bool, LogError> {
        self.sweep_if_due().await;
        let client = self.client().await?;
        self.bounded(async {
            client
                .execute(
                    "INSERT INTO toolhost_approvals (log, id, request, replica) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (log, id) DO NOTHING",
                    &[&self.log, &id, &request, &self.replica],
                )
                .await
                .map_err(from_pg)
        })
        .await
        .map(|n| n == 1)
    }

    /// Claims `id` once for this log: `true` for the first claim of all replicas and
    /// processes, `false` for any later one (also across restarts). The claim is a
    /// request decided in the same statement (`decision` = `what`), so it is never
    /// pending: no operator lists or decides it. For what must happen once however
    /// many replicas see it at the same instant (a 2026-07-28 approval state's use).
    ///
    /// The claim is kept for good: [`PgApprovals::recover`] never removes it. A claim
    /// that only matters until some time (the expiry of the state it spends) should be
    /// made with [`PgApprovals::claim_once_until`], which lets it go after that.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] when the database cannot be reached or refuses the write.
    pub async fn claim_once(&self, id: &str, what: &str) -> Result<bool, LogError> {
        self.claim(id, what, f64::INFINITY).await
    }

    /// [`PgApprovals::claim_once`] for a claim needed only until `until` (the expiry of
    /// what it spends): it is kept at least until then, and removed by a
    /// [`PgApprovals::recover`] more than its `grace` after `until`, never before,
    /// whatever that grace.
    ///
    /// # Errors
    ///
    /// As [`PgApprovals::claim_once`].
    pub async fn claim_once_until(
        &self,
        id: &str,
        what: &str,
        until: SystemTime,
    ) -> Result<bool, LogError> {
        // A time before 1970 keeps the claim until 1970: already past.
        let secs = until
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.claim(id, what, secs).await
    }

    /// Inserts the claim with `decided_at` = `keep_until_secs` (Unix time; infinite for
    /// good): for a claim, that column says until when it must be kept, so that the
    /// clean-up of [`PgApprovals::recover`] (`decided_at` older than its grace) leaves
    /// it until then. Before, a claim was stamped with the time it was made and removed
    /// after the grace (the host's is 600 s), while the state it spent could live
    /// longer: a replay of that still-valid state then won a second claim.
    async fn claim(&self, id: &str, what: &str, keep_until_secs: f64) -> Result<bool, LogError> {
        self.sweep_if_due().await;
        let client = self.client().await?;
        self.bounded(async {
            client
                .execute(
                    "INSERT INTO toolhost_approvals (log, id, request, replica, decision, decided_at) \
                     VALUES ($1, $2, $3, $4, $3, to_timestamp($5::float8)) \
                     ON CONFLICT (log, id) DO NOTHING",
                    &[&self.log, &id, &what, &self.replica, &keep_until_secs],
                )
                .await
                .map_err(from_pg)
        })
        .await
        .map(|inserted| inserted == 1)
    }

    /// The decision recorded for `id`, if any.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] when the database cannot be reached.
    pub async fn decision(&self, id: &str) -> Result<Option<String>, LogError> {
        let client = self.client().await?;
        self.bounded(async { Ok(recorded(&client, &self.log, id).await?.flatten()) })
            .await
    }

    /// Records `decision` (JSON) for `id` unless one is recorded already.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] when the database cannot be reached or refuses the write.
    pub async fn decide(&self, id: &str, decision: &str) -> Result<Decided, LogError> {
        let client = self.client().await?;
        self.bounded(async {
            let updated = client
                .execute(
                    "UPDATE toolhost_approvals SET decision = $3, decided_at = now() \
                     WHERE log = $1 AND id = $2 AND decision IS NULL",
                    &[&self.log, &id, &decision],
                )
                .await
                .map_err(from_pg)?;
            if updated == 1 {
                return Ok(Decided::Stands);
            }
            Ok(match recorded(&client, &self.log, id).await? {
                Some(Some(first)) => Decided::Already(first),
                Some(None) | None => Decided::Unknown,
            })
        })
        .await
    }

    /// The requests (JSON) still pending whose waiting replica holds a live lease, oldest
    /// first: those of dead replicas can no longer be acted on.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] when the database cannot be reached.
    pub async fn pending(&self) -> Result<Vec<String>, LogError> {
        let client = self.client().await?;
        self.bounded(async {
            let rows = client
                .query(
                    "SELECT a.request FROM toolhost_approvals a JOIN toolhost_replicas r \
                     ON r.log = a.log AND r.id = a.replica \
                     WHERE a.log = $1 AND a.decision IS NULL AND r.lease_until >= now() \
                     ORDER BY a.asked_at, a.id",
                    &[&self.log],
                )
                .await
                .map_err(from_pg)?;
            rows.iter()
                .map(|r| r.try_get::<_, String>(0).map_err(from_pg))
                .collect()
        })
        .await
    }

    /// Decides `decision` (JSON) for every pending request that nobody can wait for any
    /// more: those of this replica's identity (an earlier incarnation: call this right
    /// after the replica's log was opened, before it asks anything) and those of replicas
    /// whose lease expired. Removes requests decided more than `grace` ago, and claims
    /// more than `grace` past the time they were kept for (never those of
    /// [`PgApprovals::claim_once`]). Returns the ids decided.
    ///
    /// # Errors
    ///
    /// [`LogError::Storage`] when the database cannot be reached or refuses the write.
    pub async fn recover(&self, decision: &str, grace: Duration) -> Result<Vec<String>, LogError> {
        let client = self.client().await?;
        let grace = grace.as_secs_f64();
        self.bounded(async {
            let rows = client
                .query(
                    "UPDATE toolhost_approvals a SET decision = $3, decided_at = now() \
                     WHERE a.log = $1 AND a.decision IS NULL AND (a.replica = $2 OR NOT EXISTS \
                       (SELECT 1 FROM toolhost_replicas r WHERE r.log = a.log \
                        AND r.id = a.replica AND r.lease_until >= now())) \
                     RETURNING a.id",
                    &[&self.log, &self.replica, &decision],
                )
                .await
                .map_err(from_pg)?;
            delete_decided(&client, &self.log, grace).await?;
            rows.iter()
                .map(|r| r.try_get::<_, String>(0).map_err(from_pg))
                .collect()
        })
        .await
    }
}

impl PgApprovals {
    /// Removes the rows decided more than [`KEEP_DECIDED`] ago (claims: past
    /// the time they are kept for), at most once a minute per
    /// handle. Every request and claim adds a row; without this, a replica
    /// that never restarts (the sweep of [`PgApprovals::recover`] runs at
    /// start) grew the table without bound. A failure is left for the next
    /// sweep: the row it would remove is no longer needed, and the caller's
    /// own statement reports a database that cannot be reached.
    pub async fn sweep_if_due(&self) -> u64 {
        use std::sync::atomic::Ordering;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let last = self.swept_at.load(Ordering::SeqCst);
        if now.saturating_sub(last) < SWEEP_EVERY.as_secs()
            || self
                .swept_at
                .compare_exchange(last, now, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            return 0;
        }
        let Ok(client) = self.client().await else {
            return 0;
        };
        self.bounded(delete_decided(
            &client,
            &self.log,
            KEEP_DECIDED.as_secs_f64(),
        ))
        .await
        .unwrap_or(0)
    }
}

/// Removes the rows of `log` decided more than `grace_secs` ago (a claim's
/// `decided_at` is the time it is kept until); how many.
async fn delete_decided(client: &Client, log: &str, grace_secs: f64) -> Result<u64, LogError> {
    client
        .execute(
            "DELETE FROM toolhost_approvals WHERE log = $1 \
             AND decided_at < now() - make_interval(secs => $2)",
            &[&log, &grace_secs],
        )
        .await
        .map_err(from_pg)
}

/// The row of request `id` in `log`: `None` when there is none, else its
/// decision (`None` while pending).
async fn recorded(
    client: &Client,
    log: &str,
    id: &str,
) -> Result<Option<Option<String>>, LogError> {
    let row = client
        .query_opt(
            "SELECT decision FROM toolhost_approvals WHERE log = $1 AND id = $2",
            &[&log, &id],
        )
        .await
        .map_err(from_pg)?;
    row.map(|r| r.try_get::<_, Option<String>>(0).map_err(from_pg))
        .transpose()
}
