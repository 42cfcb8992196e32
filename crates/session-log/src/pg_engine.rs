//! The PostgreSQL engine (feature `postgres`, DESIGN.md §5b): several toolhost replicas
//! append to one log in one database.
//!
//! This module owns the engine: connecting, the schema check, the write transactions,
//! replica leases, fencing and the recovery of dead replicas' calls. It must keep every
//! rule of [`LogEngine`] that the redb engine keeps, and it must not let a type of
//! `tokio-postgres` escape.
//!
//! Shape: a [`PgEngine`] is a handle to one worker thread that owns the connection and a
//! single-threaded runtime to drive it. Callers (any thread, async or not) send a job and
//! block until it is answered, as they block on redb's `fdatasync`. The worker takes every
//! job that is waiting when it starts a transaction, so appends that arrive while a commit
//! is in flight share the next commit (group commit): one durable commit for the group,
//! whatever its size.
//!
//! Rules that make several writers safe:
//! - every write transaction first locks the log's row in `toolhost_logs`: sequence
//!   numbers follow commit order, and recovery's "read the pending set, append the
//!   results" is atomic with respect to every writer;
//! - every write transaction renews this replica's lease only if its epoch is still the
//!   one it registered with; recovery of a replica's calls increments its epoch, so a
//!   replica that only looked dead fails its next write with [`LogError::Fenced`] and
//!   cannot commit a result for a call already declared unknown;
//! - leases are compared with the database's clock, never a replica's;
//! - a lease keeper thread, on a connection of its own, renews the lease whenever the
//!   worker has not for half a lease (the worker is busy with a slow operation: one may
//!   take up to the operation timeout, longer than the lease), so that a live replica
//!   is not declared dead because its worker waits.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls, Statement, Transaction};

use crate::engine::LogEngine;
use crate::error::LogError;
use crate::event::{Event, EventKind, NewEvent, now_unix_ms};
use crate::log::Durability;
use crate::pg_schema::{
    CREATE, CREATE_APPEND, CREATE_APPROVALS, CREATE_VERSION_TABLE, FENCED_SQLSTATE,
    PG_SCHEMA_VERSION, SCHEMA_LOCK,
};
use crate::recovery::{Recovery, recovery_events};

/// Most jobs one transaction takes (a bound on the group of a group commit).
const MAX_GROUP: usize = 256;

/// How a [`PgEngine`] connects and whom it writes as. Start from
/// [`PgOptions::default`] and set what differs.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// The log to use: one database holds many logs, each with its own sequence. Default
    /// `default`.
    pub log: String,
    /// The PostgreSQL schema (namespace) holding toolhost's tables, created if missing.
    /// Lower-case letters, digits and `_`. Default `toolhost`.
    pub schema: String,
    /// This replica's identity. A replica that restarts with the same identity takes over
    /// its predecessor's lease (and fences it). Default: host name, process id and start
    /// time, unique per process.
    pub replica: String,
    /// How long this replica's lease lasts without renewal. Every write renews it, the
    /// worker renews it every third of it when idle, and a keeper thread whenever the
    /// worker has not for half of it (while an operation is slow); after it expires,
    /// another replica (or `toolhost recover`) resolves this replica's unfinished calls.
    /// Default 10 s.
    pub lease: Duration,
    /// How long one database operation may take before it fails with
    /// [`LogError::Storage`] (its outcome then unknown). Default 30 s.
    pub op_timeout: Duration,
    /// Refuse to open as a writer while this identity's lease still runs (a process
    /// uses it, or one stopped less than a lease ago), instead of taking it over and
    /// fencing that process: what `toolhost recover` asks, so that a shell that exports
    /// a server's `TOOLHOST_REPLICA_ID` cannot fence the live server. Default `false`:
    /// a restart takes over its predecessor's identity.
    pub refuse_live_identity: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            log: "default".to_string(),
            schema: "toolhost".to_string(),
            replica: default_replica_id(),
            lease: Duration::from_secs(10),
            op_timeout: Duration::from_secs(30),
            refuse_live_identity: false,
        }
    }
}

/// `HOSTNAME:PID:START_MS`: unique per process on one machine.
fn default_replica_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_string());
    format!("{host}:{}:{}", std::process::id(), now_unix_ms())
}

/// What a [`PgEngine`] has done so far (for tests and benchmarks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PgStats {
    /// Operations in the worker's queue so far (answered or still waiting).
    pub submitted: u64,
    /// Append requests answered (successful or not).
    pub appends: u64,
    /// Write transactions committed (appends, flushes, recoveries, lease renewals).
    pub commits: u64,
    /// Of [`PgStats::commits`], those with synchronous commit (durable on return).
    pub durable_commits: u64,
}

#[derive(Debug, Default)]
struct Counters {
    submitted: AtomicU64,
    appends: AtomicU64,
    commits: AtomicU64,
    durable_commits: AtomicU64,
}

/// The PostgreSQL engine: a [`LogEngine`] whose events live in one database shared by
/// several replicas. Open it with [`PgEngine::open`] (a writer: it registers a lease) or
/// [`PgEngine::open_reader`] (reads only), and hand it to
/// [`SessionLog::from_engine`](crate::SessionLog::from_engine).
///
/// Beyond the rules of [`LogEngine`]:
/// - [`LogEngine::recover`] resolves the unfinished calls of this replica (those of its
///   earlier incarnations with the same identity, and any running here: call it right
///   after opening) and of every replica whose lease has expired, never those of a live
///   replica. The worker also resolves expired replicas' calls by itself, at every lease
///   renewal.
/// - After this replica's calls were recovered elsewhere (its lease expired while it was
///   paused or cut off), every write fails with [`LogError::Fenced`]; restart it.
/// - After a connection error the engine reconnects at its next operation; the failed
///   operation's outcome is unknown, as for any durable append that fails.
/// - Going on after a failed write, it still leaves no call open that a failed lazy
///   append would have closed: the calls whose `tool/result` it carried are resolved as
///   recovery resolves them (`TOOL_OUTCOME_UNKNOWN` and a `session/recovered` event) by
///   the first write transaction that commits after it (tried at once, then before the
///   next operation and at every lease renewal), unless a result of theirs reached the
///   database. The redb engine ends such a call the same way: it refuses further writes
///   after a failure, and the recovery that follows the reopening resolves it. (Whoever
///   appends lazily leaves the rest to the log and must not append the result again;
///   the caller of a failed durable append is told, and decides: it may retry.)
pub struct PgEngine {
    jobs: Option<Sender<Job>>,
    worker: Option<JoinHandle<()>>,
    /// The lease keeper (writers): what it shares with the worker, and its thread.
    keeper: Option<(Arc<LeaseShared>, JoinHandle<()>)>,
    counters: Arc<Counters>,
    replica: Option<String>,
    log: String,
}

impl fmt::Debug for PgEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgEngine")
            .field("log", &self.log)
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

impl PgEngine {
    /// Connects to the database at `url` (a libpq-style URL or key=value string), creates
    /// or checks the schema, and registers this replica with a lease.
    ///
    /// # Errors
    ///
    /// [`LogError::Invalid`] if `url` or the options are malformed;
    /// [`LogError::NewerFormat`] if a newer toolhost created the schema;
    /// [`LogError::Storage`] if the database cannot be reached or refuses to write (also
    /// when it is read-only).
    pub fn open(url: &str, options: &PgOptions) -> Result<PgEngine, LogError> {
        PgEngine::start(url, options, true)
    }

    /// Connects to the database at `url` to read a log (`toolhost log`): it registers no
    /// lease and never writes; appends, flushes and recovery fail with
    /// [`LogError::Invalid`]. The schema must exist: a database without toolhost's tables
    /// fails with [`LogError::Storage`] saying so (nothing is created).
    ///
    /// # Errors
    ///
    /// As [`PgEngine::open`].
    pub fn open_reader(url: &str, options: &PgOptions) -> Result<PgEngine, LogError> {
        PgEngine::start(url, options, false)
    }

    fn start(url: &str, options: &PgOptions, writer: bool) -> Result<PgEngine, LogError> {
        let mut config = checked_config(url, options)?;
        if options.lease < Duration::from_millis(100) {
            return Err(LogError::Invalid(
                "a replica's lease must last at least 100 ms".to_string(),
            ));
        }
        // Names the connections, so that an operator (or a test) can tell replicas apart.
        config.application_name(format!("toolhost {}", options.replica));
        let keeper_config = config.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| LogError::Storage(format!("cannot start the PostgreSQL client: {e}")))?;
        let counters = Arc::new(Counters::default());
        let lease = Arc::new(LeaseShared::new());
        let mut worker = Worker {
            config,
            options: options.clone(),
            writer,
            runtime,
            conn: None,
            epoch: 0,
            fenced: false,
            lazy_unflushed: false,
            lazy_last: 0,
            lazy_lost: None,
            unresolved: Vec::new(),
            counters: counters.clone(),
            last_renewal: Instant::now(),
            lease: lease.clone(),
        };
        let (jobs, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let handle = std::thread::Builder::new()
            .name("toolhost-log-pg".to_string())
            .spawn(move || {
                let opened = worker.open().map(|()| worker.epoch);
                let ok = opened.is_ok();
                let _ = ready_tx.send(opened);
                if ok {
                    worker.run(&rx);
                }
            })
            .map_err(|e| LogError::Storage(format!("cannot start the PostgreSQL worker: {e}")))?;
        let epoch = match ready_rx.recv() {
            Ok(Ok(epoch)) => epoch,
            Ok(Err(e)) => {
                let _ = handle.join();
                return Err(e);
            }
            Err(_) => {
                let _ = handle.join();
                return Err(LogError::Storage(
                    "the PostgreSQL worker stopped while opening".to_string(),
                ));
            }
        };
        let mut engine = PgEngine {
            jobs: Some(jobs),
            worker: Some(handle),
            keeper: None,
            counters,
            replica: writer.then(|| options.replica.clone()),
            log: options.log.clone(),
        };
        if writer {
            let keeper = LeaseKeeper {
                config: keeper_config,
                schema: options.schema.clone(),
                who: Who {
                    log: options.log.clone(),
                    replica: options.replica.clone(),
                    epoch,
                    lease_secs: options.lease.as_secs_f64(),
                },
                lease: options.lease,
                shared: lease.clone(),
                counters: engine.counters.clone(),
            };
            let handle = std::thread::Builder::new()
                .name("toolhost-log-pg-lease".to_string())
                .spawn(move || keeper.run())
                .map_err(|e| LogError::Storage(format!("cannot start the lease keeper: {e}")))?;
            engine.keeper = Some((lease, handle));
        }
        Ok(engine)
    }

    /// This replica's identity (`None` for a reader).
    pub fn replica(&self) -> Option<&str> {
        self.replica.as_deref()
    }

    /// A handle to this engine's counters that stays valid after the engine is moved
    /// into a [`SessionLog`](crate::SessionLog).
    pub fn stats_handle(&self) -> PgStatsHandle {
        PgStatsHandle(self.counters.clone())
    }

    fn ask<T>(
        &self,
        make: impl FnOnce(SyncSender<Result<T, LogError>>) -> Job,
    ) -> Result<T, LogError> {
        let (tx, rx) = mpsc::sync_channel(1);
        let stopped = || LogError::Storage("the PostgreSQL worker has stopped".to_string());
        self.jobs
            .as_ref()
            .ok_or_else(stopped)?
            .send(make(tx))
            .map_err(|_| stopped())?;
        // Counted once in the queue, so that a test that sees the count knows the
        // worker will find the job there.
        self.counters.submitted.fetch_add(1, Ordering::SeqCst);
        rx.recv().map_err(|_| stopped())?
    }
}

/// Reads the counters of a [`PgEngine`] (see [`PgEngine::stats_handle`]).
#[derive(Debug, Clone)]
pub struct PgStatsHandle(Arc<Counters>);

impl PgStatsHandle {
    /// The counters now.
    pub fn get(&self) -> PgStats {
        PgStats {
            submitted: self.0.submitted.load(Ordering::Relaxed),
            appends: self.0.appends.load(Ordering::Relaxed),
            commits: self.0.commits.load(Ordering::Relaxed),
            durable_commits: self.0.durable_commits.load(Ordering::Relaxed),
        }
    }
}

impl Drop for PgEngine {
    fn drop(&mut self) {
        // The keeper stops first, so that no renewal follows the release.
        if let Some((lease, handle)) = self.keeper.take() {
            lease.stop();
            let _ = handle.join();
        }
        // Closing the channel stops the worker after the jobs already sent; it then
        // ends the replica's lease (see `release`).
        self.jobs.take();
        if let Some(handle) = self.worker.take() {
            let _ = handle.join();
        }
    }
}

impl LogEngine for PgEngine {
    fn append(&self, events: &[NewEvent], durability: Durability) -> Result<Vec<u64>, LogError> {
        if events.is_empty() {
            // A durable append returns only once every earlier event is durable: with
            // none of its own, that is a flush.
            return match durability {
                Durability::Durable => self.flush().map(|()| Vec::new()),
                Durability::Lazy => Ok(Vec::new()),
            };
        }
        self.ask(|reply| Job::Append {
            events: events.to_vec(),
            durable: durability == Durability::Durable,
            reply,
        })
    }

    fn flush(&self) -> Result<(), LogError> {
        self.ask(|reply| Job::Flush { reply })
    }

    fn events(&self) -> Result<Vec<Event>, LogError> {
        self.ask(|reply| Job::Events {
            call_id: None,
            reply,
        })
    }

    fn events_for_call(&self, call_id: &str) -> Result<Vec<Event>, LogError> {
        self.ask(|reply| Job::Events {
            call_id: Some(call_id.to_string()),
            reply,
        })
    }

    fn pending_calls(&self) -> Result<Vec<String>, LogError> {
        self.ask(|reply| Job::Pending { reply })
    }

    fn recover(&self) -> Result<Recovery, LogError> {
        self.ask(|reply| Job::Recover { reply })
    }
}

/// What a caller asks of the worker.
enum Job {
    Append {
        events: Vec<NewEvent>,
        durable: bool,
        reply: SyncSender<Result<Vec<u64>, LogError>>,
    },
    Flush {
        reply: SyncSender<Result<(), LogError>>,
    },
    Events {
        call_id: Option<String>,
        reply: SyncSender<Result<Vec<Event>, LogError>>,
    },
    Pending {
        reply: SyncSender<Result<Vec<String>, LogError>>,
    },
    Recover {
        reply: SyncSender<Result<Recovery, LogError>>,
    },
}

/// An append waiting in a group: its events, whether it must be durable, and where its
/// answer goes.
type AppendJob = (Vec<NewEvent>, bool, SyncSender<Result<Vec<u64>, LogError>>);

/// Whom a write transaction writes as: what it checks and renews.
struct Who {
    log: String,
    replica: String,
    epoch: i64,
    /// The lease, in seconds (PostgreSQL's `make_interval` takes them as a float).
    lease_secs: f64,
}

/// The worker thread's state: the connection and this replica's registration.
struct Worker {
    config: tokio_postgres::Config,
    options: PgOptions,
    writer: bool,
    runtime: tokio::runtime::Runtime,
    conn: Option<Conn>,
    /// The epoch this replica registered with (writers only).
    epoch: i64,
    /// Set once a write found this replica's epoch taken: every later write fails.
    fenced: bool,
    /// A lazy commit has not been followed by a durable one yet.
    lazy_unflushed: bool,
    /// The sequence number of the last event committed lazily.
    lazy_last: u64,
    /// Lazily committed events were lost (the database restarted before they were
    /// durable): the next flush or durable append reports it.
    lazy_lost: Option<String>,
    /// Calls of this replica whose `tool/result` was in a lazy append that failed: their
    /// intents may still be pending. The next recovery transaction that commits resolves
    /// those that are ([`Worker::resolve_unresolved`]).
    unresolved: Vec<String>,
    counters: Arc<Counters>,
    last_renewal: Instant,
    /// Shared with the lease keeper: when the lease was last renewed.
    lease: Arc<LeaseShared>,
}

impl Worker {
    /// Connects, checks the schema and registers (writers).
    fn open(&mut self) -> Result<(), LogError> {
        if !self.writer {
            return self.run_op(async |_| Ok(()));
        }
        let log = self.options.log.clone();
        let replica = self.options.replica.clone();
        let lease_secs = self.options.lease.as_secs_f64();
        let refuse_live = self.options.refuse_live_identity;
        self.epoch = self.run_op(async |c| {
            register(&mut c.client, &log, &replica, lease_secs, refuse_live).await
        })?;
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        self.counters
            .durable_commits
            .fetch_add(1, Ordering::Relaxed);
        self.last_renewal = Instant::now();
        self.lease.renewed();
        Ok(())
    }

    fn run(&mut self, jobs: &Receiver<Job>) {
        let renew_every = self.options.lease / 3;
        loop {
            let wait = renew_every.saturating_sub(self.last_renewal.elapsed());
            match jobs.recv_timeout(wait) {
                Ok(first) => {
                    let mut group = vec![first];
                    while group.len() < MAX_GROUP {
                        match jobs.try_recv() {
                            Ok(job) => group.push(job),
                            Err(_) => break,
                        }
                    }
                    self.serve(group);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if self.writer && !self.fenced && self.last_renewal.elapsed() >= renew_every {
                // A failed renewal is tried again at the next tick (not at once: the
                // database may be down); a write in between reports the error to its
                // caller. It also resolves the calls left unresolved.
                let _ = self.recover(false);
                self.last_renewal = Instant::now();
            }
        }
        if self.writer && !self.fenced {
            let who = self.who();
            let _ = self.run_op(async |c| release(&mut c.client, &who).await);
        }
    }

    /// Answers `jobs` in order; consecutive appends share one transaction.
    fn serve(&mut self, jobs: Vec<Job>) {
        // Before anything else: what a caller reads or appends next comes after the
        // resolution of the calls an earlier failure left open.
        self.resolve_unresolved();
        let mut appends: Vec<AppendJob> = Vec::new();
        for job in jobs {
            match job {
                Job::Append {
                    events,
                    durable,
                    reply,
                } => appends.push((events, durable, reply)),
                Job::Flush { reply } => {
                    self.append_group(std::mem::take(&mut appends));
                    let _ = reply.send(self.flush());
                }
                Job::Events { call_id, reply } => {
                    self.append_group(std::mem::take(&mut appends));
                    let _ = reply.send(self.read_events(call_id));
                }
                Job::Pending { reply } => {
                    self.append_group(std::mem::take(&mut appends));
                    let _ = reply.send(self.read_pending());
                }
                Job::Recover { reply } => {
                    self.append_group(std::mem::take(&mut appends));
                    let _ = reply.send(self.recover(true));
                }
            }
        }
        self.append_group(appends);
    }

    fn who(&self) -> Who {
        Who {
            log: self.options.log.clone(),
            replica: self.options.replica.clone(),
            epoch: self.epoch,
            lease_secs: self.options.lease.as_secs_f64(),
        }
    }

    /// Refuses a write of a reader or of a fenced replica.
    fn may_write(&self) -> Result<(), LogError> {
        if !self.writer {
            return Err(LogError::Invalid(
                "this PostgreSQL log was opened for reading only".to_string(),
            ));
        }
        if self.fenced {
            return Err(LogError::Fenced {
                replica: self.options.replica.clone(),
            });
        }
        Ok(())
    }

    /// Counts a committed write transaction and notes what it made durable; `last` is
    /// the sequence number of the last event it wrote, if it wrote any.
    fn committed(&mut self, durable: bool, last: Option<u64>) {
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        if durable {
            self.counters
                .durable_commits
                .fetch_add(1, Ordering::Relaxed);
            self.lazy_unflushed = false;
        } else {
            self.lazy_unflushed = true;
            if let Some(last) = last {
                self.lazy_last = last;
            }
        }
        // Every write transaction renewed the lease.
        self.last_renewal = Instant::now();
        self.lease.renewed();
    }

    /// Notes a write's failure: a fenced replica stays fenced.
    fn failed<T>(&mut self, outcome: Result<T, LogError>) -> Result<T, LogError> {
        if matches!(outcome, Err(LogError::Fenced { .. })) {
            self.fenced = true;
        }
        outcome
    }

    fn append_group(&mut self, group: Vec<AppendJob>) {
        if group.is_empty() {
            return;
        }
        self.counters
            .appends
            .fetch_add(group.len() as u64, Ordering::Relaxed);
        let durable = group.iter().any(|(_, d, _)| *d);
        let outcome = match self.may_write() {
            Ok(()) => {
                let who = self.who();
                let parts: Vec<&[NewEvent]> = group.iter().map(|(e, _, _)| e.as_slice()).collect();
                let events = parts.iter().map(|p| p.len() as u64).sum::<u64>();
                let outcome = self.run_op(async |c| write_appends(c, &who, &parts, durable).await);
                if let Ok(first) = outcome {
                    self.committed(durable, first.saturating_add(events).checked_sub(1));
                }
                self.failed(outcome)
            }
            Err(e) => Err(e),
        };
        // A durable append returns only once every earlier event is durable: lazily
        // committed events found lost at a reconnection (in this operation or an
        // earlier one) fail the group's durable appends, once, though their own events
        // are committed (an error leaves a durable append's outcome unknown anyway).
        let lost = match (&outcome, durable) {
            (Ok(_), true) => self.lazy_lost.take(),
            _ => None,
        };
        match outcome {
            Ok(first) => {
                let mut next = first;
                for (events, durable, reply) in &group {
                    let n = events.len() as u64;
                    let _ = reply.send(match &lost {
                        Some(lost) if *durable => Err(LogError::Storage(lost.clone())),
                        _ => Ok((next..next + n).collect()),
                    });
                    next += n;
                }
            }
            Err(e) => {
                for (_, _, reply) in &group {
                    let _ = reply.send(Err(copy_error(&e)));
                }
                // A fenced replica's calls were resolved by whoever fenced it, and a
                // reader has none.
                if self.writer && !self.fenced {
                    let lazy = group.iter().filter(|(_, durable, _)| !durable);
                    self.note_unresolved(lazy.flat_map(|(events, _, _)| events));
                    self.resolve_unresolved();
                }
            }
        }
    }

    /// Notes the calls whose result is among `events`, of a lazy append that failed.
    fn note_unresolved<'e>(&mut self, events: impl IntoIterator<Item = &'e NewEvent>) {
        for e in events {
            // (A call has one result: no duplicates to look for.)
            if e.kind == EventKind::ToolResult {
                self.unresolved.push(e.call_id.clone());
            }
        }
    }

    /// Resolves the calls a failed append left unresolved, if there are any (one
    /// recovery transaction; on failure they wait for the next try).
    fn resolve_unresolved(&mut self) {
        if !self.unresolved.is_empty() && self.writer && !self.fenced {
            let _ = self.recover(false);
        }
    }

    fn flush(&mut self) -> Result<(), LogError> {
        if !self.writer || !self.lazy_unflushed {
            return self
                .lazy_lost
                .take()
                .map_or(Ok(()), |e| Err(LogError::Storage(e)));
        }
        self.may_write()?;
        let who = self.who();
        // One synchronous commit makes every earlier asynchronous one durable: the
        // write-ahead log is flushed in order.
        let outcome = self.run_op(async |c| renew(&mut c.client, &who).await);
        if outcome.is_ok() {
            self.committed(true, None);
        }
        self.failed(outcome)?;
        // A reconnection found lazily committed events gone.
        self.lazy_lost
            .take()
            .map_or(Ok(()), |e| Err(LogError::Storage(e)))
    }

    /// Resolves pending calls (see [`PgEngine`]): those of replicas that are gone, this
    /// replica's unresolved ones and, with `include_own`, all of this replica's current
    /// calls. Without it, this is the periodic lease renewal and sweep.
    fn recover(&mut self, include_own: bool) -> Result<Recovery, LogError> {
        self.may_write()?;
        let who = self.who();
        let unresolved = std::mem::take(&mut self.unresolved);
        let outcome = self
            .run_op(async |c| recover_calls(&mut c.client, &who, include_own, &unresolved).await);
        if outcome.is_ok() {
            self.committed(true, None);
        } else {
            self.unresolved = unresolved;
        }
        self.failed(outcome)
    }

    fn read_events(&mut self, call_id: Option<String>) -> Result<Vec<Event>, LogError> {
        let log = self.options.log.clone();
        self.run_op(async |c| read_events(&mut c.client, &log, call_id.as_deref()).await)
    }

    fn read_pending(&mut self) -> Result<Vec<String>, LogError> {
        let log = self.options.log.clone();
        self.run_op(async |c| {
            let rows = c
                .client
                .query(
                    "SELECT call_id FROM toolhost_pending WHERE log = $1 ORDER BY seq",
                    &[&log],
                )
                .await
                .map_err(from_pg)?;
            rows.iter()
                .map(|r| r.try_get::<_, String>(0).map_err(from_pg))
                .collect()
        })
    }

    /// Runs `op` on the connection (connecting first if there is none), bounded by the
    /// operation timeout. After any error the connection is dropped, so that the next
    /// operation starts on a fresh one.
    ///
    /// A new connection while events committed lazily are not yet durable first checks
    /// that the last of them is still there, before anything is written on it: a
    /// database that crashed and restarted in between lost them, and a flush must not
    /// then report them durable (a synchronous commit on the new connection would
    /// succeed). Found missing, they are reported by the next flush or durable append
    /// (this one, if it is one).
    fn run_op<T>(
        &mut self,
        op: impl AsyncFnOnce(&mut Conn) -> Result<T, LogError>,
    ) -> Result<T, LogError> {
        let Worker {
            config,
            options,
            writer,
            runtime,
            conn,
            lazy_unflushed,
            lazy_last,
            lazy_lost,
            ..
        } = self;
        let timeout = options.op_timeout;
        let outcome = runtime.block_on(async {
            if conn.as_ref().is_none_or(|c| c.client.is_closed()) {
                *conn = None;
                let client =
                    with_timeout(timeout, connect(config, &options.schema, *writer)).await?;
                if *writer && *lazy_unflushed {
                    let check = lazy_event_exists(&client, &options.log, *lazy_last, &options.replica);
                    if !with_timeout(timeout, check).await? {
                        *lazy_unflushed = false;
                        *lazy_lost = Some(format!(
                            "events committed lazily (up to sequence number {lazy_last}) were lost: the connection to PostgreSQL broke before they were durable, and the database no longer has them (did it restart?)"
                        ));
                    }
                }
                *conn = Some(Conn {
                    client,
                    append: None,
                });
            }
            match conn.as_mut() {
                Some(c) => with_timeout(timeout, op(c)).await,
                None => Err(LogError::Storage("no connection to PostgreSQL".to_string())),
            }
        });
        if outcome.is_err() {
            *conn = None;
        }
        outcome
    }
}

/// What the worker and the lease keeper share: when the lease was last renewed, and
/// the keeper's stop signal.
struct LeaseShared {
    base: Instant,
    /// Milliseconds from `base` to the last renewal.
    renewed_ms: AtomicU64,
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl LeaseShared {
    fn new() -> LeaseShared {
        LeaseShared {
            base: Instant::now(),
            renewed_ms: AtomicU64::new(0),
            stopped: Mutex::new(false),
            wake: Condvar::new(),
        }
    }

    /// Notes a renewal that committed now.
    fn renewed(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.renewed_ms.fetch_max(ms, Ordering::SeqCst);
    }

    fn since_renewal(&self) -> Duration {
        let at = Duration::from_millis(self.renewed_ms.load(Ordering::SeqCst));
        self.base.elapsed().saturating_sub(at)
    }

    fn stop(&self) {
        if let Ok(mut stopped) = self.stopped.lock() {
            *stopped = true;
        }
        self.wake.notify_all();
    }

    /// Waits for `tick` or the stop signal; returns whether to stop.
    fn wait(&self, tick: Duration) -> bool {
        let Ok(stopped) = self.stopped.lock() else {
            return true;
        };
        match self.wake.wait_timeout_while(stopped, tick, |s| !*s) {
            Ok((stopped, _)) => *stopped,
            Err(_) => true,
        }
    }
}

/// The `application_name` of the lease keeper's connection of `replica`
/// (what an operator sees in `pg_stat_activity`; PostgreSQL keeps 63 bytes).
pub fn keeper_application(replica: &str) -> String {
    let name: String = format!("toolhost-lease-keeper {replica}")
        .chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .filter(|c| *c != '\'')
        .collect();
    let mut end = name.len().min(63);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

/// Renews the lease of a writer, on a connection of its own, whenever the worker has
/// not renewed it for half a lease: the worker renews it at every write and every third
/// of a lease when idle, but not while one of its operations is slow (up to the
/// operation timeout, which may be longer than the lease).
///
/// It checks the epoch as every renewal does: once this replica is fenced it stops.
/// It writes nothing else, and never resolves anyone's calls (the worker's sweep does).
struct LeaseKeeper {
    config: tokio_postgres::Config,
    schema: String,
    who: Who,
    lease: Duration,
    shared: Arc<LeaseShared>,
    counters: Arc<Counters>,
}

impl LeaseKeeper {
    fn run(self) {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        // A renewal is due at half a lease, seen within a sixth, and bounded by a sixth:
        // the lease is renewed at most five sixths of it after the last renewal.
        let tick = self.lease / 6;
        let mut client: Option<Client> = None;
        while !self.shared.wait(tick) {
            if self.shared.since_renewal() < self.lease / 2 {
                continue;
            }
            // (The timer is made inside the runtime: it needs its clock.)
            let renewal = runtime
                .block_on(async { tokio::time::timeout(tick, self.renew(&mut client)).await });
            match renewal {
                // No answer within a tick although the server gives up sooner:
                // the connection itself is in doubt; the next tick opens another.
                Err(_) => client = None,
                Ok(Ok(true)) => {
                    self.counters.commits.fetch_add(1, Ordering::Relaxed);
                    self.counters
                        .durable_commits
                        .fetch_add(1, Ordering::Relaxed);
                    self.shared.renewed();
                }
                // Fenced: the worker's next write says so.
                Ok(Ok(false)) => return,
                // An error from the server (its lock or statement timeout, below
                // the tick, while the worker holds this replica's row): tried
                // again at the next tick on the same connection, where nothing
                // is left waiting; on a new one once it is closed. Dropping an open one
                // whose statement still waits would leave a blocked backend per
                // tick while the worker holds this replica's row.
                Ok(Err(_)) => {
                    if client.as_ref().is_some_and(Client::is_closed) {
                        client = None;
                    }
                }
            }
        }
    }

    /// Renews the lease if the epoch is still this replica's; `false` if it is not.
    async fn renew(&self, client: &mut Option<Client>) -> Result<bool, LogError> {
        if client.as_ref().is_none_or(Client::is_closed) {
            let c = connect(&self.config, &self.schema, false).await?;
            // The renewal gives up on the server's side before the keeper's own
            // timeout (a tick): while the worker's transaction holds this
            // replica's row, the UPDATE waits at most this long for it. Only the
            // lock wait is bounded so: on a loaded machine the statement itself
            // may take longer, and a renewal that runs must be let finish.
            let limit_ms = (self.lease / 12).as_millis().max(1);
            c.batch_execute(&format!(
                "SET lock_timeout = {limit_ms}; SET application_name = '{}'",
                keeper_application(&self.who.replica)
            ))
            .await
            .map_err(from_pg)?;
            *client = Some(c);
        }
        let Some(c) = client.as_ref() else {
            return Err(LogError::Storage("no connection to PostgreSQL".to_string()));
        };
        let who = &self.who;
        let renewed = c
            .execute(
                RENEW,
                &[&who.log, &who.replica, &who.epoch, &who.lease_secs],
            )
            .await
            .map_err(from_pg)?;
        Ok(renewed == 1)
    }
}

/// Whether the event `seq` of `log`, written by `replica`, is in the database.
async fn lazy_event_exists(
    client: &Client,
    log: &str,
    seq: u64,
    replica: &str,
) -> Result<bool, LogError> {
    let seq =
        i64::try_from(seq).map_err(|_| LogError::Corrupt(format!("sequence number {seq}")))?;
    let row = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM toolhost_events WHERE log = $1 AND seq = $2 AND replica = $3)",
            &[&log, &seq, &replica],
        )
        .await
        .map_err(from_pg)?;
    row.try_get(0).map_err(from_pg)
}

/// A connection and the statement it prepared for appends.
struct Conn {
    client: Client,
    append: Option<Statement>,
}

/// `fut`, or a storage error once `timeout` has passed.
async fn with_timeout<T>(
    timeout: Duration,
    fut: impl Future<Output = Result<T, LogError>>,
) -> Result<T, LogError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(outcome) => outcome,
        Err(_) => Err(LogError::Storage(format!(
            "PostgreSQL did not answer within {:.1} s; the operation's outcome is unknown",
            timeout.as_secs_f64()
        ))),
    }
}

/// A new connection with the session settings toolhost relies on, on a checked schema.
pub(crate) async fn connect(
    config: &tokio_postgres::Config,
    schema: &str,
    writer: bool,
) -> Result<Client, LogError> {
    let (mut client, connection) = config.connect(NoTls).await.map_err(from_pg)?;
    // The connection task ends when the client is dropped or the server goes away.
    tokio::spawn(connection);
    // Durable appends need synchronous commit whatever the server's default; lazy ones
    // turn it off per transaction.
    client
        .batch_execute("SET synchronous_commit TO on")
        .await
        .map_err(from_pg)?;
    ensure_schema(&mut client, schema, writer).await?;
    client
        .batch_execute(&format!("SET search_path TO {}", quoted(schema)))
        .await
        .map_err(from_pg)?;
    Ok(client)
}

/// Checks the schema version, creating the schema first if it is missing (writers).
async fn ensure_schema(client: &mut Client, schema: &str, writer: bool) -> Result<(), LogError> {
    let table = format!("{}.toolhost_schema", quoted(schema));
    // Read first, without writing: a current schema on a read-only database still opens.
    // (A reader also opens an older one: it reads only tables every version has.)
    if let Some(version) = schema_version(client, &table).await? {
        check_version(version)?;
        if !writer {
            return Ok(());
        }
        if u64::try_from(version).is_ok_and(|v| v == PG_SCHEMA_VERSION) {
            return ensure_append_current(client, schema).await;
        }
    }
    if !writer {
        return Err(LogError::Storage(format!(
            "this database holds no toolhost session log (schema {schema:?} has no toolhost tables)"
        )));
    }
    let tx = client.transaction().await.map_err(from_pg)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .await
        .map_err(from_pg)?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {q}; SET LOCAL search_path TO {q}; {CREATE_VERSION_TABLE}",
        q = quoted(schema)
    ))
    .await
    .map_err(from_pg)?;
    let found = tx
        .query_opt("SELECT version FROM toolhost_schema WHERE id = 1", &[])
        .await
        .map_err(from_pg)?;
    match found {
        Some(row) => {
            let version: i64 = row.try_get(0).map_err(from_pg)?;
            check_version(version)?;
            // Migrations, under the schema lock, each in this one transaction.
            if version < 2 {
                tx.batch_execute(CREATE_APPROVALS).await.map_err(from_pg)?;
            }
            tx.batch_execute(CREATE_APPEND).await.map_err(from_pg)?;
            let current = i64::try_from(PG_SCHEMA_VERSION).unwrap_or(i64::MAX);
            tx.execute(
                "UPDATE toolhost_schema SET version = $1 WHERE id = 1",
                &[&current],
            )
            .await
            .map_err(from_pg)?;
        }
        None => {
            tx.batch_execute(CREATE).await.map_err(from_pg)?;
            tx.batch_execute(CREATE_APPEND).await.map_err(from_pg)?;
            tx.batch_execute(CREATE_APPROVALS).await.map_err(from_pg)?;
            let version = i64::try_from(PG_SCHEMA_VERSION).unwrap_or(i64::MAX);
            tx.execute(
                "INSERT INTO toolhost_schema (id, version) VALUES (1, $1)",
                &[&version],
            )
            .await
            .map_err(from_pg)?;
        }
    }
    tx.commit().await.map_err(from_pg)
}

/// Puts this build's append function in place of an older body (one that renews the
/// lease from its transaction's start), under the schema lock. Its signature is the
/// same, so replicas of either build go on calling it.
async fn ensure_append_current(client: &mut Client, schema: &str) -> Result<(), LogError> {
    let function = format!("{}.toolhost_append", quoted(schema));
    let current = client
        .query_one(
            "SELECT coalesce(pg_get_functiondef(to_regproc($1)) LIKE '%clock_timestamp()%', false)",
            &[&function],
        )
        .await
        .map_err(from_pg)?;
    if current.try_get::<_, bool>(0).map_err(from_pg)? {
        return Ok(());
    }
    let tx = client.transaction().await.map_err(from_pg)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .await
        .map_err(from_pg)?;
    tx.batch_execute(&format!(
        "SET LOCAL search_path TO {q}; {CREATE_APPEND}",
        q = quoted(schema)
    ))
    .await
    .map_err(from_pg)?;
    tx.commit().await.map_err(from_pg)
}

/// The version in `table`, or `None` if the table or its row is missing.
async fn schema_version(client: &Client, table: &str) -> Result<Option<i64>, LogError> {
    let exists = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .map_err(from_pg)?;
    if !exists.try_get::<_, bool>(0).map_err(from_pg)? {
        return Ok(None);
    }
    let row = client
        .query_opt(&format!("SELECT version FROM {table} WHERE id = 1"), &[])
        .await
        .map_err(from_pg)?;
    row.map(|r| r.try_get(0).map_err(from_pg)).transpose()
}

fn check_version(found: i64) -> Result<(), LogError> {
    let found = u64::try_from(found)
        .map_err(|_| LogError::Corrupt(format!("schema version {found} is negative")))?;
    if found > PG_SCHEMA_VERSION {
        return Err(LogError::NewerFormat {
            found,
            supported: PG_SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Creates the log's row if missing and registers `replica` with a fresh lease and an
/// epoch never held by it before: the database clock in microseconds, or one above
/// every epoch of the log's replicas, or, for an identity whose row exists (a restart
/// that fences its earlier incarnation), its epoch plus one, whichever is highest. Epochs stay unique per identity also after its row was
/// forgotten on a clean close ([`release`]): an old, fenced incarnation that comes back
/// never matches a later one. (This assumes the database's clock does not go back by
/// more than the time between two registrations of one identity.) Returns the epoch.
async fn register(
    client: &mut Client,
    log: &str,
    replica: &str,
    lease_secs: f64,
    refuse_live: bool,
) -> Result<i64, LogError> {
    let tx = client.transaction().await.map_err(from_pg)?;
    tx.execute(
        "INSERT INTO toolhost_logs (log, next_seq) VALUES ($1, 1) ON CONFLICT DO NOTHING",
        &[&log],
    )
    .await
    .map_err(from_pg)?;
    lock_log(&tx, log).await?;
    if refuse_live {
        let live = tx
            .query_opt(
                "SELECT lease_until::text FROM toolhost_replicas \
                 WHERE log = $1 AND id = $2 AND lease_until > clock_timestamp()",
                &[&log, &replica],
            )
            .await
            .map_err(from_pg)?;
        if let Some(row) = live {
            let until: String = row.try_get(0).map_err(from_pg)?;
            return Err(LogError::Invalid(format!(
                "replica {replica:?} holds a lease until {until}: a process uses this identity (TOOLHOST_REPLICA_ID), or one stopped less than a lease ago; taking it over would fence that process. Stop it, or wait for the lease to end"
            )));
        }
    }
    let row = tx
        .query_one(
            "INSERT INTO toolhost_replicas (log, id, epoch, lease_until) \
             VALUES ($1, $2, greatest((extract(epoch FROM clock_timestamp()) * 1000000)::bigint, \
                     (SELECT coalesce(max(epoch), 0) + 1 FROM toolhost_replicas WHERE log = $1)), \
                     clock_timestamp() + make_interval(secs => $3)) \
             ON CONFLICT (log, id) DO UPDATE \
               SET epoch = greatest(toolhost_replicas.epoch + 1, EXCLUDED.epoch), \
                   lease_until = EXCLUDED.lease_until \
             RETURNING epoch",
            &[&log, &replica, &lease_secs],
        )
        .await
        .map_err(from_pg)?;
    let epoch = row.try_get(0).map_err(from_pg)?;
    tx.commit().await.map_err(from_pg)?;
    Ok(epoch)
}

/// On a clean close: forgets a replica that has nothing pending; otherwise ends its
/// lease now, so that its calls are recovered at once.
///
/// Forgetting the row is safe because epochs come from the database clock (see
/// [`register`]): an identity that returns later takes an epoch above every one it
/// had, so an older, fenced incarnation still running never matches it again.
async fn release(client: &mut Client, who: &Who) -> Result<(), LogError> {
    let tx = client.transaction().await.map_err(from_pg)?;
    lock_log(&tx, &who.log).await?;
    let deleted = tx
        .execute(
            "DELETE FROM toolhost_replicas r WHERE r.log = $1 AND r.id = $2 AND r.epoch = $3 \
             AND NOT EXISTS (SELECT 1 FROM toolhost_pending p WHERE p.log = r.log AND p.replica = r.id)",
            &[&who.log, &who.replica, &who.epoch],
        )
        .await
        .map_err(from_pg)?;
    if deleted == 0 {
        tx.execute(
            "UPDATE toolhost_replicas SET lease_until = now() \
             WHERE log = $1 AND id = $2 AND epoch = $3",
            &[&who.log, &who.replica, &who.epoch],
        )
        .await
        .map_err(from_pg)?;
    }
    tx.commit().await.map_err(from_pg)
}

/// Takes the log's row lock (the serialisation point of every writer) and returns the
/// next sequence number.
async fn lock_log(tx: &Transaction<'_>, log: &str) -> Result<i64, LogError> {
    let row = tx
        .query_opt(
            "SELECT next_seq FROM toolhost_logs WHERE log = $1 FOR UPDATE",
            &[&log],
        )
        .await
        .map_err(from_pg)?
        .ok_or_else(|| LogError::Corrupt(format!("the row of log {log:?} is missing")))?;
    row.try_get(0).map_err(from_pg)
}

/// A lease renewal: a lease from now (the database clock at the update), only while the
/// epoch is still the one registered (`$1` log, `$2` replica, `$3` epoch, `$4` seconds).
const RENEW: &str = "UPDATE toolhost_replicas SET lease_until = clock_timestamp() + make_interval(secs => $4) \
                     WHERE log = $1 AND id = $2 AND epoch = $3";

/// Renews this replica's lease if its epoch is still the one it registered with; else
/// the replica was declared dead and its calls recovered: [`LogError::Fenced`].
async fn check_lease(tx: &Transaction<'_>, who: &Who) -> Result<(), LogError> {
    let renewed = tx
        .execute(
            RENEW,
            &[&who.log, &who.replica, &who.epoch, &who.lease_secs],
        )
        .await
        .map_err(from_pg)?;
    if renewed == 0 {
        return Err(LogError::Fenced {
            replica: who.replica.clone(),
        });
    }
    Ok(())
}

/// One synchronous transaction that renews the lease (and so flushes every earlier
/// asynchronous commit).
async fn renew(client: &mut Client, who: &Who) -> Result<(), LogError> {
    let tx = client.transaction().await.map_err(from_pg)?;
    check_lease(&tx, who).await?;
    tx.commit().await.map_err(from_pg)
}

/// Appends the events of `parts` (in order) in one transaction, synchronous if
/// `durable`; returns the sequence number of the first.
///
/// One round trip: the statement is a call of `toolhost_append` (see `pg_schema.rs`),
/// which runs as its own transaction and takes the log's row lock only for its own
/// duration and its commit.
async fn write_appends(
    conn: &mut Conn,
    who: &Who,
    parts: &[&[NewEvent]],
    durable: bool,
) -> Result<u64, LogError> {
    let events: Vec<&NewEvent> = parts.iter().flat_map(|p| p.iter()).collect();
    let batch = Batch::of(&events)?;
    let at = i64::try_from(now_unix_ms()).unwrap_or(i64::MAX);
    let statement = match &conn.append {
        Some(s) => s.clone(),
        None => {
            let s = conn
                .client
                .prepare(
                    "SELECT toolhost_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                )
                .await
                .map_err(from_pg)?;
            conn.append = Some(s.clone());
            s
        }
    };
    let row = conn
        .client
        .query_one(
            &statement,
            &[
                &who.log,
                &who.replica,
                &who.epoch,
                &who.lease_secs,
                &durable,
                &batch.call_ids,
                &batch.kinds,
                &at,
                &batch.payloads,
                &batch.open_ids,
                &batch.open_at,
                &batch.closed_ids,
            ],
        )
        .await
        .map_err(|e| fenced_or(e, who))?;
    let first: i64 = row.try_get(0).map_err(from_pg)?;
    u64::try_from(first).map_err(|_| LogError::Corrupt(format!("sequence number {first}")))
}

/// The columns of a batch of events, as `toolhost_append` takes them.
struct Batch<'a> {
    call_ids: Vec<&'a str>,
    kinds: Vec<&'static str>,
    payloads: Vec<String>,
    /// Calls pending after the batch, with the 1-based position of their intent.
    open_ids: Vec<&'a str>,
    open_at: Vec<i32>,
    /// Calls the batch resolved (a result after any intent of theirs).
    closed_ids: Vec<&'a str>,
}

impl<'a> Batch<'a> {
    fn of(events: &[&'a NewEvent]) -> Result<Batch<'a>, LogError> {
        let mut net: HashMap<&'a str, Option<i32>> = HashMap::new();
        let mut batch = Batch {
            call_ids: Vec::with_capacity(events.len()),
            kinds: Vec::with_capacity(events.len()),
            payloads: Vec::with_capacity(events.len()),
            open_ids: Vec::new(),
            open_at: Vec::new(),
            closed_ids: Vec::new(),
        };
        for (i, e) in events.iter().enumerate() {
            let at = i32::try_from(i + 1)
                .map_err(|_| LogError::Invalid("too many events in one append".to_string()))?;
            batch.call_ids.push(&e.call_id);
            batch.kinds.push(e.kind.as_str());
            batch.payloads.push(
                serde_json::to_string(&e.payload).map_err(|err| {
                    LogError::Invalid(format!("payload cannot be encoded: {err}"))
                })?,
            );
            match e.kind {
                EventKind::ToolIntent => {
                    net.insert(&e.call_id, Some(at));
                }
                EventKind::ToolResult => {
                    net.insert(&e.call_id, None);
                }
                _ => {}
            }
        }
        for (id, open) in net {
            match open {
                Some(at) => {
                    batch.open_ids.push(id);
                    batch.open_at.push(at);
                }
                None => batch.closed_ids.push(id),
            }
        }
        Ok(batch)
    }
}

/// [`LogError::Fenced`] for the fencing error of `toolhost_append`, else [`from_pg`].
fn fenced_or(err: tokio_postgres::Error, who: &Who) -> LogError {
    if err.code().is_some_and(|c| c.code() == FENCED_SQLSTATE) {
        return LogError::Fenced {
            replica: who.replica.clone(),
        };
    }
    from_pg(err)
}

/// Inserts `events` from sequence number `first` on, moves the log's next sequence
/// number past them and keeps the pending set in step. The log's row lock is held.
async fn insert_events(
    tx: &Transaction<'_>,
    who: &Who,
    first: i64,
    events: &[&NewEvent],
) -> Result<(), LogError> {
    let n = i64::try_from(events.len()).map_err(|_| LogError::Invalid("too many events".into()))?;
    let next = first
        .checked_add(n)
        .ok_or_else(|| LogError::Corrupt("the sequence number space is exhausted".to_string()))?;
    let at = i64::try_from(now_unix_ms()).unwrap_or(i64::MAX);
    let mut seqs = Vec::with_capacity(events.len());
    let mut call_ids = Vec::with_capacity(events.len());
    let mut kinds = Vec::with_capacity(events.len());
    let mut payloads = Vec::with_capacity(events.len());
    // The pending set after these events: call id → the seq of its intent, or `None`
    // once a result followed.
    let mut pending: HashMap<&str, Option<i64>> = HashMap::new();
    for (seq, e) in (first..).zip(events) {
        seqs.push(seq);
        call_ids.push(e.call_id.as_str());
        kinds.push(e.kind.as_str());
        payloads.push(
            serde_json::to_string(&e.payload)
                .map_err(|err| LogError::Invalid(format!("payload cannot be encoded: {err}")))?,
        );
        match e.kind {
            EventKind::ToolIntent => {
                pending.insert(&e.call_id, Some(seq));
            }
            EventKind::ToolResult => {
                pending.insert(&e.call_id, None);
            }
            _ => {}
        }
    }
    tx.execute(
        "UPDATE toolhost_logs SET next_seq = $2 WHERE log = $1",
        &[&who.log, &next],
    )
    .await
    .map_err(from_pg)?;
    tx.execute(
        "INSERT INTO toolhost_events (log, seq, call_id, kind, at_unix_ms, payload, replica) \
         SELECT $1, s, c, k, $5, p, $6 \
         FROM UNNEST($2::bigint[], $3::text[], $4::text[], $7::text[]) AS u(s, c, k, p)",
        &[
            &who.log,
            &seqs,
            &call_ids,
            &kinds,
            &at,
            &who.replica,
            &payloads,
        ],
    )
    .await
    .map_err(from_pg)?;
    if pending.is_empty() {
        return Ok(());
    }
    let touched: Vec<&str> = pending.keys().copied().collect();
    tx.execute(
        "DELETE FROM toolhost_pending WHERE log = $1 AND call_id = ANY($2)",
        &[&who.log, &touched],
    )
    .await
    .map_err(from_pg)?;
    let (open_ids, open_seqs): (Vec<&str>, Vec<i64>) = pending
        .iter()
        .filter_map(|(id, seq)| seq.map(|s| (*id, s)))
        .unzip();
    if !open_ids.is_empty() {
        tx.execute(
            "INSERT INTO toolhost_pending (log, call_id, seq, replica, epoch) \
             SELECT $1, c, s, $2, $3 FROM UNNEST($4::text[], $5::bigint[]) AS u(c, s)",
            &[&who.log, &who.replica, &who.epoch, &open_ids, &open_seqs],
        )
        .await
        .map_err(from_pg)?;
    }
    Ok(())
}

/// Resolves, in one synchronous transaction, the pending calls of other replicas that
/// are gone (lease expired, superseded by a restart, or unregistered), the calls of
/// this replica's identity named in `unresolved` and, with `include_own`, every call of
/// this replica's identity (this incarnation's and its predecessors'); fences the
/// expired replicas whose calls it resolved (the epoch it found expired, even if that
/// replica renewed its lease since).
/// Renews this replica's lease either way.
async fn recover_calls(
    client: &mut Client,
    who: &Who,
    include_own: bool,
    unresolved: &[String],
) -> Result<Recovery, LogError> {
    let tx = client.transaction().await.map_err(from_pg)?;
    let first = lock_log(&tx, &who.log).await?;
    check_lease(&tx, who).await?;
    // The third column: the replica's epoch if it is the expired writer of the call,
    // to be fenced.
    let rows = tx
        .query(
            "SELECT p.call_id, p.replica, \
                    CASE WHEN r.id IS NOT NULL AND r.epoch = p.epoch AND r.lease_until < now() \
                         THEN r.epoch END \
             FROM toolhost_pending p \
             LEFT JOIN toolhost_replicas r ON r.log = p.log AND r.id = p.replica \
             WHERE p.log = $1 AND CASE WHEN p.replica = $3 THEN $2 OR p.call_id = ANY($4) \
                   ELSE (r.id IS NULL OR r.epoch <> p.epoch OR r.lease_until < now()) END \
             ORDER BY p.seq",
            &[&who.log, &include_own, &who.replica, &unresolved],
        )
        .await
        .map_err(from_pg)?;
    let mut recovered = Vec::with_capacity(rows.len());
    let mut expired = BTreeMap::new();
    for row in &rows {
        recovered.push(row.try_get::<_, String>(0).map_err(from_pg)?);
        if let Some(epoch) = row.try_get::<_, Option<i64>>(2).map_err(from_pg)? {
            let replica: String = row.try_get(1).map_err(from_pg)?;
            if replica != who.replica {
                expired.insert(replica, epoch);
            }
        }
    }
    if !recovered.is_empty() {
        let events = recovery_events(&recovered);
        let refs: Vec<&NewEvent> = events.iter().collect();
        insert_events(&tx, who, first, &refs).await?;
        // Fences the epoch that was found expired, whatever its lease says now: a
        // renewal does not take the log's row lock, so the replica may have renewed
        // since the select, and its calls are resolved all the same. (Conditioned on
        // the lease, the fence missed such a replica, which then committed results for
        // calls declared unknown.)
        let (ids, epochs): (Vec<String>, Vec<i64>) = expired.into_iter().unzip();
        tx.execute(
            "UPDATE toolhost_replicas r SET epoch = r.epoch + 1 \
             FROM UNNEST($2::text[], $3::bigint[]) AS f(id, epoch) \
             WHERE r.log = $1 AND r.id = f.id AND r.epoch = f.epoch",
            &[&who.log, &ids, &epochs],
        )
        .await
        .map_err(from_pg)?;
    }
    tx.commit().await.map_err(from_pg)?;
    Ok(Recovery { recovered })
}

async fn read_events(
    client: &mut Client,
    log: &str,
    call_id: Option<&str>,
) -> Result<Vec<Event>, LogError> {
    const COLUMNS: &str = "SELECT seq, call_id, kind, at_unix_ms, payload FROM toolhost_events";
    let rows = match call_id {
        None => {
            client
                .query(&format!("{COLUMNS} WHERE log = $1 ORDER BY seq"), &[&log])
                .await
        }
        Some(id) => {
            client
                .query(
                    &format!("{COLUMNS} WHERE log = $1 AND call_id = $2 ORDER BY seq"),
                    &[&log, &id],
                )
                .await
        }
    }
    .map_err(from_pg)?;
    rows.iter().map(decode_row).collect()
}

fn decode_row(row: &tokio_postgres::Row) -> Result<Event, LogError> {
    let seq: i64 = row.try_get(0).map_err(from_pg)?;
    let seq =
        u64::try_from(seq).map_err(|_| LogError::Corrupt(format!("sequence number {seq}")))?;
    let kind: String = row.try_get(2).map_err(from_pg)?;
    let at: i64 = row.try_get(3).map_err(from_pg)?;
    let payload: String = row.try_get(4).map_err(from_pg)?;
    Ok(Event {
        seq,
        call_id: row.try_get(1).map_err(from_pg)?,
        kind: kind
            .parse()
            .map_err(|e| LogError::Corrupt(format!("event {seq}: {e}")))?,
        at_unix_ms: u64::try_from(at).unwrap_or(0),
        payload: serde_json::from_str(&payload)
            .map_err(|e| LogError::Corrupt(format!("event {seq} cannot be decoded: {e}")))?,
    })
}

/// The connection settings of `url`, once `options` name a valid schema, a
/// log and a replica: what the engine and [`PgApprovals`](crate::PgApprovals)
/// both start from.
pub(crate) fn checked_config(
    url: &str,
    options: &PgOptions,
) -> Result<tokio_postgres::Config, LogError> {
    let config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| LogError::Invalid(format!("not a PostgreSQL connection string: {e}")))?;
    check_name("schema", &options.schema)?;
    if options.log.is_empty() || options.replica.is_empty() {
        return Err(LogError::Invalid(
            "the log name and the replica identity must not be empty".to_string(),
        ));
    }
    Ok(config)
}

/// Refuses a name that would need quoting beyond double quotes.
pub(crate) fn check_name(what: &str, name: &str) -> Result<(), LogError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else {
        Err(LogError::Invalid(format!(
            "{what} {name:?} must be 1 to 63 lower-case letters, digits or '_', not starting with a digit"
        )))
    }
}

/// `name` (checked by [`check_name`]) as an SQL identifier.
fn quoted(name: &str) -> String {
    format!("\"{name}\"")
}

/// A copy of `e` for each append of a failed group.
fn copy_error(e: &LogError) -> LogError {
    match e {
        LogError::Fenced { replica } => LogError::Fenced {
            replica: replica.clone(),
        },
        LogError::Invalid(s) => LogError::Invalid(s.clone()),
        LogError::Corrupt(s) => LogError::Corrupt(s.clone()),
        LogError::Storage(s) => LogError::Storage(s.clone()),
        other => LogError::Storage(other.to_string()),
    }
}

/// Translates an error of the PostgreSQL client into words that say what to do.
pub(crate) fn from_pg(err: tokio_postgres::Error) -> LogError {
    if let Some(db) = err.as_db_error() {
        let code = db.code();
        let what = if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
            "the database refuses writes (it is read-only)"
        } else if *code == SqlState::DISK_FULL {
            "the database is out of disk space"
        } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            "the database user may not write toolhost's tables"
        } else if *code == SqlState::ADMIN_SHUTDOWN || *code == SqlState::CRASH_SHUTDOWN {
            "the database shut down; the operation's outcome is unknown"
        } else {
            "PostgreSQL refused the operation"
        };
        return LogError::Storage(format!(
            "{what}: {} (SQLSTATE {})",
            db.message(),
            code.code()
        ));
    }
    if err.is_closed() {
        return LogError::Storage(
            "the connection to PostgreSQL was lost; the operation's outcome is unknown".to_string(),
        );
    }
    // The client's own message is terse ("error connecting to server"): add its causes
    // ("Connection refused (os error 111)").
    let mut text = format!("PostgreSQL: {err}");
    let mut cause = std::error::Error::source(&err);
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    LogError::Storage(text)
}
