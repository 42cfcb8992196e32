//! A plain `echo` component for the compile-cache tests.

#[path = "../shared/echo.rs"]
mod echo;

toolhost_guest::export_tools!(echo::Echo);

fn main() {}
