//! Allocates and touches the number of MiB given as its first argument,
//! then says so.

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut blocks = Vec::new();
    for _ in 0..mib {
        blocks.push(std::hint::black_box(vec![1u8; 1 << 20]));
    }
    println!("allocated {} MiB", blocks.len());
}
