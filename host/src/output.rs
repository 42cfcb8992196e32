//! Bounded capture of a guest's stdout and stderr.
//!
//! Output is never inherited: each stream keeps at most `capacity` bytes and
//! counts (but drops) the rest, so an output flood neither traps the guest
//! nor grows host memory.

use bytes::Bytes;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

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
