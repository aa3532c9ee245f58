//! What the engine shares with the Lua side of every policy it loads: the `WRstate` state
//! keyed by policy name (so it survives reloads) and a bounded buffer of log lines that the
//! host drains and prints wherever it logs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mlua::Lua;
use serde::{Deserialize, Serialize};

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
    /// What `slots()` returns this tick, hottest first.
    pub(crate) slots: Vec<SlotLoad>,
    /// What `sequencers()` returns this tick, busiest first.
    pub(crate) sequencers: Vec<SequencerLoad>,
}

/// One entry of `slots()`: a range of this node's slots (a single slot as the host measures
/// them, `first == last`) and its request rate over the last tick.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotLoad {
    pub first: u16,
    pub last: u16,
    /// Requests per second.
    pub load: f64,
}

impl SlotLoad {
    /// Most entries `slots()` holds: enough for `howmuch()` to choose units from, few enough
    /// that building the table costs a tick next to nothing.
    pub const MAX: usize = 64;

    /// The [`SlotLoad::MAX`] hottest of `loads` (slot, requests per second), hottest first,
    /// ties by slot number; slots without load are left out (moving them relieves nothing).
    /// The simulator and the live balancer both build `slots()` with this.
    pub fn hottest(loads: impl IntoIterator<Item = (u16, f64)>) -> Vec<SlotLoad> {
        let mut hot: Vec<(u16, f64)> = loads.into_iter().filter(|&(_, l)| l > 0.0).collect();
        let order = |a: &(u16, f64), b: &(u16, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if hot.len() > Self::MAX {
            hot.select_nth_unstable_by(Self::MAX - 1, order);
            hot.truncate(Self::MAX);
        }
        hot.sort_unstable_by(order);
        hot.into_iter()
            .map(|(slot, load)| SlotLoad {
                first: slot,
                last: slot,
                load,
            })
            .collect()
    }
}

/// One entry of `sequencers()`: a shared log's sequencer this node runs (issue 27), the slot
/// it lives in (its migration unit: moving the slot moves the sequencer) and its rates over
/// the last tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SequencerLoad {
    /// The log's name (lossy UTF-8).
    pub log: String,
    /// The slot of the log's name.
    pub slot: u16,
    /// `ZLOG.NEXT` requests per second.
    pub rate: f64,
    /// Positions handed out per second (a batched `ZLOG.NEXT log N` hands out N).
    pub positions: f64,
    /// Every keyed request per second in the slot (the sequencer's and those of the log
    /// object sharing it): what moving the slot relieves, as `slots()` counts it.
    #[serde(default)]
    pub load: f64,
}

impl SequencerLoad {
    /// Most entries `sequencers()` holds, as for `slots()`.
    pub const MAX: usize = 64;

    /// The [`SequencerLoad::MAX`] busiest of `loads` by request rate, busiest first, ties by
    /// log name; idle sequencers are left out (moving them relieves nothing).
    pub fn busiest(loads: impl IntoIterator<Item = SequencerLoad>) -> Vec<SequencerLoad> {
        let mut busy: Vec<SequencerLoad> = loads.into_iter().filter(|s| s.rate > 0.0).collect();
        let order = |a: &SequencerLoad, b: &SequencerLoad| {
            b.rate.total_cmp(&a.rate).then_with(|| a.log.cmp(&b.log))
        };
        if busy.len() > Self::MAX {
            busy.select_nth_unstable_by(Self::MAX - 1, order);
            busy.truncate(Self::MAX);
        }
        busy.sort_unstable_by(order);
        busy
    }
}

/// Installs `sequencers()`: a fresh table, busiest first, of `{log=, slot=, rate=,
/// positions=, load=}` for the sequencers the host set for this tick (empty outside a
/// cluster).
pub(crate) fn install_sequencers(lua: &Lua, host: &Arc<Mutex<HostShared>>) -> mlua::Result<()> {
    let h = Arc::clone(host);
    let sequencers = lua.create_function(move |lua, ()| {
        let entries = h
            .lock()
            .map(|host| host.sequencers.clone())
            .unwrap_or_default();
        let table = lua.create_table_with_capacity(entries.len(), 0)?;
        for (i, e) in (1..).zip(entries) {
            let entry = lua.create_table_with_capacity(0, 5)?;
            entry.raw_set("log", e.log)?;
            entry.raw_set("slot", e.slot)?;
            entry.raw_set("rate", e.rate)?;
            entry.raw_set("positions", e.positions)?;
            entry.raw_set("load", e.load)?;
            table.raw_set(i, entry)?;
        }
        Ok(table)
    })?;
    lua.globals().raw_set("sequencers", sequencers)
}

/// Installs `slots()`: a fresh table, hottest first, of `{first=, last=, load=}` for the
/// slots the host set for this tick (empty outside a cluster).
pub(crate) fn install_slots(lua: &Lua, host: &Arc<Mutex<HostShared>>) -> mlua::Result<()> {
    let h = Arc::clone(host);
    let slots = lua.create_function(move |lua, ()| {
        let entries = h.lock().map(|host| host.slots.clone()).unwrap_or_default();
        let table = lua.create_table_with_capacity(entries.len(), 0)?;
        for (i, e) in (1..).zip(entries) {
            let entry = lua.create_table_with_capacity(0, 3)?;
            entry.raw_set("first", e.first)?;
            entry.raw_set("last", e.last)?;
            entry.raw_set("load", e.load)?;
            table.raw_set(i, entry)?;
        }
        Ok(table)
    })?;
    lua.globals().raw_set("slots", slots)
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
    fn hottest_slots_are_bounded_and_ordered() {
        let loads = (0..200u16).map(|s| (s, f64::from(s % 50)));
        let hot = SlotLoad::hottest(loads);
        assert_eq!(hot.len(), SlotLoad::MAX);
        // Loads 49 (slots 49, 99, 149, 199) first, ties by slot number.
        let first: Vec<u16> = hot.iter().take(5).map(|e| e.first).collect();
        assert_eq!(first, [49, 99, 149, 199, 48]);
        assert!(hot.windows(2).all(|w| w[0].load >= w[1].load));
        assert!(hot.iter().all(|e| e.first == e.last && e.load > 0.0));
        // Idle slots never show.
        assert!(SlotLoad::hottest([(1, 0.0), (2, 0.0)]).is_empty());
        assert_eq!(SlotLoad::hottest([(5, 2.0), (1, 3.0)]).len(), 2);
    }

    #[test]
    fn busiest_sequencers_are_bounded_and_ordered() {
        let seq = |i: usize, rate: f64| SequencerLoad {
            log: format!("log{i:03}"),
            slot: i as u16,
            rate,
            positions: rate,
            load: rate,
        };
        let busy = SequencerLoad::busiest((0..100).map(|i| seq(i, (i % 10) as f64)));
        assert_eq!(busy.len(), SequencerLoad::MAX);
        assert!(busy.windows(2).all(|w| w[0].rate >= w[1].rate));
        assert_eq!(busy[0].log, "log009");
        assert!(busy.iter().all(|s| s.rate > 0.0));
        assert!(SequencerLoad::busiest([seq(1, 0.0)]).is_empty());
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
