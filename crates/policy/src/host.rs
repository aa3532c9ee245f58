//! What the engine shares with the Lua side of every policy it loads: the `WRstate` state
//! keyed by policy name (so it survives reloads) and a bounded buffer of log lines that the
//! host drains and prints wherever it logs.

use std::collections::HashMap;

use serde::Serialize;

use crate::limits::Limits;
use crate::value::StateValue;

/// Severity of a policy log line. Numeric levels follow Ceph's `BAL_LOG` convention: 0 is an
/// error, 1 a warning, 2-4 information, 5 and above debug output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
}

impl LogLevel {
    pub(crate) fn from_lua(value: mlua::Value) -> LogLevel {
        match value {
            mlua::Value::Integer(i) => LogLevel::from_number(i as f64),
            mlua::Value::Number(n) => LogLevel::from_number(n),
            mlua::Value::String(s) => match s.to_string_lossy().to_ascii_lowercase().as_str() {
                "error" | "err" => LogLevel::Error,
                "warn" | "warning" => LogLevel::Warn,
                "debug" | "trace" => LogLevel::Debug,
                _ => LogLevel::Info,
            },
            _ => LogLevel::Info,
        }
    }

    fn from_number(n: f64) -> LogLevel {
        match n {
            n if n < 1.0 => LogLevel::Error,
            n if n < 2.0 => LogLevel::Warn,
            n if n < 5.0 => LogLevel::Info,
            _ => LogLevel::Debug,
        }
    }
}

/// One line logged by a policy or by the engine about a policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogRecord {
    /// `name@version` of the policy concerned.
    pub policy: String,
    pub level: LogLevel,
    pub message: String,
}

/// Log lines waiting for the host; bounded so a chatty policy cannot grow the host's memory:
/// at most [`Limits::MAX_LOG_LINES_PER_TICK`] policy lines a tick, each at most
/// [`Limits::MAX_LOG_LINE_BYTES`], and [`LogBuffer::CAPACITY`] lines between two drains.
#[derive(Debug, Default)]
pub(crate) struct LogBuffer {
    records: Vec<LogRecord>,
    dropped: u64,
    /// Policy lines taken since the tick started.
    this_tick: usize,
}

impl LogBuffer {
    /// Lines kept between two drains; later ones are counted and dropped.
    pub(crate) const CAPACITY: usize = 10_000;

    /// Starts counting a new tick's (or load's) policy lines.
    pub(crate) fn start_tick(&mut self) {
        self.this_tick = 0;
    }

    /// Whether a policy line may be logged now; if not, it is counted as dropped (and never
    /// built).
    pub(crate) fn accepts_line(&mut self) -> bool {
        if self.this_tick >= Limits::MAX_LOG_LINES_PER_TICK || self.records.len() >= Self::CAPACITY
        {
            self.dropped += 1;
            return false;
        }
        self.this_tick += 1;
        true
    }

    pub(crate) fn push(&mut self, policy: &str, level: LogLevel, message: String) {
        if self.records.len() >= Self::CAPACITY {
            self.dropped += 1;
            return;
        }
        self.records.push(LogRecord {
            policy: policy.to_string(),
            level,
            message,
        });
    }

    /// Takes the buffered lines and the number dropped since the last drain.
    pub(crate) fn drain(&mut self) -> (Vec<LogRecord>, u64) {
        let dropped = std::mem::take(&mut self.dropped);
        (std::mem::take(&mut self.records), dropped)
    }
}

#[derive(Debug, Default)]
pub(crate) struct HostShared {
    pub(crate) states: HashMap<String, StateValue>,
    pub(crate) logs: LogBuffer,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_levels_follow_ceph() {
        assert_eq!(LogLevel::from_number(0.0), LogLevel::Error);
        assert_eq!(LogLevel::from_number(1.0), LogLevel::Warn);
        assert_eq!(LogLevel::from_number(3.0), LogLevel::Info);
        assert_eq!(LogLevel::from_number(5.0), LogLevel::Debug);
    }

    #[test]
    fn the_buffer_is_bounded() {
        let mut b = LogBuffer::default();
        for i in 0..LogBuffer::CAPACITY + 5 {
            b.push("p@1", LogLevel::Info, i.to_string());
        }
        let (records, dropped) = b.drain();
        assert_eq!(records.len(), LogBuffer::CAPACITY);
        assert_eq!(dropped, 5);
        assert_eq!(b.drain().0.len(), 0);
    }
}
