//! Bounded capture of a guest's stdout and stderr.
//!
//! A tool's output is never inherited: each stream keeps at most `capacity`
//! bytes and counts (but drops) the rest, so an output flood neither traps
//! the guest nor grows host memory. A command program run by `toolhost
//! exec` is the one guest whose output reaches the host's own stdout and
//! stderr ([`PassthroughOutput`]), up to a cap per stream.

use bytes::Bytes;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

#[derive(Default)]
struct Inner {
    kept: Vec<u8>,
    dropped: u64,
}

/// A bounded in-memory sink for one output stream of one call.
#[derive(Clone)]
pub(crate) struct CapturedOutput {
    capacity: usize,
    inner: Arc<Mutex<Inner>>,
}

impl CapturedOutput {
    pub fn new(capacity: usize) -> Self {
        CapturedOutput {
            capacity,
            inner: Arc::default(),
        }
    }

    fn push(&self, bytes: &[u8]) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let room = self.capacity.saturating_sub(inner.kept.len());
        let take = room.min(bytes.len());
        inner.kept.extend_from_slice(&bytes[..take]);
        inner.dropped += (bytes.len() - take) as u64;
    }

    /// The kept bytes (lossy UTF-8) and how many bytes were dropped.
    pub fn snapshot(&self) -> (String, u64) {
        match self.inner.lock() {
            Ok(inner) => (
                String::from_utf8_lossy(&inner.kept).into_owned(),
                inner.dropped,
            ),
            Err(_) => (String::new(), 0),
        }
    }

    pub fn total_bytes(&self) -> u64 {
        match self.inner.lock() {
            Ok(inner) => inner.kept.len() as u64 + inner.dropped,
            Err(_) => 0,
        }
    }
}

impl IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CapturedOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for CapturedOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always accept: what exceeds the capacity is dropped and counted.
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for CapturedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Which of the host's own streams a [`PassthroughOutput`] writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostStream {
    Stdout,
    Stderr,
}

impl HostStream {
    fn name(self) -> &'static str {
        match self {
            HostStream::Stdout => "stdout",
            HostStream::Stderr => "stderr",
        }
    }

    fn write(self, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        match self {
            HostStream::Stdout => std::io::stdout().write_all(bytes),
            HostStream::Stderr => std::io::stderr().write_all(bytes),
        }
    }

    fn flush(self) -> std::io::Result<()> {
        use std::io::Write;
        match self {
            HostStream::Stdout => std::io::stdout().flush(),
            HostStream::Stderr => std::io::stderr().flush(),
        }
    }
}

#[derive(Default)]
struct Passed {
    /// Bytes written to the host stream.
    written: usize,
    /// Whether a write past the cap was refused.
    refused: bool,
}

/// A command program's output stream (`toolhost exec`), passed through to
/// the host's own stdout or stderr as it is written, up to `capacity`
/// bytes. Past the cap, writes fail as on a closed pipe (most programs then
/// stop) and the refusal is recorded, so that the run ends
/// `OUTPUT_TOO_LARGE` instead of passing a cut output off as whole.
#[derive(Clone)]
pub(crate) struct PassthroughOutput {
    stream: HostStream,
    capacity: usize,
    passed: Arc<Mutex<Passed>>,
}

impl PassthroughOutput {
    pub fn new(stream: HostStream, capacity: usize) -> Self {
        PassthroughOutput {
            stream,
            capacity,
            passed: Arc::default(),
        }
    }

    /// Writes as much of `bytes` as the cap leaves room for; how much, or
    /// `None` (recorded) when there is no room left at all.
    fn pass(&self, bytes: &[u8]) -> Option<std::io::Result<usize>> {
        let Ok(mut passed) = self.passed.lock() else {
            return Some(Err(std::io::Error::other("output state poisoned")));
        };
        let room = self.capacity.saturating_sub(passed.written);
        if room == 0 && !bytes.is_empty() {
            passed.refused = true;
            return None;
        }
        let take = room.min(bytes.len());
        if let Err(e) = self.stream.write(&bytes[..take]) {
            return Some(Err(e));
        }
        passed.written += take;
        if take < bytes.len() {
            passed.refused = true;
        }
        Some(Ok(take))
    }

    /// What to report when writes past the cap were refused.
    pub fn refused(&self) -> Option<String> {
        let passed = self.passed.lock().ok()?;
        passed.refused.then(|| {
            format!(
                "the program's {} reached its cap of {} bytes; what it wrote past that was refused",
                self.stream.name(),
                self.capacity
            )
        })
    }
}

impl IsTerminal for PassthroughOutput {
    fn is_terminal(&self) -> bool {
        match self.stream {
            HostStream::Stdout => std::io::IsTerminal::is_terminal(&std::io::stdout()),
            HostStream::Stderr => std::io::IsTerminal::is_terminal(&std::io::stderr()),
        }
    }
}

impl StdoutStream for PassthroughOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for PassthroughOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for PassthroughOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        match self.pass(&bytes) {
            Some(Ok(n)) if n == bytes.len() => Ok(()),
            Some(Ok(_)) | None => Err(StreamError::Closed),
            Some(Err(e)) => Err(StreamError::LastOperationFailed(e.into())),
        }
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.stream
            .flush()
            .map_err(|e| StreamError::LastOperationFailed(e.into()))
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        let written = self.passed.lock().map(|p| p.written).unwrap_or(usize::MAX);
        match self.capacity.saturating_sub(written) {
            0 => {
                if let Ok(mut passed) = self.passed.lock() {
                    passed.refused = true;
                }
                Err(StreamError::Closed)
            }
            room => Ok(room.min(64 * 1024)),
        }
    }
}

impl tokio::io::AsyncWrite for PassthroughOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(match self.pass(buf) {
            Some(r) => r,
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        })
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(self.stream.flush())
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
