//! Three replica processes on one PostgreSQL log, killed with SIGKILL at random points
//! and restarted (alternately under the same identity and a new one); afterwards every
//! intent has exactly one result, approvals are paired, each call's events are in
//! pipeline order, and nothing follows a call's `TOOL_OUTCOME_UNKNOWN`.
//!
//! `TOOLHOST_PG_KILLS` sets the number of kills (default 24).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use toolhost_log::{Durability, EventKind, NewEvent, PgEngine, SessionLog};

use crate::engines::{pg_options, pg_url, unique};
use crate::{call, intent, result};

/// The lease of the replicas in this test: short, so that survivors take over fast, and
/// long enough that a live replica starved of CPU on a loaded machine keeps it.
const LEASE: Duration = Duration::from_secs(2);

/// The child side: one replica writing calls until its stdin closes (or it is killed).
/// `spec` is `LOG:REPLICA:URL`.
pub fn replica_child(spec: &str) {
    let (name, rest) = spec.split_once(':').unwrap();
    let (replica, url) = rest.split_once(':').unwrap();
    let engine = PgEngine::open(url, &pg_options(name, replica, LEASE)).unwrap();
    let log = SessionLog::from_engine(engine);
    // As the host does on start: this identity's unfinished calls end as unknown.
    log.recover().unwrap();
    println!("CHILD: started");
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut rest);
        stop2.store(true, Ordering::SeqCst);
    });
    let pid = std::process::id();
    let mut i = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let id = format!("{replica}-{pid}-{i}");
        let asked = NewEvent::new(&id, EventKind::ApprovalAsked, json!({ "approval": i }));
        let decided = NewEvent::new(&id, EventKind::ApprovalDecided, json!({ "approval": i }));
        let step = log
            .append(&[call(&id), asked], Durability::Lazy)
            .and_then(|_| log.append(&[decided], Durability::Lazy))
            .and_then(|_| log.record_intents(&[intent(&id)]))
            .and_then(|_| {
                // The body: the parent may kill this replica from here on.
                println!("CHILD: running {i}");
                log.events_for_call(&id)
            })
            .and_then(|_| log.append(&[result(&id)], Durability::Lazy));
        if let Err(e) = step {
            // Fenced, or the database went away: a real replica stops here too.
            println!("CHILD: error {e}");
            std::process::exit(4);
        }
        println!("CHILD: done {i}");
        i += 1;
    }
    drop(log);
    println!("CHILD: closed");
}

/// A running replica process, how many bodies it has started, and its last line once
/// its output ended.
struct Replica {
    child: Child,
    done: Arc<AtomicU64>,
    ended: Arc<Mutex<Option<String>>>,
}

impl Replica {
    fn start(name: &str, replica: &str, url: &str) -> Replica {
        let spec = format!("{name}:{replica}:{url}");
        let mut child = crate::child::probe_command("pg-replica", Path::new(&spec))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let done = Arc::new(AtomicU64::new(0));
        let ended = Arc::new(Mutex::new(None));
        let (counter, end) = (done.clone(), ended.clone());
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut last = String::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("CHILD: running") {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
                last = line;
            }
            *end.lock().unwrap() = Some(last);
        });
        Replica { child, done, ended }
    }

    /// Waits until the replica has started `more` bodies beyond what it has now: its
    /// intents are durable, its results may not be.
    fn wait_for_calls(&self, more: u64) {
        let target = self.done.load(Ordering::SeqCst) + more;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.done.load(Ordering::SeqCst) < target {
            if let Some(last) = self.ended.lock().unwrap().as_ref() {
                panic!("a replica stopped before finishing its calls: {last}");
            }
            assert!(Instant::now() < deadline, "a replica made no progress");
            std::thread::yield_now();
        }
    }
}

/// A small deterministic generator (xorshift), seeded from the clock; the seed is
/// printed so that a failing run can be told apart.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn three_replicas_killed_at_random_keep_every_invariant() {
    let Some(url) = pg_url() else { return };
    let kills: u64 = std::env::var("TOOLHOST_PG_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(24);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    eprintln!("replicas: seed {seed}, {kills} kills");
    let mut rng = Rng(seed);
    let name = unique("replicas");
    let mut ids: Vec<String> = (0..3).map(|r| format!("r{r}")).collect();
    let mut replicas: Vec<Replica> = ids
        .iter()
        .map(|id| Replica::start(&name, id, &url))
        .collect();
    for k in 0..kills {
        let victim = (rng.next() % 3) as usize;
        replicas[victim].wait_for_calls(1 + rng.next() % 4);
        replicas[victim].child.kill().unwrap();
        replicas[victim].child.wait().unwrap();
        // Alternately the same identity (it recovers its own calls on start) and a new
        // one (a survivor recovers the dead one's calls once its lease expires).
        if k % 2 == 1 {
            ids[victim] = format!("r{victim}-{k}");
        }
        replicas[victim] = Replica::start(&name, &ids[victim], &url);
    }
    for r in &replicas {
        r.wait_for_calls(1);
    }
    for mut r in replicas {
        drop(r.child.stdin.take());
        assert!(r.child.wait().unwrap().success());
    }

    // Every replica is gone: `toolhost recover` (an engine of its own) resolves what is
    // left once the last leases have expired.
    let checker = SessionLog::from_engine(
        PgEngine::open(&url, &pg_options(&name, "checker", LEASE)).unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !checker.pending_calls().unwrap().is_empty() {
        checker.recover().unwrap();
        assert!(Instant::now() < deadline, "calls stayed pending");
        std::thread::yield_now();
    }
    check_invariants(&checker.events().unwrap());
}

fn check_invariants(events: &[toolhost_log::Event]) {
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "sequence numbers are gapless"
    );
    let mut by_call: HashMap<&str, Vec<&toolhost_log::Event>> = HashMap::new();
    let mut recovered_lists = 0;
    for e in events {
        if e.kind == EventKind::SessionRecovered {
            recovered_lists += 1;
            continue;
        }
        by_call.entry(&e.call_id).or_default().push(e);
    }
    let mut intents = 0;
    let mut unknown = 0;
    for (id, evs) in &by_call {
        let kinds: Vec<EventKind> = evs.iter().map(|e| e.kind).collect();
        let count = |k: EventKind| kinds.iter().filter(|&&x| x == k).count();
        // Pipeline order, each step at most once; a call killed early stops anywhere.
        let order = [
            EventKind::ToolCall,
            EventKind::ApprovalAsked,
            EventKind::ApprovalDecided,
            EventKind::ToolIntent,
            EventKind::ToolResult,
        ];
        assert_eq!(kinds, order[..kinds.len()], "{id}: events out of order");
        if count(EventKind::ToolIntent) == 1 {
            intents += 1;
            assert_eq!(
                count(EventKind::ToolResult),
                1,
                "{id}: an intent without its one result"
            );
            // Approvals are paired before the intent.
            assert_eq!(count(EventKind::ApprovalAsked), 1, "{id}");
            assert_eq!(count(EventKind::ApprovalDecided), 1, "{id}");
        }
        // No result after an unknown, and the unknown is the call's last event.
        if let Some(last) = evs.last()
            && last.kind == EventKind::ToolResult
            && last.payload["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
        {
            unknown += 1;
        }
    }
    eprintln!(
        "replicas: {} events, {} calls with an intent, {unknown} recovered as unknown in {recovered_lists} recoveries",
        events.len(),
        intents
    );
    assert!(intents > 0);
}
