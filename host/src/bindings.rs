//! The host side of `wit/`: one private `bindgen!` and the `host` interface
//! (structured logging and progress) implemented on the per-call state.

use crate::state::CallState;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "tool-provider",
    exports: { default: async },
});

pub(crate) use self::exports::toolhost::tool::tool::{ToolDescriptor, ToolOutput};
pub(crate) use self::toolhost::tool::host::LogLevel;
pub(crate) use self::toolhost::tool::types::{
    ContentBlock, SandboxMode as WitMode, SideEffect as WitSideEffect,
};

impl self::toolhost::tool::types::Host for CallState {}

impl self::toolhost::tool::host::Host for CallState {
    fn log(&mut self, level: LogLevel, message: String, fields: Option<String>) {
        self.host.log(level, message, fields);
    }

    fn progress(&mut self, done: u64, total: Option<u64>, message: Option<String>) {
        self.host.progress(done, total, message);
    }
}
