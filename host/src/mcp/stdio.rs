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
//! [`Stdio::restore`] puts blocking mode back when the session ends.

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
    /// Which of fd 0 and fd 1 were switched to non-blocking mode.
    switched: [bool; 2],
}

impl Stdio {
    /// Opens stdin and stdout: non-blocking where they are pipes or
    /// sockets, tokio's blocking streams otherwise (or where switching
    /// fails). Needs a tokio runtime with I/O enabled.
    pub(crate) fn open() -> Stdio {
        let (input, in_switched) = match open_input(io::stdin().as_fd()) {
            Ok(Some(input)) => (input, true),
            Ok(None) => (Box::new(tokio::io::stdin()) as Input, false),
            Err(e) => {
                tracing::debug!("stdin stays on blocking reads: {e}");
                (Box::new(tokio::io::stdin()) as Input, false)
            }
        };
        let (output, out_switched) = match open_output(io::stdout().as_fd()) {
            Ok(Some(output)) => (output, true),
            Ok(None) => (Box::new(tokio::io::stdout()) as Output, false),
            Err(e) => {
                tracing::debug!("stdout stays on blocking writes: {e}");
                (Box::new(tokio::io::stdout()) as Output, false)
            }
        };
        Stdio {
            input,
            output,
            switched: [in_switched, out_switched],
        }
    }

    /// Whether stdin and stdout are read and written without blocking.
    pub(crate) fn non_blocking(&self) -> [bool; 2] {
        self.switched
    }

    /// Puts blocking mode back on the standard streams that were switched
    /// (call once the session's streams are dropped).
    pub(crate) fn restore(switched: [bool; 2]) {
        if switched[0] {
            let _ = rustix::io::ioctl_fionbio(io::stdin().as_fd(), false);
        }
        if switched[1] {
            let _ = rustix::io::ioctl_fionbio(io::stdout().as_fd(), false);
        }
    }
}

/// `fd` as a non-blocking input stream, if it is a pipe or a socket. The
/// stream owns a duplicate of `fd`.
pub(crate) fn open_input(fd: BorrowedFd<'_>) -> io::Result<Option<Input>> {
    match kind(fd) {
        Kind::Pipe => {
            let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(fd.try_clone_to_owned()?)?;
            Ok(Some(Box::new(pipe)))
        }
        Kind::Socket => Ok(Some(Box::new(socket(fd)?))),
        Kind::Other => Ok(None),
    }
}

/// `fd` as a non-blocking output stream, if it is a pipe or a socket. The
/// stream owns a duplicate of `fd`.
pub(crate) fn open_output(fd: BorrowedFd<'_>) -> io::Result<Option<Output>> {
    match kind(fd) {
        Kind::Pipe => {
            let pipe = tokio::net::unix::pipe::Sender::from_owned_fd(fd.try_clone_to_owned()?)?;
            Ok(Some(Box::new(pipe)))
        }
        Kind::Socket => Ok(Some(Box::new(socket(fd)?))),
        Kind::Other => Ok(None),
    }
}

/// A stream socket behind `fd`, non-blocking, registered with tokio. Reads
/// and writes are plain `read(2)` and `write(2)` on the descriptor, so any
/// stream socket works, not only a Unix one.
fn socket(fd: BorrowedFd<'_>) -> io::Result<tokio::net::UnixStream> {
    let owned: OwnedFd = fd.try_clone_to_owned()?;
    rustix::io::ioctl_fionbio(&owned, true)?;
    tokio::net::UnixStream::from_std(std::os::unix::net::UnixStream::from(owned))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
