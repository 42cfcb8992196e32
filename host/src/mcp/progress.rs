//! Progress forwarding: a tool's progress reports become
//! `notifications/progress` when the `tools/call` request carried a
//! progress token.
//!
//! A guest may report progress as often as it likes, so reports are never
//! queued: each one replaces the last in a single slot ([`LatestProgress`],
//! latest wins). One forwarder per call sends what the slot holds, at most
//! once per [`PROGRESS_INTERVAL`]. When the call ends the forwarder stops,
//! sends the report still in the slot (if any) and only then lets the call
//! return, so no progress notification ever follows the response to its
//! call. A call of `d` seconds sends at most `d / PROGRESS_INTERVAL + 2`
//! notifications, whatever the guest does.

use super::logging::{SendGate, Sent};
use crate::sandbox::state::{Progress, ProgressSink};
use rmcp::Peer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::RoleServer;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The shortest time between two progress notifications of one call; the
/// last report of a call is sent when the call ends, even sooner.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);

/// The latest progress report of one call: a single slot, not a queue.
/// Written on the guest's thread (it never blocks for long: the lock is
/// held only to swap the value), read by the forwarder.
#[derive(Default)]
pub(super) struct LatestProgress {
    latest: Mutex<Option<Progress>>,
    posted: Notify,
}

impl LatestProgress {
    fn slot(&self) -> MutexGuard<'_, Option<Progress>> {
        // A panic while holding the lock cannot leave a half-written
        // `Option`: the value is still the latest report or none.
        match self.latest.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Replaces the unsent report, if any, with `report`.
    pub(super) fn put(&self, report: Progress) {
        *self.slot() = Some(report);
        self.posted.notify_one();
    }

    /// The latest report not sent yet.
    pub(super) fn take(&self) -> Option<Progress> {
        self.slot().take()
    }
}

/// Forwards one call's progress to the client; see the module docs.
pub(super) struct ProgressForwarder {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl ProgressForwarder {
    /// Starts forwarding to `peer` under `token`, through the session's `gate`.
    pub(super) fn start(
        peer: Peer<RoleServer>,
        gate: SendGate,
        token: ProgressToken,
    ) -> (ProgressSink, ProgressForwarder) {
        let slot = Arc::new(LatestProgress::default());
        let (stop, stopped) = oneshot::channel();
        let send = move |p: Progress| {
            let (peer, token, gate) = (peer.clone(), token.clone(), gate.clone());
            async move {
                let mut n = ProgressNotificationParam::new(token, p.done as f64);
                n.total = p.total.map(|t| t as f64);
                n.message = p.message;
                gated(&gate, async move { peer.notify_progress(n).await }).await
            }
        };
        let task = tokio::spawn(forward(slot.clone(), stopped, PROGRESS_INTERVAL, send));
        let sink: ProgressSink = Arc::new(move |p: &Progress| slot.put(p.clone()));
        (
            sink,
            ProgressForwarder {
                stop: Some(stop),
                task,
            },
        )
    }

    /// Ends forwarding: sends the last report not sent yet, then returns.
    /// After this, nothing more is sent for the call, so the call's
    /// response follows every notification of it, unless the session did
    /// not take one in time ([`SendGate`]): that one is abandoned (and may
    /// still be written after the response, should the session ever take
    /// it) rather than hold the call, its slot among the calls in flight
    /// included.
    pub(super) async fn finish(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Err(e) = (&mut self.task).await {
            tracing::debug!("the progress forwarder ended abnormally: {e}");
        }
    }
}

impl Drop for ProgressForwarder {
    fn drop(&mut self) {
        // A call dropped without `finish` sends nothing more.
        self.task.abort();
    }
}

/// One notification sent through the session's `gate`: an error unless
/// the session took it.
async fn gated<F, E>(gate: &SendGate, sending: F) -> Result<(), String>
where
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: Send + 'static,
{
    match gate.send(sending).await {
        Sent::Taken => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

/// Sends what `slot` holds through `send`, at most once per `interval`,
/// until `stop` fires; then sends the slot's last report, if any. Stops
/// early when a send fails (the client is gone, or its session did not take
/// the notification in time).
async fn forward<S, F>(
    slot: Arc<LatestProgress>,
    mut stop: oneshot::Receiver<()>,
    interval: Duration,
    mut send: S,
) where
    S: FnMut(Progress) -> F,
    F: Future<Output = Result<(), String>>,
{
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            () = slot.posted.notified() => {}
        }
        let Some(report) = slot.take() else {
            continue;
        };
        if let Err(e) = send(report).await {
            tracing::debug!("progress notification not sent: {e}");
            return;
        }
        let next = Instant::now() + interval;
        tokio::select! {
            biased;
            _ = &mut stop => break,
            () = tokio::time::sleep_until(next) => {}
        }
    }
    // The call is over: its last report goes out now, before the response.
    if let Some(report) = slot.take()
        && let Err(e) = send(report).await
    {
        tracing::debug!("progress notification not sent: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::logging::LOG_FORWARD_LIMIT;

    fn report(done: u64) -> Progress {
        Progress {
            done,
            total: Some(1_000_000),
            message: None,
        }
    }

    /// A session that never takes a notification holds the forwarder, and
    /// so the call's end, for [`LOG_FORWARD_LIMIT`] at most.
    #[tokio::test(start_paused = true)]
    async fn a_send_the_session_never_takes_is_given_up() {
        let slot = Arc::new(LatestProgress::default());
        let (stop, stopped) = oneshot::channel();
        let started = Instant::now();
        let sends = Arc::new(Mutex::new(0));
        let counted = sends.clone();
        let gate = SendGate::default();
        let task = tokio::spawn(forward(
            slot.clone(),
            stopped,
            PROGRESS_INTERVAL,
            move |_| {
                if let Ok(mut n) = counted.lock() {
                    *n += 1;
                }
                let gate = gate.clone();
                async move { gated(&gate, std::future::pending::<Result<(), ()>>()).await }
            },
        ));
        slot.put(report(1));
        tokio::task::yield_now().await;
        slot.put(report(2));
        let _ = stop.send(());
        let ended = tokio::time::timeout(LOG_FORWARD_LIMIT * 10, task).await;
        assert!(ended.is_ok(), "the forwarder still waits for the session");
        assert_eq!(started.elapsed(), LOG_FORWARD_LIMIT);
        // Given up, it sends nothing more, the last report included.
        assert_eq!(sends.lock().map(|n| *n).unwrap_or_default(), 1);
    }

    #[test]
    fn the_slot_keeps_only_the_latest_report() {
        let slot = LatestProgress::default();
        assert_eq!(slot.take(), None);
        for done in 1..=1_000_000 {
            slot.put(report(done));
        }
        assert_eq!(slot.take(), Some(report(1_000_000)));
        assert_eq!(slot.take(), None, "a report is sent once");
    }

    /// A flood of reports is coalesced and rate-limited, and the last report
    /// is sent when the call ends.
    #[tokio::test]
    async fn a_flood_is_rate_limited_and_ends_with_the_last_report() {
        let interval = Duration::from_millis(20);
        let sent = Arc::new(Mutex::new(Vec::new()));
        let slot = Arc::new(LatestProgress::default());
        let (stop, stopped) = oneshot::channel();
        let record = sent.clone();
        let started = Instant::now();
        let task = tokio::spawn(forward(slot.clone(), stopped, interval, move |p| {
            if let Ok(mut s) = record.lock() {
                s.push(p.done);
            }
            async { Ok(()) }
        }));
        // The guest: reports for a while, yielding now and then so the
        // forwarder runs (as a guest on another thread would let it).
        let mut done = 0;
        while done < 200 || started.elapsed() < interval * 5 {
            done += 1;
            slot.put(report(done));
            if done % 1000 == 0 {
                tokio::task::yield_now().await;
            }
        }
        let _ = stop.send(());
        task.await.unwrap_or_else(|e| panic!("forwarder: {e}"));
        let elapsed = started.elapsed();
        let sent = sent.lock().map(|s| s.clone()).unwrap_or_default();
        let bound = (elapsed.as_millis() / interval.as_millis()) as usize + 2;
        assert!(
            !sent.is_empty() && sent.len() <= bound,
            "{} notifications for {done} reports in {elapsed:?} (at most {bound})",
            sent.len()
        );
        assert_eq!(sent.last(), Some(&done), "the last report is sent");
        assert!(sent.windows(2).all(|w| w[0] < w[1]), "{sent:?}");
    }
}
