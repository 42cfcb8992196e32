//! The engines the durability suite runs on: one set of tests, two engines (redb in a
//! state directory, PostgreSQL), and the PostgreSQL server the tests use.
//!
//! PostgreSQL comes from `TOOLHOST_TEST_PG_URL` (`scripts/pg-test-server start` prints
//! it; `.ci/run` exports it). When it is unset, a test that needs it fails if `CI` is set
//! (so CI can never pass without running them) and otherwise prints a loud notice and
//! checks only the redb engine.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use toolhost_log::{PgEngine, PgOptions, SessionLog};

/// The schema (namespace) the tests' logs live in, apart from a real toolhost's.
pub const TEST_SCHEMA: &str = "toolhost_test";

/// The URL of the test server, or `None` outside CI when there is none.
pub fn pg_url() -> Option<String> {
    match std::env::var("TOOLHOST_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!(
                "TOOLHOST_TEST_PG_URL is unset under CI: .ci/run must start PostgreSQL (scripts/pg-test-server start)"
            )
        }
        _ => {
            eprintln!(
                "\n*** TOOLHOST_TEST_PG_URL is unset: the PostgreSQL engine is NOT tested. \
                 Run `eval $(scripts/pg-test-server start)` first. ***\n"
            );
            None
        }
    }
}

/// A name no other test (or earlier run) uses: the test's name, the pid and a counter.
pub fn unique(what: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{what}-{}-{}-{}",
        std::process::id(),
        toolhost_now_ms(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn toolhost_now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Options for a PostgreSQL log `log` written as `replica`.
pub fn pg_options(log: &str, replica: &str, lease: Duration) -> PgOptions {
    PgOptions {
        log: log.to_string(),
        schema: TEST_SCHEMA.to_string(),
        replica: replica.to_string(),
        lease,
        op_timeout: Duration::from_secs(20),
        refuse_live_identity: false,
    }
}

/// Where a log lives. `open` reopens the same log, as a restarted process would.
#[derive(Debug, Clone)]
pub enum Backend {
    /// A redb state directory.
    Redb(PathBuf),
    /// A log in the test database, reopened under the same replica identity.
    Pg { url: String, log: String },
}

impl Backend {
    /// Opens the log (for PostgreSQL as replica `main`, with a 10 s lease).
    pub fn open(&self) -> SessionLog {
        match self {
            Backend::Redb(dir) => SessionLog::open(dir).unwrap(),
            Backend::Pg { url, log } => SessionLog::from_engine(
                PgEngine::open(url, &pg_options(log, "main", Duration::from_secs(10))).unwrap(),
            ),
        }
    }

    /// What a child process needs to open the same log (see `child`).
    pub fn spec(&self) -> String {
        match self {
            Backend::Redb(dir) => format!("redb:{}", dir.display()),
            Backend::Pg { url, log } => format!("pg:{log}:{url}"),
        }
    }

    /// The backend of a [`Backend::spec`].
    pub fn from_spec(spec: &str) -> Backend {
        if let Some(dir) = spec.strip_prefix("redb:") {
            return Backend::Redb(PathBuf::from(dir));
        }
        let rest = spec.strip_prefix("pg:").unwrap();
        let (log, url) = rest.split_once(':').unwrap();
        Backend::Pg {
            url: url.to_string(),
            log: log.to_string(),
        }
    }

    /// A short name for assertion messages.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Redb(_) => "redb",
            Backend::Pg { .. } => "postgres",
        }
    }
}

/// Runs `test` on a fresh log of each engine: redb always, PostgreSQL when there is a
/// server (see [`pg_url`]).
pub fn on_each_engine(what: &str, test: impl Fn(&Backend)) {
    let dir = tempfile::tempdir().unwrap();
    test(&Backend::Redb(dir.path().to_path_buf()));
    if let Some(url) = pg_url() {
        test(&Backend::Pg {
            url,
            log: unique(what),
        });
    }
}

/// Runs `sql` (one or more statements) on the test server at `url`, outside any engine.
pub fn sql(url: &str, sql: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let task = tokio::spawn(conn);
        client.batch_execute(sql).await.unwrap();
        drop(client);
        let _ = task.await;
    });
}

/// The first column of the first row of `query` as text (`None` for no row or NULL).
pub fn sql_value(url: &str, query: &str) -> Option<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let task = tokio::spawn(conn);
        let row = client.query_opt(query, &[]).await.unwrap();
        let value = row.and_then(|r| r.get::<_, Option<String>>(0));
        drop(client);
        let _ = task.await;
        value
    })
}
