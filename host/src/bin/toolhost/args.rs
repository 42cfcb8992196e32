//! The command line's flags: one clap type per subcommand, the flags the
//! hosting subcommands share ([`HostArgs`], [`StateArgs`]), and the parsers
//! of flag values. Nothing here reaches the filesystem or the library's
//! pipeline.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use toolhost::SandboxMode;

#[derive(Parser)]
#[command(
    name = "toolhost",
    version,
    about = "Run AI-agent tools as sandboxed WebAssembly components behind a governed pipeline"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
    /// Compile the tools of directories into the compile cache, ahead of serving.
    Precompile(PrecompileArgs),
    /// Explain, layer by layer, what a call would meet; runs nothing.
    Explain(ExplainArgs),
    /// List and decide the approvals a `--approver queue` host waits for.
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// Create a tool project: one tool, its unit test, the WIT, a README.
    New(NewArgs),
    /// Write the WIT contract of toolhost tools into a directory.
    Wit(WitArgs),
}

#[derive(Subcommand)]
pub(crate) enum ApprovalsCommand {
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
pub(crate) struct StateArgs {
    /// State directory (the session log). Default: $TOOLHOST_STATE_DIR, else a
    /// per-workspace directory under $XDG_STATE_HOME/toolhost (or
    /// ~/.local/state/toolhost), outside the workspace so tools cannot edit it.
    /// A `postgres://` URL instead keeps the log in PostgreSQL, shared by replicas
    /// ($TOOLHOST_PG_LOG names the log, default `default`; $TOOLHOST_REPLICA_ID this
    /// process's identity; $TOOLHOST_PG_LEASE_MS its lease, default 10000); the
    /// requests of `--approver queue` then wait in the database, for any replica.
    #[arg(long, value_name = "DIR|URL")]
    pub(crate) state: Option<PathBuf>,
    /// The workspace the tools see (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub(crate) workspace: Option<PathBuf>,
}

#[derive(Args)]
pub(crate) struct HostArgs {
    #[command(flatten)]
    pub(crate) state: StateArgs,
    /// Directory of tools, loaded with the embedded tools: components
    /// (`*.wasm`) and program-backed tools (`NAME.tool.toml` manifests).
    #[arg(long, value_name = "DIR")]
    pub(crate) tools: Option<PathBuf>,
    /// Sandbox mode: none, read-only, workspace-write, danger-full-access
    /// (default: the policy's mode).
    #[arg(long, value_name = "MODE")]
    pub(crate) mode: Option<SandboxMode>,
    /// Policy file (TOML).
    #[arg(long, value_name = "FILE")]
    pub(crate) policy: Option<PathBuf>,
    /// Approver: none, tty, auto-approve, auto-reject, command:PROGRAM, or
    /// queue (requests wait for `toolhost approvals decide`).
    #[arg(long, value_name = "KIND", default_value = "none")]
    pub(crate) approver: String,
    /// Seconds to wait for an approval.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub(crate) approval_timeout: u64,
    /// Wall-clock deadline of a call, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub(crate) timeout_ms: u64,
    /// Fuel budget (enables fuel metering).
    #[arg(long, value_name = "UNITS")]
    pub(crate) fuel: Option<u64>,
    /// Most linear memory a call may hold (all its memories together), in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    pub(crate) memory_mb: usize,
    /// Scope (agent) the call comes from.
    #[arg(long, value_name = "NAME")]
    pub(crate) scope: Option<String>,
    /// Who asks, as the policy's principals and layers see it (default:
    /// `local`, an owner; `serve --http` without tokens: `anonymous`).
    #[arg(long, value_name = "NAME", value_parser = parse_principal)]
    pub(crate) principal: Option<String>,
    /// Compile cache directory (default: $TOOLHOST_CACHE_DIR or ~/.cache/toolhost).
    #[arg(long, value_name = "DIR")]
    pub(crate) cache: Option<PathBuf>,
}

#[derive(Args)]
pub(crate) struct RunArgs {
    /// A `.wasm` component path, or a tool name (embedded or in --tools).
    #[arg(required_unless_present = "batch")]
    pub(crate) tool: Option<String>,
    /// The tool to call inside a multi-tool component (`--tool-name` also works).
    #[arg(
        long = "tool",
        id = "tool_name",
        value_name = "NAME",
        alias = "tool-name"
    )]
    pub(crate) tool_name: Option<String>,
    /// The arguments, as a JSON object.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    pub(crate) args: String,
    /// A JSON array of {"tool","args"} calls to run as one step.
    #[arg(long, value_name = "FILE", conflicts_with = "tool")]
    pub(crate) batch: Option<PathBuf>,
    /// Ask to run this call in a wider mode (needs approval).
    #[arg(long, value_name = "MODE", requires = "justification")]
    pub(crate) escalate: Option<SandboxMode>,
    /// Why the escalation is needed.
    #[arg(long, value_name = "TEXT")]
    pub(crate) justification: Option<String>,
    /// Print exactly one JSON object (an array for --batch).
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) host: HostArgs,
}

#[derive(Args)]
pub(crate) struct ExplainArgs {
    /// A tool name (embedded or in --tools).
    pub(crate) tool: String,
    /// The arguments, as a JSON object.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    pub(crate) args: String,
    /// Explain the call as an escalation to this mode.
    #[arg(long, value_name = "MODE", requires = "justification")]
    pub(crate) escalate: Option<SandboxMode>,
    /// Why the escalation is needed.
    #[arg(long, value_name = "TEXT")]
    pub(crate) justification: Option<String>,
    /// Print one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) host: HostArgs,
}

/// A principal name, as `--principal` takes it.
fn parse_principal(s: &str) -> Result<String, String> {
    toolhost::policy::check_principal_name(s)?;
    Ok(s.to_string())
}

#[derive(Args)]
pub(crate) struct ListArgs {
    /// Component files or directories of them (default: the embedded tools).
    pub(crate) paths: Vec<PathBuf>,
    /// Policy file: list only what --principal may see.
    #[arg(long, value_name = "FILE")]
    pub(crate) policy: Option<PathBuf>,
    /// List the tools this principal sees (default: `local`, an owner).
    #[arg(long, value_name = "NAME", value_parser = parse_principal)]
    pub(crate) principal: Option<String>,
    /// Print the tools as declarations for this model provider, their
    /// schemas normalized to what it accepts: openai, anthropic or gemini
    /// (JSON; implies --json).
    #[arg(long, value_name = "PROVIDER")]
    pub(crate) schema_for: Option<toolhost::schemas::Provider>,
    /// JSON output.
    #[arg(long)]
    pub(crate) json: bool,
    /// List the tools as `run` and `serve` load them with this workspace
    /// (a tools directory, program or manifest inside it is refused, as
    /// there). Default: an empty temporary directory, in TMPDIR.
    #[arg(long, value_name = "DIR")]
    pub(crate) workspace: Option<PathBuf>,
}

#[derive(Args)]
pub(crate) struct ExecArgs {
    /// The program: a command component (exports wasi:cli/run) or a WASI
    /// preview 1 core module (exports _start).
    pub(crate) program: PathBuf,
    /// Sandbox mode.
    #[arg(long, value_name = "MODE", default_value = "none")]
    pub(crate) mode: SandboxMode,
    /// The workspace (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub(crate) workspace: Option<PathBuf>,
    /// Where the workspace appears inside the program (modes read-only and
    /// workspace-write): `.`, its current directory, or an absolute guest
    /// path such as `/` or `/data`.
    #[arg(long, value_name = "GUEST_PATH", default_value = ".")]
    pub(crate) mount: String,
    /// An environment variable for the program (repeatable; a later one of
    /// the same KEY wins). Nothing is inherited from toolhost's environment.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub(crate) env: Vec<(String, String)>,
    /// The program's standard input: a file, or `-` for toolhost's own.
    /// Read whole before the program starts, at most 64 MiB. Default: empty.
    #[arg(long, value_name = "FILE")]
    pub(crate) stdin: Option<PathBuf>,
    /// Let the program reach this destination (repeatable):
    /// `scheme://host[:port]` with `http`, `https`, `tcp` or `udp`, a
    /// `*.` wildcard for subdomains, the scheme's port by default; the same
    /// patterns as a policy's `[network] allow`. Nothing is reachable
    /// without one, in every mode; addresses are checked after name
    /// resolution (loopback, private and metadata addresses only when a
    /// pattern names that exact address).
    #[arg(long = "allow-net", value_name = "URL_PATTERN")]
    pub(crate) allow_net: Vec<String>,
    /// Extra certificates (PEM) to trust for `https` beside the system's
    /// roots, for example a private service's CA.
    #[arg(long, value_name = "FILE", requires = "allow_net")]
    pub(crate) ca_file: Option<PathBuf>,
    /// Most requests and connections the program may make through its
    /// `--allow-net` grants (default 32), as a policy's
    /// `network.max_requests`.
    #[arg(long, value_name = "N", requires = "allow_net",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) net_max_requests: Option<u32>,
    /// Most response body bytes the program may receive, all requests
    /// summed (default 8 MiB), as `network.max_response_bytes`.
    #[arg(long, value_name = "BYTES", requires = "allow_net",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) net_max_response_bytes: Option<u64>,
    /// Each request's timeout, in milliseconds (default 30 000), within
    /// `--timeout-ms`, as `network.request_timeout_ms`.
    #[arg(long, value_name = "MS", requires = "allow_net",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) net_request_timeout_ms: Option<u64>,
    /// Wall-clock deadline, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub(crate) timeout_ms: u64,
    /// Most linear memory the program may hold (all its memories together), in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    pub(crate) memory_mb: usize,
    /// Fuel budget (enables fuel metering).
    #[arg(long, value_name = "UNITS")]
    pub(crate) fuel: Option<u64>,
    /// Writes what the run did as JSON to FILE once it ends: its exit
    /// status or error, and its receipt (every network request and
    /// connection, allowed or refused, and what the sandbox denied). Its
    /// directory is checked before the program runs; not in mode
    /// danger-full-access, nor inside a workspace the program may write.
    #[arg(long, value_name = "FILE")]
    pub(crate) receipt: Option<PathBuf>,
    /// Bytes of stdout, and of stderr, passed through; past that the
    /// program's writes fail and toolhost exits 125 (OUTPUT_TOO_LARGE).
    #[arg(long, value_name = "BYTES", default_value_t = EXEC_MAX_OUTPUT)]
    pub(crate) max_output: usize,
    /// Arguments for the program.
    #[arg(last = true)]
    pub(crate) args: Vec<String>,
}

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
pub(crate) struct ConformanceArgs {
    /// The tool component to check.
    pub(crate) tool: PathBuf,
    /// One JSON report instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct PrecompileArgs {
    /// Tools directories (as `--tools` takes them), components or manifests.
    #[arg(required = true)]
    pub(crate) paths: Vec<PathBuf>,
    /// Compile for hosts run with `--fuel` (fuel-metered code, cached apart).
    #[arg(long)]
    pub(crate) fuel: bool,
    /// Compile cache directory (default: $TOOLHOST_CACHE_DIR or ~/.cache/toolhost).
    #[arg(long, value_name = "DIR")]
    pub(crate) cache: Option<PathBuf>,
    /// One JSON array, an object per tool source.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("transport").required(true).args(["mcp", "http"])))]
pub(crate) struct ServeArgs {
    /// Speak the Model Context Protocol on stdin/stdout (logs go to stderr).
    #[arg(long)]
    pub(crate) mcp: bool,
    /// Serve MCP over Streamable HTTP at http://ADDR/mcp (ADDR: IP:PORT or
    /// localhost:PORT; port 0 picks a free one). The bound address is
    /// printed to stderr.
    #[arg(long, value_name = "ADDR", value_parser = parse_listen_addr)]
    pub(crate) http: Option<std::net::SocketAddr>,
    /// Allow --http on an address that is not loopback.
    #[arg(long, requires = "http")]
    pub(crate) allow_remote: bool,
    /// An Origin admitted besides http(s)://localhost, 127.0.0.1 and [::1]
    /// (scheme://host[:port], or :* for any port). Repeatable.
    #[arg(long, value_name = "ORIGIN", requires = "http")]
    pub(crate) allowed_origin: Vec<String>,
    /// A Host admitted besides the loopback names and the bound address
    /// (name[:port]; for a server reached by name). Repeatable.
    #[arg(long, value_name = "HOST", requires = "http")]
    pub(crate) allowed_host: Vec<String>,
    /// Ask for a bearer token: one token per line, # starts a comment.
    #[arg(long, value_name = "FILE", requires = "http")]
    pub(crate) tokens: Option<PathBuf>,
    /// Seconds a stopping HTTP server waits for calls in flight.
    #[arg(long, value_name = "SECS", default_value_t = 10, requires = "http")]
    pub(crate) shutdown_grace: u64,
    /// Serve only the tools of --tools DIR, without the embedded tools.
    #[arg(long, requires = "tools")]
    pub(crate) tools_only: bool,
    /// How often --tools DIR is polled for changes, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    pub(crate) poll_ms: u64,
    /// The key that seals the approval states of 2026-07-28 clients
    /// (created at random if missing, mode 0600). Default: mcp-approval.key
    /// in the state directory; with a PostgreSQL --state, give one file
    /// that every replica reads (without it, those clients are asked like
    /// any other).
    #[arg(long, value_name = "FILE")]
    pub(crate) approval_key: Option<PathBuf>,
    /// Seconds an approval state of a 2026-07-28 client stays good
    /// (fractions allowed).
    #[arg(long, value_name = "SECS", default_value_t = 600.0, value_parser = parse_seconds)]
    pub(crate) approval_state_ttl: f64,
    #[command(flatten)]
    pub(crate) host: HostArgs,
}

/// Non-negative seconds, fractions allowed.
fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1e9).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds")),
    }
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

#[derive(Args)]
pub(crate) struct NewArgs {
    /// The tool's name: 1-64 characters of [A-Za-z0-9_-], starting with a
    /// letter.
    #[arg(value_parser = parse_tool_name)]
    pub(crate) name: String,
    /// The language of the tool.
    #[arg(long, value_enum)]
    pub(crate) lang: Lang,
    /// Where to create the project: a new or empty directory (default: ./NAME).
    pub(crate) dir: Option<PathBuf>,
    /// The toolhost checkout whose SDK the project uses (default: the
    /// checkout this binary was built from, while it exists; else, for Rust
    /// and Python, the toolhost git repository).
    #[arg(long, value_name = "CHECKOUT")]
    pub(crate) sdk: Option<PathBuf>,
}

/// The languages `toolhost new` writes a project in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Lang {
    /// Rust, with the toolhost-guest crate.
    Rust,
    /// Python, with componentize-py.
    Python,
    /// JavaScript, with componentize-js.
    #[value(alias = "javascript")]
    Js,
}

impl Lang {
    /// The language's name, for messages.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
        }
    }
}

/// A tool name, as the host accepts it.
fn parse_tool_name(s: &str) -> Result<String, String> {
    if toolhost::runtime::is_valid_name(s) {
        Ok(s.to_string())
    } else {
        Err("a tool name is 1-64 characters of [A-Za-z0-9_-], starting with a letter".into())
    }
}

#[derive(Args)]
pub(crate) struct WitArgs {
    /// The directory (created if missing); files of the same names are replaced.
    pub(crate) dir: PathBuf,
}

#[derive(Args)]
pub(crate) struct LogArgs {
    #[command(flatten)]
    pub(crate) state: StateArgs,
    /// One JSON object per event, per line.
    #[arg(long)]
    pub(crate) json: bool,
}
