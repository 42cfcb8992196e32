//! `describe` never returns: the load must fail within DESCRIBE_DEADLINE
//! instead of hanging.

use toolhost_guest::bindings::exports::toolhost::tool::tool::Guest;
use toolhost_guest::bindings::toolhost::tool::types::{ToolDescriptor, ToolError, ToolOutput};

struct Probe;

impl Guest for Probe {
    fn describe() -> Vec<ToolDescriptor> {
        let mut n = 0u64;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
            if std::hint::black_box(false) {
                return Vec::with_capacity(n as usize);
            }
        }
    }

    fn invoke(_name: String, _args: String) -> Result<ToolOutput, ToolError> {
        Err(ToolError {
            code: "none".into(),
            message: "unreachable".into(),
        })
    }
}

toolhost_guest::bindings::export!(Probe with_types_in toolhost_guest::bindings);

fn main() {}
