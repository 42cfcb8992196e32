//! Prints a line and exits with the status given as its first argument
//! (0-255). A component reports it with `wasi:cli/exit.exit-with-code`
//! (WASI 0.2.12): std's `exit(n)` on wasm32-wasip2 reports only success or
//! failure.

use std::io::Write;

fn main() {
    let status: u8 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    println!("exiting with {status}");
    let _ = std::io::stdout().flush();
    exit(status);
}

#[cfg(all(target_os = "wasi", target_env = "p2"))]
fn exit(status: u8) -> ! {
    wasip2::cli::exit::exit_with_code(status);
    unreachable!("exit-with-code returned")
}

#[cfg(not(all(target_os = "wasi", target_env = "p2")))]
fn exit(status: u8) -> ! {
    std::process::exit(i32::from(status))
}
