//! A WASI command program that computes forever: `toolhost exec
//! --timeout-ms` must stop it and exit 125.

fn main() {
    let mut n = 0u64;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
        if std::hint::black_box(false) {
            println!("{n}");
        }
    }
}
