//! Lines for the operator on stderr, written so that a closed stderr or a broken pipe drops
//! the line instead of panicking the thread that wrote it (the server's rule, `server::log`).

/// Writes one line to stderr, ignoring failure.
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{args}");
}

/// `log_line!("...", args)`: [`line`] with `format!` syntax.
macro_rules! log_line {
    ($($arg:tt)*) => {
        $crate::log::line(format_args!($($arg)*))
    };
}
pub(crate) use log_line;
