//! Where the command line's text goes. `println!`, `print!` and `eprintln!` in `src/` are
//! these (the macros at the top of `main.rs` shadow std's), so no write can panic or stop
//! swarm: a closed pipe (`swarm refactor … 2>&1 | head -3`, `swarm status | head -1`) only
//! means nobody reads. A run goes on to its end, writes its report and exits with its own
//! code; a command that only prints ends quietly (the closed pipe's error, where it surfaces
//! from a writer of its own, is exit 0: [`super::error::report`]).

use std::io::Write as _;

/// Writes a line on stderr, ignoring every error.
pub(crate) fn err_line(args: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}

/// Writes on stdout, ignoring every error.
pub(crate) fn out(args: std::fmt::Arguments<'_>) {
    let _ = std::io::stdout().lock().write_fmt(args);
}

/// Writes a line on stdout, ignoring every error.
pub(crate) fn out_line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
}

/// Whether `e` is a write to a pipe nobody reads any more.
pub(crate) fn is_closed_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}
