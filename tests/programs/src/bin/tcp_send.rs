//! `tcp_send ADDR[,ADDR...] MESSAGE [THEN]`: connects to each socket
//! address `ADDR` in turn (an IP literal and a port; no name lookup), sends
//! `MESSAGE` and a newline, prints the first line the peer answers. Then,
//! if `THEN` is `flood`, writes to stdout for ever (an output nobody reads
//! holds it in a host system call); otherwise reads the file `THEN` (a FIFO
//! nobody writes does too). An address whose connection or exchange fails
//! gets the error kind on stderr, and the others are still tried; then the
//! program exits 1.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(addr), Some(message)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: tcp_send ADDR[,ADDR...] MESSAGE [flood|FILE]");
        std::process::exit(2);
    };
    let exchange = |addr: &str| -> std::io::Result<String> {
        let mut stream = TcpStream::connect(addr)?;
        stream.write_all(format!("{message}\n").as_bytes())?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line)?;
        Ok(line)
    };
    let mut failed = false;
    for addr in addr.split(',') {
        match exchange(addr) {
            Ok(line) => print!("{line}"),
            Err(e) => {
                eprintln!("error: {:?}", e.kind());
                failed = true;
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
    if args.get(3).is_some_and(|t| t == "flood") {
        let chunk = [b'x'; 65536];
        loop {
            if std::io::stdout().write_all(&chunk).is_err() {
                std::process::exit(1);
            }
        }
    }
    if let Some(path) = args.get(3) {
        let _ = std::io::Write::flush(&mut std::io::stdout());
        match std::fs::read(path) {
            Ok(bytes) => println!("read {} bytes", bytes.len()),
            Err(e) => eprintln!("read: {:?}", e.kind()),
        }
    }
}
