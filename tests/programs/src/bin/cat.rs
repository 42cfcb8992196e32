//! Copies stdin to stdout byte for byte, then says on stderr how many bytes
//! it copied.

fn main() {
    let copied = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::stdout().lock());
    match copied {
        Ok(n) => eprintln!("copied {n} bytes"),
        Err(e) => {
            eprintln!("error: copy: {:?}", e.kind());
            std::process::exit(1);
        }
    }
}
