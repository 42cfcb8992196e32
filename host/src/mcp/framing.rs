//! The stdio transport: one JSON-RPC message per line, read in front of
//! the protocol library so that garbage gets JSON-RPC errors instead of
//! silence. A line that is not JSON is answered with a parse error
//! (`-32700`), a line over [`MAX_MESSAGE_BYTES`] is skipped without being
//! buffered and answered with an invalid-request error (`-32600`); neither
//! stops the server. Framing knows nothing about tools: the protocol part
//! (`protocol`) runs unchanged over any transport rmcp accepts.
//!
//! Nothing here grows with the client's input: a line is read into at most
//! [`MAX_MESSAGE_BYTES`], the pipes to and from rmcp are fixed-size, and at
//! most [`MAX_PENDING_ERRORS`] error answers wait for stdout. Past that, the
//! reader stops reading stdin until stdout drains, so a client that floods
//! garbage without reading the answers is slowed down, not buffered. The
//! same holds for well-formed requests, which rmcp handles without waiting
//! for their answers to be written: past [`MAX_IN_FLIGHT`] unanswered ones
//! (see `in_flight`), the reader waits.

use super::bounds::MAX_MESSAGE_BYTES;
use super::in_flight::InFlight;
#[cfg(any(doc, test))]
use super::in_flight::MAX_IN_FLIGHT;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
};
use tokio::sync::mpsc;

/// The most framing error answers waiting to be written to stdout.
pub(super) const MAX_PENDING_ERRORS: usize = 64;

/// The stdio framing of one session: two tasks between the byte streams
/// and the in-memory pipes that rmcp serves on.
pub(super) struct Framing {
    reader: tokio::task::JoinHandle<()>,
    writer: tokio::task::JoinHandle<()>,
}

/// What rmcp reads from and writes to.
pub(super) type Pipes = (DuplexStream, DuplexStream);

impl Framing {
    /// Starts framing `input` and `output`; returns the pipes to serve rmcp
    /// on. The reader waits while `in_flight` is full.
    pub(super) fn start<R, W>(input: R, output: W, in_flight: Arc<InFlight>) -> (Framing, Pipes)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (to_rmcp, rmcp_in) = tokio::io::duplex(1 << 16);
        let (rmcp_out, from_rmcp) = tokio::io::duplex(1 << 16);
        let (errors_tx, errors_rx) = mpsc::channel::<String>(MAX_PENDING_ERRORS);
        let reader = tokio::spawn(frame_input(input, to_rmcp, errors_tx, in_flight.clone()));
        let writer = tokio::spawn(frame_output(from_rmcp, errors_rx, output));
        (Framing { reader, writer }, (rmcp_in, rmcp_out))
    }

    /// Stops reading and lets the writer finish what rmcp already wrote
    /// (for at most two seconds).
    pub(super) async fn finish(self) {
        self.reader.abort();
        let _ = tokio::time::timeout(Duration::from_secs(2), self.writer).await;
    }
}

/// A JSON-RPC error response with a null id (the id of an unreadable
/// message is unknown).
fn error_line(code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}}).to_string()
}

/// Reads stdin line by line, at most [`MAX_MESSAGE_BYTES`] per line. JSON
/// lines go on to rmcp; other lines are answered with a parse error; an
/// oversized line is skipped without buffering it and answered with an
/// invalid-request error. Error answers go to `errors`, whose capacity is the
/// backpressure on stdin; so is `in_flight`, waited on before each line.
async fn frame_input<R, W>(
    input: R,
    mut to_rmcp: W,
    errors: mpsc::Sender<String>,
    in_flight: Arc<InFlight>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        // Waits for room; but once the writer is gone (stdout closed: the
        // client died) no answer will ever make room, so stop reading.
        tokio::select! {
            () = in_flight.wait_for_room() => {}
            () = errors.closed() => break,
        }
        line.clear();
        let read = (&mut input)
            .take(MAX_MESSAGE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!("cannot read stdin: {e}");
                break;
            }
        }
        if line.len() > MAX_MESSAGE_BYTES && line.last() != Some(&b'\n') {
            // Skip the rest of the line without keeping it.
            let mut eof = false;
            loop {
                line.clear();
                match (&mut input)
                    .take(1 << 16)
                    .read_until(b'\n', &mut line)
                    .await
                {
                    Ok(0) | Err(_) => {
                        eof = true;
                        break;
                    }
                    Ok(_) if line.last() == Some(&b'\n') => break,
                    Ok(_) => {}
                }
            }
            tracing::warn!("discarded a message longer than {MAX_MESSAGE_BYTES} bytes");
            let answer = error_line(
                -32600,
                &format!("Invalid Request: message longer than {MAX_MESSAGE_BYTES} bytes"),
            );
            // Waits while stdout is behind; fails once the writer is gone,
            // and then nothing can be answered any more.
            if errors.send(answer).await.is_err() || eof {
                break;
            }
            continue;
        }
        let body = trim_line(&line);
        if body.is_empty() {
            continue;
        }
        if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() {
            tracing::debug!("answered a line that is not JSON with a parse error");
            let answer = error_line(-32700, "Parse error: the message is not valid JSON");
            if errors.send(answer).await.is_err() {
                break;
            }
            continue;
        }
        if to_rmcp.write_all(body).await.is_err()
            || to_rmcp.write_all(b"\n").await.is_err()
            || to_rmcp.flush().await.is_err()
        {
            break;
        }
    }
    let _ = to_rmcp.shutdown().await;
}

fn trim_line(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line
        .strip_prefix(b"\xEF\xBB\xBF".as_slice())
        .unwrap_or(line);
    line.trim_ascii()
}

/// Writes whole lines to stdout: rmcp's messages and the framing errors,
/// never interleaved within a line.
async fn frame_output<R, W>(from_rmcp: R, mut errors: mpsc::Receiver<String>, mut output: W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut from_rmcp = BufReader::new(from_rmcp);
    let mut line = Vec::new();
    let mut rmcp_open = true;
    let mut errors_open = true;
    while rmcp_open || errors_open {
        tokio::select! {
            read = from_rmcp.read_until(b'\n', &mut line), if rmcp_open => {
                match read {
                    Ok(0) | Err(_) => rmcp_open = false,
                    Ok(_) => {
                        if !line.ends_with(b"\n") {
                            line.push(b'\n');
                        }
                        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                            return;
                        }
                        line.clear();
                    }
                }
            }
            e = errors.recv(), if errors_open => {
                match e {
                    None => errors_open = false,
                    Some(e) => {
                        if output.write_all(e.as_bytes()).await.is_err()
                            || output.write_all(b"\n").await.is_err()
                            || output.flush().await.is_err()
                        {
                            return;
                        }
                    }
                }
            }
        }
        if !rmcp_open {
            // rmcp is done: nothing more will be answered.
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_trimmed() {
        assert_eq!(trim_line(b"{}\r\n"), b"{}");
        assert_eq!(trim_line(b"\xEF\xBB\xBF{}\n"), b"{}");
        assert_eq!(trim_line(b"  \n"), b"");
    }

    /// While `MAX_IN_FLIGHT` things are held (handlers running, messages
    /// waiting to be written), the reader forwards nothing more to rmcp; one
    /// released lets the next line through.
    #[tokio::test]
    async fn requests_past_the_in_flight_bound_wait_for_room() {
        use tokio::io::AsyncReadExt as _;
        let in_flight = Arc::new(InFlight::default());
        let mut held: Vec<_> = (0..MAX_IN_FLIGHT).map(|_| in_flight.hold()).collect();
        let (to_rmcp, mut rmcp_in) = tokio::io::duplex(1 << 16);
        let (errors_tx, _errors_rx) = mpsc::channel(MAX_PENDING_ERRORS);
        let ping = b"{\"jsonrpc\":\"2.0\",\"id\":\"next\",\"method\":\"ping\"}\n".to_vec();
        let reader = tokio::spawn(frame_input(
            std::io::Cursor::new(ping),
            to_rmcp,
            errors_tx,
            in_flight.clone(),
        ));
        let mut buf = vec![0u8; 256];
        for _ in 0..1000 {
            tokio::task::yield_now().await;
        }
        assert!(
            futures::FutureExt::now_or_never(rmcp_in.read(&mut buf)).is_none(),
            "a line went to rmcp while the bound was full"
        );
        held.pop();
        let n = rmcp_in.read(&mut buf).await.unwrap_or(0);
        assert!(
            std::str::from_utf8(&buf[..n]).is_ok_and(|l| l.contains("\"next\"")),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        assert!(reader.await.is_ok());
    }

    /// A flood of garbage is answered line for line, but never more than
    /// `MAX_PENDING_ERRORS` answers wait for a writer that is behind: the
    /// reader waits instead of queueing.
    #[tokio::test]
    async fn garbage_answers_wait_for_stdout_instead_of_queueing() {
        const LINES: usize = 10_000;
        let input = b"not json\n".repeat(LINES);
        let (errors_tx, mut errors_rx) = mpsc::channel(MAX_PENDING_ERRORS);
        let reader = tokio::spawn(frame_input(
            std::io::Cursor::new(input),
            tokio::io::sink(),
            errors_tx,
            Arc::default(),
        ));
        // Nobody drains the answers yet: the reader fills the channel and
        // then waits (bounded polling for that state, no sleep).
        for _ in 0..100_000 {
            if errors_rx.len() == MAX_PENDING_ERRORS {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(errors_rx.len(), MAX_PENDING_ERRORS);
        assert!(!reader.is_finished(), "the reader waits for the writer");
        let mut answered = 0;
        while let Some(line) = errors_rx.recv().await {
            assert!(line.contains("-32700"), "{line}");
            answered += 1;
            assert!(errors_rx.len() <= MAX_PENDING_ERRORS);
        }
        assert_eq!(answered, LINES, "every line is answered, none dropped");
        assert!(reader.await.is_ok());
    }
}
