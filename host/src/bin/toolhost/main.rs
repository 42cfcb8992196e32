//! The `toolhost` command line: a thin layer over the library. This file
//! parses the flags, starts the async runtime and hands the subcommand to
//! its module; [`host`] makes a [`toolhost::Host`] from the flags the
//! hosting subcommands share.
//!
//! Exit codes:
//! - 0: ok.
//! - 1: the call ended in an error result (`run`), the tool failed a check
//!   (`conformance`), a tool did not load (`precompile`), the decision was
//!   refused (`approvals decide`), or stdout could not be written.
//! - 2: usage or configuration error, or (`exec`) a program that cannot
//!   run at all.
//! - 3: (`run`) the session log could not be flushed before the result was
//!   printed: the result is not recorded, whatever it says ([`status`]).
//! - 125: (`exec`) the runtime stopped the program (deadline, fuel, memory,
//!   a trap, output past `--max-output`), or its `--receipt` could not be
//!   written. Otherwise `exec` passes the program's exit status through.
//! - 141: stdout is a closed pipe (`toolhost log | head`), as for a program
//!   that SIGPIPE ended ([`out`]).

// First: its `out!` and `outln!` print for every module below.
#[macro_use]
mod out;

mod approvals;
mod args;
mod conformance;
mod exec;
mod explain;
mod host;
mod list;
mod log;
mod new;
mod pg;
mod precompile;
mod run;
mod serve;
mod status;
mod wit;

use crate::args::{Cli, Command};
use clap::Parser;
use std::process::ExitCode;
use std::time::Duration;

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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return refuse_flags(&rt, e),
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

/// Flags clap refuses. A stdio MCP server (`serve` without `--http`) is
/// started by a client that shows only "Connection closed" for a process
/// that exits before the handshake: its first request is answered with the
/// reason first, as for any other startup failure.
fn refuse_flags(rt: &tokio::runtime::Runtime, e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let shown = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
        || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let stdio_serve = args.first().is_some_and(|a| a == "serve")
        && !args
            .iter()
            .any(|a| a == "--http" || a.starts_with("--http="));
    if stdio_serve && !shown {
        let text = e.to_string();
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let reason = first.trim_start_matches("error: ").to_string();
        rt.block_on(toolhost::mcp::answer_startup_failure(&reason));
    }
    e.exit()
}

/// How long the CLI waits, once its command is done, for threads still
/// running (an abandoned body's) before it exits.
const EXIT_GRACE: Duration = Duration::from_secs(1);

/// Runs the subcommand. `run` tells a usage error from a call's own
/// failure itself; for every other command, an error is a usage or
/// configuration error.
async fn dispatch(cli: Cli) -> Result<ExitCode, UsageError> {
    match cli.command {
        Command::Run(a) => run::run(a).await,
        Command::List(a) => list::list(a).await.map_err(UsageError),
        Command::Exec(a) => exec::exec(a).await.map_err(UsageError),
        Command::Log(a) => log::show_log(a).map_err(UsageError),
        Command::Recover(a) => log::recover(a).map_err(UsageError),
        Command::Serve(a) => serve::serve(a).await.map_err(UsageError),
        Command::Conformance(a) => conformance::conformance(a).await.map_err(UsageError),
        Command::Precompile(a) => precompile::precompile(a).await.map_err(UsageError),
        Command::Explain(a) => explain::explain(a).await.map_err(UsageError),
        Command::Approvals(a) => approvals::approvals(a).await.map_err(UsageError),
        Command::New(a) => new::new(a).map_err(UsageError),
        Command::Wit(a) => wit::wit(a).map_err(UsageError),
    }
}
