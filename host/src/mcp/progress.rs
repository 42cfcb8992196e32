//! Progress forwarding: a tool's progress reports become
//! `notifications/progress` when the `tools/call` request carried a
//! progress token.

use crate::state::{Progress, ProgressSink};
use rmcp::Peer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::RoleServer;
use std::sync::Arc;
use tokio::sync::mpsc;

/// A progress sink that queues reports (it runs on the guest's thread and
/// must not block) and a task that sends them as `notifications/progress`.
pub(super) fn progress_forwarder(
    peer: Peer<RoleServer>,
    token: ProgressToken,
) -> (ProgressSink, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Progress>();
    let task = tokio::spawn(async move {
        while let Some(p) = rx.recv().await {
            let mut n = ProgressNotificationParam::new(token.clone(), p.done as f64);
            n.total = p.total.map(|t| t as f64);
            n.message = p.message;
            if let Err(e) = peer.notify_progress(n).await {
                tracing::debug!("progress notification not sent: {e}");
                break;
            }
        }
    });
    let sink: ProgressSink = Arc::new(move |p: &Progress| {
        let _ = tx.send(p.clone());
    });
    (sink, task)
}
