//! Host sockets whose sends never raise `SIGPIPE`: the HTTP client's
//! connections, the MCP HTTP server's, and the MCP stdio transport's output
//! when it is a socket.
//!
//! A send to a peer that is gone raises `SIGPIPE`, which ends a program
//! that embeds the host and keeps the signal's default action. std's
//! `TcpStream::write` passes `MSG_NOSIGNAL`, but tokio's vectored writes
//! (which hyper and rustls use) go to `writev`, and a `UnixStream`'s
//! writes are plain `write`: neither does. [`Stream`] sends every write
//! with [`SEND_FLAGS`] through tokio's own readiness (`try_io`), and
//! leaves everything else to tokio.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// The flags of a send: never `SIGPIPE` for a peer that is gone; the send
/// fails with `EPIPE` instead. On Apple's systems `SO_NOSIGPIPE` does the
/// same: socket2 sets it on the sockets it makes, and mio on its
/// listeners, whose accepted sockets inherit it.
#[cfg(not(target_vendor = "apple"))]
const SEND_FLAGS: libc::c_int = libc::MSG_NOSIGNAL;
#[cfg(target_vendor = "apple")]
const SEND_FLAGS: libc::c_int = 0;

/// What [`Stream`] needs of a tokio stream socket: its write readiness,
/// the socket for `send`, and its own reads and shutdown.
pub(crate) trait Socket: AsyncRead + AsyncWrite + Unpin {
    /// The socket, for `send`.
    fn sock_ref(&self) -> socket2::SockRef<'_>;
    /// Waits until the socket may be written (tokio's `poll_write_ready`).
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// `op`, a readiness it finds stale cleared (tokio's `try_io`).
    fn try_io<R>(&self, interest: Interest, op: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

/// [`Socket`] for tokio's stream types, whose methods of those names it
/// forwards to.
macro_rules! socket {
    ($t:ty) => {
        impl Socket for $t {
            fn sock_ref(&self) -> socket2::SockRef<'_> {
                socket2::SockRef::from(self)
            }
            fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                <$t>::poll_write_ready(self, cx)
            }
            fn try_io<R>(
                &self,
                interest: Interest,
                op: impl FnOnce() -> io::Result<R>,
            ) -> io::Result<R> {
                <$t>::try_io(self, interest, op)
            }
        }
    };
}
socket!(TcpStream);
#[cfg(unix)]
socket!(tokio::net::UnixStream);

/// A connected TCP stream (the HTTP client's and the MCP HTTP server's).
pub(crate) type Tcp = Stream<TcpStream>;

/// A connected stream socket whose sends never raise `SIGPIPE`.
pub(crate) struct Stream<S> {
    stream: S,
}

impl<S: Socket> Stream<S> {
    /// A connected stream, whose sends from now on never raise `SIGPIPE`.
    pub(crate) fn new(stream: S) -> Stream<S> {
        Stream { stream }
    }

    /// `send` (by `op`) once the socket may be written, again after each
    /// readiness report until it no longer would block.
    fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        mut op: impl FnMut(socket2::SockRef<'_>) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.stream.poll_write_ready(cx))?;
            match self
                .stream
                .try_io(Interest::WRITABLE, || op(self.stream.sock_ref()))
            {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => return Poll::Ready(done),
            }
        }
    }
}

impl<S: Socket> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<S: Socket> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_send(cx, |s| s.send_with_flags(buf, SEND_FLAGS))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_send(cx, |s| s.send_vectored_with_flags(bufs, SEND_FLAGS))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Connects to `addr` (the HTTP client's connections).
pub(crate) async fn connect(addr: std::net::SocketAddr) -> io::Result<Tcp> {
    TcpStream::connect(addr).await.map(Tcp::new)
}

/// Runs `body` in a child process of this test binary, in which `SIGPIPE`
/// has its default action (the Rust runtime ignores it, so a send that
/// raises it would pass unseen in the test's own process); fails when the
/// child was killed by a signal or did not pass. `test` is the calling
/// test's full path, which the child runs alone.
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
pub(crate) fn with_default_sigpipe(test: &str, body: impl FnOnce()) {
    const CHILD: &str = "TOOLHOST_TEST_SIGPIPE_CHILD";
    if std::env::var_os(CHILD).is_some() {
        // SAFETY: sets the process's disposition of one signal; no handler
        // runs, so nothing else is assumed.
        let previous = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        assert_ne!(previous, libc::SIG_ERR, "{}", io::Error::last_os_error());
        body();
        return;
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let out = std::process::Command::new(exe)
        .args(["--exact", test, "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        None,
        "the child was killed by a signal"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("1 passed"),
        "the child did not run the test: {stdout}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A runtime on the test's own thread.
    fn current_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Which end of a connection the host's stream is.
    #[derive(Debug, Clone, Copy)]
    enum Side {
        /// Made by [`connect`] (the HTTP client's).
        Connected,
        /// Accepted by a listener, then wrapped (the MCP server's).
        Accepted,
    }

    /// A loopback connection: the host's stream, at `side`, and its peer.
    async fn pair(side: Side) -> (Tcp, TcpStream) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let accept = || async {
            let (s, _) = listener.accept().await.unwrap_or_else(|e| panic!("{e}"));
            s
        };
        match side {
            Side::Connected => {
                let stream = connect(addr).await.unwrap_or_else(|e| panic!("{e}"));
                (stream, accept().await)
            }
            Side::Accepted => {
                let peer = TcpStream::connect(addr)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                (Tcp::new(accept().await), peer)
            }
        }
    }

    /// Reads and writes that would block wait as tokio's do, in both
    /// directions and across many turns: a write larger than the socket
    /// buffers waits for the peer to read, a read with nothing there waits
    /// for the peer to write; nothing is lost or reordered, and the end of
    /// the stream is seen.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocked_reads_and_writes_wait_and_lose_nothing() {
        // The server's buffers kept small (its accepted socket inherits
        // them), so that the client's writes block.
        let socket = tokio::net::TcpSocket::new_v4().unwrap_or_else(|e| panic!("{e}"));
        for set in [
            tokio::net::TcpSocket::set_recv_buffer_size,
            tokio::net::TcpSocket::set_send_buffer_size,
        ] {
            set(&socket, 64 << 10).unwrap_or_else(|e| panic!("{e}"));
        }
        socket
            .bind("127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
        let listener = socket.listen(8).unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        // 8 MiB each way: more than the client's send buffer can take and
        // the server's small ones hold.
        let sent: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
        let echo = tokio::spawn(async move {
            let (mut peer, _) = listener.accept().await.unwrap_or_else(|e| panic!("{e}"));
            let (mut r, mut w) = peer.split();
            let copied = tokio::io::copy(&mut r, &mut w).await;
            let _ = w.shutdown().await;
            copied
        });
        let stream = connect(addr).await.unwrap_or_else(|e| panic!("{e}"));
        let (mut r, mut w) = tokio::io::split(stream);
        let writing = {
            let sent = sent.clone();
            tokio::spawn(async move {
                w.write_all(&sent).await?;
                w.shutdown().await
            })
        };
        let mut got = Vec::new();
        // A lost wake-up would wait for good: bounded, and the bound is
        // checked first (the timer's wake-up alone lets a stalled read go
        // on, which must not count as having kept up).
        let read = tokio::select! {
            biased;
            () = tokio::time::sleep(std::time::Duration::from_secs(60)) => None,
            read = r.read_to_end(&mut got) => Some(read),
        };
        read.unwrap_or_else(|| panic!("the echo stalled"))
            .unwrap_or_else(|e| panic!("{e}"));
        writing
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|e| panic!("{e}"));
        let copied = echo.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(copied.ok(), Some(sent.len() as u64));
        assert!(got == sent, "the echo came back altered");
    }

    /// Sends to a peer that reset the connection fail with an error, and
    /// never raise `SIGPIPE`, which kills a program that embeds the host
    /// and keeps the signal's default action (the Rust runtime ignores it,
    /// so the check runs in a child process of this test that restores it):
    /// on a connection the host made (its HTTP client) and on one it
    /// accepted (the MCP HTTP server's).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn a_send_to_a_reset_peer_fails_without_sigpipe() {
        with_default_sigpipe(
            "egress::nosigpipe::tests::a_send_to_a_reset_peer_fails_without_sigpipe",
            || {
                current_thread().block_on(async {
                    sends_after_a_reset(Side::Connected).await;
                    sends_after_a_reset(Side::Accepted).await;
                })
            },
        );
    }

    /// Opens a connection with the host's stream at `side`, has the peer
    /// reset it, then sends (plain and vectored) until both fail.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    async fn sends_after_a_reset(side: Side) {
        let (mut stream, peer) = pair(side).await;
        // Closed with a zero linger: a reset instead of a FIN.
        socket2::SockRef::from(&peer)
            .set_linger(Some(std::time::Duration::ZERO))
            .unwrap_or_else(|e| panic!("{e}"));
        drop(peer);
        // The reset, seen by a read (which also takes the socket's pending
        // error, so that every send after it is refused with EPIPE, the
        // case that raises SIGPIPE without the flag).
        let mut one = [0u8; 1];
        let read = tokio::time::timeout(std::time::Duration::from_secs(30), stream.read(&mut one))
            .await
            .unwrap_or_else(|_| panic!("the reset never came ({side:?})"));
        assert_eq!(
            read.err().map(|e| e.kind()),
            Some(io::ErrorKind::ConnectionReset),
            "{side:?}"
        );
        for round in 0..4 {
            let sent = if round % 2 == 0 {
                stream.write(b"after the reset").await
            } else {
                let bufs = [IoSlice::new(b"after "), IoSlice::new(b"the reset")];
                stream.write_vectored(&bufs).await
            };
            assert_eq!(
                sent.err().map(|e| e.kind()),
                Some(io::ErrorKind::BrokenPipe),
                "send {round} ({side:?})"
            );
        }
    }
}
