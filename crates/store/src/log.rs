//! Lines for the operator on stderr. `eprintln!` panics when stderr is closed or a broken
//! pipe, which would take down whichever thread wrote (a server worker, the WAL sync thread);
//! every line of the store and the server goes through here instead and a failed write is
//! dropped. `clippy::print_stderr` is denied in both crates so no `eprintln!` comes back.

/// Writes one line to stderr, ignoring failure.
pub fn line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{args}");
}

/// `log_line!("...", args)`: [`line`] with `format!` syntax.
#[macro_export]
macro_rules! log_line {
    ($($arg:tt)*) => {
        $crate::log::line(format_args!($($arg)*))
    };
}
