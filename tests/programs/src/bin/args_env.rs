//! Prints its arguments and its whole environment, in order, as Rust debug
//! strings (every byte escaped the same way on both sides of the test).

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let env: Vec<(String, String)> = std::env::vars().collect();
    println!("args: {args:?}");
    println!("env: {env:?}");
}
