//! Clocks, random and poll, as a program uses them; one line per check:
//!
//! - `wall: SECS`: the wall clock, in seconds since the epoch;
//! - `monotonic: true`: two readings in order do not go back;
//! - `sleep 30 ms: true`: a 30 ms sleep takes at least 30 ms;
//! - `clock resolution: true`: the monotonic clock has a resolution;
//! - `random: 32 bytes, distinct draws: true`: two draws of random bytes;
//! - `poll clock: ok`: polling a single 20 ms timer wakes up once, for it,
//!   after at least 20 ms;
//! - `poll stdin: ok`: polling a 10 s timer and stdin (which has input)
//!   wakes up at once, for stdin.
//!
//! std covers the first three; the rest call the WASI functions of the
//! program's own kind (`poll_oneoff` and `random_get` for preview 1,
//! `wasi:io/poll` and `wasi:random` for a component).

use std::time::{Duration, Instant, SystemTime};

fn main() {
    let wall = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    println!("wall: {wall}");
    let (t0, t1) = (Instant::now(), Instant::now());
    println!("monotonic: {}", t1 >= t0);
    let before = Instant::now();
    std::thread::sleep(Duration::from_millis(30));
    println!(
        "sleep 30 ms: {}",
        before.elapsed() >= Duration::from_millis(30)
    );
    println!("clock resolution: {}", imp::resolution_ns() > 0);
    let (a, b) = (imp::random32(), imp::random32());
    println!(
        "random: {} bytes, distinct draws: {}",
        a.len(),
        a != b && a != [0; 32]
    );
    let before = Instant::now();
    let clock = imp::poll_clock(Duration::from_millis(20));
    let clock = match clock {
        Ok(()) if before.elapsed() >= Duration::from_millis(20) => "ok".to_string(),
        Ok(()) => format!("woke after {:?}", before.elapsed()),
        Err(e) => e,
    };
    println!("poll clock: {clock}");
    let before = Instant::now();
    let stdin = match imp::poll_stdin_or(Duration::from_secs(10)) {
        Ok(()) if before.elapsed() < Duration::from_secs(5) => "ok".to_string(),
        Ok(()) => format!("woke after {:?}", before.elapsed()),
        Err(e) => e,
    };
    println!("poll stdin: {stdin}");
}

#[cfg(all(target_os = "wasi", target_env = "p1"))]
mod imp {
    use std::time::Duration;
    use wasi::{
        CLOCKID_MONOTONIC, EVENTTYPE_CLOCK, EVENTTYPE_FD_READ, Event, Subscription,
        SubscriptionClock, SubscriptionFdReadwrite, SubscriptionU, SubscriptionUU,
    };

    pub fn resolution_ns() -> u64 {
        // SAFETY: a plain WASI call with no pointers.
        unsafe { wasi::clock_res_get(CLOCKID_MONOTONIC) }.unwrap_or(0)
    }

    pub fn random32() -> [u8; 32] {
        let mut buf = [0u8; 32];
        // SAFETY: `buf` is writable for its whole length.
        if unsafe { wasi::random_get(buf.as_mut_ptr(), buf.len()) }.is_err() {
            return [0; 32];
        }
        buf
    }

    fn clock(userdata: u64, after: Duration) -> Subscription {
        Subscription {
            userdata,
            u: SubscriptionU {
                tag: EVENTTYPE_CLOCK.raw(),
                u: SubscriptionUU {
                    clock: SubscriptionClock {
                        id: CLOCKID_MONOTONIC,
                        timeout: after.as_nanos() as u64,
                        precision: 0,
                        flags: 0,
                    },
                },
            },
        }
    }

    /// Polls `subs`; the events that fired.
    fn poll(subs: &[Subscription]) -> Result<Vec<Event>, String> {
        let mut out: Vec<std::mem::MaybeUninit<Event>> = Vec::with_capacity(subs.len());
        // SAFETY: `subs` is readable and `out` has room for one event per
        // subscription, which is the most poll_oneoff writes.
        let n = unsafe {
            wasi::poll_oneoff(subs.as_ptr(), out.as_mut_ptr().cast(), subs.len())
                .map_err(|e| format!("poll_oneoff: {e}"))?
        };
        // SAFETY: poll_oneoff initialised the first `n` events.
        unsafe { out.set_len(n) };
        Ok(out
            .into_iter()
            // SAFETY: as above.
            .map(|e| unsafe { e.assume_init() })
            .collect())
    }

    pub fn poll_clock(after: Duration) -> Result<(), String> {
        let events = poll(&[clock(7, after)])?;
        match events.as_slice() {
            [e] if e.userdata == 7 && e.type_ == EVENTTYPE_CLOCK && e.error.raw() == 0 => Ok(()),
            other => Err(format!("{} events", other.len())),
        }
    }

    pub fn poll_stdin_or(timeout: Duration) -> Result<(), String> {
        let stdin = Subscription {
            userdata: 2,
            u: SubscriptionU {
                tag: EVENTTYPE_FD_READ.raw(),
                u: SubscriptionUU {
                    fd_read: SubscriptionFdReadwrite { file_descriptor: 0 },
                },
            },
        };
        let events = poll(&[clock(1, timeout), stdin])?;
        match events.as_slice() {
            [e] if e.userdata == 2 && e.type_ == EVENTTYPE_FD_READ && e.error.raw() == 0 => Ok(()),
            other => Err(format!(
                "{} events, userdata {:?}",
                other.len(),
                other.iter().map(|e| e.userdata).collect::<Vec<_>>()
            )),
        }
    }
}

#[cfg(all(target_os = "wasi", target_env = "p2"))]
mod imp {
    use std::time::Duration;
    use wasip2::clocks::monotonic_clock;

    pub fn resolution_ns() -> u64 {
        monotonic_clock::resolution()
    }

    pub fn random32() -> [u8; 32] {
        let bytes = wasip2::random::random::get_random_bytes(32);
        <[u8; 32]>::try_from(bytes.as_slice()).unwrap_or([0; 32])
    }

    pub fn poll_clock(after: Duration) -> Result<(), String> {
        let timer = monotonic_clock::subscribe_duration(after.as_nanos() as u64);
        match wasip2::io::poll::poll(&[&timer]).as_slice() {
            [0] => Ok(()),
            other => Err(format!("ready: {other:?}")),
        }
    }

    pub fn poll_stdin_or(timeout: Duration) -> Result<(), String> {
        let timer = monotonic_clock::subscribe_duration(timeout.as_nanos() as u64);
        let stdin = wasip2::cli::stdin::get_stdin();
        let readable = stdin.subscribe();
        match wasip2::io::poll::poll(&[&timer, &readable]).as_slice() {
            [1] => Ok(()),
            other => Err(format!("ready: {other:?}")),
        }
    }
}

/// Native builds (the workspace's own `cargo build`) only need to compile.
#[cfg(not(target_os = "wasi"))]
mod imp {
    use std::time::Duration;

    pub fn resolution_ns() -> u64 {
        1
    }

    pub fn random32() -> [u8; 32] {
        [0; 32]
    }

    pub fn poll_clock(after: Duration) -> Result<(), String> {
        std::thread::sleep(after);
        Ok(())
    }

    pub fn poll_stdin_or(_timeout: Duration) -> Result<(), String> {
        Err("not a WASI program".into())
    }
}
