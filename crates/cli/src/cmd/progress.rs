//! The progress bar of long replays on stderr: share of the trace read, rate and time left
//! when the trace's size is known (its bytes), a count and a rate otherwise.
//!
//! Shown only when stderr is a terminal, or everywhere with `--progress` (one line per
//! update then, for logs); `--quiet` turns it off. It never writes to stdout, so `--json`
//! output stays one JSON object.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};
use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

/// When to show the bar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Show {
    Never,
    /// Only if stderr is a terminal.
    OnTerminal,
    /// Always, as plain lines when stderr is not a terminal.
    Always,
}

impl Show {
    pub fn from_flags(quiet: bool, forced: bool) -> Show {
        match (quiet, forced) {
            (true, _) => Show::Never,
            (false, true) => Show::Always,
            (false, false) => Show::OnTerminal,
        }
    }
}

/// Requests between two looks at the reader (a look costs a few nanoseconds; the bar
/// itself redraws at most a few times a second).
const EVERY: u64 = 1 << 16;

pub struct ReplayProgress {
    bar: Option<ProgressBar>,
    /// The bar counts bytes of the file (known size) rather than requests.
    by_bytes: bool,
    requests: u64,
}

impl ReplayProgress {
    /// `size`: the reader's `(bytes read, file size)` when it knows them.
    pub fn new(show: Show, label: &str, size: Option<(u64, u64)>) -> ReplayProgress {
        let target = match show {
            Show::Never => None,
            Show::OnTerminal => Some(ProgressDrawTarget::stderr_with_hz(4)),
            Show::Always if std::io::IsTerminal::is_terminal(&std::io::stderr()) => {
                Some(ProgressDrawTarget::stderr_with_hz(4))
            }
            Show::Always => Some(ProgressDrawTarget::term_like_with_hz(
                Box::new(LineTerm::default()),
                1,
            )),
        };
        let Some(target) = target else {
            return ReplayProgress {
                bar: None,
                by_bytes: false,
                requests: 0,
            };
        };
        let total = size.map(|(_, total)| total).filter(|&t| t > 0);
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
        let template = if total.is_some() {
            "{prefix} {bar:20} {percent:>3}% {msg}, eta {eta}"
        } else {
            "{prefix} {spinner} {msg}, {elapsed} elapsed"
        };
        bar.set_style(
            ProgressStyle::with_template(template)
                .expect("static template is valid")
                .progress_chars("=> "),
        );
        bar.set_prefix(label.to_string());
        bar.set_message("0 requests");
        // Drawing starts only now that the bar is complete.
        bar.set_draw_target(target);
        bar.enable_steady_tick(Duration::from_millis(500));
        ReplayProgress {
            bar: Some(bar),
            by_bytes: total.is_some(),
            requests: 0,
        }
    }

    /// Counts `n` requests (a batch); `size` is looked at at most once per [`EVERY`].
    #[inline]
    pub fn requests(&mut self, n: u64, size: impl FnOnce() -> Option<(u64, u64)>) {
        let before = self.requests / EVERY;
        self.requests += n;
        if self.requests / EVERY != before {
            self.update(size());
        }
    }

    #[cold]
    fn update(&mut self, size: Option<(u64, u64)>) {
        let Some(bar) = &self.bar else { return };
        if self.by_bytes {
            if let Some((done, _)) = size {
                bar.set_position(done);
            }
        }
        let secs = bar.elapsed().as_secs_f64();
        let rate = if secs > 0.0 {
            self.requests as f64 / secs
        } else {
            0.0
        };
        bar.set_message(format!(
            "{} requests, {:.2} M req/s",
            self.requests,
            rate / 1e6
        ));
    }

    /// Ends the bar; on a terminal it is cleared, in a log the last line says 100%.
    pub fn finish(mut self, size: Option<(u64, u64)>) {
        self.update(size);
        if let Some(bar) = self.bar.take() {
            if let Some(total) = bar.length() {
                bar.set_position(total);
            }
            if bar.is_hidden() {
                return;
            }
            if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                bar.finish_and_clear();
            } else {
                bar.finish();
            }
        }
    }
}

/// A draw target for a non-terminal stderr: every redraw becomes one plain line (no cursor
/// moves, no padding), and a redraw that changed nothing prints nothing.
#[derive(Debug, Default)]
struct LineTerm {
    /// The line being drawn, and the last one printed.
    lines: Mutex<(String, String)>,
}

impl LineTerm {
    fn emit(&self) -> std::io::Result<()> {
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        let (current, last) = &mut *lines;
        let line = current.trim_end().to_string();
        current.clear();
        if line.is_empty() || line == *last {
            return Ok(());
        }
        writeln!(std::io::stderr(), "{line}")?;
        *last = line;
        Ok(())
    }
}

impl TermLike for LineTerm {
    fn width(&self) -> u16 {
        100
    }
    fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.write_str(s)?;
        self.emit()
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines.0.push_str(s);
        Ok(())
    }
    fn clear_line(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        self.emit()?;
        std::io::stderr().flush()
    }
}

/// The trace's file name, for the progress bar's label.
pub fn file_label(path: &std::path::Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
