//! Holds ever more host resources without any grant: TCP or UDP socket
//! objects (which the host creates before any address is checked), opened
//! files, or wasi:http header fields. Each one is a host file descriptor or
//! host memory. The host must stop the call at its per-call cap instead of
//! running out of file descriptors or memory.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// `tcp`, `udp`, `files` (opens `path` again and again) or `fields`.
    what: String,
    /// How many to hold at most.
    count: u32,
    /// The file to open, for `files`.
    #[serde(default)]
    path: String,
}

#[derive(Serialize, JsonSchema)]
struct Out {
    /// How many were held at once.
    held: u32,
}

struct HandleFlood;

impl Tool for HandleFlood {
    const NAME: &'static str = "handle_flood";
    const DESCRIPTION: &'static str = "Holds many sockets, files or header fields at once.";
    type Args = Args;
    type Output = Out;
    fn run(args: Args) -> Result<Out, ToolError> {
        imp::hold(&args).map(|held| Out { held })
    }
}

#[cfg(target_os = "wasi")]
mod imp {
    use super::Args;
    use toolhost_guest::ToolError;
    use wasip2::http::types::Fields;
    use wasip2::sockets::network::IpAddressFamily;
    use wasip2::sockets::{tcp_create_socket, udp_create_socket};

    pub fn hold(args: &Args) -> Result<u32, ToolError> {
        let fail = |i: u32, e: String| ToolError::new("held", format!("after {i}: {e}"));
        let mut tcp = Vec::new();
        let mut udp = Vec::new();
        let mut files = Vec::new();
        let mut fields = Vec::new();
        let value = vec![b'v'; 8 * 1024];
        for i in 0..args.count {
            match args.what.as_str() {
                "tcp" => tcp.push(
                    tcp_create_socket::create_tcp_socket(IpAddressFamily::Ipv4)
                        .map_err(|e| fail(i, format!("{e:?}")))?,
                ),
                "udp" => udp.push(
                    udp_create_socket::create_udp_socket(IpAddressFamily::Ipv4)
                        .map_err(|e| fail(i, format!("{e:?}")))?,
                ),
                "files" => {
                    files.push(std::fs::File::open(&args.path).map_err(|e| fail(i, e.to_string()))?)
                }
                "fields" => {
                    let f = Fields::from_list(&[("x".to_string(), value.clone())])
                        .map_err(|e| fail(i, format!("{e:?}")))?;
                    fields.push(f.clone());
                    fields.push(f);
                }
                other => return Err(ToolError::new("bad_args", format!("unknown {other}"))),
            }
        }
        Ok(args.count)
    }
}

#[cfg(not(target_os = "wasi"))]
mod imp {
    use super::Args;
    use toolhost_guest::ToolError;

    pub fn hold(args: &Args) -> Result<u32, ToolError> {
        let Args { what, count, path } = args;
        Err(ToolError::new(
            "unsupported",
            format!("holding {count} {what} ({path}) needs wasi"),
        ))
    }
}

toolhost_guest::export_tools!(HandleFlood);

fn main() {}
