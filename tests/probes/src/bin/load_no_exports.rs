//! A WASI command that exports no tool: loading it as a tool component must
//! fail with "does not implement the toolhost:tool/tool-provider world".

fn main() {
    println!("I am a command, not a tool provider");
}
