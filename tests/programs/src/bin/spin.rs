//! Computes forever: only the runtime can stop it.

fn main() {
    let mut n = 0u64;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
        if std::hint::black_box(false) {
            println!("{n}");
        }
    }
}
