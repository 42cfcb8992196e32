//! Opening refuses what it cannot use, with a clear error, and modifies nothing.

use std::fs;
use std::path::Path;
use std::time::Duration;

use toolhost_log::{Durability, FORMAT_VERSION, LogError, SessionLog};

use crate::call;
use crate::child::run_child;

#[test]
fn a_newer_format_is_refused_not_misread() {
    let dir = tempfile::tempdir().unwrap();
    SessionLog::open(dir.path())
        .unwrap()
        .append(&[call("a")], Durability::Durable)
        .unwrap();
    {
        // What a newer toolhost would have written.
        let db = redb::Database::create(dir.path().join("session.redb")).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(redb::TableDefinition::<&str, u64>::new("meta"))
            .unwrap()
            .insert("format_version", FORMAT_VERSION + 1)
            .unwrap();
        tx.commit().unwrap();
    }
    let err = SessionLog::open(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::NewerFormat { found, supported }
                if found == FORMAT_VERSION + 1 && supported == FORMAT_VERSION
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "session log written by a newer toolhost (format {}, this build reads up to {})",
            FORMAT_VERSION + 1,
            FORMAT_VERSION
        )
    );
}

#[test]
fn a_format_1_log_is_upgraded_in_place_and_keeps_its_events() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = SessionLog::open(dir.path()).unwrap();
        log.append(&[call("a"), call("b")], Durability::Durable)
            .unwrap();
    }
    let meta = redb::TableDefinition::<&str, u64>::new("meta");
    {
        // What the previous release wrote: the same tables, format 1, no journal.
        let db = redb::Database::create(dir.path().join("session.redb")).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(meta)
            .unwrap()
            .insert("format_version", 1)
            .unwrap();
        tx.commit().unwrap();
    }
    fs::remove_file(dir.path().join("session.wal")).unwrap();
    let log = SessionLog::open(dir.path()).unwrap();
    let ids: Vec<String> = log
        .events()
        .unwrap()
        .into_iter()
        .map(|e| e.call_id)
        .collect();
    assert_eq!(ids, ["a", "b"]);
    drop(log);
    assert_eq!(crate::stored_format_version(dir.path()), FORMAT_VERSION);
}

#[test]
fn a_file_that_is_not_a_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.redb");
    let text: String = "these are my notes, not a database\n".repeat(120);
    let bytes = text.as_bytes()[..4096].to_vec();
    fs::write(&path, &bytes).unwrap();
    let err = SessionLog::open(dir.path()).unwrap_err();
    assert!(
        matches!(&err, LogError::NotADatabase { path: p } if p == &path),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("not a toolhost session log"),
        "{err}"
    );
    assert!(fs::read(&path).unwrap() == bytes, "the file was modified");
    // Also a tiny file, shorter than redb's header.
    fs::write(&path, b"hi").unwrap();
    assert!(matches!(
        SessionLog::open(dir.path()),
        Err(LogError::NotADatabase { .. })
    ));
    assert_eq!(fs::read(&path).unwrap(), b"hi");
}

#[test]
fn a_foreign_redb_database_is_refused_and_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.redb");
    {
        let db = redb::Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(redb::TableDefinition::<u64, u64>::new("other"))
            .unwrap()
            .insert(1, 2)
            .unwrap();
        tx.commit().unwrap();
    }
    let err = SessionLog::open(dir.path()).unwrap_err();
    assert!(matches!(err, LogError::Corrupt(_)), "{err:?}");
    // redb itself may rewrite bookkeeping when it closes, but the log wrote nothing: the
    // other program's data is intact and no table of ours was created.
    let db = redb::Database::create(&path).unwrap();
    let read = redb::ReadableDatabase::begin_read(&db).unwrap();
    let names: Vec<String> = read
        .list_tables()
        .unwrap()
        .map(|t| redb::TableHandle::name(&t).to_string())
        .collect();
    assert_eq!(names, vec!["other".to_string()]);
    let other = read
        .open_table(redb::TableDefinition::<u64, u64>::new("other"))
        .unwrap();
    assert_eq!(
        redb::ReadableTable::get(&other, 1)
            .unwrap()
            .map(|v| v.value()),
        Some(2)
    );
}

fn is_writable_despite_permissions(dir: &Path) -> bool {
    // Root (and CAP_DAC_OVERRIDE) ignores permission bits.
    fs::write(dir.join("probe"), b"x").is_ok()
}

#[test]
fn a_state_dir_that_cannot_be_created_is_not_writable() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    fs::write(&file, b"x").unwrap();
    let err = SessionLog::open(&file.join("state")).unwrap_err();
    assert!(matches!(err, LogError::NotWritable { .. }), "{err:?}");
    assert!(err.to_string().starts_with("state directory "), "{err}");
    // The state dir itself is a regular file.
    let err = SessionLog::open(&file).unwrap_err();
    assert!(matches!(err, LogError::NotWritable { .. }), "{err:?}");
}

#[test]
fn a_read_only_state_dir_is_not_writable() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    fs::create_dir(&state).unwrap();
    fs::set_permissions(&state, fs::Permissions::from_mode(0o500)).unwrap();
    if is_writable_despite_permissions(&state) {
        eprintln!("running as root: permission bits do not bind; covered by the regular-file test");
        return;
    }
    let err = SessionLog::open(&state).unwrap_err();
    fs::set_permissions(&state, fs::Permissions::from_mode(0o700)).unwrap();
    assert!(matches!(err, LogError::NotWritable { .. }), "{err:?}");
}

#[test]
fn a_second_open_in_the_same_process_is_locked_and_names_this_process() {
    let dir = tempfile::tempdir().unwrap();
    let log = SessionLog::open(dir.path()).unwrap();
    let err = SessionLog::open_with_wait(dir.path(), Duration::ZERO).unwrap_err();
    let LogError::Locked {
        holder: Some(holder),
        waited,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(holder.pid, std::process::id());
    assert!(!holder.exited);
    assert!(*waited < Duration::from_secs(1), "{waited:?}");
    let text = err.to_string();
    assert!(text.contains("in use by another toolhost"), "{text}");
    assert!(
        text.contains(&format!("held by pid {} (", std::process::id())),
        "{text}"
    );
    assert!(text.contains("this very process"), "{text}");
    drop(log);
    SessionLog::open_with_wait(dir.path(), Duration::ZERO).unwrap();
}

#[test]
fn an_open_from_another_process_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let log = SessionLog::open(dir.path()).unwrap();
    let out = run_child("open", dir.path());
    assert!(out.contains("CHILD: locked"), "{out}");
    drop(log);
    let out = run_child("open", dir.path());
    assert!(out.contains("CHILD: opened"), "{out}");
}

#[test]
fn every_error_displays_as_one_line() {
    let held = tempfile::tempdir().unwrap();
    let _log = SessionLog::open(held.path()).unwrap();
    let errors = [
        LogError::Locked {
            path: "/s/session.redb".into(),
            holder: None,
            waited: Duration::ZERO,
        },
        // A real one, which names its holder.
        SessionLog::open_with_wait(held.path(), Duration::from_millis(50)).unwrap_err(),
        LogError::NotADatabase {
            path: "/s/session.redb".into(),
        },
        LogError::NewerFormat {
            found: 7,
            supported: 1,
        },
        LogError::NotWritable {
            path: "/s".into(),
            detail: "Permission denied (os error 13)".into(),
        },
        LogError::Storage("I/O error".into()),
        LogError::Corrupt("bad".into()),
        LogError::Invalid("bad".into()),
    ];
    for e in errors {
        let text = e.to_string();
        assert!(!text.contains('\n') && !text.is_empty(), "{text:?}");
    }
}
