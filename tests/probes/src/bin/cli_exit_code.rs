//! A WASI command program for `toolhost exec`: prints its arguments after
//! the first (one per line) and exits with the status given as the first.
//!
//! WASI 0.2's stable `wasi:cli/exit` carries only success or failure, so
//! `exit(3)` reaches the host as a failure (status 1).

fn main() {
    let mut args = std::env::args().skip(1);
    let code: i32 = args.next().and_then(|c| c.parse().ok()).unwrap_or(0);
    for arg in args {
        println!("arg: {arg}");
    }
    std::process::exit(code);
}
