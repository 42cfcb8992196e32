//! JavaScript tools: `examples/js/word_stats.js` (pure) and
//! `examples/js/http_get.js` (the standard `fetch()`), written with the
//! helper in `sdk/js/`, built by `scripts/build-js-tools` with the
//! componentize-js pinned in `sdk/js/package-lock.json` into
//! `target/js-tools/`. CI runs the script before the tests; here it runs
//! again with `--install` (npm ci in sdk/js when the toolchain is missing)
//! and rebuilds only what changed. When it cannot build, every test here
//! fails with the script's message.
//!
//! componentize-js output imports wasi:http whether or not the tool uses
//! it; `http_get` does, and reaches only what a policy's `[network]`
//! grants: a loopback server this test starts counts what reaches it.

use super::Example;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use toolhost::policy::Policy;
use toolhost::{CallRequest, ErrorCode, HostBuilder, SandboxMode};

/// `target/js-tools/NAME.wasm`, built, and compiled into the shared cache,
/// once per test run.
fn component(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let dir = super::build_with("build-js-tools", &["--install"], "js-tools")?;
        for example in ["word_stats", "http_get"] {
            super::warm_cache(&dir.join(format!("{example}.wasm")))?;
        }
        Ok(dir)
    });
    match built {
        Ok(dir) => dir.join(format!("{name}.wasm")),
        Err(e) => panic!("the JavaScript example tools are not built:\n{e}"),
    }
}

fn word_stats() -> Example {
    Example {
        component: component("word_stats"),
        tool: "word_stats",
        mode: SandboxMode::None,
        files: &[],
        args: json!({"text": "one two three\nfour five ✓\n"}),
        expected: json!({"words": 6, "lines": 2, "chars": 26}),
        invalid: json!({"text": 42}),
        examples: 1,
    }
}

#[tokio::test]
async fn js_tools_run_through_the_library_pipeline() {
    super::library_pipeline(&word_stats()).await;
}

#[test]
fn js_tools_run_through_the_cli() {
    super::cli_pipeline(&word_stats());
}

/// Both pass; the wasi:http imports are a warning, and `http_get`'s
/// example is reported with the destination it asks for, not run against
/// it (conformance grants no network).
#[test]
fn js_tools_pass_conformance() {
    let report = super::conformance_passes(&word_stats());
    assert_eq!(
        report["made_with"], "JavaScript (componentize-js)",
        "{report:#}"
    );
    let checks = report["checks"].as_array().unwrap().clone();
    let caps = checks
        .iter()
        .find(|c| c["check"] == "capabilities:word_stats")
        .unwrap();
    assert_eq!(caps["verdict"], "warn", "{caps:#}");
    assert!(
        caps["detail"].as_str().unwrap().contains("wasi:http/"),
        "{caps:#}"
    );

    let http_get = Example {
        component: component("http_get"),
        tool: "http_get",
        mode: SandboxMode::None,
        files: &[],
        args: json!({}),
        expected: json!(null),
        invalid: json!({}),
        examples: 0,
    };
    let report = super::conformance_passes(&http_get);
    let checks = report["checks"].as_array().unwrap();
    let row = |name: &str| checks.iter().find(|c| c["check"] == name).cloned();
    let network = row("network:http_get").unwrap_or_else(|| panic!("{report:#}"));
    assert!(
        network["detail"]
            .as_str()
            .unwrap()
            .contains("GET https://example.com:443"),
        "{network:#}"
    );
    let example = row("example:http_get[0]").unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(example["verdict"], "warn", "{example:#}");
}

/// An HTTP server on 127.0.0.1 answering every request with `200` and a
/// fixed body; counts the connections that reach it. Stops when dropped.
struct Counted {
    port: u16,
    connections: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

const BODY: &str = "served on loopback\n";

impl Counted {
    fn start() -> Counted {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (connections.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                c.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let Ok(reader) = stream.try_clone() else {
                    continue;
                };
                let mut reader = BufReader::new(reader);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line == "\r\n" {
                        break;
                    }
                    line.clear();
                }
                let _ = stream.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{BODY}",
                        BODY.len()
                    )
                    .as_bytes(),
                );
            }
        });
        Counted {
            port,
            connections,
            stop,
        }
    }

    fn count(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

async fn get(policy: &str, url: &str, mode: SandboxMode) -> toolhost::CallResult {
    let ws = crate::support::tempdir();
    let mut b = HostBuilder::new();
    b.tool_file(component("http_get"))
        .workspace(ws.path())
        .runtime_options(crate::support::runtime_options_with_pool(4))
        .policy(Policy::from_toml(policy, "test-policy.toml").unwrap());
    let host = b.build().await.unwrap();
    host.call(CallRequest::new("http_get", json!({ "url": url })).mode(mode))
        .await
}

/// `fetch()` in a componentize-js tool reaches a server only through a
/// grant: granted, the body comes back and the receipt records the
/// request with its rule; not granted (no `[network]`, another port, a
/// danger-full-access call), fetch rejects inside the tool, nothing reaches
/// the server, and the refusal is in the receipt's `denied`.
#[tokio::test]
async fn js_fetch_reaches_only_a_granted_server() {
    let server = Counted::start();
    let url = format!("http://127.0.0.1:{}/page", server.port);
    let granted = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"http://127.0.0.1:{}\"]\n",
        server.port
    );
    let r = get(&granted, &url, SandboxMode::None).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.canonical["status"], 200, "{r:?}");
    assert_eq!(r.canonical["body"], BODY, "{r:?}");
    assert_eq!(r.canonical["content_type"], "text/plain", "{r:?}");
    assert_eq!(server.count(), 1);
    let record = serde_json::to_value(&r.receipt.network).unwrap();
    assert_eq!(record[0]["decision"], "allowed", "{record:#}");
    assert_eq!(record[0]["status"], 200, "{record:#}");

    let other_port = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [\"http://127.0.0.1:{}\"]\n",
        server.port.wrapping_add(1).max(1)
    );
    for (policy, mode) in [
        (
            "version = 1\ndefault = \"allow\"\n".to_string(),
            SandboxMode::None,
        ),
        (
            "version = 1\npreset = \"danger-full-access\"\ndefault = \"allow\"\n".to_string(),
            SandboxMode::DangerFullAccess,
        ),
        (other_port, SandboxMode::None),
    ] {
        let r = get(&policy, &url, mode).await;
        assert_eq!(r.code(), Some(ErrorCode::ToolError), "{policy}: {r:?}");
        assert!(
            r.error
                .as_ref()
                .unwrap()
                .message
                .starts_with("fetch-failed"),
            "{r:?}"
        );
        assert!(
            r.receipt
                .denied
                .iter()
                .any(|d| d.starts_with("network: GET")),
            "{policy}: {:?}",
            r.receipt.denied
        );
        assert_eq!(server.count(), 1, "{policy}: nothing may reach the server");
    }
}
