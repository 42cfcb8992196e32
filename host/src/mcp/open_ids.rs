//! The request ids open in each HTTP session, so that a client cannot
//! reuse one while rmcp still routes it.
//!
//! rmcp's session worker keeps one channel per POST and maps the request's
//! JSON-RPC id to it; a second request with the same id, while the first is
//! open, takes the mapping over. The first channel then never closes: the
//! first POST's stream never ends, and its channel stays in the worker for
//! as long as the session lasts. A client repeating that grew the host
//! without bound. (The MCP specification forbids reusing an id within a
//! session; rmcp does not check it.)
//!
//! So the front door refuses (400) a request whose id is open in its
//! session. An id is open from the moment the front door lets its POST
//! through until rmcp is done with it:
//! - its response stream ended (rmcp closed the request's channel, so it
//!   no longer maps the id) and nothing else holds the request; or else
//! - [`ANSWER_TAKEN`] after the request's last holder let go: the front
//!   door's response (a client that dropped the stream before its end) and
//!   rmcp's copy of the request's parts, which goes with its handler's
//!   context (a handler runs on after a cancellation ended its stream, and
//!   rmcp routes its answer by the id when it returns). rmcp takes a handler's answer at once; until it has, a second
//!   request with the id would still take the mapping over.
//!
//! What is held is bounded by what holds it: the POSTs the front door has
//! open (at most one per connection), the handlers running, and requests
//! let go of within the last [`ANSWER_TAKEN`].

use super::in_flight::ANSWER_TAKEN;
use rmcp::model::RequestId;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};

/// The ids open in every session: each entry names the one request that
/// holds it (a number no other request of the process gets).
#[derive(Default)]
pub(super) struct OpenIds {
    open: std::sync::Mutex<HashMap<(Arc<str>, RequestId), u64>>,
    next: AtomicU64,
}

/// One request's hold on its id in its session: the id is free again when
/// [`OpenRequest::ended`] says rmcp is done with it, or [`ANSWER_TAKEN`]
/// after the last holder let go.
#[derive(Clone)]
pub(super) struct OpenRequest(Arc<Hold>);

struct Hold {
    ids: Arc<OpenIds>,
    key: (Arc<str>, RequestId),
    number: u64,
    released: AtomicBool,
}

impl OpenIds {
    /// Marks `id` open in `session` for one request; `None` when another
    /// request of the session holds it.
    pub(super) fn open(self: &Arc<Self>, session: &str, id: RequestId) -> Option<OpenRequest> {
        let key = (Arc::<str>::from(session), id);
        let mut open = crate::sandbox::state::lock(&self.open);
        if open.contains_key(&key) {
            return None;
        }
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        open.insert(key.clone(), number);
        Some(OpenRequest(Arc::new(Hold {
            ids: self.clone(),
            key,
            number,
            released: AtomicBool::new(false),
        })))
    }

    /// How many ids are open, in all sessions.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        crate::sandbox::state::lock(&self.open).len()
    }
}

impl OpenRequest {
    /// The request's stream ended: rmcp no longer routes its id. The id is
    /// free at once unless something else still holds the request (its
    /// handler, which runs on after a cancellation ended the stream, and
    /// whose answer rmcp would route by the id when it returns); then it is
    /// free [`ANSWER_TAKEN`] after that holder lets go.
    pub(super) fn ended(self) {
        if Arc::strong_count(&self.0) == 1 {
            self.0.release();
        }
    }
}

impl Hold {
    fn release(&self) {
        if !self.released.swap(true, Ordering::SeqCst) {
            self.ids.free(&self.key, self.number);
        }
    }
}

impl OpenIds {
    /// Frees `key` if request `number` still holds it.
    fn free(&self, key: &(Arc<str>, RequestId), number: u64) {
        let mut open = crate::sandbox::state::lock(&self.open);
        if open.get(key) == Some(&number) {
            open.remove(key);
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.released.load(Ordering::SeqCst) {
            return;
        }
        let (ids, key, number) = (self.ids.clone(), self.key.clone(), self.number);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    tokio::time::sleep(ANSWER_TAKEN).await;
                    ids.free(&key, number);
                });
            }
            // No runtime: nothing of rmcp's can be running either.
            Err(_) => ids.free(&key, number),
        }
    }
}

/// A response body that frees its request's id when it ends, and lets go
/// of its hold when dropped before.
pub(super) struct Releasing<B: hyper::body::Body> {
    pub(super) inner: B,
    pub(super) open: Option<OpenRequest>,
}

impl<B: hyper::body::Body> Releasing<B> {
    fn release_if_ended(&mut self, ended: bool) {
        if ended && let Some(open) = self.open.take() {
            open.ended();
        }
    }
}

impl<B> hyper::body::Body for Releasing<B>
where
    B: hyper::body::Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(_)) => self.inner.is_end_stream(),
            Poll::Pending => false,
        };
        self.release_if_ended(ended);
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl<B: hyper::body::Body> Drop for Releasing<B> {
    fn drop(&mut self) {
        let ended = self.inner.is_end_stream();
        self.release_if_ended(ended);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly on a set-up error")]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    fn id(n: i64) -> RequestId {
        RequestId::Number(n)
    }

    /// An id is held once per session: freed at once when its stream
    /// ends, else [`ANSWER_TAKEN`] after its last holder let go; a late
    /// release of an earlier hold never frees the id a later request holds.
    #[tokio::test(start_paused = true)]
    async fn an_id_is_held_once_per_session_until_rmcp_is_done_with_it() {
        let ids = Arc::new(OpenIds::default());
        let first = ids.open("s", id(7)).unwrap();
        assert!(ids.open("s", id(7)).is_none());
        // Another id, or the same in another session: not held.
        assert!(ids.open("s", RequestId::String("7".into())).is_some());
        assert!(ids.open("t", id(7)).is_some());
        let kept = first.clone();
        drop(first);
        assert!(
            ids.open("s", id(7)).is_none(),
            "freed while a holder is left"
        );
        drop(kept);
        tokio::time::sleep(ANSWER_TAKEN / 2).await;
        assert!(
            ids.open("s", id(7)).is_none(),
            "freed before rmcp took the answer"
        );
        tokio::time::sleep(ANSWER_TAKEN).await;
        // A stream that ends while its handler still holds the request (a
        // cancellation ended it): held until the handler lets go.
        let second = ids.open("s", id(7)).unwrap();
        let handler = second.clone();
        let mut body = Releasing {
            inner: Full::new(bytes::Bytes::from_static(b"x")),
            open: Some(second),
        };
        while body.frame().await.is_some() {}
        assert!(
            ids.open("s", id(7)).is_none(),
            "freed while the handler runs"
        );
        drop(handler);
        tokio::time::sleep(ANSWER_TAKEN * 2).await;
        // A stream that ends with nothing else holding it: free at once.
        let third = ids.open("s", id(7)).unwrap();
        let mut body = Releasing {
            inner: Full::new(bytes::Bytes::from_static(b"x")),
            open: Some(third),
        };
        assert!(ids.open("s", id(7)).is_none());
        while body.frame().await.is_some() {}
        let fourth = ids.open("s", id(7)).unwrap();
        drop(body);
        tokio::time::sleep(ANSWER_TAKEN * 2).await;
        assert!(
            ids.open("s", id(7)).is_none(),
            "the fourth's hold was freed"
        );
        drop(fourth);
        tokio::time::sleep(ANSWER_TAKEN * 2).await;
        assert_eq!(ids.len(), 0);
    }
}
