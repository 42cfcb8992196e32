//! Approval requests shared by the replicas of a PostgreSQL log (`PgApprovals`): asked
//! as one replica, listed and decided as another, exactly one decision; recovery
//! leaves a live replica's requests alone and decides a dead one's; a version-1
//! database gains the table when a writer of this build opens it.

use std::time::{Duration, Instant, SystemTime};

use toolhost_log::{Decided, PG_SCHEMA_VERSION, PgApprovals, PgEngine};

use crate::engines::{pg_options, pg_url, sql, sql_value, unique};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_request_asked_on_one_replica_is_decided_once_through_another() {
    let Some(url) = pg_url() else { return };
    let log = unique("approvals");
    // Replica `a` waits (its engine holds a live lease); `b` operates.
    let _a_log = PgEngine::open(&url, &pg_options(&log, "a", Duration::from_secs(600))).unwrap();
    let a = PgApprovals::new(&url, &pg_options(&log, "a", Duration::from_secs(600))).unwrap();
    let b = PgApprovals::new(&url, &pg_options(&log, "b", Duration::from_secs(600))).unwrap();
    let rt = rt();
    rt.block_on(async {
        assert!(a.register("r1", r#"{"approval_id":"r1"}"#).await.unwrap());
        // Registering again keeps the first text, and says so.
        assert!(!a.register("r1", "other").await.unwrap());
        assert_eq!(b.pending().await.unwrap(), [r#"{"approval_id":"r1"}"#]);
        assert_eq!(a.decision("r1").await.unwrap(), None);
        assert_eq!(b.decide("r1", "allow").await.unwrap(), Decided::Stands);
        assert_eq!(
            a.decide("r1", "timeout").await.unwrap(),
            Decided::Already("allow".into())
        );
        assert_eq!(a.decision("r1").await.unwrap().as_deref(), Some("allow"));
        assert!(b.pending().await.unwrap().is_empty());
        assert_eq!(b.decide("nope", "allow").await.unwrap(), Decided::Unknown);
    });
}

/// A claim succeeds once across replicas, also when they race, and is never pending.
#[test]
fn a_claim_is_won_once_across_replicas_and_is_never_pending() {
    let Some(url) = pg_url() else { return };
    let log = unique("approvals-claim");
    let _a_log = PgEngine::open(&url, &pg_options(&log, "a", Duration::from_secs(600))).unwrap();
    let a = std::sync::Arc::new(
        PgApprovals::new(&url, &pg_options(&log, "a", Duration::from_secs(600))).unwrap(),
    );
    let b = std::sync::Arc::new(
        PgApprovals::new(&url, &pg_options(&log, "b", Duration::from_secs(600))).unwrap(),
    );
    let rt = rt();
    rt.block_on(async {
        assert!(a.claim_once("c1", "used").await.unwrap());
        assert!(!a.claim_once("c1", "used").await.unwrap());
        assert!(!b.claim_once("c1", "used").await.unwrap());
        // Racing: 16 claims of each of 8 ids from both replicas at once.
        for round in 0..8 {
            let id = format!("race-{round}");
            let mut claims = tokio::task::JoinSet::new();
            for i in 0..16 {
                let q = if i % 2 == 0 { a.clone() } else { b.clone() };
                let id = id.clone();
                claims.spawn(async move { q.claim_once(&id, "used").await.unwrap() });
            }
            let won = claims.join_all().await.into_iter().filter(|w| *w).count();
            assert_eq!(won, 1, "{id}: {won} claims won");
        }
        // A claim is decided as it is made: nobody lists or decides it.
        assert!(b.pending().await.unwrap().is_empty());
        assert_eq!(
            b.decide("c1", "allow").await.unwrap(),
            Decided::Already("used".into())
        );
    });
}

/// The clean-up of decided requests leaves a claim as long as what it spends is valid:
/// for good (`claim_once`), or until its time (`claim_once_until`), whatever the grace.
/// A claim used to be removed a grace (the host's: 600 s) after it was made, so a
/// replay of an approval state that lived longer than that won a second claim.
#[test]
fn a_claim_outlives_the_clean_up_of_decided_requests_until_its_time() {
    let Some(url) = pg_url() else { return };
    let log = unique("approvals-claim-kept");
    let _a_log = PgEngine::open(&url, &pg_options(&log, "a", Duration::from_secs(600))).unwrap();
    let a = PgApprovals::new(&url, &pg_options(&log, "a", Duration::from_secs(600))).unwrap();
    let rt = rt();
    rt.block_on(async {
        let hour = Duration::from_secs(3600);
        assert!(a.claim_once("forever", "used").await.unwrap());
        let later = SystemTime::now() + hour;
        assert!(a.claim_once_until("later", "used", later).await.unwrap());
        let past = SystemTime::now() - hour;
        assert!(a.claim_once_until("past", "used", past).await.unwrap());
        // A clean-up with no grace at all.
        a.recover("unavailable", Duration::ZERO).await.unwrap();
        assert!(!a.claim_once("forever", "used").await.unwrap());
        assert!(!a.claim_once_until("later", "used", later).await.unwrap());
        // Past its time: gone, and claimed anew (the state it spent has expired: the
        // host refuses it before it claims).
        assert!(a.claim_once_until("past", "used", past).await.unwrap());
    });
}

/// Registrations and claims remove old rows as they go, at most once a minute per
/// handle: the sweep of `recover` runs only when a replica starts, and every request
/// and claim adds a row, so a replica that never restarted grew the table without
/// bound. Pending requests and claims still in their time stay.
#[test]
fn old_rows_are_swept_while_a_replica_runs() {
    let Some(url) = pg_url() else { return };
    let log = unique("approvals-sweep");
    let _a_log = PgEngine::open(&url, &pg_options(&log, "a", Duration::from_secs(600))).unwrap();
    let a = PgApprovals::new(&url, &pg_options(&log, "a", Duration::from_secs(600))).unwrap();
    let b = PgApprovals::new(&url, &pg_options(&log, "b", Duration::from_secs(600))).unwrap();
    let rt = rt();
    rt.block_on(async {
        let past = SystemTime::now() - 2 * toolhost_log::KEEP_DECIDED;
        assert!(a.claim_once_until("past", "used", past).await.unwrap());
        assert!(a.claim_once("forever", "used").await.unwrap());
        assert!(
            a.register("pending", r#"{"approval_id":"pending"}"#)
                .await
                .unwrap()
        );
        // `b`'s first registration sweeps.
        assert!(b.register("other", "{}").await.unwrap());
        assert!(
            a.claim_once_until("past", "used", past).await.unwrap(),
            "the old claim was not removed"
        );
        assert!(!a.claim_once("forever", "used").await.unwrap());
        assert!(
            b.pending()
                .await
                .unwrap()
                .contains(&r#"{"approval_id":"pending"}"#.to_string())
        );
        // Not again within the minute.
        assert!(a.claim_once_until("past-2", "used", past).await.unwrap());
        assert!(b.register("other-2", "{}").await.unwrap());
        assert!(!a.claim_once_until("past-2", "used", past).await.unwrap());
    });
}

#[test]
fn recovery_decides_only_requests_nobody_can_wait_for() {
    let Some(url) = pg_url() else { return };
    let log = unique("approvals-recover");
    let lease = Duration::from_millis(300);
    let live = PgEngine::open(&url, &pg_options(&log, "live", Duration::from_secs(600))).unwrap();
    let dying = PgEngine::open(&url, &pg_options(&log, "dying", lease)).unwrap();
    let of = |r: &str| PgApprovals::new(&url, &pg_options(&log, r, lease)).unwrap();
    let (live_q, dying_q, other) = (of("live"), of("dying"), of("other"));
    let rt = rt();
    rt.block_on(async {
        assert!(live_q.register("l1", "{}").await.unwrap());
        assert!(dying_q.register("d1", "{}").await.unwrap());
    });
    drop(dying); // its lease now runs out
    let deadline = Instant::now() + Duration::from_secs(60);
    let recovered = loop {
        let r = rt.block_on(other.recover("unavailable", Duration::from_secs(600)));
        let r = r.unwrap();
        if !r.is_empty() {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "the dead replica's request stayed"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(recovered, ["d1"]);
    rt.block_on(async {
        assert_eq!(live_q.decision("l1").await.unwrap(), None);
        assert_eq!(
            dying_q.decision("d1").await.unwrap().as_deref(),
            Some("unavailable")
        );
        // A restart under the live replica's identity recovers its own requests.
        assert_eq!(
            live_q
                .recover("unavailable", Duration::from_secs(600))
                .await
                .unwrap(),
            ["l1"]
        );
        // Decided long enough ago: removed.
        assert!(other.recover("x", Duration::ZERO).await.unwrap().is_empty());
        assert_eq!(other.decide("l1", "allow").await.unwrap(), Decided::Unknown);
    });
    drop(live);
}

/// A version-1 database gains the approvals table (version 2) and the append function
/// that renews leases from the time of its update.
#[test]
fn a_version_1_database_is_brought_up_to_date_when_a_writer_opens_it() {
    let Some(url) = pg_url() else { return };
    let schema = unique("v1").replace('-', "_");
    let mut options = pg_options("default", "r", Duration::from_secs(10));
    options.schema = schema.clone();
    drop(PgEngine::open(&url, &options).unwrap());
    // As a version-1 toolhost left it: no approvals table, leases from `now()`.
    let function = format!("'\"{schema}\".toolhost_append'::regproc");
    let definition = |url: &str| {
        sql_value(url, &format!("SELECT pg_get_functiondef({function})")).unwrap_or_default()
    };
    let current = definition(&url);
    assert!(current.contains("clock_timestamp()"), "{current}");
    sql(&url, &current.replace("clock_timestamp()", "now()"));
    sql(
        &url,
        &format!(
            "DROP TABLE \"{schema}\".toolhost_approvals; \
             UPDATE \"{schema}\".toolhost_schema SET version = 1"
        ),
    );
    // A reader opens it as it is.
    drop(PgEngine::open_reader(&url, &options).unwrap());
    assert_eq!(
        sql_value(
            &url,
            &format!("SELECT version::text FROM \"{schema}\".toolhost_schema")
        ),
        Some("1".into())
    );
    drop(PgEngine::open(&url, &options).unwrap());
    assert_eq!(
        sql_value(
            &url,
            &format!("SELECT version::text FROM \"{schema}\".toolhost_schema")
        ),
        Some(PG_SCHEMA_VERSION.to_string())
    );
    assert_eq!(
        sql_value(
            &url,
            &format!("SELECT (to_regclass('\"{schema}\".toolhost_approvals') IS NOT NULL)::text")
        ),
        Some("true".into())
    );
    let migrated = definition(&url);
    assert!(
        migrated.contains("clock_timestamp()") && !migrated.contains("now()"),
        "{migrated}"
    );
    // A database of the current version whose append function an older build
    // created: a writer replaces the body (the version stays, so older builds
    // still open it); a reader leaves it.
    sql(&url, &migrated.replace("clock_timestamp()", "now()"));
    drop(PgEngine::open_reader(&url, &options).unwrap());
    assert!(definition(&url).contains("now()"));
    drop(PgEngine::open(&url, &options).unwrap());
    let replaced = definition(&url);
    assert!(
        replaced.contains("clock_timestamp()") && !replaced.contains("now()"),
        "{replaced}"
    );
    assert_eq!(
        sql_value(
            &url,
            &format!("SELECT version::text FROM \"{schema}\".toolhost_schema")
        ),
        Some(PG_SCHEMA_VERSION.to_string())
    );
    sql(&url, &format!("DROP SCHEMA \"{schema}\" CASCADE"));
}
