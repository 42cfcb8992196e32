//! Program-backed tools (DESIGN.md §2b): a `NAME.tool.toml` manifest turns
//! a WASI program into a tool whose calls go through the whole pipeline.
//! Arguments become argv and stdin as the manifest says; the result carries
//! the exit status and the bounded stdout and stderr; a non-zero exit is
//! the tool's error; policy, approval, the log and the sandbox apply as to
//! any tool; `--tools DIR` picks manifests up, hot reload included.
//!
//! The programs are those of the `toolhost exec` tests (`tests/programs`),
//! plus a reactor written in WAT here. The CLI and MCP tests need the
//! binary: `cargo build -p toolhost` first.

use crate::common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use toolhost::log::EventKind;
use toolhost::manifest::ManifestCode;
use toolhost::policy::Policy;
use toolhost::{Host, HostBuilder, HostError, Limits, SandboxMode, Status};
use toolhost_conformance::{p1, p2};

/// Copies `program` into `dir` as `NAME.wasm` and writes `NAME.tool.toml`
/// with `manifest` after the name line.
fn install(dir: &Path, name: &str, program: &str, manifest: &str) -> PathBuf {
    std::fs::copy(program, dir.join(format!("{name}.wasm"))).unwrap();
    let path = dir.join(format!("{name}.tool.toml"));
    std::fs::write(&path, format!("name = \"{name}\"\n{manifest}")).unwrap();
    path
}

async fn host_of(manifests: &[&Path], workspace: &Path, policy: Option<&str>) -> Host {
    builder_of(manifests, workspace, policy)
        .build()
        .await
        .unwrap_or_else(|e| panic!("host builds: {e}"))
}

fn builder_of(manifests: &[&Path], workspace: &Path, policy: Option<&str>) -> HostBuilder {
    let mut b = HostBuilder::new();
    for m in manifests {
        b.program_tool_file(*m);
    }
    b.workspace(workspace)
        .limits(Limits::default())
        .runtime_options(suite_options());
    if let Some(p) = policy {
        b.policy(Policy::from_toml(p, "test.toml").unwrap());
    }
    b
}

const ARGS_ENV: &str = r#"
description = "Prints its arguments and environment."
argv = ["args_env", "--name={name}", "{files}", "{count}", "lit{{}}"]
env = { ONLY = "this" }
input_schema = '{"type":"object","properties":{"name":{"type":"string"},"files":{"type":"array","items":{"type":"string"}},"count":{"type":"integer"}},"required":["name"]}'
"#;

/// The validated arguments become argv as the template says (a
/// placeholder inside text is substituted, an array expands, an absent
/// argument leaves its element out), and the environment is exactly the
/// manifest's: nothing of the host's. Same for a preview 1 module and a
/// command component.
#[tokio::test]
async fn program_tool_argv_and_env() {
    for (kind, program) in [("p1", p1::ARGS_ENV), ("p2", p2::ARGS_ENV)] {
        let tools = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let m = install(tools.path(), "args_env", program, ARGS_ENV);
        let host = host_of(&[&m], ws.path(), None).await;
        let r = call(
            &host,
            "args_env",
            json!({"name": "a b", "files": ["x", "y z"]}),
            SandboxMode::None,
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{kind}: {r:?}");
        let stdout = r.canonical["stdout"].as_str().unwrap();
        let want_args = format!(
            "args: {:?}",
            ["args_env", "--name=a b", "x", "y z", "lit{}"]
        );
        assert!(stdout.contains(&want_args), "{kind}: {stdout}");
        assert!(
            stdout.contains(r#"env: [("ONLY", "this")]"#),
            "{kind}: {stdout}"
        );
        assert_eq!(r.canonical["exit_code"], 0);
        assert_eq!(r.content[0].as_text(), stdout);
        // Arguments that do not match the schema never reach the program.
        let r = call(&host, "args_env", json!({"files": [1]}), SandboxMode::None).await;
        assert_eq!(r.code(), Some(toolhost::ErrorCode::InvalidArgs), "{r:?}");
    }
}

/// The argument the manifest names is the program's stdin; its stdout and
/// stderr are the result, each cut at the manifest's `output_bytes`.
#[tokio::test]
async fn program_tool_stdin_and_output_bounds() {
    let tools = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let schema = r#"input_schema = '{"type":"object","properties":{"text":{"type":"string"}}}'"#;
    let cat = install(
        tools.path(),
        "cat",
        p1::CAT,
        &format!("description = \"cat\"\nargv = [\"cat\"]\nstdin = \"text\"\n{schema}\n"),
    );
    let small = install(
        tools.path(),
        "small",
        p1::CAT,
        &format!(
            "description = \"cat, cut\"\nargv = [\"cat\"]\nstdin = \"text\"\nlimits = {{ output_bytes = 16 }}\n{schema}\n"
        ),
    );
    let host = host_of(&[&cat, &small], ws.path(), None).await;
    let text = "héllo\nworld\n".repeat(10);
    let r = call(&host, "cat", json!({"text": text}), SandboxMode::None).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.canonical["stdout"], text.as_str());
    assert_eq!(
        r.canonical["stderr"],
        format!("copied {} bytes\n", text.len())
    );
    assert_eq!(r.canonical["stdout_truncated"], false);
    // Without the argument, stdin is empty.
    let r = call(&host, "cat", json!({}), SandboxMode::None).await;
    assert_eq!(r.canonical["stdout"], "");
    assert_eq!(r.canonical["stderr"], "copied 0 bytes\n");

    let r = call(&host, "small", json!({"text": text}), SandboxMode::None).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.canonical["stdout"].as_str().unwrap().len(), 16);
    assert_eq!(r.canonical["stdout_truncated"], true);
    assert_eq!(r.canonical["stderr_truncated"], true);
    assert!(
        r.content[0]
            .as_text()
            .contains(&format!("[stdout cut: {} more bytes", text.len() - 16)),
        "{:?}",
        r.content
    );

    // The host's output cap holds for a program's result too (it was raised
    // to fit the streams): with 16 KiB, each stream is kept to a quarter of
    // it, and control bytes, which JSON writes six times over, end
    // OUTPUT_TOO_LARGE instead of passing.
    let mut b = builder_of(&[&cat], ws.path(), None);
    b.limits(Limits {
        max_output: 16 << 10,
        ..Limits::default()
    });
    let capped = b.build().await.unwrap();
    let plain = "x".repeat(64 << 10);
    let r = call(&capped, "cat", json!({"text": plain}), SandboxMode::None).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(
        r.canonical["stdout"].as_str().map(str::len),
        Some((16 << 10) / 4 - 256)
    );
    assert_eq!(r.canonical["stdout_truncated"], true);
    let control = "\u{1}".repeat(64 << 10);
    let r = call(&capped, "cat", json!({"text": control}), SandboxMode::None).await;
    assert_eq!(
        r.code(),
        Some(toolhost::ErrorCode::OutputTooLarge),
        "{:?}",
        r.error
    );
}

/// A non-zero exit is the tool's error (`TOOL_ERROR`) that still carries
/// the program's record, and its content shows stderr and the status; the
/// status reaches the result unchanged for both kinds of program.
#[tokio::test]
async fn program_tool_exit_status() {
    for (kind, program) in [("p1", p1::EXIT_CODE), ("p2", p2::EXIT_CODE)] {
        let tools = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let m = install(
            tools.path(),
            "exit",
            program,
            r#"description = "exits"
argv = ["exit_code", "{status}"]
input_schema = '{"type":"object","properties":{"status":{"type":"integer","minimum":0,"maximum":255}}}'
"#,
        );
        let host = host_of(&[&m], ws.path(), None).await;
        for status in [0u64, 3, 255] {
            let r = call(&host, "exit", json!({"status": status}), SandboxMode::None).await;
            assert_eq!(r.canonical["exit_code"], status, "{kind}: {r:?}");
            assert_eq!(
                r.canonical["stdout"],
                format!("exiting with {status}\n"),
                "{kind}"
            );
            if status == 0 {
                assert_eq!(r.status, Status::Ok, "{kind}: {r:?}");
            } else {
                assert_eq!(r.code(), Some(toolhost::ErrorCode::ToolError), "{kind}");
                let text = r.content[0].as_text();
                assert!(
                    text.contains(&format!("[exit status {status}]")),
                    "{kind}: {text}"
                );
            }
        }
    }
}

/// A manifest that cannot become a tool fails the host's build with a
/// stable code, and never panics.
#[tokio::test]
async fn program_tool_manifest_errors() {
    let tools = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let dir = tools.path();
    let good = "description = \"d\"\nargv = [\"x\"]\ninput_schema = '{\"type\":\"object\"}'\n";
    let cases: Vec<(PathBuf, ManifestCode, &str)> = vec![
        {
            let p = dir.join("nowasm.tool.toml");
            std::fs::write(&p, format!("name = \"nowasm\"\n{good}")).unwrap();
            (p, ManifestCode::WasmMissing, "does not exist")
        },
        {
            let p = dir.join("broken.tool.toml");
            std::fs::write(&p, "name = \"broken\"\ndescription = [").unwrap();
            (p, ManifestCode::Invalid, "")
        },
        {
            let p = install(
                dir,
                "badschema",
                p1::CAT,
                "description = \"d\"\nargv = [\"x\"]\ninput_schema = '{\"type\":12}'\n",
            );
            (p, ManifestCode::Invalid, "input_schema")
        },
        {
            let p = install(dir, "reactorless", p1::CAT, good);
            std::fs::write(dir.join("reactorless.wasm"), b"\0asm\x01\0\0\0garbage").unwrap();
            (p, ManifestCode::NotProgram, "")
        },
        {
            let p = install(dir, "text", p1::CAT, good);
            std::fs::write(dir.join("text.wasm"), "not a program").unwrap();
            (p, ManifestCode::NotProgram, "not a WebAssembly file")
        },
        {
            // A reactor whose `_initialize` takes a parameter: it could not
            // be initialised before `run`, so it is refused, not run
            // uninitialised.
            let p = install(dir, "badinit", p1::CAT, good);
            let wat = r#"(module
  (memory (export "memory") 1)
  (func (export "_initialize") (param i32))
  (func (export "run") (result i32) (i32.const 0)))"#;
            std::fs::write(dir.join("badinit.wasm"), wat::parse_str(wat).unwrap()).unwrap();
            (
                p,
                ManifestCode::NotProgram,
                "`_initialize` export is not a function",
            )
        },
        {
            // Larger than the host reads (sparse: no disk used): refused
            // before it is read.
            let p = install(dir, "huge", p1::CAT, good);
            let f = std::fs::File::create(dir.join("huge.wasm")).unwrap();
            f.set_len(toolhost::runtime::MAX_WASM_FILE_BYTES + 1)
                .unwrap();
            (p, ManifestCode::NotProgram, "larger than")
        },
    ];
    for (path, code, detail) in cases {
        let e = match builder_of(&[&path], ws.path(), None).build().await {
            Ok(_) => panic!("{} loaded", path.display()),
            Err(e) => e,
        };
        match e {
            HostError::Manifest(m) => {
                assert_eq!(m.code, code, "{}: {m}", path.display());
                assert!(m.detail.contains(detail), "{}: {m}", path.display());
                assert!(m.to_string().starts_with(code.as_str()), "{m}");
            }
            other => panic!("{}: {other}", path.display()),
        }
    }
}

/// A program or manifest inside the workspace is refused, whatever path
/// reaches it: a call that may write the workspace could rewrite the code
/// the tool runs, or what it declares, from its next load on (a reload, a
/// restart). By the path as written (through a link in the workspace,
/// which a call could re-point) and by the file it resolves to (a link
/// beside the manifest).
#[tokio::test]
async fn program_tool_program_inside_the_workspace_is_refused() {
    let tools = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let good = "description = \"d\"\nargv = [\"cat\"]\ninput_schema = '{\"type\":\"object\"}'\n";
    std::fs::copy(p1::CAT, ws.path().join("cat.wasm")).unwrap();
    std::fs::copy(p1::CAT, tools.path().join("real.wasm")).unwrap();
    std::os::unix::fs::symlink(tools.path().join("real.wasm"), ws.path().join("link.wasm"))
        .unwrap();
    std::os::unix::fs::symlink(ws.path().join("cat.wasm"), tools.path().join("beside.wasm"))
        .unwrap();
    let manifest = |name: &str, wasm: &Path| {
        let path = tools.path().join(format!("{name}.tool.toml"));
        let text = format!(
            "name = \"{name}\"\nwasm = {:?}\n{good}",
            wasm.display().to_string()
        );
        std::fs::write(&path, text).unwrap();
        path
    };
    for (name, wasm) in [
        ("inside", ws.path().join("cat.wasm")),
        ("through_link", ws.path().join("link.wasm")),
        ("link_beside", tools.path().join("beside.wasm")),
    ] {
        let m = manifest(name, &wasm);
        match builder_of(&[&m], ws.path(), None).build().await {
            Ok(_) => panic!("{name}: a program in the workspace loaded"),
            Err(HostError::UnsafeState(e)) => assert!(e.contains("inside the workspace"), "{e}"),
            Err(other) => panic!("{name}: {other}"),
        }
    }
    // A manifest inside the workspace, its program outside: a call could
    // rewrite what the tool declares and is granted.
    let inside = ws.path().join("m.tool.toml");
    let text = format!(
        "name = \"m\"\nwasm = {:?}\n{good}",
        tools.path().join("real.wasm").display().to_string()
    );
    std::fs::write(&inside, text).unwrap();
    match builder_of(&[&inside], ws.path(), None).build().await {
        Ok(_) => panic!("a manifest in the workspace loaded"),
        Err(HostError::UnsafeState(e)) => assert!(e.contains("the manifest"), "{e}"),
        Err(other) => panic!("manifest inside: {other}"),
    }
    let m = manifest("outside", &tools.path().join("real.wasm"));
    host_of(&[&m], ws.path(), None).await;
}

const FS: &str = r#"
description = "File operations."
argv = ["fs", "{op}", "{path}", "{text}"]
workspace = "/"
mode = "read-only"
side_effect = "write"
input_schema = '{"type":"object","properties":{"op":{"type":"string"},"path":{"type":"string"},"text":{"type":"string"}},"required":["op","path"]}'
"#;

/// The sandbox mode decides what the program may touch: mounted at the
/// manifest's guest path, the workspace is readable in `read-only`, where a
/// write fails inside the program and the host file system is unchanged,
/// and writable in `workspace-write`.
#[tokio::test]
async fn program_tool_sandbox_modes() {
    let tools = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("in.txt"), "inside").unwrap();
    let m = install(tools.path(), "fs", p1::FS, FS);
    let host = host_of(&[&m], ws.path(), None).await;
    let r = call(
        &host,
        "fs",
        json!({"op": "read", "path": "/in.txt"}),
        SandboxMode::ReadOnly,
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert!(r.canonical["stdout"].as_str().unwrap().contains("inside"));
    let before = snapshot(ws.path());
    let r = call(
        &host,
        "fs",
        json!({"op": "write", "path": "/out.txt", "text": "x"}),
        SandboxMode::ReadOnly,
    )
    .await;
    assert_eq!(r.code(), Some(toolhost::ErrorCode::ToolError), "{r:?}");
    assert!(
        r.canonical["stderr"]
            .as_str()
            .unwrap()
            .contains("error: write"),
        "{r:?}"
    );
    assert_eq!(snapshot(ws.path()), before);
    let r = call(
        &host,
        "fs",
        json!({"op": "write", "path": "/out.txt", "text": "x"}),
        SandboxMode::WorkspaceWrite,
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "x"
    );
    // In danger-full-access the host root is mounted (the manifest's mount
    // point does not apply): the call runs and reads the workspace by its host
    // path (it was refused SANDBOX_UNAVAILABLE, the mount being `/`).
    let host_path = ws.path().canonicalize().unwrap().join("in.txt");
    let r = call(
        &host,
        "fs",
        json!({"op": "read", "path": host_path.to_str().unwrap()}),
        SandboxMode::DangerFullAccess,
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert!(r.canonical["stdout"].as_str().unwrap().contains("inside"));
}

/// Two tools whose names differ only in case, or in `-` against `_`, read
/// as one tool to a model: the host refuses to load them together.
#[tokio::test]
async fn program_tool_look_alike_names_are_refused() {
    let ws = tempfile::tempdir().unwrap();
    for (a, b) in [("args_env", "Args_env"), ("args_env", "args-env")] {
        let tools = tempfile::tempdir().unwrap();
        let first = install(tools.path(), a, p1::ARGS_ENV, ARGS_ENV);
        let second = install(tools.path(), b, p1::ARGS_ENV, ARGS_ENV);
        let err = match builder_of(&[&first, &second], ws.path(), None)
            .build()
            .await
        {
            Ok(_) => panic!("{a} and {b} were loaded together"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("only in case or in - and _"), "{err}");
    }
}

/// A tool's description is bounded (16 KiB: it goes into every model's
/// context) and `toolhost list` shows its control characters escaped, so a
/// description cannot drive the terminal or print rows of its own.
/// A manifest named by its bare file name, from its own directory, loads:
/// its directory is `.` (the empty parent of a bare name could not be
/// resolved, and every such manifest was refused).
#[test]
fn program_tool_manifest_named_by_its_bare_file_name_loads() {
    let tools = tempfile::tempdir().unwrap();
    std::fs::create_dir(tools.path().join("lib")).unwrap();
    let manifest = format!("{ARGS_ENV}preopens = [{{ host = \"lib\", guest = \"/lib\" }}]\n");
    install(tools.path(), "bare", p1::ARGS_ENV, &manifest);
    let out = Command::new(toolhost_bin())
        .current_dir(tools.path())
        .env("TOOLHOST_CACHE_DIR", cache_dir())
        .args(["list", "bare.tool.toml"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("bare"),
        "{out:?}"
    );
}

#[test]
fn program_tool_descriptions_are_bounded_and_listed_escaped() {
    let tools = tempfile::tempdir().unwrap();
    let long = format!(
        "description = \"{}\"\n{}",
        "d".repeat(16 * 1024 + 1),
        ARGS_ENV.replace(
            "description = \"Prints its arguments and environment.\"\n",
            ""
        )
    );
    install(tools.path(), "long", p1::ARGS_ENV, &long);
    let out = Command::new(toolhost_bin())
        .env("TOOLHOST_CACHE_DIR", cache_dir())
        .args(["list".as_ref(), tools.path().as_os_str()])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("at most 16384"),
        "{out:?}"
    );

    let tools = tempfile::tempdir().unwrap();
    let sneaky = ARGS_ENV.replace(
        "Prints its arguments and environment.",
        "fine\\u001b[2J\\nfake_tool  none  looks real",
    );
    install(tools.path(), "sneaky", p1::ARGS_ENV, &sneaky);
    let out = Command::new(toolhost_bin())
        .env("TOOLHOST_CACHE_DIR", cache_dir())
        .args(["list".as_ref(), tools.path().as_os_str()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(!listed.contains('\u{1b}'), "{listed:?}");
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(listed.contains(r"fine\u{1b}[2J\nfake_tool"), "{listed}");
}

/// A manifest's preopen was resolved inside the manifest's directory when
/// the tool loaded; if that directory is later swapped for a symbolic link
/// to somewhere else, the next call is refused `SANDBOX_UNAVAILABLE` and
/// reads nothing there.
#[tokio::test]
async fn program_tool_preopen_swapped_for_a_link_is_refused() {
    let tools = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("f.txt"), "outside secret").unwrap();
    std::fs::create_dir(tools.path().join("lib")).unwrap();
    std::fs::write(tools.path().join("lib/f.txt"), "the tool's own").unwrap();
    let manifest = format!("{FS}preopens = [{{ host = \"lib\", guest = \"/lib\" }}]\n");
    let m = install(tools.path(), "fs", p1::FS, &manifest);
    let host = host_of(&[&m], ws.path(), None).await;
    let read = json!({"op": "read", "path": "/lib/f.txt"});
    let r = call(&host, "fs", read.clone(), SandboxMode::ReadOnly).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert!(
        r.canonical["stdout"]
            .as_str()
            .unwrap()
            .contains("the tool's own")
    );

    std::fs::rename(tools.path().join("lib"), tools.path().join("lib.old")).unwrap();
    std::os::unix::fs::symlink(outside.path(), tools.path().join("lib")).unwrap();
    let r = call(&host, "fs", read, SandboxMode::ReadOnly).await;
    assert_eq!(
        r.code(),
        Some(toolhost::ErrorCode::SandboxUnavailable),
        "{r:?}"
    );
    assert!(!format!("{r:?}").contains("outside secret"));
}

/// A call in mode `none` sees no file of the workspace, even through a
/// manifest's preopen: one that holds the workspace (or lies inside it) is
/// refused `SANDBOX_UNAVAILABLE` in that mode. So is a preopen of the
/// manifest's own directory, when the manifest loads.
#[tokio::test]
async fn program_tool_preopen_over_the_workspace_is_refused_in_mode_none() {
    let tools = tempfile::tempdir().unwrap();
    let lib = tools.path().join("lib");
    let ws = lib.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("secret.txt"), "workspace secret").unwrap();
    std::fs::write(lib.join("own.txt"), "the tool's own").unwrap();
    let fs_none = FS.replace("mode = \"read-only\"", "mode = \"none\"");
    let manifest = format!("{fs_none}preopens = [{{ host = \"lib\", guest = \"/lib\" }}]\n");
    let m = install(tools.path(), "fs", p1::FS, &manifest);
    let host = host_of(&[&m], &ws, None).await;
    let read = |path: &str| json!({"op": "read", "path": path});
    let r = call(&host, "fs", read("/lib/ws/secret.txt"), SandboxMode::None).await;
    assert_eq!(
        r.code(),
        Some(toolhost::ErrorCode::SandboxUnavailable),
        "{r:?}"
    );
    assert!(!format!("{r:?}").contains("workspace secret"));
    // With the workspace elsewhere, the preopen serves the tool's own files.
    let elsewhere = tempfile::tempdir().unwrap();
    let host = host_of(&[&m], elsewhere.path(), None).await;
    let r = call(&host, "fs", read("/lib/own.txt"), SandboxMode::None).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    // The manifest's own directory is no preopen.
    for host_dir in [".", "", "./"] {
        let manifest =
            format!("{fs_none}preopens = [{{ host = \"{host_dir}\", guest = \"/lib\" }}]\n");
        let m = install(tools.path(), "fs", p1::FS, &manifest);
        let e = toolhost::Manifest::load(&m).err();
        assert!(
            e.as_ref()
                .is_some_and(|e| e.detail.contains("manifest's directory itself")),
            "{host_dir:?}: {e:?}"
        );
    }
}

/// The runtime's limits hold: a program that never ends is stopped at the
/// manifest's deadline (`TIMEOUT`), one that allocates past the manifest's
/// memory ends `MEMORY_LIMIT`, and the host serves the next call.
#[tokio::test]
async fn program_tool_limits() {
    let tools = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let schema = r#"input_schema = '{"type":"object","properties":{"mib":{"type":"integer"}}}'"#;
    let spin = install(
        tools.path(),
        "spin",
        p1::SPIN,
        &format!(
            "description = \"spins\"\nargv = [\"spin\"]\nlimits = {{ timeout_ms = 300 }}\n{schema}\n"
        ),
    );
    let alloc = install(
        tools.path(),
        "alloc",
        p1::ALLOC,
        &format!(
            "description = \"allocates\"\nargv = [\"alloc\", \"{{mib}}\"]\nlimits = {{ memory_mb = 32 }}\n{schema}\n"
        ),
    );
    let host = host_of(&[&spin, &alloc], ws.path(), None).await;
    let r = call(&host, "spin", json!({}), SandboxMode::None).await;
    assert_eq!(r.code(), Some(toolhost::ErrorCode::Timeout), "{r:?}");
    let r = call(&host, "alloc", json!({"mib": 256}), SandboxMode::None).await;
    assert_eq!(r.code(), Some(toolhost::ErrorCode::MemoryLimit), "{r:?}");
    let r = call(&host, "alloc", json!({"mib": 2}), SandboxMode::None).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
}

/// A program-backed tool goes through policy and approval like any tool:
/// a `deny` rule refuses it and an `ask` without an approver refuses it
/// (`APPROVAL_UNAVAILABLE`), neither with an intent in the log; an allowed
/// call has its intent (naming the program's SHA-256) before its result.
#[tokio::test]
async fn program_tool_pipeline() {
    let tools = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let schema = r#"input_schema = '{"type":"object","properties":{"text":{"type":"string"}}}'"#;
    let manifest = format!("description = \"cat\"\nargv = [\"cat\"]\nstdin = \"text\"\n{schema}\n");
    let denied = install(tools.path(), "denied", p1::CAT, &manifest);
    let asked = install(tools.path(), "asked", p1::CAT, &manifest);
    let allowed = install(tools.path(), "allowed", p1::CAT, &manifest);
    let policy = r#"
version = 1
default = "allow"
[[rules]]
tool = "denied"
decision = "deny"
reason = "not this one"
[[rules]]
tool = "asked"
decision = "ask"
reason = "a human decides"
"#;
    let host = host_of(&[&denied, &asked, &allowed], ws.path(), Some(policy)).await;
    let r = call(&host, "denied", json!({"text": "x"}), SandboxMode::None).await;
    assert_eq!(r.code(), Some(toolhost::ErrorCode::PolicyDenied), "{r:?}");
    let denied_id = r.call_id.clone();
    let r = call(&host, "asked", json!({"text": "x"}), SandboxMode::None).await;
    assert_eq!(
        r.code(),
        Some(toolhost::ErrorCode::ApprovalUnavailable),
        "{r:?}"
    );
    let asked_id = r.call_id.clone();
    let r = call(&host, "allowed", json!({"text": "x"}), SandboxMode::None).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    for id in [&denied_id, &asked_id] {
        let events = host.log().events_for_call(id).unwrap();
        assert!(
            !events.iter().any(|e| e.kind == EventKind::ToolIntent),
            "{events:?}"
        );
    }
    let events = host.log().events_for_call(&r.call_id).unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    let intent = kinds.iter().position(|k| *k == EventKind::ToolIntent);
    let result = kinds.iter().position(|k| *k == EventKind::ToolResult);
    assert!(
        matches!((intent, result), (Some(i), Some(r)) if i < r),
        "{kinds:?}"
    );
    let bytes = std::fs::read(p1::CAT).unwrap();
    let intent = &events[intent.unwrap()];
    assert_eq!(intent.payload["tool"], "allowed");
    assert_eq!(intent.payload["args"], json!({"text": "x"}));
    assert_eq!(intent.payload["component"], sha256_hex(&bytes));
}

fn sha256_hex(bytes: &[u8]) -> String {
    // The same digest the host records, computed independently.
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(bytes)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// A preview 1 reactor that exports `run` is a program too: `_initialize`
/// runs first, `run`'s result is the exit status, and the `host.call` door
/// some interpreters import answers "no host" (-1): this program exports
/// no `host_alloc`, so it cannot take an answer (code mode needs one).
#[tokio::test]
async fn program_tool_reactor() {
    let tools = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let wasm = tools.path().join("reactor.wasm");
    std::fs::write(
        &wasm,
        wat::parse_str(
            r#"(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "host" "call" (func $host (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $init (mut i32) (i32.const 0))
  (data (i32.const 16) "reactor ran\n")
  (func (export "_initialize") (global.set $init (i32.const 1)))
  (func (export "run") (result i32)
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 12))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    ;; 0 when initialised and the door said -1; 7 or the door's answer otherwise.
    (if (result i32) (global.get $init)
      (then (i32.add (call $host (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0))
                     (i32.const 1)))
      (else (i32.const 7)))))"#,
        )
        .unwrap(),
    )
    .unwrap();
    let m = tools.path().join("reactor.tool.toml");
    std::fs::write(
        &m,
        "name = \"reactor\"\ndescription = \"r\"\nargv = [\"r\"]\ninput_schema = '{\"type\":\"object\"}'\n",
    )
    .unwrap();
    let host = host_of(&[&m], ws.path(), None).await;
    let r = call(&host, "reactor", json!({}), SandboxMode::None).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.canonical["stdout"], "reactor ran\n");
    assert_eq!(r.canonical["exit_code"], 0);
    // `toolhost exec` still refuses a reactor: it is not a command.
    let out = Command::new(toolhost_bin())
        .env("TOOLHOST_CACHE_DIR", cache_dir())
        .args(["exec".as_ref(), wasm.as_os_str()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("reactor"));
}

/// `toolhost list DIR` and `toolhost run NAME --tools DIR` see a manifest's
/// tool (and not its program as a component).
#[test]
fn program_tool_cli() {
    let tools = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    install(tools.path(), "args_env", p1::ARGS_ENV, ARGS_ENV);
    let out = Command::new(toolhost_bin())
        .env("TOOLHOST_CACHE_DIR", cache_dir())
        .args(["list".as_ref(), tools.path().as_os_str(), "--json".as_ref()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<_> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["args_env"]);
    let out = Command::new(toolhost_bin())
        .env("TOOLHOST_CACHE_DIR", cache_dir())
        .arg("run")
        .arg("args_env")
        .arg("--tools")
        .arg(tools.path())
        .arg("--workspace")
        .arg(ws.path())
        .arg("--state")
        .arg(state.path())
        .args(["--args", r#"{"name":"cli"}"#, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        r["canonical"]["stdout"]
            .as_str()
            .unwrap()
            .contains("--name=cli"),
        "{r}"
    );
}

/// A line-delimited JSON-RPC client of `toolhost serve --mcp`.
struct Mcp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<Value>,
}

impl Mcp {
    fn send(&mut self, v: Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next message for which `pick` is true; earlier ones are skipped.
    fn wait(&self, what: &str, pick: impl Fn(&Value) -> bool) -> Value {
        loop {
            match self.lines.recv_timeout(std::time::Duration::from_secs(60)) {
                Ok(v) if pick(&v) => return v,
                Ok(_) => {}
                Err(e) => panic!("no {what} from the server: {e}"),
            }
        }
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.wait(method, |v| v["id"] == id)
    }

    fn tool_names(&mut self, id: u64) -> Vec<String> {
        let r = self.request(id, "tools/list", json!({}));
        let mut names: Vec<String> = r["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `serve --mcp --tools DIR` picks up a manifest added while it runs: the
/// client is told the list changed, sees the tool and calls it; removed,
/// the tool is gone.
#[test]
fn program_tool_hot_reload() {
    let tools = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut child = Command::new(toolhost_bin())
        .env("TOOLHOST_CACHE_DIR", cache_dir())
        .args([
            "serve",
            "--mcp",
            "--tools-only",
            "--poll-ms",
            "100",
            "--tools",
        ])
        .arg(tools.path())
        .arg("--workspace")
        .arg(ws.path())
        .arg("--state")
        .arg(state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    let mut mcp = Mcp {
        child,
        stdin,
        lines,
    };
    let init = mcp.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
    );
    assert!(init["result"].is_object(), "{init}");
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    assert!(mcp.tool_names(2).is_empty());
    // Added: the program first, then the manifest (renamed into place).
    std::fs::copy(p1::ARGS_ENV, tools.path().join("args_env.wasm")).unwrap();
    let tmp = tools.path().join("manifest.tmp");
    std::fs::write(&tmp, format!("name = \"args_env\"\n{ARGS_ENV}")).unwrap();
    std::fs::rename(&tmp, tools.path().join("args_env.tool.toml")).unwrap();
    mcp.wait("tools/list_changed", |v| {
        v["method"] == "notifications/tools/list_changed"
    });
    assert_eq!(mcp.tool_names(3), ["args_env"]);
    let r = mcp.request(
        4,
        "tools/call",
        json!({"name": "args_env", "arguments": {"name": "mcp"}}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert!(
        r["result"]["structuredContent"]["stdout"]
            .as_str()
            .is_some_and(|s| s.contains("--name=mcp"))
            || r.to_string().contains("--name=mcp"),
        "{r}"
    );
    // Removed (the program too: alone, it would be taken for a component).
    std::fs::remove_file(tools.path().join("args_env.tool.toml")).unwrap();
    std::fs::remove_file(tools.path().join("args_env.wasm")).unwrap();
    mcp.wait("tools/list_changed", |v| {
        v["method"] == "notifications/tools/list_changed"
    });
    assert!(mcp.tool_names(5).is_empty());
}

/// A program stuck in a host file system call (reading a FIFO that has no
/// writer, where neither the epoch nor a dropped future can stop it) is
/// abandoned at its deadline, as a component tool's body is: the call ends
/// TIMEOUT shortly after the manifest's 300 ms, and the host goes on
/// serving.
#[tokio::test]
async fn a_program_stuck_in_a_host_call_is_abandoned_at_its_deadline() {
    let tools = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("in.txt"), "inside").unwrap();
    let pipe = Fifo::make(ws.path().join("pipe"));
    let m = install(
        tools.path(),
        "fs",
        p1::FS,
        &format!("{FS}limits = {{ timeout_ms = 300 }}\n"),
    );
    let host = host_of(&[&m], ws.path(), None).await;
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        call(
            &host,
            "fs",
            json!({"op": "read", "path": "/pipe"}),
            SandboxMode::ReadOnly,
        ),
    )
    .await;
    let took = started.elapsed();
    // Let the stuck reader go.
    pipe.release();
    let r = r.expect("the call outlived its deadline by 20 s");
    assert_eq!(r.code(), Some(toolhost::ErrorCode::Timeout), "{r:?}");
    assert!(
        took < std::time::Duration::from_secs(3),
        "ended after {took:?}"
    );
    // The released body returns, and with it its pass through the
    // exclusivity gate (a program tool is not concurrency-safe, so nothing
    // overlaps it, even abandoned).
    let waited = std::time::Instant::now();
    while host.runtime().abandoned_bodies() > 0 {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(20),
            "the released body never returned"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let r = call(
        &host,
        "fs",
        json!({"op": "read", "path": "/in.txt"}),
        SandboxMode::ReadOnly,
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
}

/// A program tool that connected (its policy's grant) and then got stuck
/// in a host system call (reading a FIFO nobody writes) is abandoned at its
/// deadline, and its call still records the connection, in its result and
/// in the session log: a program cannot hide its traffic by getting itself
/// abandoned.
#[tokio::test]
async fn an_abandoned_program_tool_keeps_its_network_records() {
    let echo = EchoListener::start();
    let addr = format!("127.0.0.1:{}", echo.port);
    let tools = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let pipe = Fifo::make(ws.path().join("pipe"));
    let m = install(
        tools.path(),
        "send",
        p2::TCP_SEND,
        r#"
description = "Sends a line, then reads a file."
argv = ["tcp_send", "{addr}", "hello", "{then}"]
workspace = "/"
mode = "read-only"
side_effect = "external"
limits = { timeout_ms = 5000 }
input_schema = '{"type":"object","properties":{"addr":{"type":"string"},"then":{"type":"string"}},"required":["addr","then"]}'
"#,
    );
    let policy =
        format!("version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"tcp://{addr}\"]\n");
    let host = host_of(&[&m], ws.path(), Some(&policy)).await;
    let r = call(
        &host,
        "send",
        json!({"addr": addr, "then": "/pipe"}),
        SandboxMode::ReadOnly,
    )
    .await;
    pipe.release();
    assert_eq!(r.code(), Some(toolhost::ErrorCode::Timeout), "{r:?}");
    assert_eq!(echo.count(), 1);
    let urls: Vec<&str> = r.receipt.network.iter().map(|n| n.url.as_str()).collect();
    assert_eq!(urls, [format!("tcp://{addr}").as_str()], "{r:?}");
    let logged: Vec<Value> = host
        .log()
        .events_for_call(&r.call_id)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .map(|e| e.payload)
        .collect();
    assert_eq!(
        logged[0]["receipt"]["network"][0]["url"],
        format!("tcp://{addr}"),
        "{logged:?}"
    );
}
