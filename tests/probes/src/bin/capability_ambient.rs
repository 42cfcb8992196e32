//! Reports what the guest can see of its ambient environment through the
//! WASI interfaces themselves: environment variables, arguments, the initial
//! working directory, stdin, the clocks and randomness.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Args {}

#[derive(Serialize, JsonSchema, Default)]
struct Out {
    /// `wasi:cli/environment.get-environment`, as `KEY=VALUE`.
    env: Vec<String>,
    /// What Rust's `std::env::vars` sees.
    std_env: Vec<String>,
    /// `wasi:cli/environment.get-arguments`.
    args: Vec<String>,
    /// `wasi:cli/environment.initial-cwd`.
    initial_cwd: Option<String>,
    /// What reading stdin gave: `eof`, `closed`, `error: ...` or the bytes read.
    stdin: String,
    /// `wasi:clocks/wall-clock.now`, seconds since the epoch.
    wall_secs: u64,
    /// Monotonic nanoseconds measured across a 20 ms sleep.
    slept_ns: u64,
    /// Two draws of 16 random bytes, hex.
    random: Vec<String>,
}

#[cfg(target_os = "wasi")]
fn observe() -> Out {
    use wasip2::cli::environment;
    use wasip2::clocks::{monotonic_clock, wall_clock};
    use wasip2::io::streams::StreamError;
    let stdin = match wasip2::cli::stdin::get_stdin().blocking_read(4096) {
        Ok(bytes) if bytes.is_empty() => "empty read".to_string(),
        Ok(bytes) => format!("read {} bytes", bytes.len()),
        Err(StreamError::Closed) => "closed".to_string(),
        Err(StreamError::LastOperationFailed(e)) => format!("error: {}", e.to_debug_string()),
    };
    let before = monotonic_clock::now();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let slept_ns = monotonic_clock::now().saturating_sub(before);
    let hex = |b: Vec<u8>| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    Out {
        env: environment::get_environment()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
        std_env: std::env::vars().map(|(k, v)| format!("{k}={v}")).collect(),
        args: environment::get_arguments(),
        initial_cwd: environment::initial_cwd(),
        stdin,
        wall_secs: wall_clock::now().seconds,
        slept_ns,
        random: vec![
            hex(wasip2::random::random::get_random_bytes(16)),
            hex(wasip2::random::random::get_random_bytes(16)),
        ],
    }
}

#[cfg(not(target_os = "wasi"))]
fn observe() -> Out {
    Out::default()
}

struct Ambient;

impl Tool for Ambient {
    const NAME: &'static str = "ambient";
    const DESCRIPTION: &'static str = "Reports env, args, cwd, stdin, clocks and randomness.";
    const MIN_MODE: toolhost_guest::SandboxMode = toolhost_guest::SandboxMode::None;
    // Declares writes so that a call granted a writable mode runs in it
    // (a tool that declares `none` or `read` runs at most read-only): the
    // test checks what each mode, `danger-full-access` included, shows.
    const SIDE_EFFECT: toolhost_guest::SideEffect = toolhost_guest::SideEffect::Write;
    type Args = Args;
    type Output = Out;
    fn run(_: Args) -> Result<Out, ToolError> {
        Ok(observe())
    }
}

toolhost_guest::export_tools!(Ambient);

fn main() {}
