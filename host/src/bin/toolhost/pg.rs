//! The PostgreSQL session log's options: a `postgres://` `--state`, and
//! the environment that names the log, this replica and its lease.

use crate::args::StateArgs;
use anyhow::{Context, Result, anyhow};
use std::time::Duration;

/// The `--state` (or `$TOOLHOST_STATE_DIR`) when it names a PostgreSQL database.
pub(crate) fn postgres_url(state: &StateArgs) -> Option<String> {
    let given = match &state.state {
        Some(s) => s.as_os_str().to_owned(),
        None => std::env::var_os("TOOLHOST_STATE_DIR")?,
    };
    let given = given.to_str()?;
    (given.starts_with("postgres://") || given.starts_with("postgresql://"))
        .then(|| given.to_string())
}

/// The PostgreSQL options of this process, from the environment. The replica
/// identity is made once per process, so that its log and its approval
/// requests name the same replica.
pub(crate) fn pg_options() -> Result<toolhost::log::PgOptions> {
    static IDENTITY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let mut options = toolhost::log::PgOptions::default();
    if let Ok(log) = std::env::var("TOOLHOST_PG_LOG") {
        options.log = log;
    }
    options.replica = match std::env::var("TOOLHOST_REPLICA_ID") {
        Ok(replica) => replica,
        Err(_) => IDENTITY.get_or_init(|| options.replica.clone()).clone(),
    };
    if let Ok(ms) = std::env::var("TOOLHOST_PG_LEASE_MS") {
        let ms: u64 = ms.parse().with_context(|| {
            format!("TOOLHOST_PG_LEASE_MS={ms:?} is not a number of milliseconds")
        })?;
        options.lease = Duration::from_millis(ms);
    }
    Ok(options)
}

/// Opens the PostgreSQL log at `url`: as a replica with a lease (`writer`), or to read.
pub(crate) fn open_postgres(url: &str, writer: bool) -> Result<toolhost::log::SessionLog> {
    use toolhost::log::{PgEngine, SessionLog};
    let options = pg_options()?;
    let engine = if writer {
        PgEngine::open(url, &options)
    } else {
        PgEngine::open_reader(url, &options)
    };
    engine
        .map(SessionLog::from_engine)
        .map_err(|e| anyhow!("{e}"))
}
