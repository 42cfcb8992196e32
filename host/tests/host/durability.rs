//! Durability of the call pipeline (DESIGN.md §1, §5), tested through the
//! library and through the `toolhost` binary:
//!
//! - `library`: one fdatasync on a call's critical path and one group commit
//!   for a batch (counted with `CountingStorage`); storage faults injected at
//!   every write-path operation (`FailingStorage`) never let a body run
//!   without a durable intent; cancellation ends calls CANCELLED and logged;
//!   a batch larger than the instance pool still runs every call.
//! - `kill`: the CLI is stopped with SIGKILL at each named crash point
//!   (`TOOLHOST_TEST_PAUSE_AT`, see `host/src/crashpoint.rs`) and after random
//!   delays while it runs batches; the state must reopen, every call must be
//!   absent, intent-only (resolved exactly once as `TOOL_OUTCOME_UNKNOWN` by
//!   recovery, which is idempotent) or completed, no file may be written by a
//!   call without a durable intent, and no result the CLI printed may be lost.
//! - `cli`: SIGINT cancels a running call; unusable state directories (a
//!   file, a non-redb `session.redb`) fail with a clear message and exit 2,
//!   touching nothing; a state held by a `run` or `serve --mcp` is read beside
//!   it by `log`, and writers wait, then exit 2 naming the holder; `log --json`.
//!
//! - `code_mode`: a `run python` killed while its code's inner call has a
//!   durable intent: both calls recovered `TOOL_OUTCOME_UNKNOWN` once, on redb
//!   and on PostgreSQL.
//! - `postgres`: a `run` on a PostgreSQL log killed in its body is recovered
//!   once by `toolhost recover` after its lease expired; `log` reads it.
//! - `replicas`: three `serve --http` replicas on one PostgreSQL log, 200
//!   random SIGKILLs while a client spreads calls over them; every intent
//!   keeps exactly one result, approvals stay paired, order holds.
//! - `pg_faults`: the database full, read-only, cut off or restarted under a
//!   `serve --http` replica: calls are refused clearly
//!   (`ABORTED_BEFORE_DISPATCH` naming the SQLSTATE) and served again after.
//!   (`replica` holds what these share: replica processes, an MCP client.)
//!
//! The random-kill test runs 200 iterations by default. For a longer soak,
//! set `TOOLHOST_SOAK_ITERATIONS=N`, e.g.
//! `TOOLHOST_SOAK_ITERATIONS=5000 cargo test -p toolhost --test host durability::kill::random_kills -- --nocapture`.
//! Each iteration prints nothing unless it fails; a failure names the
//! iteration and its xorshift seed, and `TOOLHOST_SOAK_FIRST=I` starts the
//! loop at iteration I to replay it.

pub(crate) mod support;

mod cli;
mod code_mode;
mod kill;
mod library;
mod pg_faults;
mod postgres;
mod replica;
mod replicas;
