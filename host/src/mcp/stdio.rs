//! The process's stdin and stdout as the stdio transport's byte streams.
//!
//! tokio's own `stdin()` and `stdout()` do every read and every write on
//! its blocking pool: a hand-off to another thread and back for each
//! message, in each direction. An MCP client starts the server with pipes
//! (or, from Node's libuv, a socket pair) as its stdio, and those can be
//! read and written without blocking, on the executor's own readiness
//! events. So a pipe or a socket is switched to non-blocking mode and
//! polled directly; anything else (a terminal, a file) stays on tokio's
//! blocking streams.
//!
//! Non-blocking mode belongs to the open file, which the client's end of
//! the pipe does not share but another process given the same stdio could;
//! [`Restore`] puts blocking mode back when the session ends.

use rustix::fs::FileType;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use tokio::io::{AsyncRead, AsyncWrite};

/// What a standard stream of this process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A pipe (FIFO).
    Pipe,
    /// A socket (libuv gives child processes socket pairs).
    Socket,
    /// A terminal, a file or anything else: read and written by tokio's
    /// blocking streams.
    Other,
}

/// What `fd` is.
pub(crate) fn kind(fd: BorrowedFd<'_>) -> Kind {
    match rustix::fs::fstat(fd) {
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            FileType::Fifo => Kind::Pipe,
            FileType::Socket => Kind::Socket,
            _ => Kind::Other,
        },
        Err(_) => Kind::Other,
    }
}

/// The input stream of the transport.
pub(crate) type Input = Box<dyn AsyncRead + Unpin + Send>;
/// The output stream of the transport.
pub(crate) type Output = Box<dyn AsyncWrite + Unpin + Send>;

/// This process's stdin and stdout, opened for the transport.
pub(crate) struct Stdio {
    pub input: Input,
    pub output: Output,
    /// Puts blocking mode back when dropped (after the streams).
    pub restore: Restore,
}

impl Stdio {
    /// Opens stdin and stdout: non-blocking where they are pipes or
    /// sockets, tokio's blocking streams otherwise (or where switching
    /// fails). Needs a tokio runtime with I/O enabled.
    pub(crate) fn open() -> Stdio {
        let (input, stdin) = or_blocking("stdin", open_input(io::stdin().as_fd()), || {
            Box::new(tokio::io::stdin())
        });
        let (output, stdout) = or_blocking("stdout", open_output(io::stdout().as_fd()), || {
            Box::new(tokio::io::stdout())
        });
        tracing::debug!("non-blocking stdio: stdin {stdin}, stdout {stdout}");
        Stdio {
            input,
            output,
            restore: Restore { stdin, stdout },
        }
    }
}

/// The stream `opened`, and `true`; or, where `opened` is not a pipe or a
/// socket or could not be switched, the `blocking` one and `false`.
fn or_blocking<T>(
    name: &str,
    opened: io::Result<Option<T>>,
    blocking: impl FnOnce() -> T,
) -> (T, bool) {
    match opened {
        Ok(Some(stream)) => (stream, true),
        Ok(None) => (blocking(), false),
        Err(e) => {
            tracing::debug!("{name} stays on tokio's blocking stream: {e}");
            (blocking(), false)
        }
    }
}

/// Which standard streams were switched to non-blocking mode; dropping it
/// puts blocking mode back on them.
pub(crate) struct Restore {
    stdin: bool,
    stdout: bool,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if self.stdin {
            let _ = rustix::io::ioctl_fionbio(io::stdin().as_fd(), false);
        }
        if self.stdout {
            let _ = rustix::io::ioctl_fionbio(io::stdout().as_fd(), false);
        }
    }
}

/// `fd` as a non-blocking input stream, if it is a pipe or a socket. The
/// stream owns a duplicate of `fd`.
pub(crate) fn open_input(fd: BorrowedFd<'_>) -> io::Result<Option<Input>> {
    use tokio::net::unix::pipe::Receiver;
    open_as(
        fd,
        |dup| -> io::Result<Input> { Ok(Box::new(Receiver::from_owned_fd(dup)?)) },
        |socket| -> Input { Box::new(socket) },
    )
}

/// `fd` as a non-blocking output stream, if it is a pipe or a socket. The
/// stream owns a duplicate of `fd`. A socket's sends never raise `SIGPIPE`
/// on Linux (`runtime::Stream`; Apple's systems have no such send flag, and
/// an inherited socket no `SO_NOSIGPIPE`); a pipe's writes cannot help it
/// (see [`serve_stdio`](super::serve_stdio)).
pub(crate) fn open_output(fd: BorrowedFd<'_>) -> io::Result<Option<Output>> {
    use tokio::net::unix::pipe::Sender;
    open_as(
        fd,
        |dup| -> io::Result<Output> { Ok(Box::new(Sender::from_owned_fd(dup)?)) },
        |socket| -> Output { Box::new(crate::sandbox::Stream::new(socket)) },
    )
}

/// A duplicate of `fd`, non-blocking: a pipe end made by `pipe`, a socket
/// given to `socket`; `None` for anything else.
fn open_as<S>(
    fd: BorrowedFd<'_>,
    pipe: impl FnOnce(OwnedFd) -> io::Result<S>,
    socket: impl FnOnce(tokio::net::UnixStream) -> S,
) -> io::Result<Option<S>> {
    match kind(fd) {
        Kind::Pipe => pipe(fd.try_clone_to_owned()?).map(Some),
        Kind::Socket => Ok(Some(socket(stream_socket(fd)?))),
        Kind::Other => Ok(None),
    }
}

/// A stream socket behind `fd`, non-blocking, registered with tokio. Reads
/// are plain `read(2)` on the descriptor, and the output's writes
/// (`runtime::Stream`) `send` with flags, so any stream socket works, not
/// only a Unix one.
fn stream_socket(fd: BorrowedFd<'_>) -> io::Result<tokio::net::UnixStream> {
    let owned: OwnedFd = fd.try_clone_to_owned()?;
    rustix::io::ioctl_fionbio(&owned, true)?;
    tokio::net::UnixStream::from_std(std::os::unix::net::UnixStream::from(owned))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly on a set-up error")]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn pipes_and_sockets_are_read_and_written_without_blocking() {
        // A pipe: the write end as output, the read end as input.
        let (read_end, write_end) = std::io::pipe().unwrap();
        assert_eq!(kind(read_end.as_fd()), Kind::Pipe);
        let mut input = open_input(read_end.as_fd()).unwrap().unwrap();
        let mut output = open_output(write_end.as_fd()).unwrap().unwrap();
        output.write_all(b"{\"jsonrpc\":\"2.0\"}\n").await.unwrap();
        output.flush().await.unwrap();
        let mut got = [0u8; 18];
        input.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"{\"jsonrpc\":\"2.0\"}\n");

        // A socket pair, as libuv gives a child process.
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(kind(ours.as_fd()), Kind::Socket);
        let mut input = open_input(ours.as_fd()).unwrap().unwrap();
        let mut output = open_output(theirs.as_fd()).unwrap().unwrap();
        output.write_all(b"ping\n").await.unwrap();
        let mut got = [0u8; 5];
        input.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping\n");
    }

    /// A socket as stdout (what Node's libuv gives a child process) whose
    /// reader is gone fails the write, and never raises `SIGPIPE`, which
    /// would end a program that embeds the server and keeps the signal's
    /// default action.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn a_socket_stdout_whose_reader_is_gone_fails_without_sigpipe() {
        crate::sandbox::with_default_sigpipe(
            "mcp::stdio::tests::a_socket_stdout_whose_reader_is_gone_fails_without_sigpipe",
            || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let (ours, client) = std::os::unix::net::UnixStream::pair().unwrap();
                    let mut output = open_output(ours.as_fd()).unwrap().unwrap();
                    drop(ours);
                    drop(client);
                    // Plain and vectored (tokio's vectored writes to a
                    // socket are `writev`, which has no flag against it).
                    for round in 0..4 {
                        let line = b"{\"jsonrpc\":\"2.0\"}\n";
                        let sent = if round % 2 == 0 {
                            output.write(line).await
                        } else {
                            let bufs = [std::io::IoSlice::new(line), std::io::IoSlice::new(line)];
                            output.write_vectored(&bufs).await
                        };
                        assert_eq!(
                            sent.err().map(|e| e.kind()),
                            Some(std::io::ErrorKind::BrokenPipe),
                            "write {round}"
                        );
                    }
                });
            },
        );
    }

    #[test]
    fn a_regular_file_stays_on_blocking_streams() {
        let file = tempfile::tempfile().unwrap();
        assert_eq!(kind(file.as_fd()), Kind::Other);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        assert!(open_input(file.as_fd()).unwrap().is_none());
        assert!(open_output(file.as_fd()).unwrap().is_none());
    }
}
