//! What a caller and a running call exchange: the interrupt that cancels
//! it, the progress reports and log records it sends back, and the one
//! function that shortens text.
//!
//! Plain types, no wasmtime: the store a call runs in (and what it holds)
//! belongs to `runtime::store`, the `host` interface that fills these in to
//! `bindings`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// One structured log record written by a tool through `host.log`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LogRecord {
    /// `trace`, `debug`, `info`, `warn` or `error`.
    pub level: &'static str,
    /// The message (cut to 4096 bytes).
    pub message: String,
    /// Extra fields, when the tool gave valid JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<serde_json::Value>,
}

/// A progress report from a tool.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Progress {
    /// Work done so far.
    pub done: u64,
    /// Expected end value of `done`, when known.
    pub total: Option<u64>,
    /// A short message.
    pub message: Option<String>,
}

/// Receives progress reports while a call runs (e.g. to forward them to an
/// MCP client). Called on the thread running the guest: keep it cheap.
pub type ProgressSink = Arc<dyn Fn(&Progress) + Send + Sync>;

/// `mutex`'s guard, also when a thread panicked holding it: what these
/// mutexes guard stays consistent between statements, so a poisoned lock
/// still holds usable data.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// What `f` returns, or `None` when it panics: library code (approvers,
/// hooks) the host calls must not take the host down with it.
pub(crate) fn unpanicked<T>(f: impl FnOnce() -> T) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok()
}

/// `s` cut to at most `max` bytes (on a character boundary), with `…`
/// appended when something was cut. The one place that shortens text.
pub(crate) fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// `s` with every control character escaped (`\u{1b}`, `\r`, `\n`), so
/// that printing it cannot move the cursor, change the terminal or start a
/// line of its own. Other characters are kept as they are.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Why the runtime interrupted a guest.
#[derive(Clone, Default)]
pub struct Interrupt {
    inner: Arc<InterruptInner>,
}

#[derive(Default)]
struct InterruptInner {
    cancelled: AtomicBool,
    /// Wakes [`Interrupt::cancelled`] futures (no timer polls the flag:
    /// a timer per call would wake an idle runtime thread per call).
    woken: tokio::sync::Notify,
    /// The interrupt this one was made from ([`Interrupt::child`]):
    /// cancelling it cancels this one too, never the other way round.
    parent: Option<Arc<InterruptInner>>,
}

impl InterruptInner {
    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
            || self.parent.as_ref().is_some_and(|p| p.is_cancelled())
    }
}

impl Interrupt {
    /// Requests cancellation; the guest is interrupted at its next epoch
    /// check or host call, and every [`Interrupt::cancelled`] future
    /// resolves.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        self.inner.woken.notify_waiters();
    }

    /// True once cancellation was requested (of this interrupt, or of the
    /// one it was made from).
    pub fn is_cancelled(&self) -> bool {
        self.inner.is_cancelled()
    }

    /// An interrupt cancelled with this one, which can also be cancelled
    /// alone: what the host cancels for one body without touching the
    /// interrupt its caller gave (which may be shared by other calls).
    pub(crate) fn child(&self) -> Interrupt {
        Interrupt {
            inner: Arc::new(InterruptInner {
                parent: Some(self.inner.clone()),
                ..InterruptInner::default()
            }),
        }
    }

    /// Resolves once cancellation is requested (at once if it was).
    pub async fn cancelled(&self) {
        loop {
            let woken = self.inner.woken.notified();
            let mut woken = std::pin::pin!(woken);
            // Registered before the flags are read: a `cancel` in between
            // wakes this future instead of being missed.
            woken.as_mut().enable();
            if self.inner.parent.is_none() {
                if self.is_cancelled() {
                    return;
                }
                woken.await;
                continue;
            }
            // A child waits on its own wake-up and on each ancestor's.
            let mut ancestors = Vec::new();
            let mut next = self.inner.parent.as_deref();
            while let Some(inner) = next {
                let mut notified = Box::pin(inner.woken.notified());
                notified.as_mut().enable();
                ancestors.push(notified);
                next = inner.parent.as_deref();
            }
            if self.is_cancelled() {
                return;
            }
            futures::future::select(woken, futures::future::select_all(ancestors)).await;
        }
    }
}

#[allow(clippy::unwrap_used, reason = "tests fail loudly on a set-up error")]
#[cfg(test)]
mod tests {
    use super::Interrupt;

    /// A child is cancelled with its parent (its waiters woken), and alone;
    /// cancelling it never cancels the parent.
    #[tokio::test]
    async fn a_child_is_cancelled_with_its_parent_and_alone() {
        let bound = std::time::Duration::from_secs(10);
        let parent = Interrupt::default();
        let (child, grandchild) = (parent.child(), parent.child().child());
        child.cancel();
        assert!(child.is_cancelled());
        assert!(!parent.is_cancelled(), "a child cancelled its parent");
        tokio::time::timeout(bound, child.cancelled())
            .await
            .unwrap();
        let other = parent.child();
        let (started, parked) = tokio::sync::oneshot::channel();
        let waiting = {
            let (other, grandchild) = (other.clone(), grandchild.clone());
            tokio::spawn(async move {
                let (a, b) = (other.cancelled(), grandchild.cancelled());
                let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
                // Both parked (pending) before the parent is cancelled.
                assert!(futures::poll!(a.as_mut()).is_pending());
                assert!(futures::poll!(b.as_mut()).is_pending());
                started.send(()).unwrap();
                futures::join!(a, b);
            })
        };
        parked.await.unwrap();
        assert!(!other.is_cancelled() && !grandchild.is_cancelled());
        parent.cancel();
        assert!(other.is_cancelled() && grandchild.is_cancelled());
        tokio::time::timeout(bound, waiting).await.unwrap().unwrap();
    }

    /// Every waiter wakes on `cancel`, whether it started waiting before
    /// (it is parked: no timer polls the flag) or after.
    #[tokio::test]
    async fn cancelled_wakes_every_waiter_and_resolves_at_once_afterwards() {
        let interrupt = Interrupt::default();
        let (started, mut all_started) = tokio::sync::mpsc::channel(4);
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let (i, started) = (interrupt.clone(), started.clone());
                tokio::spawn(async move {
                    let cancelled = i.cancelled();
                    let mut cancelled = std::pin::pin!(cancelled);
                    // Polled once (pending) before the test cancels.
                    assert!(futures::poll!(cancelled.as_mut()).is_pending());
                    started.send(()).await.unwrap();
                    cancelled.await;
                })
            })
            .collect();
        for _ in 0..3 {
            all_started.recv().await.unwrap();
        }
        assert!(!interrupt.is_cancelled());
        interrupt.cancel();
        // A bound, so that a missed wake-up fails instead of hanging.
        let bound = std::time::Duration::from_secs(10);
        for w in waiters {
            tokio::time::timeout(bound, w).await.unwrap().unwrap();
        }
        tokio::time::timeout(bound, interrupt.cancelled())
            .await
            .unwrap();
        tokio::time::timeout(bound, interrupt.clone().cancelled())
            .await
            .unwrap();
    }
}
