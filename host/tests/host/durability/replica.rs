//! What the PostgreSQL tests through `toolhost serve --http` share: a replica process
//! (its address, how many answers it gave since it started), a small MCP client
//! (2026-07-28 requests without a session, so any replica can answer any request),
//! `toolhost log`/`recover` on a log, and SQL on the test server.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::support::{bin, cache_dir};

/// How long any one wait of these tests may take before it fails.
pub const WAIT: Duration = Duration::from_secs(120);

/// The URL of the test server (`scripts/pg-test-server start`), or `None` outside CI
/// when there is none (the test then prints a loud notice and checks nothing).
pub fn pg_url() -> Option<String> {
    match std::env::var("TOOLHOST_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("TOOLHOST_TEST_PG_URL is unset under CI: .ci/run must start PostgreSQL")
        }
        _ => {
            eprintln!(
                "\n*** TOOLHOST_TEST_PG_URL is unset: the PostgreSQL replicas are NOT tested ***\n"
            );
            None
        }
    }
}

/// A log name no other test (or earlier run) uses.
pub fn unique(what: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{what}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `statement` on the database at `url`; the first column of its first row.
pub fn sql(url: &str, statement: &str) -> Option<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
        tokio::spawn(conn);
        let messages = client
            .simple_query(statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
        messages.into_iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        })
    })
}

/// Terminates the database connections of `replica` (as a network cut or an
/// administrator would), waiting until they are gone.
pub fn cut_connections(url: &str, replica: &str) -> u64 {
    sql(
        url,
        &format!(
            "SELECT count(pg_terminate_backend(pid, 10000))::text FROM pg_stat_activity \
             WHERE application_name = 'toolhost {replica}'"
        ),
    )
    .and_then(|n| n.parse().ok())
    .unwrap_or(0)
}

/// What the replicas of one test share: the database, the log, the workspace, the
/// lease, and extra arguments of `serve`.
#[derive(Clone)]
pub struct Cluster {
    pub url: String,
    pub log: String,
    pub ws: PathBuf,
    pub lease_ms: u64,
    pub args: Vec<String>,
}

impl Cluster {
    /// `toolhost ARGS --state URL --workspace WS` on this log as `replica`.
    pub fn command(&self, replica: &str, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(args)
            .arg("--state")
            .arg(&self.url)
            .arg("--workspace")
            .arg(&self.ws)
            .env("TOOLHOST_CACHE_DIR", cache_dir())
            .env("TOOLHOST_PG_LOG", &self.log)
            .env("TOOLHOST_REPLICA_ID", replica)
            .env("TOOLHOST_PG_LEASE_MS", self.lease_ms.to_string())
            .env_remove("TOOLHOST_TEST_PAUSE_AT")
            .env_remove("TOOLHOST_STATE_DIR")
            .env_remove("TOOLHOST_LOG")
            .stdin(Stdio::null());
        c
    }

    /// The log's events, as `toolhost log --json` prints them.
    pub fn events(&self) -> Vec<Value> {
        let out = self.command("reader", &["log", "--json"]).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Runs `toolhost recover` (as replica `recoverer`) until no call of the log has
    /// an intent without a result: the leases of dead replicas run out first.
    pub fn recover_all(&self) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        loop {
            let out = self.command("recoverer", &["recover"]).output().unwrap();
            assert!(out.status.success(), "{out:?}");
            let events = self.events();
            if unfinished(&events).is_empty() {
                return events;
            }
            assert!(
                Instant::now() < deadline,
                "calls stayed unfinished: {:?}",
                unfinished(&events)
            );
            std::thread::sleep(Duration::from_millis(self.lease_ms / 4));
        }
    }
}

/// The calls with an intent and no result.
pub fn unfinished(events: &[Value]) -> Vec<String> {
    let mut open = std::collections::BTreeSet::new();
    for e in events {
        let id = e["call_id"].as_str().unwrap_or_default().to_string();
        match e["kind"].as_str() {
            Some("tool/intent") => {
                open.insert(id);
            }
            Some("tool/result") => {
                open.remove(&id);
            }
            _ => {}
        }
    }
    open.into_iter().collect()
}

/// One `toolhost serve --http` replica: its process, its address once it listens, and
/// how many answers it has given.
pub struct Replica {
    pub id: String,
    child: Child,
    addr: Arc<Mutex<Option<SocketAddr>>>,
    /// Everything it wrote to stderr (for failures).
    stderr: Arc<Mutex<String>>,
    pub answers: Arc<AtomicU64>,
}

impl Replica {
    /// Starts a replica; it listens some time later (see [`Replica::addr`]).
    pub fn start(cluster: &Cluster, id: &str) -> Replica {
        let mut args = vec!["serve", "--http", "127.0.0.1:0"];
        args.extend(cluster.args.iter().map(String::as_str));
        Replica::spawn(cluster.command(id, &args), id)
    }

    /// Starts `command` (a `serve --http` of replica `id`).
    pub fn spawn(mut command: Command, id: &str) -> Replica {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let addr = Arc::new(Mutex::new(None));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (a, s) = (addr.clone(), stderr.clone());
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let marker = "serving MCP over Streamable HTTP at http://";
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(rest) = line.split(marker).nth(1)
                    && let Ok(parsed) = rest.trim_end_matches("/mcp").parse()
                {
                    *a.lock().unwrap() = Some(parsed);
                }
                let mut s = s.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Replica {
            id: id.to_string(),
            child,
            addr,
            stderr,
            answers: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Where it listens, once it does.
    pub fn addr(&self) -> Option<SocketAddr> {
        *self.addr.lock().unwrap()
    }

    /// A handle clients use while this process lives.
    pub fn handle(&self) -> ReplicaHandle {
        ReplicaHandle {
            addr: self.addr.clone(),
            answers: self.answers.clone(),
        }
    }

    /// Waits (bounded) until it listens; panics with its stderr if it exits first.
    pub fn wait_listening(&mut self) -> SocketAddr {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(a) = self.addr() {
                return a;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "replica {} exited ({status}) before listening:\n{}",
                    self.id,
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "replica {} never listened",
                self.id
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// SIGKILL, and wait until it is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a client needs of a replica: its address (if it listens) and its answer count.
#[derive(Clone)]
pub struct ReplicaHandle {
    addr: Arc<Mutex<Option<SocketAddr>>>,
    pub answers: Arc<AtomicU64>,
}

impl ReplicaHandle {
    pub fn addr(&self) -> Option<SocketAddr> {
        *self.addr.lock().unwrap()
    }
}

/// The `code` of a `tools/call` answer (`null` on success).
pub fn code_of(answer: &Value) -> Value {
    answer["result"]["_meta"]["toolhost"]["code"].clone()
}

/// A 2026-07-28 `tools/call` of `tool` with `args`, without a session, to `addr`; its
/// answer, or why none came (the replica died, refused the connection, ...).
pub async fn call(addr: SocketAddr, id: u64, tool: &str, args: Value) -> Result<Value, String> {
    call_as(addr, None, id, tool, args).await
}

/// [`call`] with a bearer token.
pub async fn call_as(
    addr: SocketAddr,
    token: Option<&str>,
    id: u64,
    tool: &str,
    args: Value,
) -> Result<Value, String> {
    call_with(addr, token, id, tool, args, json!({}), json!({})).await
}

/// [`call_as`] from a client with `capabilities`, with `extra` params
/// (`inputResponses`, `requestState`) beside the name and arguments.
pub async fn call_with(
    addr: SocketAddr,
    token: Option<&str>,
    id: u64,
    tool: &str,
    args: Value,
    extra: Value,
    capabilities: Value,
) -> Result<Value, String> {
    let mut params = json!({"name": tool, "arguments": args});
    if let (Some(p), Some(extra)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(extra.clone());
    }
    rpc(addr, token, id, "tools/call", tool, params, capabilities).await
}

/// A 2026-07-28 request `method` with `params` (`_meta` added: this client and its
/// `capabilities`) and `Mcp-Name: name`, without a session, to `addr`; its answer, or
/// why none came.
pub async fn rpc(
    addr: SocketAddr,
    token: Option<&str>,
    id: u64,
    method: &str,
    name: &str,
    mut params: Value,
    capabilities: Value,
) -> Result<Value, String> {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "replica-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let request = http::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", format!("127.0.0.1:{}", addr.port()))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name);
    let request = match token {
        Some(t) => request.header("authorization", format!("Bearer {t}")),
        None => request,
    }
    .body(http_body_util::Full::new(bytes::Bytes::from(
        body.to_string(),
    )))
    .map_err(|e| e.to_string())?;
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| format!("handshake: {e}"))?;
        tokio::spawn(conn);
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("send: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("status {}", response.status()));
        }
        first_message(response.into_body()).await
    };
    match tokio::time::timeout(WAIT, exchange).await {
        Ok(answer) => answer,
        Err(_) => Err("no answer in time".to_string()),
    }
}

/// The first JSON message of a response body: plain JSON, or the first SSE event with
/// data.
async fn first_message(mut body: hyper::body::Incoming) -> Result<Value, String> {
    use http_body_util::BodyExt;
    let mut buf = String::new();
    loop {
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if data.iter().any(|d| !d.is_empty()) {
                return serde_json::from_str(&data.join("\n")).map_err(|e| e.to_string());
            }
        }
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buf.push_str(&String::from_utf8_lossy(&data).replace("\r\n", "\n"));
                }
            }
            Some(Err(e)) => return Err(format!("body: {e}")),
            None => {
                let rest = buf.trim();
                return if rest.starts_with('{') {
                    serde_json::from_str(rest).map_err(|e| e.to_string())
                } else {
                    Err("the response ended without a message".to_string())
                };
            }
        }
    }
}

/// Writes the policy every replica of these tests uses to `dir`: workspace-write, and
/// `write_file` needs an approval.
pub fn ask_writes_policy(dir: &Path) -> PathBuf {
    let path = dir.join("policy.toml");
    std::fs::write(
        &path,
        "version = 1\nmode = \"workspace-write\"\n\n[[rules]]\ntool = \"write_file\"\n\
         decision = \"ask\"\nreason = \"writes need a human\"\n",
    )
    .unwrap();
    path
}

/// `GET /approvals` or `POST /approvals/ID` (the operator's endpoints) on `addr` with
/// `token`: the status and the JSON body.
pub async fn operator(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    body: Value,
) -> (u16, Value) {
    use http_body_util::BodyExt;
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", format!("127.0.0.1:{}", addr.port()))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .unwrap();
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let response = sender.send_request(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    };
    tokio::time::timeout(WAIT, exchange)
        .await
        .expect("no answer from the operator endpoint in time")
}
