//! The `toolhost` command line: a thin layer over the library.
//!
//! Exit codes: 0 ok; 1 the call ended in an error result; 2 usage or
//! configuration error. `exec` passes the program's exit status through and
//! uses 125 when the runtime stopped the program.

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use toolhost::{
    CallRequest, CallResult, ContentItem, Host, HostBuilder, Interrupt, Limits, RuntimeOptions,
    SandboxMode,
};

/// Prints to stdout like `print!`, but a stdout that cannot be written
/// does not panic: see [`write_stdout`].
macro_rules! out {
    ($($arg:tt)*) => { write_stdout(format_args!($($arg)*), false) };
}

/// Prints a line to stdout like `println!`, but a stdout that cannot be
/// written does not panic: see [`write_stdout`].
macro_rules! outln {
    () => { write_stdout(format_args!(""), true) };
    ($($arg:tt)*) => { write_stdout(format_args!($($arg)*), true) };
}

/// The exit status when stdout is a closed pipe (`toolhost log | head`):
/// what a shell reports for a program that SIGPIPE ended (128 + 13).
const EXIT_STDOUT_CLOSED: i32 = 141;

/// Writes to stdout. A reader that went away (a closed pipe) ends the
/// process quietly with [`EXIT_STDOUT_CLOSED`], as the command-line tools it
/// is piped with do; any other write error is reported on stderr and the
/// process exits with status 1 (where `println!` would panic). Whatever the
/// command did (a call and its log records) is complete before anything is
/// printed.
fn write_stdout(args: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(args)
        .and_then(|()| {
            if newline {
                stdout.write_all(b"\n")
            } else {
                Ok(())
            }
        })
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::exit(EXIT_STDOUT_CLOSED)
        }
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            std::process::exit(1)
        }
    }
}

#[derive(Parser)]
#[command(
    name = "toolhost",
    version,
    about = "Run AI-agent tools as sandboxed WebAssembly components behind a governed pipeline"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one governed tool call (or a batch).
    Run(RunArgs),
    /// List tools, their descriptions and schemas.
    List(ListArgs),
    /// Run a WASI command program under a sandbox mode.
    Exec(ExecArgs),
    /// Show the session log (read-only: also while `serve` or `run` holds it).
    Log(LogArgs),
    /// Resolve calls whose outcome is unknown after a crash.
    Recover(StateArgs),
    /// Serve the tools over the Model Context Protocol (stdio or Streamable HTTP).
    Serve(ServeArgs),
    /// Check a tool component against the contract.
    Conformance(ConformanceArgs),
    /// Explain, layer by layer, what a call would meet; runs nothing.
    Explain(ExplainArgs),
    /// List and decide the approvals a `--approver queue` host waits for.
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
}

#[derive(Subcommand)]
enum ApprovalsCommand {
    /// The requests waiting for a decision, oldest first.
    List {
        #[command(flatten)]
        state: StateArgs,
        /// One JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Decide one request: allow (this call only), reject or cancel.
    Decide {
        /// The approval id (from `approvals list`).
        id: String,
        /// allow, reject or cancel.
        #[arg(value_parser = parse_outcome)]
        decision: toolhost::ApprovalOutcome,
        /// Who decides (recorded with the decision).
        #[arg(long, value_name = "NAME", default_value = "operator")]
        by: String,
        #[command(flatten)]
        state: StateArgs,
    },
}

/// `allow`, `reject` or `cancel` (or the outcome names themselves).
fn parse_outcome(s: &str) -> Result<toolhost::ApprovalOutcome, String> {
    use toolhost::ApprovalOutcome as O;
    match s {
        "allow" | "allowed-once" => Ok(O::AllowedOnce),
        "reject" | "rejected" => Ok(O::Rejected),
        "cancel" | "cancelled" => Ok(O::Cancelled),
        _ => Err(format!("{s:?}: expected allow, reject or cancel")),
    }
}

#[derive(Args, Clone)]
struct StateArgs {
    /// State directory (the session log). Default: $TOOLHOST_STATE_DIR, else a
    /// per-workspace directory under $XDG_STATE_HOME/toolhost (or
    /// ~/.local/state/toolhost), outside the workspace so tools cannot edit it.
    /// A `postgres://` URL instead keeps the log in PostgreSQL, shared by replicas
    /// ($TOOLHOST_PG_LOG names the log, default `default`; $TOOLHOST_REPLICA_ID this
    /// process's identity; $TOOLHOST_PG_LEASE_MS its lease, default 10000); the
    /// requests of `--approver queue` then wait in the database, for any replica.
    #[arg(long, value_name = "DIR|URL")]
    state: Option<PathBuf>,
    /// The workspace the tools see (default: the current directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
}

#[derive(Args)]
struct HostArgs {
    #[command(flatten)]
    state: StateArgs,
    /// Directory of tools, loaded with the embedded tools: components
    /// (`*.wasm`) and program-backed tools (`NAME.tool.toml` manifests).
    #[arg(long, value_name = "DIR")]
    tools: Option<PathBuf>,
    /// Sandbox mode: none, read-only, workspace-write, danger-full-access
    /// (default: the policy's mode).
    #[arg(long, value_name = "MODE")]
    mode: Option<SandboxMode>,
    /// Policy file (TOML).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Approver: none, tty, auto-approve, auto-reject, command:PROGRAM.
    #[arg(long, value_name = "KIND", default_value = "none")]
    approver: String,
    /// Seconds to wait for an approval.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    approval_timeout: u64,
    /// Wall-clock deadline of a call, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    timeout_ms: u64,
    /// Fuel budget (enables fuel metering).
    #[arg(long, value_name = "UNITS")]
    fuel: Option<u64>,
    /// Most linear memory a call may hold (all its memories together), in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    memory_mb: usize,
    /// Scope (agent) the call comes from.
    #[arg(long, value_name = "NAME")]
    scope: Option<String>,
    /// Who asks, as the policy's principals and layers see it (default:
    /// `local`, an owner; `serve --http` without tokens: `anonymous`).
    #[arg(long, value_name = "NAME", value_parser = parse_principal)]
    principal: Option<String>,
    /// Compile cache directory (default: $TOOLHOST_CACHE_DIR or ~/.cache/toolhost).
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
}

#[derive(Args)]
struct RunArgs {
    /// A `.wasm` component path, or a tool name (embedded or in --tools).
    #[arg(required_unless_present = "batch")]
    tool: Option<String>,
    /// The tool to call inside a multi-tool component (`--tool-name` also works).
    #[arg(
        long = "tool",
        id = "tool_name",
        value_name = "NAME",
        alias = "tool-name"
    )]
    tool_name: Option<String>,
    /// The arguments, as a JSON object.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    args: String,
    /// A JSON array of {"tool","args"} calls to run as one step.
    #[arg(long, value_name = "FILE", conflicts_with = "tool")]
    batch: Option<PathBuf>,
    /// Ask to run this call in a wider mode (needs approval).
    #[arg(long, value_name = "MODE", requires = "justification")]
    escalate: Option<SandboxMode>,
    /// Why the escalation is needed.
    #[arg(long, value_name = "TEXT")]
    justification: Option<String>,
    /// Print exactly one JSON object (an array for --batch).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    host: HostArgs,
}

#[derive(Args)]
struct ExplainArgs {
    /// A tool name (embedded or in --tools).
    tool: String,
    /// The arguments, as a JSON object.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    args: String,
    /// Explain the call as an escalation to this mode.
    #[arg(long, value_name = "MODE", requires = "justification")]
    escalate: Option<SandboxMode>,
    /// Why the escalation is needed.
    #[arg(long, value_name = "TEXT")]
    justification: Option<String>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    host: HostArgs,
}

/// A principal name, as `--principal` takes it.
fn parse_principal(s: &str) -> Result<String, String> {
    toolhost::policy::check_principal_name(s)?;
    Ok(s.to_string())
}

#[derive(Args)]
struct ListArgs {
    /// Component files or directories of them (default: the embedded tools).
    paths: Vec<PathBuf>,
    /// Policy file: list only what --principal may see.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// List the tools this principal sees (default: `local`, an owner).
    #[arg(long, value_name = "NAME", value_parser = parse_principal)]
    principal: Option<String>,
    /// Print the tools as declarations for this model provider, their
    /// schemas normalized to what it accepts: openai, anthropic or gemini
    /// (JSON; implies --json).
    #[arg(long, value_name = "PROVIDER")]
    schema_for: Option<toolhost::Provider>,
    /// JSON output.
    #[arg(long)]
    json: bool,
    /// List the tools as `run` and `serve` load them with this workspace
    /// (a tools directory, program or manifest inside it is refused, as
    /// there). Default: an empty temporary directory, in TMPDIR.
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
}

#[derive(Args)]
struct ExecArgs {
    /// The program: a command component (exports wasi:cli/run) or a WASI
    /// preview 1 core module (exports _start).
    program: PathBuf,
    /// Sandbox mode.
    #[arg(long, value_name = "MODE", default_value = "none")]
    mode: SandboxMode,
    /// The workspace (default: the current directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Where the workspace appears inside the program (modes read-only and
    /// workspace-write): `.`, its current directory, or an absolute guest
    /// path such as `/` or `/data`.
    #[arg(long, value_name = "GUEST_PATH", default_value = ".")]
    mount: String,
    /// An environment variable for the program (repeatable; a later one of
    /// the same KEY wins). Nothing is inherited from toolhost's environment.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// The program's standard input: a file, or `-` for toolhost's own.
    /// Read whole before the program starts, at most 64 MiB. Default: empty.
    #[arg(long, value_name = "FILE")]
    stdin: Option<PathBuf>,
    /// Let the program reach this destination (repeatable):
    /// `scheme://host[:port]` with `http`, `https`, `tcp` or `udp`, a
    /// `*.` wildcard for subdomains, the scheme's port by default; the same
    /// patterns as a policy's `[network] allow`. Nothing is reachable
    /// without one, in every mode; addresses are checked after name
    /// resolution (loopback, private and metadata addresses only when a
    /// pattern names that exact address).
    #[arg(long = "allow-net", value_name = "URL_PATTERN")]
    allow_net: Vec<String>,
    /// Extra certificates (PEM) to trust for `https` beside the system's
    /// roots, for example a private service's CA.
    #[arg(long, value_name = "FILE", requires = "allow_net")]
    ca_file: Option<PathBuf>,
    /// Most requests and connections the program may make through its
    /// `--allow-net` grants (default 32), as a policy's
    /// `network.max_requests`.
    #[arg(long, value_name = "N", requires = "allow_net",
          value_parser = clap::value_parser!(u32).range(1..))]
    net_max_requests: Option<u32>,
    /// Most response body bytes the program may receive, all requests
    /// summed (default 8 MiB), as `network.max_response_bytes`.
    #[arg(long, value_name = "BYTES", requires = "allow_net",
          value_parser = clap::value_parser!(u64).range(1..))]
    net_max_response_bytes: Option<u64>,
    /// Each request's timeout, in milliseconds (default 30 000), within
    /// `--timeout-ms`, as `network.request_timeout_ms`.
    #[arg(long, value_name = "MS", requires = "allow_net",
          value_parser = clap::value_parser!(u64).range(1..))]
    net_request_timeout_ms: Option<u64>,
    /// Wall-clock deadline, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    timeout_ms: u64,
    /// Most linear memory the program may hold (all its memories together), in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    memory_mb: usize,
    /// Fuel budget (enables fuel metering).
    #[arg(long, value_name = "UNITS")]
    fuel: Option<u64>,
    /// Writes what the run did as JSON to FILE once it ends: its exit
    /// status or error, and its receipt (every network request and
    /// connection, allowed or refused, and what the sandbox denied). Its
    /// directory is checked before the program runs; not in mode
    /// danger-full-access, nor inside a workspace the program may write.
    #[arg(long, value_name = "FILE")]
    receipt: Option<PathBuf>,
    /// Bytes of stdout, and of stderr, passed through; past that the
    /// program's writes fail and toolhost exits 125 (OUTPUT_TOO_LARGE).
    #[arg(long, value_name = "BYTES", default_value_t = EXEC_MAX_OUTPUT)]
    max_output: usize,
    /// Arguments for the program.
    #[arg(last = true)]
    args: Vec<String>,
}

/// The most `toolhost exec --stdin` reads.
const EXEC_STDIN_CAP: u64 = 64 << 20;

/// The default of `toolhost exec --max-output`.
const EXEC_MAX_OUTPUT: usize = 64 << 20;

/// `KEY=VALUE`, for `exec --env`.
fn parse_env(s: &str) -> Result<(String, String), String> {
    let Some((key, value)) = s.split_once('=') else {
        return Err("expected KEY=VALUE (no `=` found)".into());
    };
    if key.is_empty() {
        return Err("expected KEY=VALUE (the KEY is empty)".into());
    }
    if s.contains('\0') {
        return Err("an environment variable cannot contain a NUL byte".into());
    }
    Ok((key.to_string(), value.to_string()))
}

#[derive(Args)]
struct ConformanceArgs {
    /// The tool component to check.
    tool: PathBuf,
    /// One JSON report instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("transport").required(true).args(["mcp", "http"])))]
struct ServeArgs {
    /// Speak the Model Context Protocol on stdin/stdout (logs go to stderr).
    #[arg(long)]
    mcp: bool,
    /// Serve MCP over Streamable HTTP at http://ADDR/mcp (ADDR: IP:PORT or
    /// localhost:PORT; port 0 picks a free one). The bound address is
    /// printed to stderr.
    #[arg(long, value_name = "ADDR", value_parser = parse_listen_addr)]
    http: Option<std::net::SocketAddr>,
    /// Allow --http on an address that is not loopback.
    #[arg(long, requires = "http")]
    allow_remote: bool,
    /// An Origin admitted besides http(s)://localhost, 127.0.0.1 and [::1]
    /// (scheme://host[:port], or :* for any port). Repeatable.
    #[arg(long, value_name = "ORIGIN", requires = "http")]
    allowed_origin: Vec<String>,
    /// A Host admitted besides the loopback names and the bound address
    /// (name[:port]; for a server reached by name). Repeatable.
    #[arg(long, value_name = "HOST", requires = "http")]
    allowed_host: Vec<String>,
    /// Ask for a bearer token: one token per line, # starts a comment.
    #[arg(long, value_name = "FILE", requires = "http")]
    tokens: Option<PathBuf>,
    /// Seconds a stopping HTTP server waits for calls in flight.
    #[arg(long, value_name = "SECS", default_value_t = 10, requires = "http")]
    shutdown_grace: u64,
    /// Serve only the tools of --tools DIR, without the embedded tools.
    #[arg(long, requires = "tools")]
    tools_only: bool,
    /// How often --tools DIR is polled for changes, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    poll_ms: u64,
    /// The key that seals the approval states of 2026-07-28 clients
    /// (created at random if missing, mode 0600). Default: mcp-approval.key
    /// in the state directory; with a PostgreSQL --state, give one file
    /// that every replica reads (without it, those clients are asked like
    /// any other).
    #[arg(long, value_name = "FILE")]
    approval_key: Option<PathBuf>,
    /// Seconds an approval state of a 2026-07-28 client stays good
    /// (fractions allowed).
    #[arg(long, value_name = "SECS", default_value_t = 600.0, value_parser = parse_seconds)]
    approval_state_ttl: f64,
    #[command(flatten)]
    host: HostArgs,
}

/// Non-negative seconds, fractions allowed.
fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1e9).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds")),
    }
}

#[derive(Args)]
struct LogArgs {
    #[command(flatten)]
    state: StateArgs,
    /// One JSON object per event, per line.
    #[arg(long)]
    json: bool,
}

/// A failure that exits with status 2.
struct UsageError(anyhow::Error);

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TOOLHOST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let code = match rt.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(UsageError(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    };
    // Everything a command does is awaited by then. The runtime's tasks are
    // dropped now (what they hold, such as the state directory's lock, is
    // let go); a tool body or program abandoned in a host system call (a
    // FIFO nobody writes) holds a blocking thread until that call returns,
    // and dropping the runtime would wait for it for ever: give it
    // [`EXIT_GRACE`], then exit without it.
    rt.shutdown_timeout(EXIT_GRACE);
    code
}

/// How long the CLI waits, once its command is done, for threads still
/// running (an abandoned body's) before it exits.
const EXIT_GRACE: Duration = Duration::from_secs(1);

async fn dispatch(cli: Cli) -> Result<ExitCode, UsageError> {
    match cli.command {
        Command::Run(a) => run(a).await,
        Command::List(a) => list(a).await.map_err(UsageError),
        Command::Exec(a) => exec(a).await.map_err(UsageError),
        Command::Log(a) => show_log(a).map_err(UsageError),
        Command::Recover(a) => recover(a).map_err(UsageError),
        Command::Serve(a) => serve(a).await.map_err(UsageError),
        Command::Conformance(a) => conformance(a).await.map_err(UsageError),
        Command::Explain(a) => explain(a).await.map_err(UsageError),
        Command::Approvals(a) => approvals(a).await.map_err(UsageError),
    }
}

fn workspace_of(state: &StateArgs) -> Result<PathBuf> {
    let ws = match &state.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    if !ws.is_dir() {
        bail!(
            "workspace {} does not exist or is not a directory",
            ws.display()
        );
    }
    ws.canonicalize()
        .with_context(|| format!("cannot resolve workspace {}", ws.display()))
}

/// The state directory: `--state`, else `$TOOLHOST_STATE_DIR`, else one per
/// workspace under the user's state directory.
fn state_dir_of(state: &StateArgs) -> Result<PathBuf> {
    if let Some(s) = &state.state {
        return Ok(s.clone());
    }
    if let Some(s) = std::env::var_os("TOOLHOST_STATE_DIR") {
        return Ok(PathBuf::from(s));
    }
    let base = match std::env::var_os("XDG_STATE_HOME") {
        Some(x) => PathBuf::from(x).join("toolhost"),
        None => match std::env::var_os("HOME") {
            Some(h) => PathBuf::from(h).join(".local/state/toolhost"),
            None => bail!("no --state given and neither XDG_STATE_HOME nor HOME is set"),
        },
    };
    let ws = workspace_of(state)?;
    let digest = <sha2::Sha256 as sha2::Digest>::digest(ws.as_os_str().as_encoded_bytes());
    let name = ws
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into());
    Ok(base
        .join("workspaces")
        .join(format!("{name}-{}", hex::encode(&digest[..6]))))
}

fn is_component_path(tool: &str) -> bool {
    tool.ends_with(".wasm") || Path::new(tool).is_file()
}

async fn build_host(h: &HostArgs, component: Option<&str>) -> Result<Host> {
    build_host_with(h, component, true, false, |_| {}).await
}

/// `build_host`, optionally without the embedded tools, with a last say
/// over the builder (the MCP server installs its approver and shares the
/// runtime and log across reloads: `log_given`, and then no PostgreSQL log is
/// opened here, since a second registration under this replica's identity
/// would fence the log in use and recover its calls in flight).
async fn build_host_with(
    h: &HostArgs,
    component: Option<&str>,
    embedded: bool,
    log_given: bool,
    customize: impl FnOnce(&mut HostBuilder),
) -> Result<Host> {
    let mut b = HostBuilder::new();
    let workspace = workspace_of(&h.state)?;
    b.workspace(&workspace);
    match component {
        Some(path) => {
            b.tool_file(path);
        }
        None => {
            if embedded {
                b.embedded_tools();
            }
            if let Some(dir) = &h.tools {
                add_tools_dir(&mut b, dir)?;
            }
        }
    }
    if let Some(policy) = &h.policy {
        refuse_inside_workspace(policy, &workspace)?;
    }
    b.policy(load_policy(h.policy.as_deref())?);
    b.approver(approver_of(h)?);
    b.limits(Limits {
        deadline: Duration::from_millis(h.timeout_ms),
        fuel: h.fuel,
        max_memory: mebibytes(h.memory_mb)?,
        ..Limits::default()
    });
    let mut options = RuntimeOptions {
        fuel: h.fuel.is_some(),
        max_concurrent_calls: 16,
        ..RuntimeOptions::default()
    };
    if let Some(c) = &h.cache {
        options.cache_dir = Some(c.clone());
    }
    b.runtime_options(options);
    if let Some(url) = postgres_url(&h.state) {
        if log_given {
            customize(&mut b);
            return b.build().await.map_err(|e| anyhow!("{e}"));
        }
        let log = open_postgres(&url, true)?;
        // Recovery on open, as for a state directory: this identity's unfinished calls
        // and those of replicas whose lease expired end as TOOL_OUTCOME_UNKNOWN.
        let recovered = log.recover().map_err(|e| anyhow!("{e}"))?;
        if !recovered.recovered.is_empty() {
            tracing::warn!(calls = ?recovered.recovered, "recovered calls with an unknown outcome");
        }
        b.session_log(std::sync::Arc::new(log));
    } else {
        let state = state_dir_of(&h.state)?;
        b.state_dir(state);
    }
    customize(&mut b);
    b.build().await.map_err(|e| anyhow!("{e}"))
}

/// Refuses a policy file that a call could rewrite: one inside the
/// workspace ([`toolhost::inside_workspace`]: through a link there, which
/// can be re-pointed, or by the file it resolves to), and one with more
/// than one hard link (the other name may be inside the workspace). The policy is the calls'
/// grant: a tool that rewrote it would choose the grants of every later
/// call, at the next run, restart or reload.
fn refuse_inside_workspace(policy: &Path, workspace: &Path) -> Result<()> {
    if toolhost::inside_workspace(policy, workspace).is_some() {
        bail!(
            "policy {} is inside the workspace {}, where tools could rewrite the grants of later calls; keep the policy file outside the workspace",
            policy.display(),
            workspace.display()
        );
    }
    // A second name of the same file may be inside the workspace, and
    // nothing short of searching the workspace would tell.
    #[cfg(unix)]
    if let Ok(meta) = std::fs::metadata(policy) {
        use std::os::unix::fs::MetadataExt;
        if meta.nlink() > 1 {
            bail!(
                "policy {} has {} hard links; one could be inside the workspace {}, where tools could rewrite the grants of later calls; keep the policy file a file of its own",
                policy.display(),
                meta.nlink(),
                workspace.display()
            );
        }
    }
    Ok(())
}

/// `--memory-mb` in bytes: a value whose bytes a `usize` cannot hold is
/// refused, never wrapped to a smaller limit.
fn mebibytes(mb: usize) -> Result<usize> {
    mb.checked_mul(1 << 20)
        .ok_or_else(|| anyhow!("--memory-mb {mb} is more than this machine can address"))
}

/// The policy file, or the built-in default without one.
fn load_policy(path: Option<&Path>) -> Result<toolhost::policy::Policy> {
    let Some(p) = path else {
        return Ok(toolhost::policy::Policy::default());
    };
    let src = std::fs::read_to_string(p)
        .with_context(|| format!("cannot read policy {}", p.display()))?;
    toolhost::policy::Policy::from_toml(&src, &p.display().to_string()).map_err(|e| anyhow!("{e}"))
}

/// `--approver`: the kinds of `approver_from_spec`, and `queue` (requests
/// wait in the state directory, or in the PostgreSQL log's database, for
/// `toolhost approvals decide`).
fn approver_of(h: &HostArgs) -> Result<Box<dyn toolhost::Approver>> {
    let timeout = Duration::from_secs(h.approval_timeout);
    if h.approver == "queue" {
        return Ok(Box::new(toolhost::QueueApprover::on(
            approval_queue_of(&h.state)?,
            timeout,
        )));
    }
    toolhost::approver_from_spec(&h.approver, timeout).map_err(|e| anyhow!("{e}; or queue"))
}

/// Where `--approver queue` requests wait: the state directory, or, for a
/// PostgreSQL log, its database (shared by the log's replicas).
fn approval_queue_of(state: &StateArgs) -> Result<toolhost::ApprovalQueue> {
    if let Some(url) = postgres_url(state) {
        let approvals =
            toolhost::log::PgApprovals::new(&url, &pg_options()?).map_err(|e| anyhow!("{e}"))?;
        return Ok(toolhost::ApprovalQueue::Postgres(std::sync::Arc::new(
            approvals,
        )));
    }
    Ok(toolhost::ApprovalQueue::Dir(state_dir_of(state)?))
}

/// Requests a process that died left pending are decided `unavailable`;
/// called only once this process holds the state directory's log (for a
/// PostgreSQL log: once it registered as a replica).
async fn recover_approvals(h: &HostArgs) {
    let Ok(queue) = approval_queue_of(&h.state) else {
        return;
    };
    match queue.recover().await {
        Ok(ids) if !ids.is_empty() => {
            tracing::warn!(
                ?ids,
                "approvals left pending by a stopped process are now unavailable"
            )
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot recover pending approvals: {e}"),
    }
}

/// Adds the tools of a tools directory: each program-backed tool's
/// manifest (`NAME.tool.toml`), and each component (`*.wasm`) that no
/// manifest claims as its program (`NAME.wasm` beside `NAME.tool.toml`,
/// or the file its `wasm` names).
fn add_tools_dir(b: &mut HostBuilder, dir: &Path) -> Result<()> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read tools directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    let manifests: Vec<&PathBuf> = files
        .iter()
        .filter(|p| toolhost::manifest_name(p).is_some())
        .collect();
    let mut claimed = std::collections::BTreeSet::new();
    for m in &manifests {
        if let Some(name) = toolhost::manifest_name(m) {
            claimed.insert(dir.join(format!("{name}.wasm")));
        }
        // A manifest that does not parse fails the build when it is
        // loaded; here it only claims its conventional program.
        if let Ok(parsed) = toolhost::Manifest::load(m) {
            claimed.insert(parsed.wasm);
        }
        b.program_tool_file(m.as_path());
    }
    for f in &files {
        if f.extension().is_some_and(|x| x == "wasm") && !claimed.contains(f) {
            b.tool_file(f);
        }
    }
    Ok(())
}

async fn run(a: RunArgs) -> Result<ExitCode, UsageError> {
    let component = a.tool.as_deref().filter(|t| is_component_path(t));
    let host = build_host(&a.host, component).await.map_err(UsageError)?;
    recover_approvals(&a.host).await;
    let interrupt = Interrupt::default();
    let on_ctrl_c = interrupt.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("toolhost: cancelling (waiting for the tool to stop)...");
            on_ctrl_c.cancel();
        }
    });
    if let Some(batch) = &a.batch {
        return run_batch(&host, &a, batch, interrupt).await;
    }
    let tool_arg = a.tool.clone().unwrap_or_default();
    let name = match (component, &a.tool_name) {
        // `--tool` picks a tool inside a component file; beside a tool
        // name it could only contradict it.
        (None, Some(n)) if a.tool.as_ref().is_some_and(|t| t != n) => {
            return Err(UsageError(anyhow!(
                "{tool_arg} is a tool name, and --tool {n} names another; --tool picks a tool inside a .wasm component given as the first argument"
            )));
        }
        (_, Some(n)) => n.clone(),
        (Some(_), None) => {
            let tools = host.tools(a.host.scope.as_deref());
            match tools.as_slice() {
                [one] => one.descriptor.name.clone(),
                many => {
                    let names: Vec<_> = many.iter().map(|t| t.descriptor.name.as_str()).collect();
                    return Err(UsageError(anyhow!(
                        "{tool_arg} offers several tools ({}); pick one with --tool NAME",
                        names.join(", ")
                    )));
                }
            }
        }
        (None, None) => tool_arg,
    };
    let mut request = CallRequest {
        tool: name,
        args: a.args.clone(),
        scope: a.host.scope.clone(),
        mode: a.host.mode,
        principal: a.host.principal.clone(),
        interrupt: Some(interrupt),
        ..CallRequest::default()
    };
    if let Some(mode) = a.escalate {
        request = request.escalate(mode, a.justification.clone().unwrap_or_default());
    }
    let result = host.call(request).await;
    let flushed = flush_before_printing(&host);
    print_result(&result, a.json);
    Ok(ExitCode::from(run_status(flushed, result.is_ok())))
}

/// Flushes the session log before a result is printed; false (and says so
/// on stderr) when that failed: the call's result is then not recorded, and
/// the log will report the call `TOOL_OUTCOME_UNKNOWN`.
fn flush_before_printing(host: &Host) -> bool {
    match host.log().flush() {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "error: the session log could not be flushed ({e}): the result below is not recorded, and the log will report the call TOOL_OUTCOME_UNKNOWN"
            );
            false
        }
    }
}

/// `run`'s exit status: 0 every call ok, 1 an error result, 3 a result
/// that could not be recorded (whatever it says).
fn run_status(flushed: bool, all_ok: bool) -> u8 {
    match (flushed, all_ok) {
        (false, _) => 3,
        (true, true) => 0,
        (true, false) => 1,
    }
}

async fn run_batch(
    host: &Host,
    a: &RunArgs,
    file: &Path,
    interrupt: Interrupt,
) -> Result<ExitCode, UsageError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Item {
        tool: String,
        #[serde(default)]
        args: serde_json::Value,
    }
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read batch file {}", file.display()))
        .map_err(UsageError)?;
    let items: Vec<Item> = serde_json::from_str(&text)
        .with_context(|| {
            format!(
                "{} is not a JSON array of {{\"tool\", \"args\"}} objects",
                file.display()
            )
        })
        .map_err(UsageError)?;
    let requests = items
        .into_iter()
        .map(|i| CallRequest {
            tool: i.tool,
            args: if i.args.is_null() {
                "{}".into()
            } else {
                i.args.to_string()
            },
            scope: a.host.scope.clone(),
            mode: a.host.mode,
            principal: a.host.principal.clone(),
            interrupt: Some(interrupt.clone()),
            ..CallRequest::default()
        })
        .collect();
    let results = host.call_batch(requests).await;
    let flushed = flush_before_printing(host);
    if a.json {
        outln!("{}", serde_json::to_string(&results).unwrap_or_default());
    } else {
        for r in &results {
            print_result(r, false);
        }
    }
    Ok(ExitCode::from(run_status(
        flushed,
        results.iter().all(CallResult::is_ok),
    )))
}

fn print_result(result: &CallResult, json: bool) {
    if json {
        outln!("{}", serde_json::to_string(result).unwrap_or_default());
        return;
    }
    match &result.error {
        None => {
            for c in &result.content {
                let text = match c {
                    ContentItem::Text { text } => text.clone(),
                    // Media and resources are for clients (`--json`, MCP);
                    // a terminal gets what they are.
                    ContentItem::Image { mime_type, data }
                    | ContentItem::Audio { mime_type, data } => {
                        format!("[{mime_type}, {} bytes in base64; see --json]", data.len())
                    }
                    ContentItem::ResourceLink { uri, .. } => format!("[link: {uri}]"),
                    ContentItem::Resource { resource } => match &resource.text {
                        Some(t) => t.clone(),
                        None => format!("[resource {}; see --json]", resource.uri),
                    },
                };
                out!("{text}");
                if !text.ends_with('\n') {
                    outln!();
                }
            }
        }
        Some(e) => eprintln!(
            "error: {}: {} [{} {}]",
            e.code, e.message, result.tool, result.call_id
        ),
    }
}

async fn list(a: ListArgs) -> Result<ExitCode> {
    let mut b = HostBuilder::new();
    if a.paths.is_empty() {
        b.embedded_tools();
    }
    for p in &a.paths {
        if p.is_dir() {
            add_tools_dir(&mut b, p)?;
        } else if p
            .to_str()
            .is_some_and(|s| s.ends_with(toolhost::MANIFEST_SUFFIX))
        {
            b.program_tool_file(p);
        } else {
            b.tool_file(p);
        }
    }
    // Listing runs no call: unless one is given, an empty directory of its
    // own is the workspace (TMPDIR itself could hold the compile cache,
    // which may not be inside the workspace).
    let temporary;
    let workspace: &Path = match &a.workspace {
        Some(dir) => dir,
        None => {
            temporary = tempfile::tempdir().with_context(|| {
                format!(
                    "cannot make a temporary workspace in {} (TMPDIR); set TMPDIR to a \
                     writable directory, or pass --workspace DIR",
                    std::env::temp_dir().display()
                )
            })?;
            temporary.path()
        }
    };
    b.workspace(workspace);
    b.policy(load_policy(a.policy.as_deref())?);
    let host = b.build().await.map_err(|e| anyhow!("{e}"))?;
    let tools = host.tools_for(None, a.principal.as_deref(), None);
    if let Some(provider) = a.schema_for {
        let all: Vec<_> = tools
            .iter()
            .map(|t| toolhost::provider_tool(provider, &t.descriptor))
            .collect();
        outln!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(ExitCode::SUCCESS);
    }
    if a.json {
        let all: Vec<_> = tools
            .iter()
            .map(|t| {
                let mut v = serde_json::to_value(t.descriptor.for_clients()).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("source".into(), t.source().into());
                    o.insert("imports".into(), t.imports().into());
                }
                v
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        for t in tools {
            let d = &t.descriptor;
            // The description is the tool's own text: its control
            // characters are shown escaped, so it cannot drive the terminal
            // or add rows of its own.
            let description = toolhost::printable(&d.description);
            outln!("{:<12} {:<16} {}", d.name, d.min_mode, description);
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn exec(a: ExecArgs) -> Result<ExitCode> {
    let bytes = toolhost::read_wasm_file(&a.program)
        .map_err(|e| anyhow!("cannot read {}: {e}", a.program.display()))?;
    let workspace = match &a.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir()?,
    };
    if a.mode != SandboxMode::None && !workspace.is_dir() {
        bail!(
            "workspace {} does not exist or is not a directory",
            workspace.display()
        );
    }
    let mut args = vec![
        a.program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    ];
    args.extend(a.args.iter().cloned());
    let network = exec_network(&a)?;
    let mut env: Vec<(String, String)> = Vec::new();
    for (key, value) in a.env {
        match env.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => env.push((key, value)),
        }
    }
    let command = toolhost::exec::CommandSpec {
        args,
        env,
        stdin: match &a.stdin {
            Some(path) => read_stdin(path)?,
            None => Vec::new(),
        },
        mount: a.mount.clone(),
        ..Default::default()
    };
    command.check(a.mode)?;
    let runtime = toolhost::Runtime::new(RuntimeOptions {
        fuel: a.fuel.is_some(),
        max_concurrent_calls: 4,
        ..RuntimeOptions::default()
    })
    .map_err(|e| anyhow!("{e}"))?;
    let spec = toolhost::exec::SandboxSpec {
        mode: a.mode,
        workspace,
        limits: Limits {
            deadline: Duration::from_millis(a.timeout_ms),
            fuel: a.fuel,
            max_memory: mebibytes(a.memory_mb)?,
            max_stdio: a.max_output,
            ..Limits::default()
        },
        network,
    };
    let receipt = match &a.receipt {
        Some(path) => Some(ReceiptFile::prepare(path, a.mode, &spec.workspace)?),
        None => None,
    };
    let interrupt = Interrupt::default();
    let on_ctrl_c = interrupt.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_ctrl_c.cancel();
        }
    });
    let report = toolhost::exec::run_command(
        &runtime,
        &a.program.display().to_string(),
        &bytes,
        &spec,
        &command,
        interrupt,
    )
    .await
    .map_err(|e| {
        // Nothing ran: what is at the receipt's path is not this run's.
        if let Some(r) = &receipt {
            r.discard_stale();
        }
        anyhow!("{e}")
    })?;
    // What the sandbox refused, so that a program's "permission denied" or
    // "connection refused" can be traced to a missing grant.
    for denied in &report.receipt.denied {
        eprintln!("toolhost: denied: {denied}");
    }
    // And what the grants let through (a refusal is a `denied` line above).
    for record in &report.receipt.network {
        if matches!(
            record.outcome,
            toolhost::policy::egress::EgressOutcome::Refused { .. }
        ) {
            continue;
        }
        if let Ok(json) = serde_json::to_value(record) {
            eprintln!("toolhost: network: {}", network_line(&json));
        }
    }
    // Refusals past what a run records (256 records; binds past the 64 a
    // run may make without a grant) are counted, not recorded.
    if report.receipt.network_dropped > 0 {
        eprintln!(
            "toolhost: receipt: {} more refused attempts counted, not recorded",
            report.receipt.network_dropped
        );
    }
    let (status, exit, error) = match &report.outcome {
        toolhost::exec::ExecOutcome::Exited(status) => (*status, Some(*status), None),
        toolhost::exec::ExecOutcome::Failed { code, message } => {
            eprintln!("error: {code}: {message}");
            (
                125,
                None,
                Some(serde_json::json!({ "code": code, "message": message })),
            )
        }
    };
    if let Some(receipt) = receipt {
        let json = serde_json::json!({
            "program": a.program.display().to_string(),
            "exit": exit,
            "error": error,
            "receipt": report.receipt,
        });
        let path = receipt.path.clone();
        if let Err(e) = receipt.write(&json) {
            // What is at the path is not this run's receipt.
            let _ = std::fs::remove_file(&path);
            let lost = match exit {
                Some(status) => format!(" (toolhost exits 125 instead of the program's {status})"),
                None => String::new(),
            };
            eprintln!(
                "error: cannot write --receipt {}: {e}{lost}",
                path.display()
            );
            return Ok(ExitCode::from(125));
        }
    }
    Ok(ExitCode::from(status))
}

/// Where `exec --receipt` goes: a new file made beside the path before the
/// program runs, written once the run ends and then renamed over the path
/// (whatever is there then, a link included, is replaced, not written
/// through). Dropped unwritten, it is removed. Readable by its owner only.
struct ReceiptFile {
    path: PathBuf,
    tmp: tempfile::NamedTempFile,
}

impl ReceiptFile {
    /// Refuses, before the program runs: a program that may write where the
    /// receipt goes (inside the workspace in a mode that writes there, or
    /// anywhere in `danger-full-access`), a path that names no file or a
    /// directory, and a directory where the new file cannot be made.
    fn prepare(path: &Path, mode: SandboxMode, workspace: &Path) -> Result<ReceiptFile> {
        if mode == SandboxMode::DangerFullAccess {
            bail!(
                "--receipt cannot be kept from a program in mode danger-full-access, which may write anywhere; use another mode"
            );
        }
        if toolhost::writable_preopens(mode) {
            let workspace = workspace
                .canonicalize()
                .with_context(|| format!("cannot resolve the workspace {}", workspace.display()))?;
            if toolhost::inside_workspace(path, &workspace).is_some() {
                bail!(
                    "--receipt {} is inside the workspace {}, which the program may write in mode {mode}; keep the receipt outside it",
                    path.display(),
                    workspace.display()
                );
            }
        }
        let name = match path.file_name() {
            Some(n) if !path.is_dir() => n,
            _ => bail!("--receipt {} does not name a file", path.display()),
        };
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        // A name of its own, made with `create_new` (never someone else's
        // file), removed unless renamed.
        let mut prefix = std::ffi::OsString::from(".");
        prefix.push(name);
        prefix.push(".");
        let tmp = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(".tmp")
            .tempfile_in(dir)
            .with_context(|| {
                format!(
                    "cannot write --receipt {} in {}",
                    path.display(),
                    dir.display()
                )
            })?;
        Ok(ReceiptFile {
            path: path.to_path_buf(),
            tmp,
        })
    }

    /// Removes what is at the path: it is not this run's receipt.
    fn discard_stale(&self) {
        let _ = std::fs::remove_file(&self.path);
    }

    /// Writes `json` and renames it over the path.
    fn write(self, json: &serde_json::Value) -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(self.tmp.as_file());
        serde_json::to_writer_pretty(&mut out, json)?;
        std::io::Write::flush(&mut out)?;
        drop(out);
        self.tmp.persist(&self.path).map(drop).map_err(|e| e.error)
    }
}

/// The network grant of `exec --allow-net`, with its `--ca-file` and its
/// `--net-*` limits.
fn exec_network(a: &ExecArgs) -> Result<toolhost::NetworkGrant> {
    use toolhost::policy::egress::{Grant, Limits as NetLimits, NetworkPolicy};
    let grants = a
        .allow_net
        .iter()
        .map(|p| Grant::parse(p).map_err(|e| anyhow!("--allow-net: {p:?}: {e}")))
        .collect::<Result<Vec<_>>>()?;
    let defaults = NetLimits::default();
    let limits = NetLimits {
        max_requests: a.net_max_requests.unwrap_or(defaults.max_requests),
        max_response_bytes: a
            .net_max_response_bytes
            .unwrap_or(defaults.max_response_bytes),
        request_timeout_ms: a
            .net_request_timeout_ms
            .unwrap_or(defaults.request_timeout_ms),
    };
    let policy = NetworkPolicy::from_grants(grants)
        .with_ca_file(a.ca_file.clone())
        .with_limits(limits);
    // Named as the flag that caused it: a grant's (a socket grant naming a
    // host), the CA file's, or the system's TLS roots (SSL_CERT_FILE).
    toolhost::NetworkGrant::from_policy(&policy, None).map_err(|e| {
        if let Some(rest) = e.strip_prefix("network.ca_file ") {
            anyhow!("--ca-file {rest}")
        } else if let Some(rest) = e.strip_prefix("network grant ") {
            anyhow!("--allow-net: {rest}")
        } else {
            anyhow!("{e}")
        }
    })
}

/// The program's stdin for `exec --stdin`: the file's bytes, or toolhost's
/// own stdin for `-`, at most [`EXEC_STDIN_CAP`] bytes.
fn read_stdin(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let read = if path == Path::new("-") {
        std::io::stdin()
            .lock()
            .take(EXEC_STDIN_CAP + 1)
            .read_to_end(&mut bytes)
            .context("cannot read toolhost's standard input")
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(EXEC_STDIN_CAP + 1).read_to_end(&mut bytes))
            .with_context(|| format!("cannot read --stdin {}", path.display()))
    };
    read?;
    if bytes.len() as u64 > EXEC_STDIN_CAP {
        bail!(
            "--stdin {} is larger than {} MiB, the most toolhost exec reads as a program's input",
            path.display(),
            EXEC_STDIN_CAP >> 20
        );
    }
    Ok(bytes)
}

/// `toolhost serve --mcp` / `--http ADDR`: see `toolhost::mcp`. With `--tools DIR` the
/// directory is loaded with the embedded tools (as for `run`), or alone with
/// `--tools-only`, and reloaded when it changes.
async fn serve(a: ServeArgs) -> Result<ExitCode> {
    let timeout = Duration::from_secs(a.host.approval_timeout);
    let fallback = approver_of(&a.host)?;
    let options = toolhost::mcp::ServeOptions {
        scope: a.host.scope.clone(),
        mode: a.host.mode,
        watch: a.host.tools.clone(),
        poll_interval: Duration::from_millis(a.poll_ms.max(20)),
        fallback_approver: std::sync::Arc::from(fallback),
        // An approver outside the client decides every ask itself: with
        // one configured, a client must not approve the calls it makes.
        ask_clients: a.host.approver == "none",
        approval_timeout: timeout,
        // Over HTTP a caller is nobody in particular unless a token names it.
        principal: a.host.principal.clone().or_else(|| {
            a.http
                .map(|_| toolhost::policy::ANONYMOUS_PRINCIPAL.to_string())
        }),
        approval_states: approval_states(&a)?,
    };
    let http = match a.http {
        None => None,
        Some(addr) => {
            let mut http = toolhost::mcp::HttpOptions::new(addr);
            http.allow_remote = a.allow_remote;
            http.allowed_origins = a.allowed_origin.clone();
            http.allowed_hosts = a.allowed_host.clone();
            http.shutdown_grace = Duration::from_secs(a.shutdown_grace);
            if a.host.approver == "queue" {
                http.approvals = Some(approval_queue_of(&a.host.state)?);
            }
            if let Some(file) = &a.tokens {
                http.tokens = Some(toolhost::mcp::Tokens::from_file(file).map_err(|e| anyhow!(e))?);
            }
            // Refused before anything is loaded or bound.
            http.check().map_err(|e| anyhow!(e))?;
            Some(http)
        }
    };
    let embedded = !a.tools_only;
    let host_args = std::sync::Arc::new(a.host);
    let first = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let factory: toolhost::mcp::HostFactory = std::sync::Arc::new(move |parts| {
        let h = host_args.clone();
        let first = first.clone();
        Box::pin(async move {
            let log_given = parts.log.is_some();
            let host = build_host_with(&h, None, embedded, log_given, |b| parts.apply(b))
                .await
                .map_err(|e| format!("{e:#}"))?;
            // Once, after the first build took the log: later builds are
            // reloads, whose own requests may be pending.
            if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                recover_approvals(&h).await;
            }
            Ok(host)
        })
    });
    match http {
        None => toolhost::mcp::serve_stdio(factory, options).await,
        Some(http) => {
            toolhost::mcp::serve_http(factory, options, http, |addr| {
                eprintln!(
                    "toolhost: serving MCP over Streamable HTTP at http://{addr}{}",
                    toolhost::mcp::MCP_PATH
                );
            })
            .await
        }
    }
    .map_err(|e| anyhow!(e))?;
    Ok(ExitCode::SUCCESS)
}

/// The sealer of MRTR approval states: its key in --approval-key FILE, else
/// in the state directory; none for a PostgreSQL state without a key file.
fn approval_states(a: &ServeArgs) -> Result<Option<std::sync::Arc<toolhost::mcp::ApprovalStates>>> {
    let file = match (&a.approval_key, postgres_url(&a.host.state)) {
        (Some(f), _) => toolhost::mcp::KeyFile(f.clone()),
        (None, Some(_)) => {
            tracing::warn!(
                "no --approval-key for a PostgreSQL state: 2026-07-28 clients are asked like any other"
            );
            return Ok(None);
        }
        (None, None) => toolhost::mcp::KeyFile::in_state_dir(&state_dir_of(&a.host.state)?),
    };
    let ttl = Duration::from_secs_f64(a.approval_state_ttl);
    let mut states = toolhost::mcp::ApprovalStates::new(&file, ttl)
        .map_err(|e| anyhow!("the approval-state key: {e}"))?;
    // Replicas of one log accept each other's states: each state's use is
    // claimed in the database too, so that only one replica can run it.
    if let Some(url) = postgres_url(&a.host.state) {
        let claims =
            toolhost::log::PgApprovals::new(&url, &pg_options()?).map_err(|e| anyhow!("{e}"))?;
        states = states.with_shared_claims(std::sync::Arc::new(claims));
    }
    Ok(Some(std::sync::Arc::new(states)))
}

/// `IP:PORT`, or `localhost:PORT` (the IPv4 loopback).
fn parse_listen_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    let s = s.trim();
    let resolved = match s.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => s.to_string(),
    };
    resolved
        .parse()
        .map_err(|_| format!("{s:?} is not IP:PORT (for example 127.0.0.1:8080 or [::1]:0)"))
}

/// `toolhost explain`: the call's way through the pipeline up to the
/// approver, without running it. Uses an in-memory log, so it works beside
/// a server that holds the state directory.
async fn explain(a: ExplainArgs) -> Result<ExitCode> {
    let log = toolhost::log::SessionLog::in_memory().map_err(|e| anyhow!("{e}"))?;
    let host = build_host_with(&a.host, None, true, true, |b| {
        b.session_log(std::sync::Arc::new(log));
    })
    .await?;
    let mut request = CallRequest {
        tool: a.tool.clone(),
        args: a.args.clone(),
        scope: a.host.scope.clone(),
        mode: a.host.mode,
        principal: a.host.principal.clone(),
        ..CallRequest::default()
    };
    if let Some(mode) = a.escalate {
        request = request.escalate(mode, a.justification.clone().unwrap_or_default());
    }
    let e = host.explain(&request);
    if a.json {
        outln!("{}", serde_json::to_string(&e)?);
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{} as {} (scope {}, mode {})",
        e.tool,
        e.principal,
        e.scope.as_deref().unwrap_or("global"),
        e.mode
    );
    for p in &e.patches {
        outln!("  patch     {p}");
    }
    for l in &e.layers {
        let get = |k: &str| l.get(k).and_then(|v| v.as_str()).unwrap_or("");
        let seen = match l.get("hidden_by").and_then(|v| v.as_str()) {
            None => "visible".to_string(),
            Some(rule) => format!("HIDDEN by {rule}"),
        };
        let decision = match get("decision") {
            "" => "no opinion".to_string(),
            d => format!("{d} ({})", get("rule")),
        };
        outln!("  {:<28} {seen}; {decision}", get("layer"));
        if let Some(reason) = l.get("reason").and_then(|v| v.as_str()) {
            outln!("  {:<28}   reason: {reason}", "");
        }
        if let Some(g) = l.get("guard").filter(|g| !g.is_null()) {
            outln!("  {:<28}   guard denies: {g}", "");
        }
    }
    match &e.guard {
        Some(g) => outln!("  {:<28} {g}", "guards"),
        None if !e.layers.is_empty() => outln!("  {:<28} pass", "guards"),
        None => {}
    }
    match &e.answer {
        toolhost::Answer::Allow => outln!("answer: allow (nobody is asked)"),
        toolhost::Answer::Ask { reason, approver } => {
            outln!("answer: ask approver {approver}: {reason}")
        }
        toolhost::Answer::Refused { code, message } => {
            outln!("answer: refused {code}: {message}")
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn approvals(a: ApprovalsCommand) -> Result<ExitCode> {
    match a {
        ApprovalsCommand::List { state, json } => {
            let queue = approval_queue_of(&state)?;
            let pending = queue.pending().await.map_err(|e| anyhow!("{e}"))?;
            if json {
                outln!("{}", serde_json::to_string(&pending)?);
            } else if pending.is_empty() {
                outln!("no approvals pending");
            } else {
                for r in pending {
                    outln!(
                        "{}  {} {} (mode {}): {}",
                        r.approval_id,
                        r.tool,
                        r.args,
                        r.mode,
                        r.reason
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ApprovalsCommand::Decide {
            id,
            decision,
            by,
            state,
        } => {
            toolhost::policy::check_principal_name(&by).map_err(|e| anyhow!("--by: {e}"))?;
            let queue = approval_queue_of(&state)?;
            match queue.decide(&id, decision, &by).await {
                Ok(()) => {
                    outln!("{id}: {}", decision.as_str());
                    Ok(ExitCode::SUCCESS)
                }
                Err(e @ toolhost::DecideError::Io { .. }) => Err(anyhow!("{e}")),
                Err(e) => {
                    eprintln!("error: {e}");
                    Ok(ExitCode::from(1))
                }
            }
        }
    }
}

/// The `--state` (or `$TOOLHOST_STATE_DIR`) when it names a PostgreSQL database.
fn postgres_url(state: &StateArgs) -> Option<String> {
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
fn pg_options() -> Result<toolhost::log::PgOptions> {
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
fn open_postgres(url: &str, writer: bool) -> Result<toolhost::log::SessionLog> {
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

fn open_log(state: &StateArgs) -> Result<toolhost::log::SessionLog> {
    if let Some(url) = postgres_url(state) {
        return open_postgres(&url, true);
    }
    let dir = state_dir_of(state)?;
    toolhost::log::SessionLog::open(&dir).map_err(|e| anyhow!("{e}"))
}

/// The log for `toolhost log`: read-only, so that it reads beside a running
/// `serve` or `run` and never waits for them. Only a log whose last writer was
/// killed, with no writer alive to repair it, is opened for writing once, as
/// before: that repairs the files and resolves no call.
fn read_log(state: &StateArgs) -> Result<toolhost::log::SessionLog> {
    use toolhost::log::{LogError, SessionLog};
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

fn show_log(a: LogArgs) -> Result<ExitCode> {
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
/// `not-sent` (`connect` for a socket's method).
fn network_line(r: &serde_json::Value) -> String {
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

fn recover(a: StateArgs) -> Result<ExitCode> {
    let log = match postgres_url(&a) {
        // Never as a live replica's identity: that would fence it.
        Some(url) => {
            let mut options = pg_options()?;
            options.refuse_live_identity = true;
            toolhost::log::PgEngine::open(&url, &options)
                .map(toolhost::log::SessionLog::from_engine)
                .map_err(|e| anyhow!("{e}"))?
        }
        None => open_log(&a)?,
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

async fn conformance(a: ConformanceArgs) -> Result<ExitCode> {
    let bytes = toolhost::read_wasm_file(&a.tool)
        .map_err(|e| anyhow!("cannot read {}: {e}", a.tool.display()))?;
    let runtime = toolhost::conformance::runtime_for_checks().map_err(|e| anyhow!("{e}"))?;
    let report =
        toolhost::conformance::check_component(runtime, &a.tool.display().to_string(), &bytes)
            .await;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        outln!("conformance of {}", report.component);
        for c in &report.checks {
            let v = match c.verdict {
                toolhost::conformance::Verdict::Pass => "pass",
                toolhost::conformance::Verdict::Fail => "FAIL",
                toolhost::conformance::Verdict::Warn => "warn",
            };
            outln!("  {v:<4}  {:<28} {}", c.check, c.detail);
        }
        let failed = report
            .checks
            .iter()
            .filter(|c| c.verdict == toolhost::conformance::Verdict::Fail)
            .count();
        outln!("{} checks, {failed} failed", report.checks.len());
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::run_status;

    /// A result the log could not record never exits 0, whatever it says.
    #[test]
    fn an_unrecorded_result_exits_3() {
        assert_eq!(run_status(true, true), 0);
        assert_eq!(run_status(true, false), 1);
        assert_eq!(run_status(false, true), 3);
        assert_eq!(run_status(false, false), 3);
    }
}
