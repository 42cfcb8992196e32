//! Three `toolhost serve --http` replicas on one PostgreSQL log, a client spreading
//! calls over them, and SIGKILL of a random replica (restarted alternately under the same
//! identity and a new one) `TOOLHOST_REPLICA_KILLS` times (default 200). Every call is a
//! `write_file` of a file of its own that needs an approval (`--approver auto-approve`).
//! Afterwards, once `toolhost recover` has resolved what the last replicas left:
//!
//! - sequence numbers are gapless, and each call's events are in pipeline order, each
//!   at most once: `tool/call`, `approval/asked`, `approval/decided`, `tool/intent`,
//!   `tool/result`;
//! - every intent has exactly one result (a recovered one is `TOOL_OUTCOME_UNKNOWN`,
//!   the call's last event: no result after its unknown), and its approval is paired;
//! - every file in the workspace was written by a call with a durable intent, and every
//!   call the client saw succeed has a successful result in the log;
//! - some calls were recovered as unknown (the kills landed in calls).
//!
//! A failure names the xorshift seed (`TOOLHOST_REPLICA_SEED` replays its choices).
//!
//! And approvals are valid on any replica: a request asked on one is decided through
//! another, once; a replica reloading its tools keeps serving on its log.

use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::replica::{Cluster, Replica, ReplicaHandle, WAIT, ask_writes_policy, call, code_of};

/// Short, so that survivors take over a dead replica's calls fast; long enough that a
/// live replica starved of CPU by its restarting peers keeps its lease.
const LEASE_MS: u64 = 2000;

/// Concurrent clients.
const CLIENTS: usize = 4;

/// xorshift.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// What the client saw of one call.
#[derive(Debug, Clone)]
enum Seen {
    /// `isError: false`.
    Ok,
    /// A refusal or failure, with its code.
    Error(Value),
    /// No answer (the replica died or was not there).
    Lost,
}

#[test]
fn three_http_replicas_killed_at_random_keep_every_invariant() {
    let Some(url) = super::replica::pg_url() else {
        return;
    };
    let kills: u64 = std::env::var("TOOLHOST_REPLICA_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(200);
    let seed = std::env::var("TOOLHOST_REPLICA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
        | 1;
    eprintln!("http replicas: seed {seed}, {kills} kills");
    let mut rng = Rng(seed);
    let dir = crate::support::tempdir();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let policy = ask_writes_policy(dir.path());
    let cluster = Cluster {
        url,
        log: super::replica::unique("http-replicas"),
        ws: ws.clone(),
        lease_ms: LEASE_MS,
        args: vec![
            "--policy".into(),
            policy.display().to_string(),
            "--approver".into(),
            "auto-approve".into(),
        ],
    };
    let started = Instant::now();

    let mut ids: Vec<String> = (0..3).map(|r| format!("r{r}")).collect();
    let mut replicas: Vec<Replica> = ids.iter().map(|id| Replica::start(&cluster, id)).collect();
    for r in &mut replicas {
        r.wait_listening();
    }
    // The clients find the replica of each slot through a handle that is swapped on
    // restart.
    let slots: Arc<Vec<std::sync::Mutex<ReplicaHandle>>> = Arc::new(
        replicas
            .iter()
            .map(|r| std::sync::Mutex::new(r.handle()))
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let next_id = Arc::new(AtomicU64::new(1));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (slots, stop, next_id) = (slots.clone(), stop.clone(), next_id.clone());
            let mut rng = Rng(seed.rotate_left(c as u32 * 7 + 1) | 1);
            runtime.spawn(async move {
                let mut seen: Vec<(String, Seen)> = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let slot = (rng.next() % 3) as usize;
                    let handle = slots[slot].lock().unwrap().clone();
                    let Some(addr) = handle.addr() else {
                        // Restarting: try again shortly.
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        continue;
                    };
                    let n = next_id.fetch_add(1, Ordering::SeqCst);
                    let path = format!("c{c}-{n}.txt");
                    let answer = call(
                        addr,
                        n,
                        "write_file",
                        json!({"path": path, "content": format!("{n}\n")}),
                    )
                    .await;
                    let outcome = match answer {
                        Ok(a) => {
                            handle.answers.fetch_add(1, Ordering::SeqCst);
                            if a["result"]["isError"] == false {
                                Seen::Ok
                            } else {
                                Seen::Error(code_of(&a))
                            }
                        }
                        Err(_) => Seen::Lost,
                    };
                    seen.push((path, outcome));
                }
                seen
            })
        })
        .collect();

    // The killer: a random replica, once it has answered a few calls since it started.
    let mut restarts_same = 0;
    for k in 0..kills {
        let victim = (rng.next() % 3) as usize;
        let want = 1 + rng.next() % 3;
        let deadline = Instant::now() + WAIT;
        while replicas[victim].answers.load(Ordering::SeqCst) < want {
            assert!(
                !replicas[victim].exited(),
                "replica {} exited by itself:\n{}",
                replicas[victim].id,
                replicas[victim].stderr()
            );
            assert!(
                Instant::now() < deadline,
                "kill {k}: replica {} answered nothing (seed {seed}):\n{}",
                replicas[victim].id,
                replicas[victim].stderr()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        // Alternately the same identity (it recovers its own calls when it starts) and
        // a new one (a survivor recovers the dead one's calls once its lease expired).
        if k % 2 == 1 {
            ids[victim] = format!("r{victim}-{k}");
        } else {
            restarts_same += 1;
        }
        replicas[victim].kill();
        replicas[victim] = Replica::start(&cluster, &ids[victim]);
        *slots[victim].lock().unwrap() = replicas[victim].handle();
    }
    for r in &mut replicas {
        r.wait_listening();
    }
    stop.store(true, Ordering::SeqCst);
    let mut seen: Vec<(String, Seen)> = Vec::new();
    for c in clients {
        seen.extend(runtime.block_on(c).unwrap());
    }
    for r in &mut replicas {
        r.kill();
    }
    let events = cluster.recover_all();
    eprintln!(
        "http replicas: {kills} kills ({restarts_same} under the same identity) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    check(&events, &seen, &ws, seed);
}

/// The invariants of the module doc.
fn check(events: &[Value], seen: &[(String, Seen)], ws: &std::path::Path, seed: u64) {
    let ctx = format!("(seed {seed})");
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "sequence numbers are gapless {ctx}"
    );
    let order = [
        "tool/call",
        "approval/asked",
        "approval/decided",
        "tool/intent",
        "tool/result",
    ];
    let mut by_call: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for e in events {
        if e["kind"] != "session/recovered" {
            by_call
                .entry(e["call_id"].as_str().unwrap())
                .or_default()
                .push(e);
        }
    }
    // What each path's call did: whether it had an intent, and its result.
    let mut by_path: HashMap<String, (bool, Option<&Value>)> = HashMap::new();
    let (mut intents, mut unknown, mut ok) = (0, 0, 0);
    for (id, evs) in &by_call {
        let kinds: Vec<&str> = evs.iter().map(|e| e["kind"].as_str().unwrap()).collect();
        let places: Vec<usize> = kinds
            .iter()
            .map(|k| {
                order
                    .iter()
                    .position(|o| o == k)
                    .unwrap_or_else(|| panic!("{id}: unexpected event {k} {ctx}"))
            })
            .collect();
        assert!(
            places.first() == Some(&0) && places.windows(2).all(|w| w[0] < w[1]),
            "{id}: events out of pipeline order or repeated: {kinds:?} {ctx}"
        );
        let has = |k: &str| kinds.contains(&k);
        let result = evs.iter().find(|e| e["kind"] == "tool/result");
        if has("tool/intent") {
            intents += 1;
            assert!(result.is_some(), "{id}: an intent without a result {ctx}");
            assert!(
                has("approval/asked") && has("approval/decided"),
                "{id}: an intent without its paired approval: {kinds:?} {ctx}"
            );
        }
        if let Some(r) = result {
            match r["payload"]["error"]["code"].as_str() {
                Some("TOOL_OUTCOME_UNKNOWN") => {
                    unknown += 1;
                    assert!(has("tool/intent"), "{id}: unknown without an intent {ctx}");
                }
                None => ok += 1,
                Some(_) => {}
            }
        }
        // `tool/call` holds the arguments as JSON text (cut to a bound).
        let args: Value = match &evs[0]["payload"]["args"] {
            Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
            other => other.clone(),
        };
        let path = args["path"]
            .as_str()
            .unwrap_or_else(|| panic!("{id}: a call without a path: {} {ctx}", evs[0]))
            .to_string();
        let previous = by_path.insert(path.clone(), (has("tool/intent"), result.copied()));
        assert!(previous.is_none(), "{path}: logged twice {ctx}");
    }
    // No file without a durable intent.
    let mut files = 0;
    for entry in std::fs::read_dir(ws).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        files += 1;
        assert!(
            by_path.get(&name).is_some_and(|(intent, _)| *intent),
            "{name} was written without a durable intent {ctx}"
        );
    }
    // No answer the client saw is contradicted by the log.
    let (mut seen_ok, mut lost) = (0, 0);
    for (path, s) in seen {
        match s {
            Seen::Ok => {
                seen_ok += 1;
                // The body ran. Its result is in the log, unless writing it failed (the
                // replica was fenced, or cut off, after the body): then recovery
                // declared the outcome unknown. Never a different result.
                let result = by_path.get(path).and_then(|(_, r)| *r);
                assert!(
                    result.is_some_and(|r| r["payload"]["status"] == "ok"
                        || r["payload"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"),
                    "{path}: the client saw success, the log says {result:?} {ctx}"
                );
                assert!(ws.join(path).exists(), "{path}: success but no file {ctx}");
            }
            Seen::Error(code) => {
                if code == "ABORTED_BEFORE_DISPATCH" {
                    assert!(!ws.join(path).exists(), "{path}: aborted but written {ctx}");
                }
            }
            Seen::Lost => lost += 1,
        }
    }
    eprintln!(
        "http replicas: {} events, {} calls logged, {intents} intents, {ok} ok, {unknown} \
         recovered as unknown; client: {} calls, {seen_ok} ok, {lost} without an answer; \
         {files} files",
        events.len(),
        by_call.len(),
        seen.len()
    );
    assert!(seen_ok > 0, "no call succeeded {ctx}");
    assert!(unknown > 0, "no kill landed in a call {ctx}");
}

/// A two-phase approval (`--approver queue`) asked on replica A is listed and decided
/// through replica B (`/approvals`) and `toolhost approvals` anywhere; the call on A
/// runs once; a second decision, on A, learns the first; a replica starting meanwhile
/// (C, a new identity) leaves the live request alone.
#[test]
fn an_approval_asked_on_one_replica_is_decided_through_another_and_the_call_runs_once() {
    let Some(url) = super::replica::pg_url() else {
        return;
    };
    let dir = crate::support::tempdir();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alice-token alice\nbob-token bob\n").unwrap();
    let policy = ask_writes_policy(dir.path());
    let mut text = std::fs::read_to_string(&policy).unwrap();
    text.push_str("\n[principals]\nowners = [\"alice\"]\n");
    std::fs::write(&policy, text).unwrap();
    let cluster = Cluster {
        url,
        log: super::replica::unique("approvals"),
        ws: ws.clone(),
        lease_ms: 10_000,
        args: [
            "--policy",
            policy.to_str().unwrap(),
            "--approver",
            "queue",
            "--approval-timeout",
            "120",
            "--tokens",
            tokens.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec(),
    };
    let mut a = Replica::start(&cluster, "approvals-a");
    let mut b = Replica::start(&cluster, "approvals-b");
    let (addr_a, addr_b) = (a.wait_listening(), b.wait_listening());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let waiting = rt.spawn(super::replica::call_as(
        addr_a,
        Some("bob-token"),
        1,
        "write_file",
        json!({"path": "approved.txt", "content": "x"}),
    ));
    let pending_on = |addr| {
        rt.block_on(super::replica::operator(
            addr,
            "GET",
            "/approvals",
            "alice-token",
            json!(null),
        ))
    };
    let deadline = Instant::now() + WAIT;
    let id = loop {
        let (status, pending) = pending_on(addr_b);
        assert_eq!(status, 200, "{pending}");
        if let Some(r) = pending.as_array().and_then(|p| p.first()) {
            assert_eq!(r["tool"], "write_file", "{r}");
            break r["approval_id"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "nothing became pending on B");
        std::thread::sleep(Duration::from_millis(10));
    };
    // The command line, another process, sees it too.
    let out = cluster
        .command("cli", &["approvals", "list", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed[0]["approval_id"], id.as_str(), "{listed}");
    // A replica that starts now recovers only dead replicas' requests.
    let mut c = Replica::start(&cluster, "approvals-c");
    let addr_c = c.wait_listening();
    let (_, pending) = pending_on(addr_c);
    assert_eq!(pending[0]["approval_id"], id.as_str(), "{pending}");

    let path = format!("/approvals/{id}");
    let (status, body) = rt.block_on(super::replica::operator(
        addr_b,
        "POST",
        &path,
        "alice-token",
        json!({"decision": "allow"}),
    ));
    assert_eq!(status, 200, "{body}");
    let (status, body) = rt.block_on(super::replica::operator(
        addr_a,
        "POST",
        &path,
        "alice-token",
        json!({"decision": "reject"}),
    ));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["decision"]["outcome"], "allowed-once", "{body}");
    assert_eq!(body["decision"]["by"], "alice", "{body}");

    let answer = rt.block_on(waiting).unwrap().unwrap();
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert!(ws.join("approved.txt").exists());
    let (_, pending) = pending_on(addr_a);
    assert_eq!(pending, json!([]));
    for r in [&mut a, &mut b, &mut c] {
        r.kill();
    }
    let events = cluster.events();
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "tool/call",
            "approval/asked",
            "approval/decided",
            "tool/intent",
            "tool/result"
        ],
        "{events:?}"
    );
    assert_eq!(events[2]["payload"]["outcome"], "allowed-once");
    assert_eq!(events[4]["payload"]["status"], "ok");
}

/// A 2026-07-28 approval state issued by one replica is good on another (one key file),
/// and its use is claimed in the database: the same approved retry sent to both replicas
/// at once, eight times, runs exactly once; the others are refused
/// `APPROVAL_STATE_REPLAYED` and logged.
#[test]
fn a_2026_approval_state_is_good_on_any_replica_and_runs_once() {
    let Some(url) = super::replica::pg_url() else {
        return;
    };
    let dir = crate::support::tempdir();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let policy = ask_writes_policy(dir.path());
    let key = dir.path().join("approval.key");
    let cluster = Cluster {
        url,
        log: super::replica::unique("mrtr"),
        ws: ws.clone(),
        lease_ms: 10_000,
        args: [
            "--policy",
            policy.to_str().unwrap(),
            "--approval-key",
            key.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec(),
    };
    let mut a = Replica::start(&cluster, "mrtr-a");
    let mut b = Replica::start(&cluster, "mrtr-b");
    let (addr_a, addr_b) = (a.wait_listening(), b.wait_listening());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let elicits = json!({"elicitation": {"form": {}}});
    let ask = |addr, path: &str| {
        let answer = rt
            .block_on(super::replica::call_with(
                addr,
                None,
                1,
                "write_file",
                json!({"path": path, "content": "once\n"}),
                json!({}),
                elicits.clone(),
            ))
            .unwrap();
        let state = answer["result"]["requestState"]
            .as_str()
            .unwrap_or_else(|| {
                panic!("no input-required result: {answer}");
            });
        state.to_string()
    };
    let approve = json!({"approval": {"action": "accept", "content": {"approve": true}}});
    let retry = |addr, id, path: &str, state: &str| {
        super::replica::call_with(
            addr,
            None,
            id,
            "write_file",
            json!({"path": path, "content": "once\n"}),
            json!({"inputResponses": approve.clone(), "requestState": state}),
            elicits.clone(),
        )
    };

    // Issued by A, used on B.
    let state = ask(addr_a, "moved.txt");
    let answer = rt.block_on(retry(addr_b, 2, "moved.txt", &state)).unwrap();
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert!(ws.join("moved.txt").exists());

    // One approved state, sixteen retries at once over both replicas.
    let state = ask(addr_b, "raced.txt");
    let answers = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..16u64 {
            let addr = if i % 2 == 0 { addr_a } else { addr_b };
            set.spawn(retry(addr, 10 + i, "raced.txt", &state));
        }
        set.join_all().await
    });
    let mut ran = 0;
    for answer in &answers {
        let answer = answer.as_ref().unwrap();
        if answer["result"]["isError"] == false {
            ran += 1;
        } else {
            assert_eq!(code_of(answer), "APPROVAL_STATE_REPLAYED", "{answer}");
        }
    }
    assert_eq!(ran, 1, "the one approved state ran {ran} times");
    for r in [&mut a, &mut b] {
        r.kill();
    }
    let events = cluster.events();
    let intents = events.iter().filter(|e| e["kind"] == "tool/intent").count();
    assert_eq!(intents, 2, "one intent per used state: {events:?}");
    let replayed = events
        .iter()
        .filter(|e| {
            e["kind"] == "tool/result" && e["payload"]["error"]["code"] == "APPROVAL_STATE_REPLAYED"
        })
        .count();
    assert_eq!(replayed, 15, "every refusal is logged");
}

/// Tasks live in the shared log: a task started on one replica is answered by another
/// (`working`, then `completed` with the call's result); only the replica that runs a
/// task cancels it (another says so and leaves it running); a task whose replica dies mid-call
/// is reported by a survivor, once the dead replica's lease expired and its calls were
/// recovered, as completed with `TOOL_OUTCOME_UNKNOWN`, never as a guess.
#[test]
fn a_task_is_answered_by_any_replica_and_a_dead_replicas_task_is_unknown() {
    let Some(url) = super::replica::pg_url() else {
        return;
    };
    let dir = crate::support::tempdir();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let policy = ask_writes_policy(dir.path());
    let cluster = Cluster {
        url,
        log: super::replica::unique("tasks"),
        ws,
        lease_ms: 1500,
        args: ["--policy", policy.to_str().unwrap()]
            .map(String::from)
            .to_vec(),
    };
    let mut a = Replica::start(&cluster, "tasks-a");
    let mut b = Replica::start(&cluster, "tasks-b");
    let (addr_a, addr_b) = (a.wait_listening(), b.wait_listening());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let start = |addr, id, ms: u64| {
        let answer = rt
            .block_on(super::replica::rpc(
                addr,
                None,
                id,
                "tools/call",
                "sleep",
                json!({"name": "sleep", "arguments": {"ms": ms}}),
                tasks.clone(),
            ))
            .unwrap();
        assert_eq!(answer["result"]["resultType"], "task", "{answer}");
        answer["result"]["taskId"].as_str().unwrap().to_string()
    };
    // `tasks/get` or `tasks/cancel` of task `id` through `addr`.
    let on_task = |addr, method: &str, id: &str| {
        rt.block_on(super::replica::rpc(
            addr,
            None,
            99,
            method,
            id,
            json!({"taskId": id}),
            tasks.clone(),
        ))
        .unwrap()
    };
    let get = |addr, id: &str| on_task(addr, "tasks/get", id);
    let until_done = |addr, id: &str| {
        let deadline = Instant::now() + WAIT;
        loop {
            let got = get(addr, id);
            assert!(got["result"].is_object(), "tasks/get failed: {got}");
            if got["result"]["status"] != "working" {
                return got["result"].clone();
            }
            assert!(Instant::now() < deadline, "still working: {got}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    let id = start(addr_a, 1, 300);
    let done = until_done(addr_b, &id);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");

    let until_intent = |id: &str| {
        let deadline = Instant::now() + WAIT;
        while !cluster
            .events()
            .iter()
            .any(|e| e["kind"] == "tool/intent" && e["call_id"] == id)
        {
            assert!(
                Instant::now() < deadline,
                "the task's intent never became durable"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let cancel = |addr, id: &str| on_task(addr, "tasks/cancel", id);

    // Only the replica that runs a task can interrupt it: another one
    // says where it runs and leaves it running.
    let id = start(addr_a, 3, 60_000);
    until_intent(&id);
    let elsewhere = cancel(addr_b, &id);
    let message = elsewhere["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("runs on another server"), "{elsewhere}");
    assert_eq!(get(addr_a, &id)["result"]["status"], "working");
    let here = cancel(addr_a, &id);
    assert!(here["result"].is_object(), "{here}");
    let done = until_done(addr_b, &id);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["_meta"]["toolhost"]["code"], "CANCELLED",
        "{done}"
    );

    // A task whose replica dies in its body.
    let id = start(addr_a, 2, 60_000);
    until_intent(&id);
    assert_eq!(get(addr_b, &id)["result"]["status"], "working");
    a.kill();
    let done = until_done(addr_b, &id);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["_meta"]["toolhost"]["code"], "TOOL_OUTCOME_UNKNOWN",
        "{done}"
    );
    b.kill();
    let events = cluster.events();
    let results = events
        .iter()
        .filter(|e| e["kind"] == "tool/result" && e["call_id"] == id.as_str())
        .count();
    assert_eq!(results, 1, "{events:?}");
}

/// A replica that reloads its tools directory (`--tools`) keeps its one registration
/// with the database: the reload shares the log, so it neither fences the log in use
/// nor recovers its own calls; calls after the reload are served.
#[test]
fn a_replica_reloading_its_tools_keeps_serving_on_its_log() {
    let Some(url) = super::replica::pg_url() else {
        return;
    };
    let dir = crate::support::tempdir();
    let ws = dir.path().join("ws");
    let tools = dir.path().join("tools");
    std::fs::create_dir(&ws).unwrap();
    std::fs::create_dir(&tools).unwrap();
    let cluster = Cluster {
        url,
        log: super::replica::unique("reload"),
        ws: ws.clone(),
        lease_ms: 10_000,
        args: [
            "--policy",
            ask_writes_policy(dir.path()).to_str().unwrap(),
            "--approver",
            "auto-approve",
            "--tools",
            tools.to_str().unwrap(),
            "--poll-ms",
            "20",
        ]
        .map(String::from)
        .to_vec(),
    };
    let mut r = Replica::start(&cluster, "reload-r");
    let addr = r.wait_listening();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let write = |id: u64| {
        rt.block_on(call(
            addr,
            id,
            "write_file",
            json!({"path": format!("f{id}.txt"), "content": "x"}),
        ))
        .unwrap()
    };
    assert_eq!(write(1)["result"]["isError"], false);
    // A new component in the directory: the server reloads.
    let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/wasm-tools/wasm32-wasip2/release/toolhost_mcp_fixtures.wasm");
    std::fs::copy(&built, tools.join("fixtures.wasm")).unwrap();
    let deadline = Instant::now() + WAIT;
    let mut n = 1;
    loop {
        n += 1;
        let answer = rt
            .block_on(call(addr, n, "test_simple_text", json!({})))
            .unwrap();
        if code_of(&answer) != "UNKNOWN_TOOL" {
            break;
        }
        assert!(Instant::now() < deadline, "the tools were never reloaded");
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..3 {
        n += 1;
        let answer = write(n);
        assert_eq!(
            answer["result"]["isError"],
            false,
            "{answer}\n{}",
            r.stderr()
        );
    }
    r.kill();
    let events = cluster.events();
    assert!(
        !events
            .iter()
            .any(|e| e["payload"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"),
        "{events:?}"
    );
}
