//! Hot reload of a tools directory: the directory is polled, a changed
//! tool set is loaded into a new [`Host`] that shares the runtime and the
//! session log, swapped in, and announced with
//! `notifications/tools/list_changed` (to the client of every open session). Calls in flight keep the host they
//! started on; a directory that fails to load keeps the old host.

use super::logging::Sent;
use super::protocol::Server;
use crate::approval::BoxFuture;
use crate::pipeline::Host;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Refuses to watch a tools directory inside the workspace: a call granted writes
/// could rewrite the manifests and components that the server then reloads (a
/// manifest says what a tool declares, and so what it is granted), with no one
/// asked.
pub(super) fn check_watched(dir: &Path, host: &Host) -> Result<(), String> {
    match crate::sandbox::spec::resolved_inside(dir, host.workspace()) {
        None => Ok(()),
        Some(resolved) => Err(format!(
            "the tools directory {} is inside the workspace {}, where a call granted writes could rewrite the tools this server reloads (and so what they declare and are granted); the workspace is --workspace DIR, or the current directory without it: pass --workspace for the directory the tools should work on, one that does not hold the tools directory, or move the tools directory out of the workspace (docs/guides/serving-your-tools.md)",
            resolved.display(),
            host.workspace().display()
        )),
    }
}

/// What identifies the contents of a tools directory: names, sizes, mtimes.
pub(super) type Snapshot = Vec<(String, u64, Option<SystemTime>)>;

pub(super) fn snapshot(dir: &Path) -> Snapshot {
    let mut files: Snapshot = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            // Components and program-backed tools' manifests (and the
            // programs those name, `.wasm` beside them).
            .filter(|e| {
                e.path()
                    .extension()
                    .is_some_and(|x| x == "wasm" || x == "toml")
            })
            .map(|e| {
                let meta = e.metadata().ok();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    meta.as_ref().map(|m| m.len()).unwrap_or(0),
                    meta.and_then(|m| m.modified().ok()),
                )
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    files
}

/// Polls `dir`; when its snapshot changed and then stayed the same for one
/// more poll (so a file being copied is not loaded half-written), rebuilds
/// the host, swaps it in and tells the client. A failed build keeps the old
/// host and is logged; the next change retries.
pub(super) async fn watch_tools<F>(
    dir: PathBuf,
    interval: Duration,
    mut loaded: Snapshot,
    mut build: F,
    server: Server,
) where
    F: FnMut() -> BoxFuture<'static, Result<Host, String>> + Send,
{
    let mut previous = loaded.clone();
    loop {
        tokio::time::sleep(interval).await;
        let now = snapshot(&dir);
        let stable = now == previous;
        previous = now.clone();
        if now == loaded || !stable {
            continue;
        }
        loaded = now;
        match build().await {
            Ok(host) => {
                let names = host
                    .tools(server.scope.as_deref())
                    .iter()
                    .map(|t| t.descriptor.name.clone())
                    .collect::<Vec<_>>();
                server.swap(host);
                tracing::info!(dir = %dir.display(), tools = ?names, "reloaded the tools directory");
                // A client that does not read its messages must not stop
                // the next reload: each gets a bounded time to take it.
                for session in server.sessions() {
                    let peer = session.peer.clone();
                    let sent = session
                        .gate
                        .send(async move { peer.notify_tool_list_changed().await })
                        .await;
                    match sent {
                        Sent::Taken => {}
                        Sent::Failed => tracing::warn!("cannot send tools/list_changed"),
                        Sent::Late | Sent::Skipped => tracing::warn!(
                            "an MCP client did not take tools/list_changed in time; dropped"
                        ),
                    }
                }
            }
            Err(e) => {
                tracing::error!(dir = %dir.display(), "the tools directory changed but cannot be loaded; keeping the previous tools: {e}");
            }
        }
    }
}
