//! The credential mask is no oracle (DESIGN.md §2b: the guest never sees a
//! credential). A hostile guest (`egress_oracle`) sends guesses of the
//! secret to servers on loopback that reflect them in their own ways, and
//! reports everything it can observe of each response. What a right guess
//! (a prefix of the secret) shows must be what a wrong guess of the same
//! length shows: heads, read sizes, bodies, trailers, errors, the call's
//! records and, statistically, the timing.

use crate::common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;
use toolhost::policy::Policy;
use toolhost::{Host, Limits, SandboxMode};

/// 27 bytes, as the credential the review recovered.
const SECRET: &str = "sk-oracle-5f3a9c1e7b2d4068a";

/// Rounds of the exact comparisons (each tries every guess once).
const ROUNDS: usize = 8;

/// Pairs of guesses of one length: a prefix of the secret, and the same
/// with its last byte wrong.
fn guesses() -> Vec<String> {
    let mut g = Vec::new();
    for k in [5, 13, SECRET.len() - 1] {
        let right = &SECRET[..k];
        g.push(right.to_string());
        g.push(format!("{}#", &right[..k - 1]));
    }
    g
}

/// A request as the reflecting servers read it.
struct Asked {
    authorization: String,
    body: String,
}

fn read_request(stream: &mut TcpStream) -> Option<Asked> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let (mut authorization, mut length, mut chunked) = (String::new(), 0, false);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        let (name, value) = line.split_once(':').unwrap_or((&line, ""));
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "authorization" => authorization = value.to_string(),
            "content-length" => length = value.parse().ok()?,
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            reader.read_line(&mut line).ok()?;
            let n = usize::from_str_radix(line.trim(), 16).ok()?;
            let mut chunk = vec![0; n + 2];
            reader.read_exact(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        body.resize(length, 0);
        reader.read_exact(&mut body).ok()?;
    }
    Some(Asked {
        authorization,
        body: String::from_utf8(body).ok()?,
    })
}

/// A server on 127.0.0.1 that answers each of `n` connections' request
/// with `answer(request)`, in one write, and closes it.
fn reflector(n: usize, answer: fn(&Asked) -> Vec<u8>) -> u16 {
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(n) {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            if let Some(asked) = read_request(&mut stream) {
                let _ = stream.write_all(&answer(&asked));
            }
        }
    });
    port
}

fn chunked(head: &str, chunks: &[&str], trailers: &str) -> Vec<u8> {
    let mut out =
        format!("HTTP/1.1 200 OK\r\n{head}transfer-encoding: chunked\r\nconnection: close\r\n\r\n");
    for c in chunks {
        out.push_str(&format!("{:x}\r\n{c}\r\n", c.len()));
    }
    out.push_str(&format!("0\r\n{trailers}\r\n"));
    out.into_bytes()
}

/// The review's attack: a server that never received the credential
/// reflects the guest's bytes as the chunk it chose them to end.
fn reflects_chunks(asked: &Asked) -> Vec<u8> {
    chunked("", &["echo: ", &asked.body, "!"], "")
}

/// The credential's own server, reflecting the guest's bytes beside the
/// credential it received: in the head, in chunks of the body, in the
/// trailers.
fn reflects_beside_the_credential(asked: &Asked) -> Vec<u8> {
    let (a, g) = (&asked.authorization, &asked.body);
    chunked(
        &format!("x-echo: {g}\r\nx-auth: {a}\r\nx-both: {g}{a}\r\n"),
        &[&format!("auth={a};"), g, &format!("{a}{g}"), "!"],
        &format!("x-t: {g}\r\nx-auth-t: {a}\r\n"),
    )
}

/// The credential's own server, reflecting and then failing: it promises
/// more than it sends and closes.
fn reflects_then_fails(asked: &Asked) -> Vec<u8> {
    let body = format!("echo: {}", asked.body);
    format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len() + 100
    )
    .into_bytes()
}

/// The credential's own server, reflecting the guest's bytes over and over
/// (about 128 KiB), after the credential: work for a mask whose cost would
/// grow with how much of each window matches the secret.
fn reflects_at_length(asked: &Asked) -> Vec<u8> {
    let mut body = format!("auth={};", asked.authorization);
    while body.len() < 128 * 1024 {
        body.push_str(&asked.body);
    }
    let mut out = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    out.push_str(&body);
    out.into_bytes()
}

/// A host around the oracle probe: every port granted, a credential for
/// each of `credentialed`.
async fn oracle_host(
    ports: &[u16],
    credentialed: &[u16],
) -> ((tempfile::TempDir, tempfile::TempDir), Host) {
    let (dir, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let secret = dir.path().join("token");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    let allow: Vec<String> = ports
        .iter()
        .map(|p| format!("\"http://127.0.0.1:{p}\""))
        .collect();
    let mut policy = format!(
        "version = 1\ndefault = \"allow\"\n\n[network]\nallow = [{}]\nmax_requests = 64\n\
         max_response_bytes = 16777216\n",
        allow.join(", ")
    );
    for port in credentialed {
        policy.push_str(&format!(
            "\n[[credentials]]\nhost = \"127.0.0.1\"\nscheme = \"http\"\nport = {port}\n\
             header = \"Authorization\"\nvalue_file = {:?}\nprefix = \"Bearer \"\n",
            secret.display().to_string()
        ));
    }
    let mut b = builder(
        probes::EGRESS_ORACLE,
        workspace.path(),
        Limits::default(),
        suite_options(),
    );
    b.policy(Policy::from_toml(&policy, "oracle.toml").unwrap());
    let host = b.build().await.unwrap();
    ((dir, workspace), host)
}

/// The probe's observations, each with its network record, for `rounds`
/// rounds of `guesses` against `port`.
async fn observe(
    host: &Host,
    port: u16,
    guesses: &[String],
    rounds: usize,
    keep_body: bool,
) -> Vec<(Value, Value)> {
    let r = call(
        host,
        "oracle",
        json!({"url": format!("http://127.0.0.1:{port}/"), "guesses": guesses,
               "rounds": rounds, "read": 4096, "keep_body": keep_body}),
        SandboxMode::None,
    )
    .await;
    assert!(r.is_ok(), "{r:?}");
    let everything = serde_json::to_string(&r).unwrap();
    assert!(
        !everything.contains(SECRET),
        "the secret reached the guest: {everything}"
    );
    let seen = r.canonical["seen"].as_array().unwrap().clone();
    assert_eq!(seen.len(), rounds * guesses.len());
    assert_eq!(r.receipt.network.len(), seen.len());
    seen.into_iter()
        .zip(&r.receipt.network)
        .map(|(s, n)| (s, serde_json::to_value(n).unwrap()))
        .collect()
}

/// What of an observation must not depend on the guess: everything but
/// its timing, the guess's own bytes written as `<guess>`; and of its
/// record, everything but the time it took.
fn shape(seen: &Value, record: &Value, guess: &str) -> String {
    let mut seen = seen.clone();
    let mut record = record.clone();
    for field in ["guess", "head_ns", "first_ns", "end_ns"] {
        seen.as_object_mut().unwrap().remove(field);
    }
    record.as_object_mut().unwrap().remove("ms");
    json!({"seen": seen, "record": record})
        .to_string()
        .replace(guess, "<guess>")
}

/// Per guess, the shapes of its observations, sorted: the distribution of
/// what the guest saw.
fn shapes_by_guess(observed: &[(Value, Value)], guesses: &[String]) -> Vec<Vec<String>> {
    let mut by_guess = vec![Vec::new(); guesses.len()];
    for (seen, record) in observed {
        let g = seen["guess"].as_u64().unwrap() as usize;
        by_guess[g].push(shape(seen, record, &guesses[g]));
    }
    by_guess.iter_mut().for_each(|s| s.sort());
    by_guess
}

/// The Mann-Whitney U test's z for samples `a` and `b` (no ties expected:
/// nanoseconds): near 0 when both come from one distribution.
fn rank_z(a: &[f64], b: &[f64]) -> f64 {
    let u: f64 = a
        .iter()
        .map(|x| {
            b.iter()
                .map(|y| match x.partial_cmp(y) {
                    Some(std::cmp::Ordering::Greater) => 1.0,
                    Some(std::cmp::Ordering::Equal) => 0.5,
                    _ => 0.0,
                })
                .sum::<f64>()
        })
        .sum();
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    (u - n1 * n2 / 2.0) / (n1 * n2 * (n1 + n2 + 1.0) / 12.0).sqrt()
}

/// The bound on |z| past which two timing samples are taken to differ:
/// dudect's 4.5, a false alarm about once in 150,000 runs when the guess
/// makes no difference. The right and wrong guesses alternate, so load on
/// the machine falls on both alike.
const LEAK_Z: f64 = 4.5;

#[tokio::test]
pub(super) async fn egress_oracle() {
    let guesses = guesses();
    let n = ROUNDS * guesses.len();
    let plain = reflector(n, reflects_chunks);
    let beside = reflector(n, reflects_beside_the_credential);
    let failing = reflector(n, reflects_then_fails);
    let (_dir, host) = oracle_host(&[plain, beside, failing], &[beside, failing]).await;

    for (port, what) in [
        (plain, "a server without the credential, reflecting chunks"),
        (beside, "the credential's server, reflecting beside it"),
        (failing, "the credential's server, reflecting then failing"),
    ] {
        let observed = observe(&host, port, &guesses, ROUNDS, true).await;
        let shapes = shapes_by_guess(&observed, &guesses);
        for pair in shapes.chunks(2) {
            assert_eq!(
                pair[0], pair[1],
                "{what}: a right guess and a wrong one were seen differently"
            );
        }
        let first = &observed[0].0;
        match port {
            p if p == plain => {
                // Passed on as it came: a read a chunk.
                assert_eq!(first["reads"].as_array().unwrap().len(), 3, "{first}");
                assert_eq!(first["error"], Value::Null, "{first}");
            }
            p if p == beside => {
                // Masked wherever it was echoed, read whole.
                let masked = format!("Bearer {}", "*".repeat(SECRET.len()));
                let text = first.to_string();
                assert!(text.contains(&format!("x-auth: {masked}")), "{first}");
                assert!(text.contains(&format!("x-auth-t: {masked}")), "{first}");
                let body = first["body"].as_str().unwrap();
                assert!(body.starts_with(&format!("auth={masked};")), "{first}");
                assert_eq!(first["reads"].as_array().unwrap().len(), 1, "{first}");
                assert!(first["trailers"].is_array(), "{first}");
            }
            _ => {
                // The error alone: nothing of the body before it.
                assert_eq!(first["body_len"], 0, "{first}");
                assert!(first["error"].is_string(), "{first}");
            }
        }
    }
}

/// Timing: a right guess and a wrong one reflected at length by the
/// credential's server take alike long to reach the guest and to end, by a
/// rank test on many alternating tries.
#[tokio::test]
async fn egress_oracle_timing_does_not_tell_a_right_guess() {
    const TRIES: usize = 30;
    let right = SECRET[..SECRET.len() - 1].to_string();
    let guesses = vec![right.clone(), format!("{}#", &right[..right.len() - 1])];
    let port = reflector(TRIES * 2, reflects_at_length);
    let (_dir, host) = oracle_host(&[port], &[port]).await;
    let observed = observe(&host, port, &guesses, TRIES, false).await;
    let shapes = shapes_by_guess(&observed, &guesses);
    assert_eq!(shapes[0], shapes[1]);
    for field in ["first_ns", "end_ns"] {
        let sample = |g: u64| -> Vec<f64> {
            observed
                .iter()
                .filter(|(s, _)| s["guess"] == g)
                .map(|(s, _)| s[field].as_u64().unwrap() as f64)
                .collect()
        };
        let z = rank_z(&sample(0), &sample(1));
        assert!(
            z.abs() < LEAK_Z,
            "{field}: a right guess is told apart by its timing (z = {z:.2})"
        );
    }
}

/// The rank test tells apart what differs: it is not a check that cannot
/// fail.
#[test]
fn the_rank_test_tells_shifted_samples_apart() {
    let a: Vec<f64> = (0..30).map(|i| 1000.0 + f64::from(i)).collect();
    let b: Vec<f64> = (0..30).map(|i| 1020.0 + f64::from(i)).collect();
    assert!(rank_z(&a, &b).abs() > LEAK_Z);
    let mixed: Vec<f64> = (0..30).map(|i| 1000.5 + f64::from(i)).collect();
    assert!(rank_z(&a, &mixed).abs() < 1.0);
}
