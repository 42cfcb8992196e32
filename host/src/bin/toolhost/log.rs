//! `toolhost log` and `toolhost recover`: the session log shown, and the
//! calls whose outcome a crash left unknown resolved.

use crate::args::{LogArgs, StateArgs};
use crate::host::state_dir_of;
use crate::pg::{open_postgres, pg_options, postgres_url};
use anyhow::{Result, anyhow};
use std::process::ExitCode;
use toolhost::log::{LogError, PgEngine, SessionLog};

/// The log for `toolhost log`: read-only, so that it reads beside a running
/// `serve` or `run` and never waits for them. Only a log whose last writer was
/// killed, with no writer alive to repair it, is opened for writing once, as
/// before: that repairs the files and resolves no call.
fn read_log(state: &StateArgs) -> Result<SessionLog> {
    if let Some(url) = postgres_url(state) {
        return open_postgres(&url, false);
    }
    let dir = state_dir_of(state)?;
    match SessionLog::open_read_only(&dir) {
        Err(LogError::NeedsRepair { .. }) => SessionLog::open(&dir),
        read_only => read_only,
    }
    .map_err(|e| anyhow!("{e}"))
}

/// Prints the session log: a table, or one JSON object per event.
pub(crate) fn show_log(a: LogArgs) -> Result<ExitCode> {
    let log = read_log(&a.state)?;
    let events = log.events().map_err(|e| anyhow!("{e}"))?;
    if a.json {
        for e in events {
            let line = serde_json::json!({
                "seq": e.seq, "call_id": e.call_id, "kind": e.kind.as_str(), "at_unix_ms": e.at_unix_ms, "payload": e.payload,
            });
            outln!("{line}");
        }
    } else {
        outln!("{:>6}  {:<17} {:<32} summary", "seq", "kind", "call");
        for e in events {
            outln!(
                "{:>6}  {:<17} {:<32} {}",
                e.seq,
                e.kind.as_str(),
                e.call_id,
                summary(&e.payload)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One event's payload in a line: its tool, status, mode, outcome, error
/// code and network.
fn summary(payload: &serde_json::Value) -> String {
    let get = |k: &str| payload.get(k).and_then(|v| v.as_str()).unwrap_or("");
    let mut parts = Vec::new();
    for k in ["tool", "status", "mode", "outcome"] {
        let v = get(k);
        if !v.is_empty() {
            parts.push(format!("{k}={v}"));
        }
    }
    if let Some(code) = payload.pointer("/error/code").and_then(|v| v.as_str()) {
        parts.push(format!("code={code}"));
    }
    // An intent's reachable grants; a result's network requests.
    if let Some(grants) = payload.get("network").and_then(|v| v.as_array()) {
        let grants: Vec<&str> = grants.iter().filter_map(|g| g.as_str()).collect();
        parts.push(format!("network=[{}]", grants.join(", ")));
    }
    if let Some(records) = payload
        .pointer("/receipt/network")
        .and_then(|v| v.as_array())
        .filter(|r| !r.is_empty())
    {
        parts.push(format!("requests=[{}]", network_summary(records)));
    }
    parts.join(" ")
}

/// The first few of a call's network records, `METHOD URL STATUS`,
/// `METHOD URL refused:CODE`, or for an allowed request without a response
/// `METHOD URL not-sent`, `no-response` or `failed`, then how many more.
fn network_summary(records: &[serde_json::Value]) -> String {
    const SHOWN: usize = 3;
    let mut out: Vec<String> = records.iter().take(SHOWN).map(network_line).collect();
    if records.len() > SHOWN {
        out.push(format!("+{} more", records.len() - SHOWN));
    }
    out.join(", ")
}

/// One network record (as the receipt serialises it): `METHOD URL OUTCOME`,
/// the outcome a status, `refused:CODE`, `failed`, `no-response` or
/// `not-sent` (`connect` for a socket's method). `exec` prints its
/// receipt's records so too.
pub(crate) fn network_line(r: &serde_json::Value) -> String {
    let get = |k: &str| r.get(k).and_then(|v| v.as_str()).unwrap_or("");
    let method = match get("method") {
        "" => "connect",
        m => m,
    };
    use toolhost::policy::egress::{NO_RESPONSE, NOT_SENT};
    let outcome = match (get("decision"), r.get("status").and_then(|v| v.as_u64())) {
        ("refused", _) => format!("refused:{}", get("code")),
        (_, Some(status)) => status.to_string(),
        (decision, None) => match get("error") {
            "" => decision.to_string(),
            NOT_SENT => "not-sent".to_string(),
            NO_RESPONSE => "no-response".to_string(),
            _ => "failed".to_string(),
        },
    };
    format!("{method} {} {outcome}", get("url"))
}

/// Resolves the calls whose outcome is unknown after a crash as
/// `TOOL_OUTCOME_UNKNOWN`, and prints them.
pub(crate) fn recover(a: StateArgs) -> Result<ExitCode> {
    let log = match postgres_url(&a) {
        // Never as a live replica's identity: that would fence it.
        Some(url) => {
            let mut options = pg_options()?;
            options.refuse_live_identity = true;
            PgEngine::open(&url, &options)
                .map(SessionLog::from_engine)
                .map_err(|e| anyhow!("{e}"))?
        }
        None => SessionLog::open(&state_dir_of(&a)?).map_err(|e| anyhow!("{e}"))?,
    };
    let r = log.recover().map_err(|e| anyhow!("{e}"))?;
    if r.recovered.is_empty() {
        outln!("nothing to recover");
    } else {
        for id in &r.recovered {
            outln!("{id}: TOOL_OUTCOME_UNKNOWN");
        }
    }
    Ok(ExitCode::SUCCESS)
}
