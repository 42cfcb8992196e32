//! A hostile guest for the egress corpus: tries every HTTP URL, TCP and UDP
//! address and name lookup it is given, in order, and reports each outcome.
//! The host decides each one against the call's grants; the test's
//! listeners count what reached them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::http::{HttpRequest, send};
use toolhost_guest::{Tool, ToolError};

/// Its example (for `toolhost conformance`) connects and sends to a port of
/// 127.0.0.1 that conformance, which grants no network, never reaches.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({"tcp": ["127.0.0.1:9"], "udp": ["127.0.0.1:9"]}))]
struct Args {
    /// URLs to request (GET unless `method` says otherwise).
    #[serde(default)]
    http: Vec<String>,
    /// The method of the `http` requests (default `GET`).
    #[serde(default)]
    method: Option<String>,
    /// `a.b.c.d:port` to connect to over TCP.
    #[serde(default)]
    tcp: Vec<String>,
    /// `a.b.c.d:port` to send one datagram to, on a socket connected to it.
    #[serde(default)]
    udp: Vec<String>,
    /// `a.b.c.d:port` to send one datagram to, naming it in the datagram
    /// (a socket connected to nothing).
    #[serde(default)]
    udp_to: Vec<String>,
    /// Names to look up.
    #[serde(default)]
    lookup: Vec<String>,
    /// A file to read after every attempt (a FIFO nobody writes holds the
    /// guest in a host system call).
    #[serde(default)]
    then_read: Option<String>,
    /// UDP sockets to bind to port 0 and hold, all at once, until the
    /// first bind that fails (one attempt: how many were bound).
    #[serde(default)]
    hold_udp: u32,
    /// Pass each HTTP response's body on: in a progress report, a log
    /// record and the attempt's detail (a tool that echoes what a server
    /// sent back, credentials included).
    #[serde(default)]
    echo: bool,
}

/// One attempt: what, whether it went through, and the error or result.
#[derive(Serialize, JsonSchema)]
struct Attempt {
    target: String,
    ok: bool,
    detail: String,
}

#[derive(Serialize, JsonSchema)]
struct Out {
    attempts: Vec<Attempt>,
}

fn attempt(target: String, r: Result<String, String>) -> Attempt {
    match r {
        Ok(detail) => Attempt {
            target,
            ok: true,
            detail,
        },
        Err(detail) => Attempt {
            target,
            ok: false,
            detail,
        },
    }
}

#[cfg(target_os = "wasi")]
mod net {
    use wasip2::sockets::network::{IpAddressFamily, IpSocketAddress, Ipv4SocketAddress};
    use wasip2::sockets::{instance_network, ip_name_lookup, tcp_create_socket, udp_create_socket};

    fn parse(target: &str) -> Result<IpSocketAddress, String> {
        let addr: std::net::SocketAddrV4 = target.parse().map_err(|e| format!("{e}"))?;
        let [a, b, c, d] = addr.ip().octets();
        Ok(IpSocketAddress::Ipv4(Ipv4SocketAddress {
            port: addr.port(),
            address: (a, b, c, d),
        }))
    }

    pub fn tcp(target: &str) -> Result<String, String> {
        let remote = parse(target)?;
        let sock = tcp_create_socket::create_tcp_socket(IpAddressFamily::Ipv4)
            .map_err(|e| format!("create: {e:?}"))?;
        let network = instance_network::instance_network();
        sock.start_connect(&network, remote)
            .map_err(|e| format!("start-connect: {e:?}"))?;
        sock.subscribe().block();
        sock.finish_connect()
            .map(|_| "connected".to_string())
            .map_err(|e| format!("finish-connect: {e:?}"))
    }

    /// One datagram to `target`: on a socket connected to it (`connected`),
    /// or one connected to nothing, the datagram naming it.
    pub fn udp(target: &str, connected: bool) -> Result<String, String> {
        let remote = parse(target)?;
        let sock = udp_create_socket::create_udp_socket(IpAddressFamily::Ipv4)
            .map_err(|e| format!("create: {e:?}"))?;
        let network = instance_network::instance_network();
        let any = IpSocketAddress::Ipv4(Ipv4SocketAddress {
            port: 0,
            address: (0, 0, 0, 0),
        });
        sock.start_bind(&network, any)
            .map_err(|e| format!("start-bind: {e:?}"))?;
        sock.subscribe().block();
        sock.finish_bind()
            .map_err(|e| format!("finish-bind: {e:?}"))?;
        let (_incoming, outgoing) = sock
            .stream(connected.then_some(remote))
            .map_err(|e| format!("stream: {e:?}"))?;
        outgoing.subscribe().block();
        outgoing
            .check_send()
            .map_err(|e| format!("check-send: {e:?}"))?;
        outgoing
            .send(&[wasip2::sockets::udp::OutgoingDatagram {
                data: b"escaped".to_vec(),
                remote_address: (!connected).then_some(remote),
            }])
            .map(|n| format!("sent {n}"))
            .map_err(|e| format!("send: {e:?}"))
    }

    /// Binds `n` UDP sockets to port 0 and holds them all; stops at the
    /// first that fails.
    pub fn hold_udp(n: u32) -> Result<String, String> {
        let network = instance_network::instance_network();
        let mut held = Vec::new();
        for _ in 0..n {
            let sock = udp_create_socket::create_udp_socket(IpAddressFamily::Ipv4)
                .map_err(|e| format!("create: {e:?}"))?;
            let any = IpSocketAddress::Ipv4(Ipv4SocketAddress {
                port: 0,
                address: (0, 0, 0, 0),
            });
            let bound = sock.start_bind(&network, any).and_then(|()| {
                sock.subscribe().block();
                sock.finish_bind()
            });
            if let Err(e) = bound {
                return Err(format!("bound {}, then bind: {e:?}", held.len()));
            }
            held.push(sock);
        }
        Ok(format!("bound {}", held.len()))
    }

    pub fn lookup(name: &str) -> Result<String, String> {
        let network = instance_network::instance_network();
        let stream = ip_name_lookup::resolve_addresses(&network, name)
            .map_err(|e| format!("resolve: {e:?}"))?;
        stream.subscribe().block();
        let mut found = Vec::new();
        loop {
            match stream.resolve_next_address() {
                Ok(Some(a)) => found.push(format!("{a:?}")),
                Ok(None) => break,
                Err(e) => return Err(format!("next: {e:?}")),
            }
        }
        Ok(found.join(","))
    }
}

#[cfg(not(target_os = "wasi"))]
mod net {
    pub fn tcp(_: &str) -> Result<String, String> {
        Err("native".into())
    }
    pub fn udp(_: &str, _: bool) -> Result<String, String> {
        Err("native".into())
    }
    pub fn hold_udp(_: u32) -> Result<String, String> {
        Err("native".into())
    }
    pub fn lookup(_: &str) -> Result<String, String> {
        Err("native".into())
    }
}

struct Corpus;

impl Tool for Corpus {
    const NAME: &'static str = "egress";
    const DESCRIPTION: &'static str =
        "Tries HTTP URLs, TCP and UDP addresses and name lookups; reports each outcome.";
    // Only tools that declare `external` get network grants.
    const SIDE_EFFECT: toolhost_guest::SideEffect = toolhost_guest::SideEffect::External;
    type Args = Args;
    type Output = Out;
    fn run(args: Args) -> Result<Out, ToolError> {
        let mut attempts = Vec::new();
        for (n, url) in args.http.into_iter().enumerate() {
            let mut request = HttpRequest::get(&url);
            if let Some(m) = &args.method {
                request.method = m.clone();
            }
            let r = send(&request, 4096)
                .map(|r| {
                    if !args.echo {
                        return format!("status {}", r.status);
                    }
                    let body = String::from_utf8_lossy(&r.body).into_owned();
                    toolhost_guest::progress(n as u64, None, Some(&body));
                    toolhost_guest::log::info(&body);
                    format!("status {}: {body}", r.status)
                })
                .map_err(|f| f.to_string());
            attempts.push(attempt(format!("http {url}"), r));
        }
        for t in args.tcp {
            let r = net::tcp(&t);
            attempts.push(attempt(format!("tcp {t}"), r));
        }
        for t in args.udp {
            let r = net::udp(&t, true);
            attempts.push(attempt(format!("udp {t}"), r));
        }
        for t in args.udp_to {
            let r = net::udp(&t, false);
            attempts.push(attempt(format!("udp-to {t}"), r));
        }
        if args.hold_udp > 0 {
            let r = net::hold_udp(args.hold_udp);
            attempts.push(attempt(format!("hold-udp {}", args.hold_udp), r));
        }
        for n in args.lookup {
            let r = net::lookup(&n);
            attempts.push(attempt(format!("lookup {n}"), r));
        }
        if let Some(path) = args.then_read {
            let r = std::fs::read(&path)
                .map(|b| format!("read {} bytes", b.len()))
                .map_err(|e| e.to_string());
            attempts.push(attempt(format!("read {path}"), r));
        }
        Ok(Out { attempts })
    }
}

toolhost_guest::export_tools!(Corpus);

fn main() {}
