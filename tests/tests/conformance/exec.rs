//! `toolhost exec` runs ordinary WASI programs (DESIGN.md §2b): preview 1
//! core modules and command components alike, under the sandbox modes and
//! limits of tools, with only the args, environment and stdin the user
//! gives, the workspace mounted where the user says, and the program's own
//! exit status.
//!
//! The programs are in `tests/programs/src/bin/`, built for wasm32-wasip1
//! (`programs::p1`) and wasm32-wasip2 (`programs::p2`); most tests run the
//! same program of both kinds and expect the same behaviour. The malformed
//! modules (a reactor, a wrong world, an unsupported proposal) are written
//! in WAT here. Needs the binary: `cargo build -p toolhost` first.

use crate::common::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};
use toolhost_conformance::{p1, p2};

/// Each program as a preview 1 module and as a command component.
fn both(p1: &'static str, p2: &'static str) -> [(&'static str, &'static str); 2] {
    [("p1", p1), ("p2", p2)]
}

/// `toolhost exec PROGRAM`, with the suite's compile cache and a host
/// environment a program must not see.
fn exec(program: &str) -> Command {
    let mut c = Command::new(toolhost_bin());
    c.env("TOOLHOST_CACHE_DIR", cache_dir())
        .env("TOOLHOST_TEST_HOST_SECRET", "must-not-leak")
        .env_remove("TOOLHOST_LOG")
        .arg("exec")
        .arg(program);
    c
}

fn run(c: &mut Command) -> Output {
    c.stdin(Stdio::null()).output().unwrap()
}

/// The JSON in the file at `path` (a `--receipt`).
fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts an exit status, showing stdout and stderr when it differs.
#[track_caller]
fn assert_status(out: &Output, status: i32, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(status),
        "{what}: stdout: {}\nstderr: {}",
        stdout(out),
        stderr(out)
    );
}

/// A `.wasm` file in a temporary directory, from WAT.
fn module(dir: &Path, name: &str, wat: &str) -> PathBuf {
    let path = dir.join(format!("{name}.wasm"));
    std::fs::write(&path, wat::parse_str(wat).unwrap()).unwrap();
    path
}

/// Arguments and environment reach the program exactly, in order, and
/// nothing of toolhost's own environment does (a later `--env` of the same
/// key wins).
#[test]
fn exec_args_and_env_round_trip() {
    let args = [
        "one",
        "two words",
        "",
        "--flag=x",
        "-",
        "héllo wörld ✓",
        "tab\tand\nnewline",
        "quote\"back\\slash",
    ];
    let env = [
        ("A", "1"),
        ("EMPTY", ""),
        ("WITH_EQUALS", "a=b=c"),
        ("UNICODE", "ünïcødé"),
        ("SPACES", "  padded  "),
        ("A", "2"),
    ];
    let expected_env = [
        ("A", "2"),
        ("EMPTY", ""),
        ("WITH_EQUALS", "a=b=c"),
        ("UNICODE", "ünïcødé"),
        ("SPACES", "  padded  "),
    ];
    for (kind, program) in both(p1::ARGS_ENV, p2::ARGS_ENV) {
        let mut c = exec(program);
        for (k, v) in env {
            c.arg("--env").arg(format!("{k}={v}"));
        }
        c.arg("--").args(args);
        let out = run(&mut c);
        assert_status(&out, 0, kind);
        let mut argv = vec!["args_env.wasm".to_string()];
        argv.extend(args.iter().map(|a| a.to_string()));
        let vars: Vec<(String, String)> = expected_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(
            stdout(&out),
            format!("args: {argv:?}\nenv: {vars:?}\n"),
            "{kind}"
        );
        // Without --env the environment is empty.
        let out = run(exec(program).arg("--").arg("x"));
        assert_status(&out, 0, kind);
        assert_eq!(
            stdout(&out),
            "args: [\"args_env.wasm\", \"x\"]\nenv: []\n",
            "{kind}: nothing is inherited"
        );
    }
}

/// A malformed `--env` is a usage error: exit 2, naming the syntax, and the
/// program does not run.
#[test]
fn exec_env_syntax_errors_exit_2() {
    for bad in ["NOVALUE", "=value", "="] {
        let out = run(exec(p1::ARGS_ENV).arg("--env").arg(bad));
        assert_status(&out, 2, bad);
        assert!(stdout(&out).is_empty(), "{bad}: the program must not run");
        assert!(
            stderr(&out).contains("KEY=VALUE"),
            "{bad}: {}",
            stderr(&out)
        );
    }
}

/// stdin comes from a file or from toolhost's own stdin (`-`), byte for
/// byte, and is empty without `--stdin`; a file over the cap is refused.
#[test]
fn exec_stdin_from_file_and_dash() {
    let dir = tempfile::tempdir().unwrap();
    let input: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let file = dir.path().join("input.bin");
    std::fs::write(&file, &input).unwrap();
    for (kind, program) in both(p1::CAT, p2::CAT) {
        let out = run(exec(program).arg("--stdin").arg(&file));
        assert_status(&out, 0, kind);
        assert!(out.stdout == input, "{kind}: stdin from a file");
        assert_eq!(stderr(&out), "copied 70000 bytes\n", "{kind}");

        let mut child = exec(program)
            .args(["--stdin", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut pipe = child.stdin.take().unwrap();
        let sent = input.clone();
        let writer = std::thread::spawn(move || pipe.write_all(&sent));
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        assert_status(&out, 0, kind);
        assert!(out.stdout == input, "{kind}: stdin from -");

        let out = run(&mut exec(program));
        assert_status(&out, 0, kind);
        assert!(out.stdout.is_empty(), "{kind}: no --stdin is empty");
        assert_eq!(stderr(&out), "copied 0 bytes\n", "{kind}");
    }
    let big = dir.path().join("big.bin");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len((64 << 20) + 1).unwrap();
    let out = run(exec(p1::CAT).arg("--stdin").arg(&big));
    assert_status(&out, 2, "stdin over the cap");
    assert!(stderr(&out).contains("64 MiB"), "{}", stderr(&out));
    let out = run(exec(p1::CAT).args(["--stdin", "/no/such/file"]));
    assert_status(&out, 2, "a missing stdin file");
}

/// The program's exit status is toolhost's: `proc_exit(n)` of a preview 1
/// module and `exit-with-code(n)` of a component, 0 to 255.
#[test]
fn exec_exit_codes() {
    for (kind, program) in both(p1::EXIT_CODE, p2::EXIT_CODE) {
        for status in [0, 3, 125, 126, 255] {
            let out = run(exec(program).arg("--").arg(status.to_string()));
            assert_status(&out, status, &format!("{kind} exit({status})"));
            assert_eq!(stdout(&out), format!("exiting with {status}\n"), "{kind}");
            assert!(stderr(&out).is_empty(), "{kind}: {}", stderr(&out));
        }
    }
}

/// The transcript of `fs suite DIR` (tests/programs/src/bin/fs.rs).
fn suite_transcript(dir: &str) -> String {
    format!(
        "mkdir: ok\n\
         write: hello\n\
         append: hello world\n\
         seek+read: world\n\
         stat: file=true len=11\n\
         truncate: hello; mtime set: true\n\
         rename: a=false b=true\n\
         hard link: hello\n\
         ls: b.txt d/ h.txt\n\
         open missing: NotFound\n\
         rmdir non-empty: refused\n\
         cleanup: {dir} is empty again\n"
    )
}

/// Files are read and written through the mount: at `.` (the default) with
/// relative paths, at `/` with absolute and relative paths, and at
/// `/data`; what the program writes lands in the workspace on the host.
#[test]
fn exec_files_through_the_mount() {
    for (kind, program) in both(p1::FS, p2::FS) {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join("work")).unwrap();
        std::fs::write(ws.path().join("hello.txt"), "hi\n").unwrap();
        let in_ws = |mode: &str, mount: Option<&str>, args: &[&str]| {
            let mut c = exec(program);
            c.args(["--mode", mode, "--workspace"]).arg(ws.path());
            if let Some(m) = mount {
                c.args(["--mount", m]);
            }
            run(c.arg("--").args(args))
        };
        for (mount, dir) in [(None, "work"), (Some("/"), "/work"), (Some("/"), "work")] {
            let out = in_ws("workspace-write", mount, &["suite", dir]);
            let what = format!("{kind} suite {dir} at {mount:?}");
            assert_status(&out, 0, &what);
            assert_eq!(stdout(&out), suite_transcript(dir), "{what}");
            assert_eq!(
                std::fs::read_dir(ws.path().join("work")).unwrap().count(),
                0,
                "{what}: the suite cleaned up after itself on the host"
            );
        }
        for (mount, path) in [(None, "hello.txt"), (Some("/"), "/hello.txt")] {
            let out = in_ws("read-only", mount, &["read", path]);
            assert_status(&out, 0, &format!("{kind} read {path}"));
            assert_eq!(stdout(&out), "hi\n", "{kind} read {path}");
        }
        let out = in_ws("read-only", Some("/data"), &["ls", "/data"]);
        assert_status(&out, 0, &format!("{kind} ls /data"));
        assert_eq!(stdout(&out), "hello.txt\nwork/\n", "{kind} ls /data");
        let out = in_ws("read-only", Some("/data"), &["read", "hello.txt"]);
        assert_status(&out, 1, &format!("{kind}: only /data is mounted"));

        for (mount, path, file) in [
            (None, "out.txt", "out.txt"),
            (Some("/"), "/out2.txt", "out2.txt"),
            (Some("/w"), "/w/work/out3.txt", "work/out3.txt"),
        ] {
            let out = in_ws("workspace-write", mount, &["write", path, "written"]);
            assert_status(&out, 0, &format!("{kind} write {path}"));
            assert_eq!(
                std::fs::read_to_string(ws.path().join(file)).unwrap(),
                "written",
                "{kind} write {path}: it lands in the workspace"
            );
        }
    }
}

/// `read-only` refuses writes (PermissionDenied, exit 1) at every mount
/// point, and the file on the host is unchanged; mode `none` mounts
/// nothing.
#[test]
fn exec_read_only_refuses_writes() {
    for (kind, program) in both(p1::FS, p2::FS) {
        let ws = tempfile::tempdir().unwrap();
        let file = ws.path().join("hello.txt");
        std::fs::write(&file, "original\n").unwrap();
        for (mount, path) in [
            (".", "hello.txt"),
            ("/", "/hello.txt"),
            ("/", "new.txt"),
            ("/data", "/data/hello.txt"),
        ] {
            let out = run(exec(program)
                .args(["--mode", "read-only", "--mount", mount, "--workspace"])
                .arg(ws.path())
                .args(["--", "write", path, "changed"]));
            let what = format!("{kind} write {path} at {mount}");
            assert_status(&out, 1, &what);
            assert!(
                stderr(&out).contains(&format!("error: write {path}: PermissionDenied")),
                "{what}: {}",
                stderr(&out)
            );
        }
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "original\n");
        assert_eq!(std::fs::read_dir(ws.path()).unwrap().count(), 1);
        let out = run(exec(program)
            .args(["--workspace"])
            .arg(ws.path())
            .args(["--", "ls", "."]));
        assert_status(&out, 1, &format!("{kind}: mode none"));
        assert!(stderr(&out).contains("NotFound"), "{}", stderr(&out));
    }
}

/// Clocks, random and poll behave: the wall clock is the host's, the
/// monotonic clock does not go back and sleeps last, random bytes differ,
/// a timer wakes a poll, and so does stdin with input before a long timer.
#[test]
fn exec_clocks_random_poll() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    std::fs::write(&input, "ready\n").unwrap();
    for (kind, program) in both(p1::SYS, p2::SYS) {
        let started = Instant::now();
        let out = run(exec(program).arg("--stdin").arg(&input));
        assert_status(&out, 0, kind);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{kind}: the stdin poll waited for its 10 s timer"
        );
        let text = stdout(&out);
        let mut lines = text.lines();
        let wall: u64 = lines
            .next()
            .and_then(|l| l.strip_prefix("wall: "))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{kind}: {text}"));
        let host = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(
            wall.abs_diff(host) < 600,
            "{kind}: guest wall clock {wall}, host {host}"
        );
        assert_eq!(
            lines.collect::<Vec<_>>(),
            [
                "monotonic: true",
                "sleep 30 ms: true",
                "clock resolution: true",
                "random: 32 bytes, distinct draws: true",
                "poll clock: ok",
                "poll stdin: ok",
            ],
            "{kind}"
        );
    }
}

/// The deadline stops a program that computes forever, of either kind:
/// exit 125 and TIMEOUT on stderr, well before anything else would stop it.
#[test]
fn exec_deadline_stops_a_spinning_program() {
    for (kind, program) in both(p1::SPIN, p2::SPIN) {
        let started = Instant::now();
        let out = run(exec(program).args(["--timeout-ms", "300"]));
        let took = started.elapsed();
        assert_status(&out, 125, kind);
        assert!(stderr(&out).contains("TIMEOUT"), "{kind}: {}", stderr(&out));
        assert!(took < Duration::from_secs(20), "{kind}: took {took:?}");
    }
}

/// Fuel and memory limits hold for preview 1 modules as for components.
#[test]
fn exec_fuel_and_memory_limits() {
    for (kind, program) in both(p1::SPIN, p2::SPIN) {
        let out = run(exec(program).args(["--fuel", "1000000"]));
        assert_status(&out, 125, kind);
        assert!(
            stderr(&out).contains("OUT_OF_FUEL"),
            "{kind}: {}",
            stderr(&out)
        );
    }
    for (kind, program) in both(p1::ALLOC, p2::ALLOC) {
        let out = run(exec(program).args(["--memory-mb", "64", "--", "8"]));
        assert_status(&out, 0, kind);
        assert_eq!(stdout(&out), "allocated 8 MiB\n", "{kind}");
        let out = run(exec(program).args(["--memory-mb", "16", "--", "64"]));
        assert_status(&out, 125, kind);
        assert!(
            stderr(&out).contains("MEMORY_LIMIT"),
            "{kind}: {}",
            stderr(&out)
        );
    }
}

/// The memory limit holds for the program as a whole, not per linear
/// memory: a command component whose two core instances each have a memory
/// may grow each to 40 MiB under `--memory-mb 64` only while together they
/// stay within it.
#[test]
fn exec_memory_limit_counts_every_memory() {
    let dir = tempfile::tempdir().unwrap();
    // `run` grows the first instance's memory, then its own, by `pages`;
    // it returns ok if both grew and traps if either was refused.
    let wat = |pages: u32| {
        format!(
            r#"(component
  (core module $first
    (memory 1)
    (func (export "grow") (result i32) (memory.grow (i32.const {pages}))))
  (core instance $first (instantiate $first))
  (core module $second
    (import "first" "grow" (func $grow (result i32)))
    (memory 1)
    (func (export "run") (result i32)
      (if (i32.eq (call $grow) (i32.const -1)) (then unreachable))
      (if (i32.eq (memory.grow (i32.const {pages})) (i32.const -1)) (then unreachable))
      (i32.const 0)))
  (core instance $second (instantiate $second (with "first" (instance $first))))
  (func $run (result (result)) (canon lift (core func $second "run")))
  (instance $run (export "run" (func $run)))
  (export "wasi:cli/run@0.2.0" (instance $run)))"#
        )
    };
    // 2 x 20 MiB (320 pages each) fits in 64 MiB.
    let small = module(dir.path(), "two_memories_small", &wat(320));
    let out = run(exec(small.to_str().unwrap()).args(["--memory-mb", "64"]));
    assert_status(&out, 0, "two memories of 20 MiB");
    // 2 x 40 MiB (640 pages each): each alone fits, together they do not.
    let big = module(dir.path(), "two_memories_big", &wat(640));
    let out = run(exec(big.to_str().unwrap()).args(["--memory-mb", "64"]));
    assert_status(&out, 125, "two memories of 40 MiB");
    assert!(stderr(&out).contains("MEMORY_LIMIT"), "{}", stderr(&out));
}

/// The deadline holds while the program is blocked writing to an output
/// nobody reads (the pipe is full; neither the epoch nor the race can stop a
/// write the host makes for it): the program is abandoned shortly after its
/// deadline and toolhost exits 125 with TIMEOUT. It waited forever.
#[test]
fn exec_deadline_holds_while_output_is_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big");
    std::fs::write(&big, vec![b'x'; 4 << 20]).unwrap();
    // Nobody reads stdout. The run must end by itself, well within 60 s.
    let out = exits_within(
        exec(p1::CAT).arg("--stdin").arg(&big).args([
            "--timeout-ms",
            "1000",
            "--max-output",
            "67108864",
        ]),
        std::time::Duration::from_secs(60),
        true,
    );
    assert_eq!(out.status.code(), Some(125));
    let err = stderr(&out);
    assert!(err.contains("TIMEOUT"), "{err}");
}

/// Output past `--max-output` is refused: exactly the cap reaches stdout,
/// and toolhost exits 125 with OUTPUT_TOO_LARGE.
#[test]
fn exec_output_cap() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.bin");
    std::fs::write(&input, vec![b'x'; 100_000]).unwrap();
    for (kind, program) in both(p1::CAT, p2::CAT) {
        let out = run(exec(program)
            .args(["--max-output", "1000", "--stdin"])
            .arg(&input));
        assert_status(&out, 125, kind);
        assert_eq!(out.stdout.len(), 1000, "{kind}");
        assert!(
            stderr(&out).contains("OUTPUT_TOO_LARGE"),
            "{kind}: {}",
            stderr(&out)
        );
    }
}

/// A reactor is refused with exit 2 and the reason, before anything runs.
#[test]
fn exec_refuses_a_reactor() {
    let dir = tempfile::tempdir().unwrap();
    let reactor = module(
        dir.path(),
        "reactor",
        r#"(module (memory (export "memory") 1) (func (export "_initialize")))"#,
    );
    let out = run(&mut exec(reactor.to_str().unwrap()));
    assert_status(&out, 2, "a reactor");
    assert!(out.stdout.is_empty());
    let err = stderr(&out);
    assert!(
        err.starts_with("error:") && err.contains("WASI reactor") && err.contains("_initialize"),
        "{err}"
    );
}

/// A module that needs a proposal the runtime does not enable (here the
/// first version of exception handling, `try`) is refused with exit 2,
/// naming the proposal.
#[test]
fn exec_refuses_an_unsupported_proposal() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = module(
        dir.path(),
        "legacy_eh",
        r#"(module (func (export "_start") try nop catch_all end))"#,
    );
    let out = run(&mut exec(legacy.to_str().unwrap()));
    assert_status(&out, 2, "legacy exception handling");
    let err = stderr(&out);
    assert!(
        err.contains("needs legacy exception handling") && err.contains("does not support"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    // The standard exception handling proposal is on: `try_table` runs.
    let standard = module(
        dir.path(),
        "standard_eh",
        r#"(module (func (export "_start") (block (try_table (catch_all 0) nop))))"#,
    );
    let out = run(&mut exec(standard.to_str().unwrap()));
    assert_status(&out, 0, "standard exception handling");
}

/// Programs of the wrong world are refused with exit 2 and the reason: a
/// tool component (no `wasi:cli/run`), a module without `_start`, a module
/// importing what WASI preview 1 does not provide.
#[test]
fn exec_refuses_wrong_worlds() {
    let dir = tempfile::tempdir().unwrap();
    let tool = dir.path().join("read_file.wasm");
    let (_, bytes) = toolhost::EMBEDDED_TOOLS
        .iter()
        .find(|(name, _)| *name == "read_file")
        .unwrap();
    std::fs::write(&tool, bytes).unwrap();
    let cases = [
        (tool, "wasi:cli/run"),
        (
            module(
                dir.path(),
                "no_start",
                r#"(module (memory (export "memory") 1))"#,
            ),
            "without a `_start`",
        ),
        (
            module(
                dir.path(),
                "env_import",
                r#"(module (import "env" "foo" (func)) (func (export "_start") call 0))"#,
            ),
            "imports `env::foo`",
        ),
        (
            module(
                dir.path(),
                "preview0",
                r#"(module
                    (import "wasi_unstable" "proc_exit" (func (param i32)))
                    (func (export "_start")))"#,
            ),
            "WASI preview 0",
        ),
        (
            module(
                dir.path(),
                "bad_start",
                r#"(module (func (export "_start") (param i32)))"#,
            ),
            "not a function without parameters",
        ),
    ];
    for (program, says) in cases {
        let out = run(&mut exec(program.to_str().unwrap()));
        let err = stderr(&out);
        assert_status(&out, 2, says);
        assert!(
            err.contains("is not a WASI command program") && err.contains(says),
            "{says}: {err}"
        );
    }
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"\0asm\x01\0\0\0\x99").unwrap();
    let out = run(&mut exec(garbage.to_str().unwrap()));
    assert_status(&out, 2, "an invalid module");
    assert!(
        stderr(&out).contains("is not a valid module"),
        "{}",
        stderr(&out)
    );
}

/// A mount point that cannot be honoured is a usage error.
#[test]
fn exec_mount_errors_exit_2() {
    let ws = tempfile::tempdir().unwrap();
    for (mode, mount, says) in [
        ("none", "/data", "mode none mounts nothing"),
        ("read-only", "data", "absolute guest path"),
        ("read-only", "/a/../b", "`..`"),
        ("workspace-write", "/tmp", "scratch"),
        ("workspace-write", "//tmp", "empty component"),
        ("read-only", "/data/", "trailing `/`"),
        ("danger-full-access", "/", "host root"),
    ] {
        let out = run(exec(p1::FS)
            .args(["--mode", mode, "--mount", mount, "--workspace"])
            .arg(ws.path())
            .args(["--", "ls", "/"]));
        let what = format!("{mode} --mount {mount}");
        assert_status(&out, 2, &what);
        assert!(out.stdout.is_empty(), "{what}: the program must not run");
        assert!(stderr(&out).contains(says), "{what}: {}", stderr(&out));
    }
}

/// Core modules go through the compile cache like components, under keys
/// of their own.
#[test]
fn exec_caches_modules_apart_from_components() {
    let cache = tempfile::tempdir().unwrap();
    for program in [p1::ARGS_ENV, p2::ARGS_ENV] {
        for _ in 0..2 {
            let out = run(exec(program).env("TOOLHOST_CACHE_DIR", cache.path()));
            assert_status(&out, 0, program);
        }
    }
    let mut entries: Vec<String> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".cwasm"))
        .collect();
    entries.sort();
    assert_eq!(entries.len(), 2, "one entry per program: {entries:?}");
    assert_eq!(
        entries
            .iter()
            .filter(|n| n.ends_with("-module.cwasm"))
            .count(),
        1,
        "{entries:?}"
    );
}

/// A program reaches the network only through `--allow-net`, in every mode
/// (danger-full-access included), and only the exact destination granted:
/// without a grant, or with a grant for another port, nothing reaches the
/// listener and toolhost names the refusal on stderr.
#[test]
fn exec_network_only_through_allow_net() {
    let echo = EchoListener::start();
    let addr = format!("127.0.0.1:{}", echo.port);
    let other_port = format!("tcp://127.0.0.1:{}", echo.port.wrapping_add(1).max(1));
    for (mode, grants, granted) in [
        ("none", vec![], false),
        ("danger-full-access", vec![], false),
        ("none", vec![other_port.clone()], false),
        (
            "none",
            vec![format!("tcp://127.0.0.2:{}", echo.port)],
            false,
        ),
        ("none", vec![format!("http://{addr}")], false),
        ("none", vec![format!("tcp://{addr}")], true),
        ("workspace-write", vec![format!("tcp://{addr}")], true),
    ] {
        let ws = tempfile::tempdir().unwrap();
        let before = echo.count();
        let mut c = exec(p2::TCP_SEND);
        c.args(["--mode", mode, "--workspace"]).arg(ws.path());
        for g in &grants {
            c.arg("--allow-net").arg(g);
        }
        let out = run(c.args(["--", &addr, "hello"]));
        let what = format!("{mode} {grants:?}");
        if granted {
            assert_status(&out, 0, &what);
            assert_eq!(stdout(&out), "echo: hello\n", "{what}");
            assert_eq!(echo.count(), before + 1, "{what}: one connection");
            // What the grant let through is named too.
            assert!(
                stderr(&out).contains(&format!("toolhost: network: connect tcp://{addr} allowed")),
                "{what}: {}",
                stderr(&out)
            );
        } else {
            assert_status(&out, 1, &what);
            assert_eq!(
                echo.count(),
                before,
                "{what}: nothing may reach the listener"
            );
            assert!(
                stderr(&out).contains("toolhost: denied: network"),
                "{what}: the refusal is named: {}",
                stderr(&out)
            );
        }
    }
}

/// A program that made a connection and then got stuck in a host system
/// call ends at its deadline (125, `TIMEOUT`), and toolhost still names the
/// connection it made and exits: reading a FIFO nobody writes (the program
/// is stopped, its read left on a blocking thread, which toolhost waited
/// for for ever), and writing to an output nobody reads (the program itself
/// is abandoned: its receipt was empty, so a program could hide its traffic
/// that way).
#[test]
fn exec_an_abandoned_program_still_names_its_connections() {
    let echo = EchoListener::start();
    let addr = format!("127.0.0.1:{}", echo.port);
    let ws = tempfile::tempdir().unwrap();
    let _pipe = Fifo::make(ws.path().join("pipe"));
    let out = exits_within(
        exec(p2::TCP_SEND)
            .args(["--mode", "read-only", "--timeout-ms", "5000", "--workspace"])
            .arg(ws.path())
            .args(["--allow-net", &format!("tcp://{addr}")])
            .args(["--", &addr, "hello", "pipe"]),
        Duration::from_secs(30),
        false,
    );
    assert_status(&out, 125, "stuck reading a FIFO");
    assert_eq!(stdout(&out), "echo: hello\n");
    assert_eq!(echo.count(), 1);
    let err = stderr(&out);
    assert!(err.contains("TIMEOUT"), "{err}");
    assert!(
        err.contains(&format!("toolhost: network: connect tcp://{addr} allowed")),
        "the connection is named: {err}"
    );

    // Nobody reads stdout.
    let out = exits_within(
        exec(p2::TCP_SEND)
            .args([
                "--timeout-ms",
                "5000",
                "--allow-net",
                &format!("tcp://{addr}"),
            ])
            .args(["--", &addr, "hello", "flood"]),
        Duration::from_secs(30),
        true,
    );
    assert_status(&out, 125, "stuck writing an output nobody reads");
    let err = stderr(&out);
    assert!(
        err.contains("TIMEOUT") && err.contains("abandoned"),
        "{err}"
    );
    assert!(
        err.contains(&format!("toolhost: network: connect tcp://{addr} allowed")),
        "the abandoned program's connection is named: {err}"
    );
    assert_eq!(echo.count(), 2);
}

/// `--net-max-requests` bounds the connections a program makes through its
/// grants: with 1, the second connection to the granted listener is
/// refused (`limit_reached`) and never reaches it; without it, both go. A
/// limit of 0, or one without `--allow-net`, is a usage error (2).
#[test]
fn exec_network_limits_from_flags() {
    let echo = EchoListener::start();
    let addr = format!("127.0.0.1:{}", echo.port);
    let twice = format!("{addr},{addr}");
    let grant = format!("tcp://{addr}");
    let out = run(exec(p2::TCP_SEND)
        .args(["--allow-net", &grant, "--net-max-requests", "1", "--"])
        .args([&twice, "hello"]));
    assert_status(&out, 1, "the second connection is over the limit");
    assert_eq!(stdout(&out), "echo: hello\n");
    assert_eq!(echo.count(), 1);
    assert!(stderr(&out).contains("limit_reached"), "{}", stderr(&out));
    let out = run(exec(p2::TCP_SEND)
        .args(["--allow-net", &grant, "--"])
        .args([&twice, "hello"]));
    assert_status(&out, 0, "the default allows both");
    assert_eq!(stdout(&out), "echo: hello\necho: hello\n");
    assert_eq!(echo.count(), 3);
    // Refusals past the 256 a run records are counted, and toolhost says
    // how many it did not record.
    let many = vec!["127.0.0.1:1"; 300].join(",");
    let dir = tempfile::tempdir().unwrap();
    let receipt = dir.path().join("receipt.json");
    let out = run(exec(p2::TCP_SEND)
        .arg("--receipt")
        .arg(&receipt)
        .args(["--allow-net", &grant, "--"])
        .args([&many, "hello"]));
    assert_status(&out, 1, "300 refused connections");
    assert!(
        stderr(&out).contains("toolhost: receipt: 44 more refused attempts counted, not recorded"),
        "{}",
        stderr(&out)
    );
    let json = read_json(&receipt);
    assert_eq!(
        json["receipt"]["network"].as_array().map(Vec::len),
        Some(256)
    );
    assert_eq!(json["receipt"]["network_dropped"], 44);
    for bad in [
        vec!["--allow-net", &grant, "--net-max-requests", "0"],
        vec!["--allow-net", &grant, "--net-max-response-bytes", "0"],
        vec!["--allow-net", &grant, "--net-request-timeout-ms", "0"],
        vec!["--allow-net", &grant, "--net-request-timeout-ms", "x"],
        vec!["--net-max-requests", "5"],
    ] {
        let out = run(exec(p2::TCP_SEND).args(&bad).args(["--", &addr, "x"]));
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{bad:?}: the program must not run");
    }
    assert_eq!(echo.count(), 3);
}

/// `--receipt FILE` writes what the run did as JSON: its exit status, and
/// each connection, allowed (with the grant that let it) or refused (with
/// why). A receipt that could not be written (no such directory), or that
/// the program could write, stops the run before the program starts (2).
#[test]
fn exec_receipt_records_every_connection() {
    let echo = EchoListener::start();
    let addr = format!("127.0.0.1:{}", echo.port);
    let dir = tempfile::tempdir().unwrap();
    let receipt = dir.path().join("receipt.json");
    // `tcp_send` to the listener (with `mode`, and `to` as its targets),
    // its receipt at `at`.
    let send = |mode: &[&str], at: &Path, to: &str| {
        run(exec(p2::TCP_SEND)
            .args(mode)
            .arg("--receipt")
            .arg(at)
            .args(["--allow-net", &format!("tcp://{addr}"), "--"])
            .args([to, "hello"]))
    };
    let out = send(&[], &receipt, &format!("{addr},127.0.0.2:9"));
    assert_status(&out, 1, "one of two connections refused");
    let json = read_json(&receipt);
    assert_eq!(json["exit"], 1, "{json:#}");
    assert_eq!(json["error"], serde_json::Value::Null, "{json:#}");
    let network = json["receipt"]["network"].as_array().unwrap();
    assert_eq!(network.len(), 2, "{json:#}");
    assert_eq!(network[0]["url"], format!("tcp://{addr}"));
    assert_eq!(network[0]["decision"], "allowed");
    assert_eq!(
        network[0]["rule"],
        format!("network.allow[0] \"tcp://{addr}\"")
    );
    assert_eq!(network[1]["url"], "tcp://127.0.0.2:9");
    assert_eq!(network[1]["decision"], "refused");
    assert_eq!(echo.count(), 1);

    let out = send(&[], &dir.path().join("missing/receipt.json"), &addr);
    assert_status(&out, 2, "a receipt that cannot be created");
    assert!(stderr(&out).contains("--receipt"), "{}", stderr(&out));
    assert_eq!(echo.count(), 1, "the program must not run");

    // Nor one the program could write (and so forge): inside the workspace
    // in a mode that lets it write there. Read-only, it may be there.
    let ws = tempfile::tempdir().unwrap();
    let inside = ws.path().join("receipt.json");
    let ws_arg = ws.path().display().to_string();
    let out = send(
        &["--mode", "workspace-write", "--workspace", &ws_arg],
        &inside,
        &addr,
    );
    assert_status(&out, 2, "a receipt the program could write");
    assert!(
        stderr(&out).contains("inside the workspace"),
        "{}",
        stderr(&out)
    );
    assert_eq!(echo.count(), 1, "the program must not run");
    let out = send(
        &["--mode", "read-only", "--workspace", &ws_arg],
        &inside,
        &addr,
    );
    assert_status(&out, 0, "read-only");
    let json = read_json(&inside);
    assert_eq!(json["exit"], 0, "{json:#}");
    assert_eq!(echo.count(), 2);

    // In danger-full-access the program may write anywhere: refused. So is
    // a path that names a directory.
    for (bad, why) in [
        (vec!["--mode", "danger-full-access"], "danger-full-access"),
        (vec![], "does not name a file"),
    ] {
        let target = if bad.is_empty() {
            dir.path().to_path_buf()
        } else {
            dir.path().join("r.json")
        };
        let out = send(&bad, &target, &addr);
        assert_status(&out, 2, why);
        assert!(stderr(&out).contains(why), "{}", stderr(&out));
    }
    assert_eq!(echo.count(), 2, "the program must not run");

    // Written after the run and renamed over the path: a link there is
    // replaced, not written through.
    let elsewhere = dir.path().join("elsewhere.txt");
    std::fs::write(&elsewhere, "untouched").unwrap();
    let linked = dir.path().join("linked.json");
    std::os::unix::fs::symlink(&elsewhere, &linked).unwrap();
    let out = send(&[], &linked, &addr);
    assert_status(&out, 0, "a link at the path");
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "untouched");
    assert!(!std::fs::symlink_metadata(&linked).unwrap().is_symlink());
    let json = read_json(&linked);
    assert_eq!(json["exit"], 0, "{json:#}");

    // A program that does not load leaves no receipt (nor an earlier
    // run's), and no file of toolhost's beside it.
    let bad_program = dir.path().join("bad.wasm");
    std::fs::write(&bad_program, b"not wasm").unwrap();
    let out = run(exec(bad_program.to_str().unwrap())
        .arg("--receipt")
        .arg(&linked));
    assert_status(&out, 2, "a program that does not load");
    assert!(!linked.exists(), "an earlier run's receipt is left");
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["bad.wasm", "elsewhere.txt", "receipt.json"],
        "{left:?}"
    );
}

/// A malformed `--allow-net` pattern is a usage error before the program
/// runs.
#[test]
fn exec_allow_net_errors_exit_2() {
    for bad in [
        "example.com",
        "ftp://example.com",
        "http://",
        "tcp://*",
        "https://*.github.io",
    ] {
        let out = run(exec(p2::TCP_SEND)
            .args(["--allow-net", bad, "--"])
            .args(["127.0.0.1:1", "x"]));
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(out.stdout.is_empty(), "{bad}: the program must not run");
        assert!(
            stderr(&out).contains("--allow-net"),
            "{bad}: {}",
            stderr(&out)
        );
        // A wildcard over a public suffix says why it is refused.
        if bad.ends_with("github.io") {
            assert!(
                stderr(&out).contains("is a public suffix"),
                "{}",
                stderr(&out)
            );
        }
    }
    // A socket grant that names a host is named as `--allow-net`; system
    // TLS roots that SSL_CERT_FILE names but cannot be read are named as
    // that variable, not as a flag.
    let out = run(exec(p2::TCP_SEND)
        .args(["--allow-net", "tcp://example.com:80", "--"])
        .args(["127.0.0.1:1", "x"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with("error: --allow-net: \"tcp://example.com:80\": ")
            && stderr(&out).contains("must name an IP address"),
        "{}",
        stderr(&out)
    );
    let out = run(exec(p2::TCP_SEND)
        .env("SSL_CERT_FILE", "/nonexistent/toolhost-test/missing.pem")
        .args(["--allow-net", "https://127.0.0.1:1", "--"])
        .args(["127.0.0.1:1", "x"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with("error: TLS roots named by SSL_CERT_FILE"),
        "{}",
        stderr(&out)
    );
    // A `--ca-file` that is not a regular file is named as that flag.
    let dir = tempfile::tempdir().unwrap();
    let out = run(exec(p2::TCP_SEND)
        .args(["--allow-net", "https://127.0.0.1:1", "--ca-file"])
        .arg(dir.path())
        .args(["--", "127.0.0.1:1", "x"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "the program must not run");
    assert!(
        stderr(&out).contains("--ca-file") && stderr(&out).contains("not a regular file"),
        "{}",
        stderr(&out)
    );
}

/// A program that may write the workspace does not run while the compile
/// cache is inside that workspace (it could rewrite code the host maps and
/// runs natively); read-only, it runs.
#[test]
fn exec_refuses_a_writable_workspace_that_holds_the_compile_cache() {
    let ws = tempfile::tempdir().unwrap();
    let cache = ws.path().join(".cache/toolhost");
    let in_ws = |mode: &str| {
        let mut c = exec(p1::FS);
        c.env("TOOLHOST_CACHE_DIR", &cache)
            .args(["--mode", mode, "--workspace"])
            .arg(ws.path());
        run(c.args(["--", "write", "out.txt", "x"]))
    };
    let out = in_ws("workspace-write");
    assert_status(&out, 125, "workspace-write with the cache inside");
    assert!(
        stderr(&out).contains("SANDBOX_UNAVAILABLE") && stderr(&out).contains("compile cache"),
        "{}",
        stderr(&out)
    );
    assert!(!ws.path().join("out.txt").exists());
    let out = in_ws("read-only");
    assert_ne!(out.status.code(), Some(125), "{}", stderr(&out));
}
