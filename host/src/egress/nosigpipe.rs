//! The TCP connections of the host's HTTP client and of the MCP HTTP
//! server, and the MCP stdio transport's output when it is a socket: each
//! operation is tried on the socket at once, and waited for only when it
//! would block; no send raises `SIGPIPE`.
//!
//! tokio does not try a socket it connected before its I/O driver has
//! reported it ready: the end of a connect, the first write and the first
//! read each wait for a turn of the driver, which runs on a worker thread.
//! A connect to a nearby server has usually finished when the system call
//! returns, and a request fits the socket's send buffer, so those waits
//! are for nothing. (tokio tries an accepted socket at once already: what
//! the MCP server's connections gain here is only the flag of their sends.)
//! Here the system call comes first; only when it would block (or
//! was interrupted) does the operation wait for the driver's readiness,
//! and then it is tried again, as tokio's own are, through
//! [`TcpStream::try_io`] (which clears a readiness that turns out stale).
//! Every send is made here, with [`SEND_FLAGS`].
//!
//! A caller that is not a runtime worker (a multi-thread runtime's
//! `block_on`) would still be woken for each wait by the worker that owns
//! tokio's I/O driver: two thread wake-ups where the kernel could wake it
//! once. Its exchange's socket ([`Here`], made by [`connect_here`]) is not
//! registered with tokio at first: the [`drive_here`] around the exchange
//! waits for it in `poll(2)` on the caller's own thread, while it is the
//! call's only exchange, until that thread has been blocked on it 1 ms in
//! all (a nearby server's whole exchange); then it waits through tokio.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// Whether an operation's error means "try again later" rather than a
/// failure.
fn again(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// The flags of a send: never `SIGPIPE` for a peer that is gone (a program
/// that embeds the host may keep the signal's default action, which ends
/// it); the send fails with `EPIPE` instead. On Apple's systems
/// `SO_NOSIGPIPE` does the same: socket2 sets it on the sockets it makes
/// (the client's), and mio on its listeners, whose accepted sockets
/// inherit it (the MCP server's).
#[cfg(not(target_vendor = "apple"))]
const SEND_FLAGS: libc::c_int = libc::MSG_NOSIGNAL;
#[cfg(target_vendor = "apple")]
const SEND_FLAGS: libc::c_int = 0;

/// Connects to `addr`, without waiting for the driver when the connection
/// is made by the time the connect returns.
pub(super) async fn connect(addr: SocketAddr) -> io::Result<Tcp> {
    let (socket, connecting) = start_connect(addr)?;
    let stream = TcpStream::from_std(socket.into())?;
    // Connecting, and not done yet: the connect ends when the socket turns
    // writable, with its error if it failed (as tokio's own connect). A
    // wake-up before that (no error, still not connected) clears the
    // readiness and waits for the next; the request's connect timeout
    // bounds it all. A socket closed for writing without an error stays
    // reported closed (tokio never clears that), so waiting again would
    // spin until the timeout: its connect fails at once (`ENOTCONN`).
    if connecting && stream.peer_addr().is_err() {
        loop {
            let ready = stream.ready(Interest::WRITABLE).await?;
            if let Some(e) = stream.take_error()? {
                return Err(e);
            }
            let connected = stream.try_io(Interest::WRITABLE, || match stream.peer_addr() {
                Err(e) if e.kind() == io::ErrorKind::NotConnected && !ready.is_write_closed() => {
                    Err(io::ErrorKind::WouldBlock.into())
                }
                other => other.map(drop),
            });
            match connected {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(Tcp::new(stream))
}

/// A non-blocking socket for `addr`'s family, its connect begun: whether
/// it is still connecting (rather than connected).
fn start_connect(addr: SocketAddr) -> io::Result<(socket2::Socket, bool)> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_nonblocking(true)?;
    match socket.connect(&addr.into()) {
        Ok(()) => Ok((socket, false)),
        Err(e) if in_progress(&e) => Ok((socket, true)),
        Err(e) => Err(e),
    }
}

/// A non-blocking connect that has begun and ends later: `EINPROGRESS`
/// (Windows: `WSAEWOULDBLOCK`). On Linux `EAGAIN` means it never began.
fn in_progress(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(libc::EINPROGRESS)
    }
    #[cfg(not(unix))]
    {
        e.kind() == io::ErrorKind::WouldBlock
    }
}

/// What [`Stream`] needs of a connected stream socket: its readiness
/// (tokio's, or for [`Here`] the socket's own), and the socket for the
/// system calls.
pub(crate) trait Socket: Unpin {
    /// The socket, for `recv` and `send`.
    fn sock_ref(&self) -> socket2::SockRef<'_>;
    /// Waits until the socket may be read (tokio's `poll_read_ready`).
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// Waits until the socket may be written (tokio's `poll_write_ready`).
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// `op`, a readiness it finds stale cleared (tokio's `try_io`).
    fn try_io<R>(&self, interest: Interest, op: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
    /// Whether a readiness wait costs no system call (tokio knows the
    /// socket's readiness): then, once a direction has waited, its
    /// operations wait for readiness before they are tried.
    fn readiness_known(&self) -> bool {
        true
    }
    /// Shuts the writing side down (tokio's `poll_shutdown`).
    fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

/// [`Socket`] for tokio's stream types, whose methods of those names it
/// forwards to.
macro_rules! socket {
    ($t:ty) => {
        impl Socket for $t {
            fn sock_ref(&self) -> socket2::SockRef<'_> {
                socket2::SockRef::from(self)
            }
            fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                <$t>::poll_read_ready(self, cx)
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
            fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                AsyncWrite::poll_shutdown(Pin::new(self), cx)
            }
        }
    };
}
socket!(TcpStream);
#[cfg(unix)]
socket!(tokio::net::UnixStream);

/// A connected TCP stream (the HTTP client's and the MCP HTTP server's).
pub(crate) type Tcp = Stream<TcpStream>;

/// A connected stream socket whose reads and writes are tried at once,
/// each direction until it first has to wait: from then on tokio knows its
/// readiness, and a poll that finds it not ready costs no system call
/// (a [`Here`] socket not registered with tokio is tried at once always).
pub(crate) struct Stream<S> {
    stream: S,
    read_waited: bool,
    write_waited: bool,
}

impl<S: Socket> Stream<S> {
    /// A connected stream (one [`connect`] or [`connect_here`] made, one a
    /// listener accepted, or a socket the process was given), whose sends from now on never
    /// raise `SIGPIPE`.
    pub(crate) fn new(stream: S) -> Stream<S> {
        Stream {
            stream,
            read_waited: false,
            write_waited: false,
        }
    }

    /// `op` on the socket: at once (until its direction first waited, or
    /// always when a readiness wait would cost a system call of its own),
    /// then after each readiness report of `interest` until it neither
    /// would block nor was interrupted. Each try counts against the task's
    /// cooperative budget, as tokio's own operations do (the try at once
    /// here, the others in tokio's readiness), so that a connection that
    /// always has data ready still lets the worker run its other tasks.
    fn poll_op<T>(
        &mut self,
        cx: &mut Context<'_>,
        interest: Interest,
        mut op: impl FnMut(socket2::SockRef<'_>) -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        let waited = if interest.is_writable() {
            &mut self.write_waited
        } else {
            &mut self.read_waited
        };
        if !*waited || !self.stream.readiness_known() {
            let coop = ready!(tokio::task::coop::poll_proceed(cx));
            let done = op(self.stream.sock_ref());
            if !done.as_ref().is_err_and(again) {
                coop.made_progress();
                return Poll::Ready(done);
            }
            // Not done: its budget unit goes back (`coop` is dropped without
            // progress), and tokio's readiness counts the wait.
            *waited = true;
        }
        loop {
            let readiness = if interest.is_writable() {
                self.stream.poll_write_ready(cx)
            } else {
                self.stream.poll_read_ready(cx)
            };
            ready!(readiness)?;
            match self.stream.try_io(interest, || op(self.stream.sock_ref())) {
                Err(e) if again(&e) => {}
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
        // SAFETY: `recv` writes only initialised bytes into the slice, and
        // `n` of them from its start when it returns `n`; those are marked
        // initialised and filled below, and nothing else is.
        let n = ready!(self.poll_op(cx, Interest::READABLE, |s| {
            s.recv(unsafe { buf.unfilled_mut() })
        }))?;
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl<S: Socket> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_op(cx, Interest::WRITABLE, |s| {
            s.send_with_flags(buf, SEND_FLAGS)
        })
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_op(cx, Interest::WRITABLE, |s| {
            s.send_vectored_with_flags(bufs, SEND_FLAGS)
        })
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream.poll_shutdown(cx)
    }
}

/// What a [`Here`] asks of its call: how many exchanges it has in flight
/// (the call's own count, so that nothing is allocated for it per call).
pub(crate) trait Exchanges: Send + Sync {
    /// The call's exchanges in flight now.
    fn in_flight(&self) -> usize;
}

#[cfg(test)]
impl Exchanges for std::sync::atomic::AtomicUsize {
    fn in_flight(&self) -> usize {
        self.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Connects to `addr` with a socket that tokio's I/O driver does not see at
/// first ([`Here`]): its waits are made by the thread that polls it, in the
/// [`drive_here`] around the exchange. `exchanges` counts the call's
/// exchanges in flight.
#[cfg(unix)]
pub(super) async fn connect_here(
    addr: SocketAddr,
    exchanges: std::sync::Arc<dyn Exchanges>,
) -> io::Result<Stream<Here>> {
    let (socket, connecting) = start_connect(addr)?;
    let here = Here {
        socket: socket.into(),
        registered: std::sync::OnceLock::new(),
        exchanges,
        blocked: std::sync::Arc::default(),
    };
    // As [`connect`]: a connect that has finished by now needs no wait; one
    // that ends does so when the socket turns writable, with its error if it
    // failed. Reported writable, yet neither connected nor failed: a socket
    // closed without an error, or asked here (`poll(2)`, which reports the
    // socket as it is, not a readiness that may be stale), fails at once
    // (`ENOTCONN`); only tokio's stale readiness is cleared and waited past.
    if connecting && here.socket.peer_addr().is_err() {
        loop {
            std::future::poll_fn(|cx| here.poll_write_ready(cx)).await?;
            if let Some(e) = here.socket.take_error()? {
                return Err(e);
            }
            match here.socket.peer_addr() {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                    let revents = poll_fd(here.fd(), libc::POLLOUT, 0)?;
                    if !here.readiness_known() || revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                        return Err(e);
                    }
                    here.clear_readiness(Interest::WRITABLE);
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(Stream::new(here))
}

/// Two bounds of the same size: the longest a [`drive_here`] blocks its
/// thread in one poll (about; it may overrun by one `poll(2)`
/// millisecond), and how long a [`Here`] socket's thread may be blocked on
/// it in all, over its whole exchange, before it waits through tokio.
#[cfg(unix)]
const WAIT_SLICE: std::time::Duration = std::time::Duration::from_millis(1);

/// How much a look that finds the socket not ready counts toward its
/// [`WAIT_SLICE`] (microseconds): ten such looks send it to tokio.
#[cfg(unix)]
const LOOK_CHARGE_US: u64 = 100;

/// The most times a [`drive_here`] polls again in one poll (each after a
/// socket turned ready or something woke the future): a server that sends
/// a little at a time cannot hold the caller's thread, whose deadline and
/// cancellation are polled around it.
#[cfg(unix)]
const MAX_TURNS: usize = 16;

#[cfg(unix)]
thread_local! {
    /// Whether a [`drive_here`] is polling on this thread.
    static DRIVING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The socket and events a [`Here`] that had to wait is waiting for,
    /// taken by the [`drive_here`] around it.
    static WANTED: std::cell::Cell<Option<Wanted>> = const { std::cell::Cell::new(None) };
}

#[cfg(all(unix, test))]
thread_local! {
    /// For the tests: how many times a [`drive_here`] on this thread
    /// blocked in `poll(2)`, and how many of those a socket ended (rather
    /// than the slice).
    static BLOCKED: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
}

/// What a [`Here`] that had to wait is waiting for.
#[cfg(unix)]
struct Wanted {
    fd: std::os::fd::RawFd,
    events: libc::c_short,
    /// The socket's time blocked in `poll(2)` so far, in microseconds.
    blocked: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// For the tests: [`BLOCKED`] on this thread, and zeroes it.
#[cfg(all(unix, test))]
pub(crate) fn take_blocked() -> (usize, usize) {
    BLOCKED.replace((0, 0))
}

/// `poll(2)` of one socket for `events`, for at most `ms` milliseconds:
/// what of them (or an error, or the peer's end) it reported, 0 when
/// nothing came (or a signal interrupted the wait).
#[cfg(unix)]
fn poll_fd(
    fd: std::os::fd::RawFd,
    events: libc::c_short,
    ms: libc::c_int,
) -> io::Result<libc::c_short> {
    let mut fd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one pollfd, valid for the call.
    match unsafe { libc::poll(&mut fd, 1, ms) } {
        n if n > 0 => Ok(fd.revents),
        0 => Ok(0),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(0)
            } else {
                Err(e)
            }
        }
    }
}

/// The waker a [`drive_here`] polls with: it notes that something woke the
/// future (then it is polled again at once, not blocked on its socket),
/// and passes the wake-up on to the caller's waker.
#[cfg(unix)]
struct Noted {
    woken: std::sync::atomic::AtomicBool,
    outer: std::task::Waker,
}

#[cfg(unix)]
impl std::task::Wake for Noted {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.woken.store(true, std::sync::atomic::Ordering::Release);
        self.outer.wake_by_ref();
    }
}

/// [`DRIVING`] set while a [`drive_here`] polls, cleared (and [`WANTED`]
/// with it) when it returns or unwinds. Drivers do not nest: each wraps an
/// exchange's own polls, and an exchange polls no other.
#[cfg(unix)]
struct Driving;

#[cfg(unix)]
impl Driving {
    fn enter() -> Driving {
        debug_assert!(!DRIVING.get(), "a drive_here inside another");
        DRIVING.set(true);
        Driving
    }
}

#[cfg(unix)]
impl Drop for Driving {
    fn drop(&mut self) {
        DRIVING.set(false);
        WANTED.set(None);
    }
}

/// Polls `poll`, whose [`Here`] sockets wait on this thread. When it is
/// pending on one of them, and nothing else woke it meanwhile, this thread
/// blocks in `poll(2)` on that socket and polls again when the socket is
/// ready; within [`WAIT_SLICE`] and [`MAX_TURNS`] in all, after which it
/// returns pending, woken at once, so that the caller's other futures (the
/// call's deadline, its cancellation, the request's timeouts, the guest's
/// other pollables) are polled. A future woken while it was polled is
/// polled again at once while tokio's cooperative budget lasts. A look
/// (a poll with the no-op waker, as wasi's non-blocking reads and
/// `future-incoming-response.get` make) never blocks.
#[cfg(unix)]
pub(crate) fn drive_here<T>(
    cx: &mut Context<'_>,
    mut poll: impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> Poll<T> {
    use std::sync::atomic::Ordering;
    // The no-op waker may be a copy of its own in another crate: a null
    // data pointer is taken for one too (a waker that wakes something
    // points at it). Either way the caller is woken before pending is
    // returned, so a look taken for a wait costs a poll, never a wake-up.
    let look = cx.waker().will_wake(std::task::Waker::noop()) || cx.waker().data().is_null();
    if look {
        let _driving = Driving::enter();
        WANTED.set(None);
        let polled = poll(cx);
        // A look finds nothing: counted as blocked a while, so that a
        // caller that only ever looks (or a waker taken for a look) has the
        // socket wait through tokio soon.
        if polled.is_pending()
            && let Some(wanted) = WANTED.take()
        {
            wanted.blocked.fetch_add(LOOK_CHARGE_US, Ordering::Relaxed);
            cx.waker().wake_by_ref();
        }
        return polled;
    }
    let noted = std::sync::Arc::new(Noted {
        woken: std::sync::atomic::AtomicBool::new(false),
        outer: cx.waker().clone(),
    });
    let waker = std::task::Waker::from(noted.clone());
    let mut inner = Context::from_waker(&waker);
    let _driving = Driving::enter();
    let mut until = None;
    for _ in 0..MAX_TURNS {
        WANTED.set(None);
        if let Poll::Ready(out) = poll(&mut inner) {
            return Poll::Ready(out);
        }
        // Pending on something else only: its waker wakes the caller.
        let Some(wanted) = WANTED.take() else {
            return Poll::Pending;
        };
        if noted.woken.swap(false, Ordering::AcqRel) {
            if tokio::task::coop::has_budget_remaining() {
                continue;
            }
            // Out of budget: the caller, woken already, runs its others.
            return Poll::Pending;
        }
        let until = *until.get_or_insert_with(|| std::time::Instant::now() + WAIT_SLICE);
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        let ms = libc::c_int::try_from(left.as_micros().div_ceil(1000)).unwrap_or(1);
        let blocking = std::time::Instant::now();
        let ready = poll_fd(wanted.fd, wanted.events, ms).is_ok_and(|r| r != 0);
        let blocked = u64::try_from(blocking.elapsed().as_micros()).unwrap_or(u64::MAX);
        wanted.blocked.fetch_add(blocked, Ordering::Relaxed);
        #[cfg(test)]
        BLOCKED.set({
            let (n, r) = BLOCKED.get();
            (n + 1, r + usize::from(ready))
        });
        if !ready {
            break;
        }
    }
    cx.waker().wake_by_ref();
    Poll::Pending
}

/// A connected socket that tokio's I/O driver does not see while its waits
/// can be made by the thread that polls it: a caller that is not a runtime
/// worker (a multi-thread runtime's `block_on`), where tokio's readiness
/// would come from a worker thread, which then wakes the caller (two
/// thread wake-ups where the kernel wakes the caller once). It is
/// registered with tokio, for good, when a wait would be made anywhere
/// else: outside a [`drive_here`], while the call has other exchanges in
/// flight (so that none of them waits for another's socket), or once its
/// thread has been blocked on it for [`WAIT_SLICE`] in all (a slow or
/// dribbling server: the call is not polled again every slice while it
/// waits).
#[cfg(unix)]
pub(crate) struct Here {
    socket: std::net::TcpStream,
    /// The same socket registered with tokio, once it waits through it.
    registered: std::sync::OnceLock<TcpStream>,
    /// The call's exchanges in flight.
    exchanges: std::sync::Arc<dyn Exchanges>,
    /// The time its thread has been blocked on it, in microseconds.
    blocked: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

#[cfg(unix)]
impl Here {
    fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.socket.as_raw_fd()
    }

    /// The socket registered with tokio, registered now if its waits can
    /// no longer be made here; `None` while they can.
    fn registered(&self) -> io::Result<Option<&TcpStream>> {
        if let Some(t) = self.registered.get() {
            return Ok(Some(t));
        }
        let alone = self.exchanges.in_flight() <= 1;
        let waited_long = u128::from(self.blocked.load(std::sync::atomic::Ordering::Relaxed))
            >= WAIT_SLICE.as_micros();
        if alone && DRIVING.get() && !waited_long {
            return Ok(None);
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(io::Error::other("no runtime to wait in"));
        }
        let t = TcpStream::from_std(self.socket.try_clone()?)?;
        Ok(Some(self.registered.get_or_init(|| t)))
    }

    /// Whether the socket has any of `events`; if not, the [`drive_here`]
    /// around it waits for them (`WANTED`), or tokio does.
    fn ready(&self, cx: &mut Context<'_>, events: libc::c_short) -> Poll<io::Result<()>> {
        let tokio = match self.registered() {
            Ok(t) => t,
            Err(e) => return Poll::Ready(Err(e)),
        };
        if let Some(t) = tokio {
            return if events == libc::POLLIN {
                t.poll_read_ready(cx)
            } else {
                t.poll_write_ready(cx)
            };
        }
        let fd = self.fd();
        match poll_fd(fd, events, 0) {
            Err(e) => Poll::Ready(Err(e)),
            Ok(r) if r != 0 => Poll::Ready(Ok(())),
            Ok(_) => {
                let events = match WANTED.take() {
                    Some(w) if w.fd == fd => w.events | events,
                    _ => events,
                };
                WANTED.set(Some(Wanted {
                    fd,
                    events,
                    blocked: self.blocked.clone(),
                }));
                Poll::Pending
            }
        }
    }

    /// Forgets a readiness of `interest` that turned out stale (tokio's,
    /// once registered; a wait here asks the socket each time).
    fn clear_readiness(&self, interest: Interest) {
        if let Some(t) = self.registered.get() {
            let _ = t.try_io(interest, || Err::<(), _>(io::ErrorKind::WouldBlock.into()));
        }
    }
}

/// A wait recorded for a socket that is closed now is forgotten (its
/// descriptor may be another's by the time the driver would block on it).
#[cfg(unix)]
impl Drop for Here {
    fn drop(&mut self) {
        if let Some(w) = WANTED.take()
            && w.fd != self.fd()
        {
            WANTED.set(Some(w));
        }
    }
}

#[cfg(unix)]
impl Socket for Here {
    fn sock_ref(&self) -> socket2::SockRef<'_> {
        socket2::SockRef::from(&self.socket)
    }
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.ready(cx, libc::POLLIN)
    }
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.ready(cx, libc::POLLOUT)
    }
    fn try_io<R>(&self, interest: Interest, op: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match self.registered.get() {
            Some(t) => t.try_io(interest, op),
            None => op(),
        }
    }
    fn readiness_known(&self) -> bool {
        self.registered.get().is_some()
    }
    /// A socket the peer has already reset is not connected any more: its
    /// shutdown has nothing to do, and is not an error of the exchange.
    fn poll_shutdown(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.socket.shutdown(std::net::Shutdown::Write) {
            Err(e) if e.kind() != io::ErrorKind::NotConnected => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(())),
        }
    }
}

/// Without `poll(2)`: a socket registered with tokio, as [`connect`]'s.
#[cfg(not(unix))]
pub(super) async fn connect_here(
    addr: SocketAddr,
    _exchanges: std::sync::Arc<dyn Exchanges>,
) -> io::Result<Tcp> {
    connect(addr).await
}

/// Without `poll(2)`: `poll` alone.
#[cfg(not(unix))]
pub(crate) fn drive_here<T>(
    cx: &mut Context<'_>,
    mut poll: impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> Poll<T> {
    poll(cx)
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

    /// How many connections wait in a listener's accept queue, and the most
    /// it holds (Linux reports both in a listener's `TCP_INFO`).
    #[cfg(target_os = "linux")]
    fn accept_queue(listener: &tokio::net::TcpListener) -> (u32, u32) {
        use std::os::fd::AsRawFd;
        // SAFETY: `tcp_info` is a C struct of integers, valid all zero.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: the pointer and length describe `info`, which outlives
        // the call; the fd is the listener's, open for the call.
        let r = unsafe {
            libc::getsockopt(
                listener.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0, "TCP_INFO: {}", io::Error::last_os_error());
        (info.tcpi_unacked, info.tcpi_sacked)
    }

    /// A listener on loopback whose accept queue is full, so that a
    /// connect to it stays in progress (its SYN is dropped, and sent again
    /// a second later); with the connections that fill it, and any that
    /// wait to. The queue itself is read, since a connection's handshake may
    /// end after its connect returns.
    #[cfg(target_os = "linux")]
    async fn full_listener() -> (tokio::net::TcpListener, Vec<socket2::Socket>) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap_or_else(|e| panic!("{e}"));
        socket
            .bind("127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
        let listener = socket.listen(1).unwrap_or_else(|e| panic!("{e}"));
        let addr: socket2::SockAddr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("{e}"))
            .into();
        let mut queued = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (waiting, most) = accept_queue(&listener);
            if waiting > most {
                return (listener, queued);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the accept queue never filled: {waiting} of {most}"
            );
            if queued.len() < 8 {
                let probe =
                    socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                        .unwrap_or_else(|e| panic!("{e}"));
                probe
                    .set_nonblocking(true)
                    .unwrap_or_else(|e| panic!("{e}"));
                let _ = probe.connect(&addr);
                queued.push(probe);
            } else {
                tokio::task::yield_now().await;
            }
        }
    }

    /// A connect to a [`full_listener`], run up to its wait: the listener,
    /// the connections in its queue and the connect.
    #[cfg(target_os = "linux")]
    async fn waiting_connect() -> (
        tokio::net::TcpListener,
        Vec<socket2::Socket>,
        tokio::task::JoinHandle<io::Result<Tcp>>,
    ) {
        let (listener, queued) = full_listener().await;
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let connecting = tokio::spawn(connect(addr));
        // The connect runs up to its wait (one thread: it runs before this).
        tokio::task::yield_now().await;
        assert!(!connecting.is_finished(), "the connect did not wait");
        (listener, queued, connecting)
    }

    /// A connect that does not end at once waits for its end: when the
    /// server makes room, the connection is made and carries data.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_connect_in_progress_waits_for_its_end() {
        let (listener, queued, connecting) = waiting_connect().await;
        // The server takes every connection from now on; the connect's
        // SYN, sent again, finds room.
        let (accepted, mut taken) = tokio::sync::mpsc::unbounded_channel();
        let server = tokio::spawn(async move {
            while let Ok(conn) = listener.accept().await {
                if accepted.send(conn).is_err() {
                    break;
                }
            }
        });
        let within = std::time::Duration::from_secs(30);
        let mut stream = tokio::time::timeout(within, connecting)
            .await
            .unwrap_or_else(|_| panic!("the connect never ended"))
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|e| panic!("{e}"));
        let ours = stream.stream.local_addr().unwrap_or_else(|e| panic!("{e}"));
        stream
            .write_all(b"ping")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut peer = tokio::time::timeout(within, async {
            while let Some((s, from)) = taken.recv().await {
                if from == ours {
                    return s;
                }
            }
            panic!("the server stopped before the connection reached it");
        })
        .await
        .unwrap_or_else(|_| panic!("the connection never reached the server"));
        let mut got = [0u8; 4];
        peer.read_exact(&mut got)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&got, b"ping");
        server.abort();
        drop(queued);
    }

    /// A connect in progress to a server that goes away ends with the
    /// refusal (its SYN, sent again, is answered with a reset).
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_connect_in_progress_that_is_refused_is_an_error() {
        let (listener, queued, connecting) = waiting_connect().await;
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        drop((listener, queued));
        // The port held by a socket that does not listen, so that no other
        // test's listener takes it before the connect's SYN comes again.
        let hold = tokio::net::TcpSocket::new_v4().unwrap_or_else(|e| panic!("{e}"));
        hold.set_reuseaddr(true).unwrap_or_else(|e| panic!("{e}"));
        hold.bind(addr).unwrap_or_else(|e| panic!("{e}"));
        let refused = tokio::time::timeout(std::time::Duration::from_secs(30), connecting)
            .await
            .unwrap_or_else(|_| panic!("the connect never ended"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            refused.err().map(|e| e.kind()),
            Some(io::ErrorKind::ConnectionRefused)
        );
        drop(hold);
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

    /// A connection that always has data ready still lets its thread's
    /// other tasks run: each read counts against tokio's cooperative
    /// budget, and the task's turn ends when the budget is spent, though
    /// no read ever had to wait.
    #[test]
    fn a_connection_that_is_always_ready_still_gives_up_its_thread() {
        // Within the connection's first window (so that it all comes
        // before any read), and 256 reads of 64 bytes: twice a turn's
        // budget.
        const SENT: usize = 16 << 10;
        current_thread().block_on(async {
            let (mut stream, peer) = pair(Side::Connected).await;
            // All in the stream's receive queue before the first read, so
            // that every read below finds data at once.
            let mut peer = peer.into_std().unwrap_or_else(|e| panic!("{e}"));
            peer.set_nonblocking(false)
                .unwrap_or_else(|e| panic!("{e}"));
            std::io::Write::write_all(&mut peer, &[7u8; SENT]).unwrap_or_else(|e| panic!("{e}"));
            let queued = || {
                let mut n: libc::c_int = 0;
                // SAFETY: FIONREAD writes one int, the bytes queued for
                // reading, through the pointer it is given.
                let r = unsafe {
                    libc::ioctl(
                        std::os::fd::AsRawFd::as_raw_fd(&stream.stream),
                        libc::FIONREAD,
                        &mut n,
                    )
                };
                assert_eq!(r, 0, "{}", io::Error::last_os_error());
                usize::try_from(n).unwrap_or(0)
            };
            let by = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while queued() < SENT {
                assert!(std::time::Instant::now() < by, "the data never arrived");
                std::thread::yield_now();
            }
            // Another task of this (one) thread: it runs only when the
            // reader gives the thread up.
            let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            tokio::spawn({
                let ran = ran.clone();
                async move { ran.store(true, std::sync::atomic::Ordering::SeqCst) }
            });
            // Small reads, more than one turn's budget.
            let (mut read, mut small) = (0, [0u8; 64]);
            while read < SENT && !ran.load(std::sync::atomic::Ordering::SeqCst) {
                let n = stream
                    .read(&mut small)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                assert!(n > 0, "the stream ended after {read} bytes");
                read += n;
            }
            assert!(
                ran.load(std::sync::atomic::Ordering::SeqCst),
                "all {read} bytes were read in one turn: the other task never ran"
            );
            assert!(read < SENT, "{read}");
            // The turn ended on the budget, not on a read that waited.
            assert!(!stream.read_waited);
        });
    }

    /// A readiness that turns out stale (the data it announced is gone
    /// before the read) is cleared, and the read waits for the next one,
    /// instead of trying again at once for ever.
    #[test]
    fn a_stale_readiness_is_cleared_and_waited_for_again() {
        let (done, result) = std::sync::mpsc::channel();
        // On a thread of its own: a read that spins never gives its thread
        // back, and the wait for it below must still end.
        let reader = std::thread::spawn(move || {
            let got = current_thread().block_on(async {
                let (mut stream, mut peer) = pair(Side::Connected).await;
                // A second descriptor of the same socket, which takes the
                // byte that the stream's readiness announces.
                // SAFETY: `dup` returns a new descriptor or -1 (checked
                // before it is used), owned from here by `thief` alone.
                let thief = unsafe {
                    let fd = libc::dup(std::os::fd::AsRawFd::as_raw_fd(&stream.stream));
                    assert!(fd >= 0, "{}", io::Error::last_os_error());
                    <std::net::TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd)
                };
                peer.write_all(b"x").await.unwrap_or_else(|e| panic!("{e}"));
                // The driver has seen it: the stream is marked readable.
                let ready = stream
                    .stream
                    .ready(Interest::READABLE)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                assert!(ready.is_readable());
                let mut taken = [0u8; 1];
                assert_eq!(
                    std::io::Read::read(&mut &thief, &mut taken).unwrap_or_else(|e| panic!("{e}")),
                    1
                );
                // Marked readable with nothing to read: the read must
                // wait, and get the byte sent after. Unconstrained by the
                // cooperative budget, which would otherwise end a spin too.
                let mut got = [0u8; 1];
                let reading = tokio::task::coop::unconstrained(stream.read(&mut got));
                let (read, sent) = tokio::join!(reading, async {
                    tokio::task::yield_now().await;
                    peer.write_all(b"y").await
                });
                sent.unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(read.unwrap_or_else(|e| panic!("{e}")), 1);
                assert!(stream.read_waited);
                got[0]
            });
            let _ = done.send(got);
        });
        let got = match result.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(got) => got,
            // The thread ended without its byte: its panic is the failure.
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match reader.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => panic!("the reader ended without a result"),
            },
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("the read never ended"),
        };
        assert_eq!(got, b'y');
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

    /// A [`Here`] socket connected to a fresh loopback listener, counted as
    /// one of `exchanges` exchanges in flight, and its peer.
    #[cfg(unix)]
    fn here_pair(exchanges: usize) -> (Stream<Here>, std::net::TcpStream) {
        let listener =
            std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        // Connected here, so that no wait of the connect registers it.
        let socket = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("{e}"));
        socket
            .set_nonblocking(true)
            .unwrap_or_else(|e| panic!("{e}"));
        let here = Stream::new(Here {
            socket,
            registered: std::sync::OnceLock::new(),
            exchanges: std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(exchanges)),
            blocked: std::sync::Arc::default(),
        });
        let (peer, _) = listener.accept().unwrap_or_else(|e| panic!("{e}"));
        (here, peer)
    }

    /// [`connect_here`] connects to a listener (unregistered: it waited
    /// nowhere, or on its own thread), and a port nobody listens on refuses
    /// it; either way within one driven poll or a few.
    #[cfg(unix)]
    #[test]
    fn connect_here_connects_or_is_refused() {
        let rt = current_thread();
        let listener =
            std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap_or_else(|e| panic!("{e}"));
        let open = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let closed = {
            let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap_or_else(|e| panic!("{e}"));
            l.local_addr().unwrap_or_else(|e| panic!("{e}"))
        };
        let count = || -> std::sync::Arc<dyn Exchanges> {
            std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(1))
        };
        let driven = |addr| {
            rt.block_on(async {
                let mut connecting = std::pin::pin!(connect_here(addr, count()));
                std::future::poll_fn(|cx| drive_here(cx, |cx| connecting.as_mut().poll(cx))).await
            })
        };
        let here = driven(open).unwrap_or_else(|e| panic!("{e}"));
        assert!(here.stream.registered.get().is_none());
        assert!(listener.accept().is_ok());
        let refused = driven(closed).err().map(|e| e.kind());
        assert_eq!(refused, Some(io::ErrorKind::ConnectionRefused));
    }

    /// A waker that counts its wake-ups.
    struct Count(std::sync::atomic::AtomicUsize);
    impl std::task::Wake for Count {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// The call's only exchange: when its read must wait, the thread that
    /// polls it waits for the socket itself, in `poll(2)`, and the read
    /// completes within that one poll of the driver, the socket never
    /// registered with tokio and the caller never woken. (The peer writes
    /// once the read has found nothing: from inside the polled future,
    /// before the driver blocks.)
    #[cfg(unix)]
    #[test]
    fn an_only_exchange_waits_on_the_callers_thread() {
        use std::io::Write;
        let rt = current_thread();
        let _in_runtime = rt.enter();
        let (mut here, mut peer) = here_pair(1);
        let count = std::sync::Arc::new(Count(std::sync::atomic::AtomicUsize::new(0)));
        let waker = std::task::Waker::from(count.clone());
        BLOCKED.set((0, 0));
        for i in 0..3u8 {
            // Each read on its own: a preempted earlier one must not count.
            here.stream
                .blocked
                .store(0, std::sync::atomic::Ordering::Relaxed);
            let mut byte = [0u8];
            let mut wrote = false;
            let read = drive_here(&mut Context::from_waker(&waker), |cx| {
                let mut buf = ReadBuf::new(&mut byte);
                let read = Pin::new(&mut here).poll_read(cx, &mut buf);
                if read.is_pending() && !wrote {
                    peer.write_all(&[i]).unwrap_or_else(|e| panic!("{e}"));
                    wrote = true;
                }
                read.map_ok(|()| buf.filled().len())
            });
            assert!(matches!(read, Poll::Ready(Ok(1))), "{read:?}");
            assert_eq!(byte[0], i);
        }
        assert_eq!(BLOCKED.get(), (3, 3));
        assert_eq!(count.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert!(here.stream.registered.get().is_none());
    }

    /// A server that always has a little more for the exchange (which
    /// always wants more) cannot hold the caller's thread: the driver polls
    /// again at most [`MAX_TURNS`] times, then returns pending, the caller
    /// woken, so that its deadline and cancellation are polled.
    #[cfg(unix)]
    #[test]
    fn a_driver_gives_the_thread_back() {
        use std::io::Write;
        let (here, mut peer) = here_pair(1);
        // Data that the polled future never reads: the socket stays ready.
        peer.write_all(b"more").unwrap_or_else(|e| panic!("{e}"));
        let count = std::sync::Arc::new(Count(std::sync::atomic::AtomicUsize::new(0)));
        let waker = std::task::Waker::from(count.clone());
        let mut polls = 0;
        let started = std::time::Instant::now();
        let out = drive_here(&mut Context::from_waker(&waker), |_| {
            polls += 1;
            WANTED.set(Some(Wanted {
                fd: here.stream.fd(),
                events: libc::POLLIN,
                blocked: here.stream.blocked.clone(),
            }));
            Poll::<()>::Pending
        });
        assert!(out.is_pending());
        // Its turns, or fewer if this thread was held up for the slice.
        assert!(
            polls == MAX_TURNS || (polls < MAX_TURNS && started.elapsed() >= WAIT_SLICE),
            "{polls}"
        );
        assert_eq!(count.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// A socket whose thread has been blocked on it for [`WAIT_SLICE`] in
    /// all (a silent or slow server) is registered with tokio from then on:
    /// the driver blocks on it no more, and wakes no one itself.
    #[cfg(unix)]
    #[test]
    fn a_socket_waited_on_for_a_slice_goes_to_tokio() {
        let rt = current_thread();
        let _in_runtime = rt.enter();
        let (mut here, _silent) = here_pair(1);
        let count = std::sync::Arc::new(Count(std::sync::atomic::AtomicUsize::new(0)));
        let waker = std::task::Waker::from(count.clone());
        BLOCKED.set((0, 0));
        let mut byte = [0u8];
        let mut wakes = 0;
        for _ in 0..10 {
            let read = drive_here(&mut Context::from_waker(&waker), |cx| {
                Pin::new(&mut here).poll_read(cx, &mut ReadBuf::new(&mut byte))
            });
            assert!(read.is_pending());
            if here.stream.registered.get().is_some() {
                break;
            }
            wakes += 1;
            // Each blocked poll before then ended with the slice, and woke
            // the caller to come back.
            assert_eq!(count.0.load(std::sync::atomic::Ordering::SeqCst), wakes);
        }
        assert!(here.stream.registered.get().is_some());
        assert_eq!(BLOCKED.get(), (wakes, 0));
        // The poll that registered it blocked no more and woke nobody.
        assert_eq!(count.0.load(std::sync::atomic::Ordering::SeqCst), wakes);
        assert!(wakes >= 1);
    }

    /// Once the call has other exchanges in flight, a socket that must wait
    /// is registered with tokio and woken by its driver (so that no
    /// exchange waits in `poll(2)` for another's socket); its data is read.
    #[cfg(unix)]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn among_other_exchanges_a_socket_waits_through_tokio() {
        use std::io::Write;
        use tokio::io::AsyncReadExt;
        let (mut here, mut peer) = here_pair(2);
        let mut byte = [0u8];
        let reading = std::future::poll_fn(|cx| {
            drive_here(cx, |cx| {
                let mut buf = ReadBuf::new(&mut byte);
                ready!(Pin::new(&mut here).poll_read(cx, &mut buf))?;
                Poll::Ready(io::Result::Ok(buf.filled().len()))
            })
        });
        let mut reading = std::pin::pin!(reading);
        // Nothing there yet: it waits, registered, without blocking.
        BLOCKED.set((0, 0));
        assert!(futures::poll!(reading.as_mut()).is_pending());
        assert_eq!(BLOCKED.get(), (0, 0));
        peer.write_all(b"x").unwrap_or_else(|e| panic!("{e}"));
        let n = tokio::time::timeout(std::time::Duration::from_secs(60), reading)
            .await
            .unwrap_or_else(|_| panic!("the registered socket was never woken"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((n, byte[0]), (1, b'x'));
        assert!(here.stream.registered.get().is_some());
        assert_eq!(BLOCKED.get(), (0, 0));
        drop(peer);
        let mut rest = Vec::new();
        here.read_to_end(&mut rest)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(rest.is_empty());
    }

    /// A wait with no driver around it (a path that polls the socket
    /// directly) is made through tokio: the socket is registered, and the
    /// read is woken when the peer writes. A look without a waker (wasi's
    /// `poll_noop`, as its non-blocking reads and
    /// `future-incoming-response.get` poll) never blocks on the socket.
    #[cfg(unix)]
    #[test]
    fn a_wait_outside_a_driver_goes_through_tokio_and_a_look_does_not_wait() {
        use std::io::Write;
        use tokio::io::AsyncReadExt;
        let rt = current_thread();
        let (mut here, mut peer) = here_pair(1);
        BLOCKED.set((0, 0));
        let mut byte = [0u8];
        let looked =
            wasmtime_wasi::runtime::poll_noop(std::pin::pin!(std::future::poll_fn(|cx| {
                drive_here(cx, |cx| {
                    Pin::new(&mut here).poll_read(cx, &mut ReadBuf::new(&mut byte))
                })
            })));
        assert!(looked.is_none());
        // Another crate's no-op waker (a waker with no data) is a look too.
        let mut other = Context::from_waker(futures::task::noop_waker_ref());
        let looked = drive_here(&mut other, |cx| {
            Pin::new(&mut here).poll_read(cx, &mut ReadBuf::new(&mut byte))
        });
        assert!(looked.is_pending());
        assert_eq!(BLOCKED.get(), (0, 0));
        assert!(here.stream.registered.get().is_none());
        rt.block_on(async {
            let mut reading = std::pin::pin!(here.read(&mut byte));
            assert!(futures::poll!(reading.as_mut()).is_pending());
            peer.write_all(b"y").unwrap_or_else(|e| panic!("{e}"));
            let n = tokio::time::timeout(std::time::Duration::from_secs(60), reading)
                .await
                .unwrap_or_else(|_| panic!("the registered socket was never woken"))
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!((n, byte[0]), (1, b'y'));
        });
        assert!(here.stream.registered.get().is_some());
        assert_eq!(BLOCKED.get(), (0, 0));
    }

    /// A future woken while it was polled (as hyper's channel wakes the
    /// request when the connection hands it the response's head) is polled
    /// again at once by the driver, not left to wait on the socket it is
    /// also pending on.
    #[cfg(unix)]
    #[test]
    fn a_driver_polls_again_what_was_woken() {
        let (mut here, _peer) = here_pair(1);
        let count = std::sync::Arc::new(Count(std::sync::atomic::AtomicUsize::new(0)));
        let waker = std::task::Waker::from(count.clone());
        BLOCKED.set((0, 0));
        let mut polls = 0;
        let mut byte = [0u8];
        let out = drive_here(&mut Context::from_waker(&waker), |cx| {
            polls += 1;
            if polls > 1 {
                return Poll::Ready(polls);
            }
            // Pending on the silent socket, and woken by something else.
            let mut buf = ReadBuf::new(&mut byte);
            assert!(Pin::new(&mut here).poll_read(cx, &mut buf).is_pending());
            cx.waker().wake_by_ref();
            Poll::Pending
        });
        assert_eq!(out, Poll::Ready(2));
        // Not blocked on the socket; the wake-up passed on to the caller.
        assert_eq!(BLOCKED.get(), (0, 0));
        assert_eq!(count.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
