//! A response's body as the guest reads it: [`LimitedBody`] counts its
//! bytes into the call's records and ends it at the call's limits, and
//! [`MaskedBody`] masks the loaded secrets in the response of the server a
//! credential was sent to, read whole first so that nothing the guest
//! observes of it depends on the secret.

use crate::egress::Egress;
use crate::egress::call::{CallNet, elapsed_ms};
use bytes::Bytes;
use http::header::{CONTENT_ENCODING, HeaderValue, TRANSFER_ENCODING};
use http_body::{Body, Frame};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use toolhost_egress::Credentials;
use wasmtime_wasi_http::Error as HttpError;

/// The between-bytes timer of a response body.
struct Between {
    gap: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
    running: bool,
}

impl Between {
    fn new(gap: Duration) -> Between {
        Between {
            gap,
            timer: Box::pin(tokio::time::sleep(gap)),
            running: false,
        }
    }

    /// Whether the server has been silent for the whole gap, the timer
    /// started now if it was not running.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.running {
            self.running = true;
            let at = tokio::time::Instant::now() + self.gap;
            self.timer.as_mut().reset(at);
        }
        self.timer.as_mut().poll(cx).is_ready()
    }
}

/// A response body that counts its bytes into the call's records and
/// stops at the call's response byte limit, the request's deadline and the
/// guest's between-bytes timeout.
pub(super) struct LimitedBody<B = hyper::body::Incoming> {
    inner: Pin<Box<B>>,
    net: Arc<CallNet>,
    index: usize,
    max: u64,
    until: Pin<Box<tokio::time::Sleep>>,
    /// The guest's between-bytes timeout and its timer: started when a
    /// read finds nothing yet (the server's gap, not the guest's own pause
    /// between reads), stopped when a frame comes.
    between: Option<Between>,
    started: Instant,
    /// Ended: whole, with its trailers, or failed.
    done: bool,
}

impl<B> LimitedBody<B> {
    /// A body over `inner`, counted in record `index` of `net`, within
    /// `max` bytes (the call's), by `until`.
    pub(super) fn new(
        inner: B,
        net: Arc<CallNet>,
        index: usize,
        max: u64,
        until: tokio::time::Instant,
        between: Option<Duration>,
        started: Instant,
    ) -> LimitedBody<B> {
        LimitedBody {
            inner: Box::pin(inner),
            net,
            index,
            max,
            until: Box::pin(tokio::time::sleep_until(until)),
            between: between.map(Between::new),
            started,
            done: false,
        }
    }

    /// Ends the body with `e`, which its record keeps.
    fn fail<T>(&mut self, e: HttpError) -> Poll<Option<Result<T, HttpError>>> {
        self.done = true;
        self.net.fail(self.index, &e, self.started);
        Poll::Ready(Some(Err(e)))
    }

    /// The body ended whole: its record has its time.
    fn finish(&mut self) {
        self.done = true;
        let ms = elapsed_ms(self.started);
        self.net.update(self.index, |r| r.ms = ms);
    }
}

impl<B: Body<Data = Bytes, Error = hyper::Error>> Body for LimitedBody<B> {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        // The request's time is checked before each read, not only while
        // the guest waits: a slow body always has data waiting for a guest
        // that reads slowly.
        if tokio::time::Instant::now() >= this.until.deadline() {
            return this.fail(HttpError::ConnectionReadTimeout);
        }
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(None) => {
                this.finish();
                Poll::Ready(None)
            }
            // A connection whose time ran out while the body was polled (its
            // task stopped, hyper's body cut short) failed the body by that
            // time: a read timeout, as a later read would have been.
            Poll::Ready(Some(Err(_))) if tokio::time::Instant::now() >= this.until.deadline() => {
                this.fail(HttpError::ConnectionReadTimeout)
            }
            Poll::Ready(Some(Err(e))) => this.fail(HttpError::Hyper(e)),
            Poll::Ready(Some(Ok(frame))) => {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                if !this.net.add_bytes_in(this.index, n, this.max) {
                    return this.fail(HttpError::HttpResponseBodySize(Some(this.max)));
                }
                if let Some(between) = this.between.as_mut() {
                    between.running = false;
                }
                // Trailers are the last frame: the guest may drop the body
                // without asking for more.
                if frame.is_trailers() {
                    this.finish();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                let waited_too_long = this.between.as_mut().is_some_and(|b| b.expired(cx));
                if waited_too_long || this.until.as_mut().poll(cx).is_ready() {
                    return this.fail(HttpError::ConnectionReadTimeout);
                }
                Poll::Pending
            }
        }
    }
}

/// The error for a response whose body the mask could not read: the first
/// coding its `content-encoding` names other than `identity`
/// (`HTTP-response-content-coding`), or its `transfer-encoding` other than
/// `identity` or `chunked`, which hyper undoes
/// (`HTTP-response-transfer-coding`), in any of their values.
pub(super) fn encoded(headers: &http::HeaderMap) -> Option<HttpError> {
    let codings = |name| {
        headers
            .get_all(name)
            .into_iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|c| !c.is_empty())
    };
    let plain = |c: &&[u8], also: &[u8]| {
        c.eq_ignore_ascii_case(b"identity") || c.eq_ignore_ascii_case(also)
    };
    let named = |c: &[u8]| Some(String::from_utf8_lossy(c).into_owned());
    if let Some(c) = codings(CONTENT_ENCODING).find(|c| !plain(c, b"identity")) {
        return Some(HttpError::HttpResponseContentCoding(named(c)));
    }
    codings(TRANSFER_ENCODING)
        .find(|c| !plain(c, b"chunked"))
        .map(|c| HttpError::HttpResponseTransferCoding(named(c)))
}

/// `headers` with every loaded secret masked in their values; a header
/// whose name holds one is dropped. The map is rebuilt only when some
/// header holds a secret.
pub(super) fn mask_headers(credentials: &Credentials, headers: &mut http::HeaderMap) {
    let in_name = |name: &http::HeaderName| credentials.in_header_name(name.as_str().as_bytes());
    if !headers
        .iter()
        .any(|(name, value)| in_name(name) || credentials.contains(value.as_bytes()))
    {
        return;
    }
    let mut kept = http::HeaderMap::with_capacity(headers.len());
    for (name, value) in headers.iter() {
        if in_name(name) {
            continue;
        }
        let mut bytes = value.as_bytes().to_vec();
        let value = if credentials.mask(&mut bytes) {
            // A mask byte is a visible character: the value stays valid.
            match HeaderValue::from_bytes(&bytes) {
                Ok(v) => v,
                Err(_) => continue,
            }
        } else {
            value.clone()
        };
        kept.append(name.clone(), value);
    }
    *headers = kept;
}

/// The body of a response from the server a credential was sent to, with
/// every loaded secret masked, its trailers' values too.
///
/// Nothing the guest can observe of it depends on the secret: the body is
/// read whole (within the call's response byte limit and the request's
/// time, which [`LimitedBody`] enforces) before the guest reads any of it,
/// then masked in place ([`Credentials::mask`], whose cost does not depend
/// on how the bytes relate to a secret) and given as one data frame, then
/// the trailers (a trailers frame, kept even when every trailer was
/// dropped), then its end. So the sizes and timing of the guest's reads,
/// the frames, the end and any error are what they would be for any other
/// bytes of the same length. A stream that masked as it went would have
/// to hold back the bytes that could begin a secret, and where the
/// guest's reads then ended would tell it which of its guesses do.
pub(super) struct MaskedBody<B> {
    inner: B,
    egress: Arc<Egress>,
    state: Masking,
}

enum Masking {
    /// Reading the body: the bytes and trailers so far.
    Reading {
        data: Vec<u8>,
        trailers: Option<http::HeaderMap>,
    },
    /// Masked: the frames still to give, in order.
    Giving(std::collections::VecDeque<Frame<Bytes>>),
}

impl<B> MaskedBody<B> {
    pub(super) fn new(inner: B, egress: Arc<Egress>) -> MaskedBody<B> {
        MaskedBody {
            inner,
            egress,
            state: Masking::Reading {
                data: Vec::new(),
                trailers: None,
            },
        }
    }
}

impl<B> Body for MaskedBody<B>
where
    B: Body<Data = Bytes, Error = HttpError> + Unpin,
{
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let this = self.get_mut();
        loop {
            let (data, trailers) = match &mut this.state {
                Masking::Giving(frames) => return Poll::Ready(frames.pop_front().map(Ok)),
                Masking::Reading { data, trailers } => (data, trailers),
            };
            match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(bytes) => data.extend_from_slice(&bytes),
                    Err(frame) => {
                        // Trailers end a body; a frame of another kind
                        // carries nothing to give.
                        if let Ok(mut t) = frame.into_trailers() {
                            mask_headers(&this.egress.credentials, &mut t);
                            trailers.get_or_insert_with(http::HeaderMap::new).extend(t);
                        }
                    }
                },
                // Nothing read is given: the guest sees the error alone.
                Some(Err(e)) => {
                    this.state = Masking::Giving(Default::default());
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    let mut data = std::mem::take(data);
                    this.egress.credentials.mask(&mut data);
                    let mut frames = std::collections::VecDeque::with_capacity(2);
                    if !data.is_empty() {
                        frames.push_back(Frame::data(Bytes::from(data)));
                    }
                    if let Some(t) = trailers.take() {
                        frames.push_back(Frame::trailers(t));
                    }
                    this.state = Masking::Giving(frames);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::NetworkGrant;
    use http_body_util::{BodyExt, Full};
    use std::sync::atomic::Ordering;
    use wasmtime_wasi_http::io::TokioIo;

    /// A response to a credentialed request is refused when any value of
    /// its `content-encoding` names a coding, or its `transfer-encoding` one
    /// other than `chunked`: the mask could not read such a body. Each
    /// refusal names its header's kind of coding.
    #[test]
    fn any_coding_in_any_value_is_found() {
        let map = |pairs: &[(&'static str, &'static str)]| {
            let mut h = http::HeaderMap::new();
            for (k, v) in pairs {
                h.append(*k, HeaderValue::from_static(v));
            }
            h
        };
        assert!(encoded(&map(&[])).is_none());
        assert!(encoded(&map(&[("content-encoding", "identity")])).is_none());
        assert!(encoded(&map(&[("transfer-encoding", "chunked")])).is_none());
        // Each is named for the header that carried it.
        assert!(matches!(
            encoded(&map(&[("content-encoding", "gzip")])),
            Some(HttpError::HttpResponseContentCoding(Some(c))) if c == "gzip"
        ));
        assert!(matches!(
            encoded(&map(&[("transfer-encoding", "gzip, chunked")])),
            Some(HttpError::HttpResponseTransferCoding(Some(c))) if c == "gzip"
        ));
        let cases: &[&[(&str, &str)]] = &[
            &[
                ("content-encoding", "identity"),
                ("content-encoding", "gzip"),
            ],
            &[("content-encoding", "identity, br")],
            &[("transfer-encoding", "gzip, chunked")],
            &[("content-encoding", " GZIP ")],
        ];
        for pairs in cases {
            assert!(encoded(&map(pairs)).is_some(), "{pairs:?}");
        }
    }

    /// A body's frames, one by one.
    struct Frames(std::collections::VecDeque<Frame<Bytes>>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = HttpError;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
            Poll::Ready(self.0.pop_front().map(Ok))
        }
    }

    /// The secret of [`masking_egress`].
    const SECRET: &str = "sk-masked-0123";

    /// The egress of a policy with one credential, [`SECRET`] (its file
    /// is read at load, and removed after).
    fn masking_egress() -> Arc<Egress> {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("token");
        std::fs::write(&file, SECRET).unwrap_or_else(|e| panic!("{e}"));
        let policy = toolhost_egress::NetworkPolicy::from_toml(
            &format!(
                "[network]\nallow = [\"https://api.example.com\"]\n\n[[credentials]]\n\
                 host = \"api.example.com\"\nheader = \"Authorization\"\nvalue_file = {:?}\n",
                file.display().to_string()
            ),
            "test.toml",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        Arc::new(Egress::load(&policy, &[], None).unwrap_or_else(|e| panic!("{e}")))
    }

    /// A server's echo of a secret reaches the guest masked, wherever its
    /// frames cut it, in its headers and its trailers too, and nothing
    /// else changes.
    #[tokio::test]
    async fn an_echoed_secret_is_masked_in_headers_frames_and_trailers() {
        let egress = masking_egress();
        let masked = "*".repeat(SECRET.len());

        let mut headers = http::HeaderMap::new();
        headers.insert("x-echo", HeaderValue::from_static("Bearer sk-masked-0123"));
        headers.append("x-echo", HeaderValue::from_static("plain"));
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        // A name holding the secret goes whole.
        headers.insert("x-sk-masked-0123", HeaderValue::from_static("named"));
        mask_headers(&egress.credentials, &mut headers);
        let echoed: Vec<_> = headers.get_all("x-echo").iter().collect();
        assert_eq!(echoed, [format!("Bearer {masked}").as_str(), "plain"]);
        assert_eq!(headers["content-type"], "text/plain");
        assert!(!headers.contains_key("x-sk-masked-0123"), "{headers:?}");

        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-trailer", HeaderValue::from_static("sk-masked-0123"));
        let frames = Frames(
            [
                Frame::data(Bytes::from_static(b"a: sk-mas")),
                Frame::data(Bytes::from_static(b"ked-0123 b: ")),
                Frame::data(Bytes::from_static(b"sk-")),
                Frame::trailers(trailers),
            ]
            .into(),
        );
        let mut body = MaskedBody::new(frames, egress.clone());
        let mut got = Vec::new();
        while let Some(frame) = body.frame().await {
            got.push(frame.unwrap_or_else(|e| panic!("{e}")));
        }
        // One data frame, whole and masked, then the trailers, masked.
        assert_eq!(got.len(), 2, "{got:?}");
        let data = got[0].data_ref().unwrap_or_else(|| panic!("{got:?}"));
        assert_eq!(String::from_utf8_lossy(data), format!("a: {masked} b: sk-"));
        let got_trailers = got[1].trailers_ref().unwrap_or_else(|| panic!("{got:?}"));
        assert_eq!(got_trailers["x-trailer"], masked.as_str());

        // Trailers whose every name held the secret: still a trailers
        // frame, empty, as for any other trailers.
        let mut named = http::HeaderMap::new();
        named.insert("x-sk-masked-0123", HeaderValue::from_static("v"));
        let frames = Frames([Frame::trailers(named)].into());
        let mut body = MaskedBody::new(frames, egress);
        let only = body
            .frame()
            .await
            .map(|f| f.unwrap_or_else(|e| panic!("{e}")));
        assert!(
            only.as_ref()
                .and_then(|f| f.trailers_ref())
                .is_some_and(|t| t.is_empty()),
            "{only:?}"
        );
        assert!(body.frame().await.is_none());
    }

    /// The guest's observations of a masked body do not depend on which of
    /// its bytes begin the secret: however the server cuts the same bytes
    /// into frames, whatever prefix of the secret they end with, the guest
    /// gets the same frames (one of the whole body), and a body that fails
    /// gives its error alone.
    #[tokio::test]
    async fn a_masked_body_is_framed_alike_whatever_it_holds() {
        let egress = masking_egress();
        let shapes = |guess: &'static [u8]| async {
            let mut shapes = Vec::new();
            for cut in 0..=guess.len() {
                let frames = Frames(
                    [
                        Frame::data(Bytes::from_static(&guess[..cut])),
                        Frame::data(Bytes::from_static(&guess[cut..])),
                    ]
                    .into(),
                );
                let mut body = MaskedBody::new(frames, egress.clone());
                let mut sizes = Vec::new();
                while let Some(frame) = body.frame().await {
                    let frame = frame.unwrap_or_else(|e| panic!("{e}"));
                    sizes.push(frame.data_ref().map(|d| d.len()));
                }
                shapes.push(sizes);
            }
            shapes
        };
        // The secret's first five bytes, and five others.
        let right = shapes(b"echo: sk-ma").await;
        let wrong = shapes(b"echo: sk-mb").await;
        assert_eq!(right, wrong);
        assert!(right.iter().all(|s| s == &[Some(11)]), "{right:?}");

        struct Failing(bool);
        impl Body for Failing {
            type Data = Bytes;
            type Error = HttpError;
            fn poll_frame(
                mut self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
                if std::mem::replace(&mut self.0, true) {
                    return Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout)));
                }
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"sk-ma")))))
            }
        }
        let mut body = MaskedBody::new(Failing(false), egress);
        assert!(matches!(
            body.frame().await,
            Some(Err(HttpError::ConnectionReadTimeout))
        ));
        assert!(body.frame().await.is_none());
    }

    /// A body over `inner` that `net` counts, ending by `until`.
    fn limited<B>(inner: B, net: &Arc<CallNet>, until: tokio::time::Instant) -> LimitedBody<B> {
        LimitedBody::new(
            inner,
            net.clone(),
            usize::MAX,
            1 << 20,
            until,
            None,
            Instant::now(),
        )
    }

    /// A response body whose request time is up ends with a read timeout
    /// even when data is waiting (a guest that reads slowly never sees the
    /// body pending, where the timer alone would be looked at).
    #[tokio::test]
    async fn a_body_with_data_waiting_still_ends_at_the_request_time() {
        let net = CallNet::new(
            NetworkGrant::default(),
            Instant::now() + Duration::from_secs(60),
        );
        let inner = Full::new(Bytes::from_static(b"waiting"))
            .map_err(|never: std::convert::Infallible| match never {});
        let body = |until| limited(inner.clone(), &net, until);
        let now = tokio::time::Instant::now();
        let in_time = body(now + Duration::from_secs(60)).collect().await;
        assert_eq!(
            in_time.map(|c| c.to_bytes()).ok(),
            Some(Bytes::from_static(b"waiting"))
        );
        let late = body(now).frame().await;
        assert!(
            matches!(late, Some(Err(HttpError::ConnectionReadTimeout))),
            "{late:?}"
        );
        // A body that ended (whole, or failed) stays ended.
        let mut ended = body(now + Duration::from_secs(60));
        let mut failed = body(now);
        while let Some(frame) = ended.frame().await {
            assert!(frame.is_ok());
        }
        assert!(ended.frame().await.is_none());
        assert!(matches!(failed.frame().await, Some(Err(_))));
        assert!(failed.frame().await.is_none());
    }

    /// A body whose last frame is its trailers ends with them, though the
    /// guest never asks for more: its record has its time.
    #[tokio::test]
    async fn a_body_ends_with_its_trailers() {
        let net = CallNet::new(
            NetworkGrant::default(),
            Instant::now() + Duration::from_secs(60),
        );
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-sum", HeaderValue::from_static("1"));
        let frames = [
            Frame::data(Bytes::from_static(b"data")),
            Frame::trailers(trailers),
        ];
        let inner = http_body_util::StreamBody::new(futures::stream::iter(
            frames.map(Ok::<_, hyper::Error>),
        ));
        let later = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut body = limited(inner, &net, later);
        let data = body.frame().await.map(|f| f.map(|f| f.is_data()));
        assert!(matches!(data, Some(Ok(true))), "{data:?}");
        assert!(!body.done);
        let last = body.frame().await.map(|f| f.map(|f| f.is_trailers()));
        assert!(matches!(last, Some(Ok(true))), "{last:?}");
        assert!(body.done, "the body did not end with its trailers");
        assert!(body.frame().await.is_none());
    }

    /// A body cut short while its request's time runs out (its connection
    /// stopped at that time, which fails hyper's body) ends with a read
    /// timeout, as a read after that time does; one that ends whole in its
    /// last poll is whole, whenever that poll ends.
    #[tokio::test]
    async fn a_body_cut_at_its_request_time_ends_with_a_read_timeout() {
        /// A body whose only poll outlasts `until`, then ends with `end`
        /// (an error, or whole when there is none).
        struct EndsLate {
            until: tokio::time::Instant,
            end: Option<hyper::Error>,
            polled: Arc<std::sync::atomic::AtomicBool>,
        }
        impl Body for EndsLate {
            type Data = Bytes;
            type Error = hyper::Error;
            fn poll_frame(
                mut self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
                self.polled.store(true, Ordering::SeqCst);
                while tokio::time::Instant::now() < self.until {
                    std::thread::yield_now();
                }
                Poll::Ready(self.end.take().map(Err))
            }
        }
        // A hyper error: a request over a connection whose peer is gone.
        let (client, server) = tokio::io::duplex(64);
        drop(server);
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(client))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        tokio::spawn(conn);
        let Err(cut) = sender
            .send_request(http::Request::new(Full::default()))
            .await
        else {
            panic!("a request over a closed connection was answered");
        };
        let net = CallNet::new(
            NetworkGrant::default(),
            Instant::now() + Duration::from_secs(60),
        );
        for end in [Some(cut), None] {
            let whole = end.is_none();
            let polled = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let until = tokio::time::Instant::now() + Duration::from_millis(100);
            let late = EndsLate {
                until,
                end,
                polled: polled.clone(),
            };
            let mut body = limited(late, &net, until);
            let last = body.frame().await;
            // The poll began before the time was up.
            assert!(polled.load(Ordering::SeqCst));
            if whole {
                assert!(last.is_none(), "{last:?}");
            } else {
                assert!(
                    matches!(last, Some(Err(HttpError::ConnectionReadTimeout))),
                    "{last:?}"
                );
                assert!(body.frame().await.is_none());
            }
        }
    }
}
