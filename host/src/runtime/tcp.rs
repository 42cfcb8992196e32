//! The TCP connections of the host's HTTP client: each operation is tried
//! on the socket at once, and waited for only when it would block.
//!
//! tokio does not try a new socket before its I/O driver has reported it
//! ready: the end of a connect, the first write and the first read each
//! wait for a turn of the driver, which runs on a worker thread. A connect
//! to a nearby server has usually finished when the system call returns,
//! and a request fits the socket's send buffer, so those waits are for
//! nothing. Here the system call comes first; only when it would block (or
//! was interrupted) does the operation go through tokio, which then waits
//! for the driver. What the driver later reports about readiness already
//! used here is at most a spurious wake-up: tokio clears it when its own
//! attempt would block.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The most bytes one read takes straight from the socket (the part of the
/// caller's buffer made ready for it; the rest waits for the next read).
const MAX_EAGER_READ: usize = 64 << 10;

/// Connects to `addr`, without waiting for the driver when the connection
/// is made by the time the connect returns.
pub(super) async fn connect(addr: SocketAddr) -> io::Result<Tcp> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_nonblocking(true)?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if in_progress(&e) => {}
        Err(e) => return Err(e),
    }
    let stream = TcpStream::from_std(socket.into())?;
    // Not connected yet: the connect ends when the socket turns writable
    // (as tokio's own connect waits), with its error if it failed.
    if stream.peer_addr().is_err() {
        stream.writable().await?;
    }
    if let Some(e) = stream.take_error()? {
        return Err(e);
    }
    Ok(Tcp { stream })
}

/// A non-blocking connect that has begun and ends later.
fn in_progress(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
        || rustix::io::Errno::from_io_error(e) == Some(rustix::io::Errno::INPROGRESS)
}

/// A connected TCP stream whose reads and writes are tried at once.
pub(super) struct Tcp {
    stream: TcpStream,
}

impl Tcp {
    fn socket(&self) -> socket2::SockRef<'_> {
        socket2::SockRef::from(&self.stream)
    }
}

/// A system call's outcome, or `None` to leave the operation to tokio (it
/// would block, or was interrupted).
fn tried<T>(result: io::Result<T>) -> Option<io::Result<T>> {
    match result {
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            None
        }
        done => Some(done),
    }
}

impl AsyncRead for Tcp {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let read = {
            let room = buf.remaining().min(MAX_EAGER_READ);
            tried((&*self.socket()).read(buf.initialize_unfilled_to(room)))
        };
        match read {
            Some(Ok(n)) => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Some(Err(e)) => Poll::Ready(Err(e)),
            None => Pin::new(&mut self.stream).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Tcp {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match tried((&*self.socket()).write(buf)) {
            Some(done) => Poll::Ready(done),
            None => Pin::new(&mut self.stream).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match tried((&*self.socket()).write_vectored(bufs)) {
            Some(done) => Poll::Ready(done),
            None => Pin::new(&mut self.stream).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Reads and writes that would block wait as tokio's do, in both
    /// directions and across many turns: a write larger than the socket
    /// buffers waits for the peer to read, a read with nothing there waits
    /// for the peer to write; nothing is lost or reordered, and the end of
    /// the stream is seen.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocked_reads_and_writes_wait_and_lose_nothing() {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        // 8 MiB each way, far beyond the loopback socket buffers.
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
        // A lost wake-up would wait for good: bounded.
        tokio::time::timeout(std::time::Duration::from_secs(60), r.read_to_end(&mut got))
            .await
            .unwrap_or_else(|_| panic!("the echo stalled after {} bytes", got.len()))
            .unwrap_or_else(|e| panic!("{e}"));
        writing
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|e| panic!("{e}"));
        let copied = echo.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(copied.ok(), Some(sent.len() as u64));
        assert!(got == sent, "the echo came back altered");
    }

    /// A refused connection is the connect's error, not a stream.
    #[tokio::test]
    async fn a_refused_connect_is_an_error() {
        // Bound and not listening: connects to it are refused.
        let socket = tokio::net::TcpSocket::new_v4().unwrap_or_else(|e| panic!("{e}"));
        socket
            .bind("127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = socket.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let refused = connect(addr).await;
        assert_eq!(
            refused.err().map(|e| e.kind()),
            Some(io::ErrorKind::ConnectionRefused)
        );
    }
}
