//! `toolhost serve`: the tools over MCP, on stdio or Streamable HTTP.

use crate::args::{HostArgs, ServeArgs};
use crate::host::{
    approval_queue_of, approver_of, build_host_with, recover_approvals, state_dir_of,
};
use crate::pg::{pg_options, postgres_url};
use anyhow::{Result, anyhow};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use toolhost::mcp::{HostFactory, HttpOptions};

/// `toolhost serve --mcp` / `--http ADDR`: see `toolhost::mcp`. With `--tools DIR` the
/// directory is loaded with the embedded tools (as for `run`), or alone with
/// `--tools-only`, and reloaded when it changes.
///
/// A stdio server that cannot start answers its client's `initialize` with
/// the reason before it exits (an MCP client shows that; a process that
/// exits first is only "Connection closed"). An HTTP server that cannot
/// start never listens: the reason is on stderr.
pub(crate) async fn serve(a: ServeArgs) -> Result<ExitCode> {
    let stdio = a.http.is_none();
    let options = match serve_options(&a) {
        Ok(o) => o,
        Err(e) => {
            if stdio {
                toolhost::mcp::answer_startup_failure(&format!("{e:#}")).await;
            }
            return Err(e);
        }
    };
    let http = http_options(&a)?;
    let embedded = !a.tools_only;
    let factory = host_factory(a.host, embedded);
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

/// How the server runs, from the flags.
fn serve_options(a: &ServeArgs) -> Result<toolhost::mcp::ServeOptions> {
    let timeout = Duration::from_secs(a.host.approval_timeout);
    let fallback = approver_of(&a.host)?;
    Ok(toolhost::mcp::ServeOptions {
        scope: a.host.scope.clone(),
        mode: a.host.mode,
        watch: a.host.tools.clone(),
        poll_interval: Duration::from_millis(a.poll_ms.max(20)),
        fallback_approver: Arc::from(fallback),
        // An approver outside the client decides every ask itself: with
        // one configured, a client must not approve the calls it makes.
        ask_clients: a.host.approver == "none",
        approval_timeout: timeout,
        // Over HTTP a caller is nobody in particular unless a token names it.
        principal: a.host.principal.clone().or_else(|| {
            a.http
                .map(|_| toolhost::policy::ANONYMOUS_PRINCIPAL.to_string())
        }),
        approval_states: approval_states(a)?,
    })
}

/// The options of `--http ADDR`, checked; none for stdio.
fn http_options(a: &ServeArgs) -> Result<Option<HttpOptions>> {
    Ok(match a.http {
        None => None,
        Some(addr) => {
            let mut http = HttpOptions::new(addr);
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
    })
}

/// Builds the host, the first time and at each reload of `--tools DIR`.
fn host_factory(host_args: HostArgs, embedded: bool) -> HostFactory {
    let host_args = Arc::new(host_args);
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    Arc::new(move |parts| {
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
    })
}

/// The sealer of MRTR approval states: its key in --approval-key FILE, else
/// in the state directory; none for a PostgreSQL state without a key file.
fn approval_states(a: &ServeArgs) -> Result<Option<Arc<toolhost::mcp::ApprovalStates>>> {
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
        states = states.with_shared_claims(Arc::new(claims));
    }
    Ok(Some(Arc::new(states)))
}
