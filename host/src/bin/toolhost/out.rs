//! Printing to stdout: `out!` and `outln!` are `print!` and `println!` for
//! a stdout that may be a closed pipe or fail, where those would panic.

/// Prints to stdout like `print!`, but a stdout that cannot be written
/// does not panic: see [`write_stdout`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::write_stdout(format_args!($($arg)*), false) };
}

/// Prints a line to stdout like `println!`, but a stdout that cannot be
/// written does not panic: see [`write_stdout`].
macro_rules! outln {
    () => { $crate::out::write_stdout(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::out::write_stdout(format_args!($($arg)*), true) };
}

/// The exit status when stdout is a closed pipe (`toolhost log | head`):
/// what a shell reports for a program that SIGPIPE ended (128 + 13).
const EXIT_STDOUT_CLOSED: i32 = 141;

/// Writes to stdout. A reader that went away (a closed pipe) ends the
/// process quietly with [`EXIT_STDOUT_CLOSED`], as the command-line tools it
/// is piped with do; any other write error is reported on stderr and the
/// process exits with status 1 (where `println!` would panic). Whatever the
/// command did (a call and its log records) is complete before anything is
/// printed.
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(args)
        .and_then(|()| {
            if newline {
                stdout.write_all(b"\n")
            } else {
                Ok(())
            }
        })
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::exit(EXIT_STDOUT_CLOSED)
        }
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            std::process::exit(1)
        }
    }
}
