//! Tries the network through the WASI socket and name-lookup interfaces
//! (and through Rust's `std::net`): a TCP connect and a UDP datagram to a
//! port the host test listens on, and a lookup of `localhost`. Every attempt
//! must fail and nothing may reach the host's listeners.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// The host's TCP listener port on 127.0.0.1.
    tcp_port: u16,
    /// The host's UDP socket port on 127.0.0.1.
    udp_port: u16,
}

/// `ok: false` and the error, or `ok: true` and what happened.
#[derive(Serialize, JsonSchema)]
struct Attempt {
    ok: bool,
    detail: String,
}

fn attempt(r: Result<String, String>) -> Attempt {
    match r {
        Ok(detail) => Attempt { ok: true, detail },
        Err(detail) => Attempt { ok: false, detail },
    }
}

#[derive(Serialize, JsonSchema)]
struct Out {
    tcp_connect: Attempt,
    udp_send: Attempt,
    lookup_localhost: Attempt,
    std_tcp_connect: Attempt,
    std_udp_send: Attempt,
}

#[cfg(target_os = "wasi")]
mod wasi_net {
    use wasip2::sockets::network::{IpAddressFamily, IpSocketAddress, Ipv4SocketAddress, Network};
    use wasip2::sockets::{instance_network, ip_name_lookup, tcp_create_socket, udp_create_socket};

    fn local(port: u16) -> IpSocketAddress {
        IpSocketAddress::Ipv4(Ipv4SocketAddress {
            port,
            address: (127, 0, 0, 1),
        })
    }

    fn net() -> Network {
        instance_network::instance_network()
    }

    pub fn tcp(port: u16) -> Result<String, String> {
        let sock = tcp_create_socket::create_tcp_socket(IpAddressFamily::Ipv4)
            .map_err(|e| format!("create: {e:?}"))?;
        let network = net();
        sock.start_connect(&network, local(port))
            .map_err(|e| format!("start-connect: {e:?}"))?;
        sock.subscribe().block();
        sock.finish_connect()
            .map(|_| "connected".to_string())
            .map_err(|e| format!("finish-connect: {e:?}"))
    }

    pub fn udp(port: u16) -> Result<String, String> {
        let sock = udp_create_socket::create_udp_socket(IpAddressFamily::Ipv4)
            .map_err(|e| format!("create: {e:?}"))?;
        let network = net();
        sock.start_bind(&network, local(0))
            .map_err(|e| format!("start-bind: {e:?}"))?;
        sock.subscribe().block();
        sock.finish_bind()
            .map_err(|e| format!("finish-bind: {e:?}"))?;
        let (_incoming, outgoing) = sock
            .stream(Some(local(port)))
            .map_err(|e| format!("stream: {e:?}"))?;
        outgoing.subscribe().block();
        outgoing
            .send(&[wasip2::sockets::udp::OutgoingDatagram {
                data: b"escaped".to_vec(),
                remote_address: None,
            }])
            .map(|n| format!("sent {n}"))
            .map_err(|e| format!("send: {e:?}"))
    }

    pub fn lookup(name: &str) -> Result<String, String> {
        let network = net();
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
mod wasi_net {
    pub fn tcp(_: u16) -> Result<String, String> {
        Err("native".into())
    }
    pub fn udp(_: u16) -> Result<String, String> {
        Err("native".into())
    }
    pub fn lookup(_: &str) -> Result<String, String> {
        Err("native".into())
    }
}

struct Net;

impl Tool for Net {
    const NAME: &'static str = "net";
    const DESCRIPTION: &'static str = "Tries TCP, UDP and name lookup; reports each outcome.";
    type Args = Args;
    type Output = Out;
    fn run(args: Args) -> Result<Out, ToolError> {
        let std_tcp = std::net::TcpStream::connect(("127.0.0.1", args.tcp_port))
            .map(|_| "connected".to_string())
            .map_err(|e| e.to_string());
        let std_udp = std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.send_to(b"escaped", ("127.0.0.1", args.udp_port)))
            .map(|n| format!("sent {n}"))
            .map_err(|e| e.to_string());
        Ok(Out {
            tcp_connect: attempt(wasi_net::tcp(args.tcp_port)),
            udp_send: attempt(wasi_net::udp(args.udp_port)),
            lookup_localhost: attempt(wasi_net::lookup("localhost")),
            std_tcp_connect: attempt(std_tcp),
            std_udp_send: attempt(std_udp),
        })
    }
}

toolhost_guest::export_tools!(Net);

fn main() {}
