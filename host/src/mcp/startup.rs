//! A stdio server that cannot start tells its client why. An MCP client
//! starts the server and sends `initialize`; a server that exits before
//! answering leaves the client with a closed pipe ("Connection closed"), and
//! the reason only in a log the user may never see. Instead, the first
//! request the client sends gets a JSON-RPC error whose message is the
//! reason (the lifecycle allows an error answer to `initialize`), and then
//! the server exits.
//!
//! Bounded: at most [`MAX_MESSAGES`] messages of at most
//! [`MAX_MESSAGE_BYTES`](super::MAX_MESSAGE_BYTES) are read, for at most
//! [`STARTUP_ANSWER_WAIT`]; notifications and anything that is not a
//! request are skipped.

use super::bounds::MAX_MESSAGE_BYTES;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// How long a server that cannot start waits for its client's first
/// request (a client sends `initialize` as soon as it has started the
/// server; it is usually waiting in the pipe already).
pub const STARTUP_ANSWER_WAIT: Duration = Duration::from_secs(10);

/// The most messages read while looking for the first request.
const MAX_MESSAGES: usize = 16;

/// The JSON-RPC error code of the answer: the server's own failure.
const SERVER_ERROR: i64 = -32603;

/// Reads `input` until the client's first request and answers it on
/// `output` with an error carrying `reason`; returns whether it answered
/// (not when the client closed its end, sent no request, or took longer
/// than [`STARTUP_ANSWER_WAIT`]).
pub(crate) async fn answer_with_error<R, W>(input: R, output: W, reason: &str) -> bool
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    tokio::time::timeout(STARTUP_ANSWER_WAIT, answer(input, output, reason))
        .await
        .unwrap_or(false)
}

async fn answer<R, W>(input: R, mut output: W, reason: &str) -> bool
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    for _ in 0..MAX_MESSAGES {
        line.clear();
        let limit = MAX_MESSAGE_BYTES as u64 + 1;
        match (&mut reader).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
        let Some(id) = request_id(&line) else {
            // An over-long line is skipped to its end, not read as more lines.
            if !line.ends_with(b"\n") && skip_line(&mut reader).await.is_err() {
                return false;
            }
            continue;
        };
        let mut answer = error_answer(&id, reason).to_string();
        answer.push('\n');
        return output.write_all(answer.as_bytes()).await.is_ok() && output.flush().await.is_ok();
    }
    false
}

/// Reads and drops the rest of a line.
async fn skip_line<R: AsyncRead + Unpin>(reader: &mut BufReader<R>) -> std::io::Result<()> {
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|b| *b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    }
}

/// The id of a JSON-RPC request (a message with a `method` and an `id`).
fn request_id(line: &[u8]) -> Option<Value> {
    let message: Value = serde_json::from_slice(line).ok()?;
    let id = message.get("id")?;
    let is_request =
        message.get("method").is_some_and(Value::is_string) && (id.is_string() || id.is_number());
    is_request.then(|| id.clone())
}

/// The error answer to the request `id`.
fn error_answer(id: &Value, reason: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": SERVER_ERROR,
            "message": format!("toolhost cannot serve: {reason}"),
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;

    async fn answered(input: &[u8]) -> (bool, String) {
        let mut out = Vec::new();
        let answered = answer_with_error(input, &mut out, "the reason").await;
        (answered, String::from_utf8(out).unwrap())
    }

    #[tokio::test]
    async fn the_first_request_gets_the_reason() {
        let input = b"not json\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"}\n\
            {\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"initialize\",\"params\":{}}\n\
            {\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\"}\n";
        let (ok, out) = answered(input).await;
        assert!(ok);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "{out}");
        let v: Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["id"], 7);
        assert_eq!(v["error"]["code"], SERVER_ERROR);
        assert_eq!(v["error"]["message"], "toolhost cannot serve: the reason");
    }

    #[tokio::test]
    async fn a_client_that_sends_no_request_gets_nothing() {
        assert_eq!(answered(b"").await, (false, String::new()));
        let long = format!("{}\n", "x".repeat(MAX_MESSAGE_BYTES + 10));
        let mut input = long.into_bytes();
        input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"initialize\"}\n");
        let (ok, out) = answered(&input).await;
        assert!(ok && out.contains("\"id\":\"a\""), "{out}");
    }
}
