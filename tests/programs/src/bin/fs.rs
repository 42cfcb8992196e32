//! File system operations through std, as any program does them:
//!
//! - `fs read PATH`: prints the file;
//! - `fs write PATH TEXT`: creates or truncates the file, writes TEXT;
//! - `fs ls PATH`: the entries, sorted, a directory with a trailing `/`;
//! - `fs suite DIR`: a fixed sequence of operations inside DIR (which it
//!   leaves as it found it), one line per step.
//!
//! A failing operation prints `error: OP PATH: KIND` on stderr and exits 1.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, SystemTime};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["read", path] => {
            let bytes = check("read", path, fs::read(path));
            let _ = std::io::stdout().write_all(&bytes);
        }
        ["write", path, text] => {
            check("write", path, fs::write(path, text));
            println!("wrote {} bytes to {path}", text.len());
        }
        ["ls", path] => {
            for name in list(path) {
                println!("{name}");
            }
        }
        ["suite", dir] => suite(Path::new(dir)),
        _ => {
            eprintln!("usage: fs read PATH | write PATH TEXT | ls PATH | suite DIR");
            std::process::exit(2);
        }
    }
}

/// The value, or the error on stderr and exit 1.
fn check<T>(op: &str, path: impl AsRef<Path>, r: std::io::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {op} {}: {:?}", path.as_ref().display(), e.kind());
            std::process::exit(1);
        }
    }
}

fn list(path: impl AsRef<Path>) -> Vec<String> {
    let path = path.as_ref();
    let mut names: Vec<String> = check("ls", path, fs::read_dir(path))
        .map(|e| {
            let e = check("ls", path, e);
            let name = e.file_name().to_string_lossy().into_owned();
            match e.file_type() {
                Ok(t) if t.is_dir() => format!("{name}/"),
                _ => name,
            }
        })
        .collect();
    names.sort();
    names
}

fn read_string(path: &Path) -> String {
    check("read", path, fs::read_to_string(path))
}

fn suite(dir: &Path) {
    let sub = dir.join("sub");
    let a = sub.join("a.txt");
    let b = sub.join("b.txt");
    let h = sub.join("h.txt");
    let d = sub.join("d");

    check("mkdir", &sub, fs::create_dir(&sub));
    println!("mkdir: ok");
    check("write", &a, fs::write(&a, "hello"));
    println!("write: {}", read_string(&a));

    let mut f = check("open", &a, OpenOptions::new().append(true).open(&a));
    check("append", &a, f.write_all(b" world"));
    drop(f);
    println!("append: {}", read_string(&a));

    let mut f = check("open", &a, File::open(&a));
    check("seek", &a, f.seek(SeekFrom::Start(6)));
    let mut rest = String::new();
    check("read", &a, f.read_to_string(&mut rest));
    println!("seek+read: {rest}");
    drop(f);

    let meta = check("stat", &a, fs::metadata(&a));
    println!("stat: file={} len={}", meta.is_file(), meta.len());

    let f = check("open", &a, OpenOptions::new().write(true).open(&a));
    check("truncate", &a, f.set_len(5));
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    check("set mtime", &a, f.set_modified(when));
    drop(f);
    let modified = check("stat", &a, fs::metadata(&a).and_then(|m| m.modified()));
    println!(
        "truncate: {}; mtime set: {}",
        read_string(&a),
        modified == when
    );

    check("rename", &a, fs::rename(&a, &b));
    println!("rename: a={} b={}", a.exists(), b.exists());

    check("link", &h, fs::hard_link(&b, &h));
    println!("hard link: {}", read_string(&h));

    check("mkdir", &d, fs::create_dir(&d));
    check("write", d.join("c.txt"), fs::write(d.join("c.txt"), "c"));
    println!("ls: {}", list(&sub).join(" "));

    match File::open(sub.join("missing")) {
        Ok(_) => println!("open missing: opened"),
        Err(e) => println!("open missing: {:?}", e.kind()),
    }
    match fs::remove_dir(&d) {
        Ok(()) => println!("rmdir non-empty: removed"),
        Err(_) => println!("rmdir non-empty: refused"),
    }

    check("rm", &h, fs::remove_file(&h));
    check("rm", &b, fs::remove_file(&b));
    check("rm -r", &d, fs::remove_dir_all(&d));
    check("rmdir", &sub, fs::remove_dir(&sub));
    let left = list(dir);
    if left.is_empty() {
        println!("cleanup: {} is empty again", dir.display());
    } else {
        println!("cleanup: {} holds {}", dir.display(), left.join(" "));
    }
}
