//! What the policy threads answer to an [`Op`](super::Op): plain values, so they know nothing
//! of the protocol. `cmd::policy` turns them into RESP frames; the dashboard serializes the
//! same values to JSON (serde), with no text in between.

use super::journal::Event;
use super::registry::VersionRef;
use crate::metrics::{CandidateFigures, ShadowReport};
use serde::Serialize;
use std::collections::BTreeMap;

/// The reply to one `POLICY` subcommand. As JSON (the dashboard's admin API) each variant is
/// its value alone: `Done` is `"OK"`, as RESP shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// PARAM, and SYNC.
    #[serde(serialize_with = "ok")]
    Done,
    /// LOAD and USE: the registry version now active.
    Version(u32),
    /// ROLLBACK: the version reinstated (`name@N`, or `no management`).
    Reinstated(String),
    /// SHOW: a version's source.
    Source(String),
    /// LIST: every stored version.
    Versions(Vec<VersionSummary>),
    Status(Box<Status>),
    /// LOG: journal events, oldest first.
    Log(Vec<Event>),
    /// TICK: what the tick did and the cache's figures after it.
    Tick(Box<TickReport>),
    /// SHADOW ADD: the shadow's name.
    Name(String),
    /// SHADOW LIST: one line per shadow.
    Lines(Vec<String>),
    /// SHADOW STATUS: the real cache's figures, then every shadow's.
    Candidates(Vec<CandidateFigures>),
    /// SHADOW STATUS name.
    Candidate(Box<CandidateFigures>),
    /// SWITCH STATUS.
    Switch(Box<ShadowReport>),
}

fn ok<S: serde::Serializer>(serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str("OK")
}

/// One line of `POLICY LIST`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VersionSummary {
    pub id: VersionRef,
    pub loaded_at_ms: u64,
    pub author: String,
    pub bytes: usize,
    /// The version running now.
    pub active: bool,
}

/// `POLICY STATUS`.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Status {
    /// `name@N` running, empty when none.
    pub active: String,
    /// The entry below the top of the activation stack, empty when none.
    pub previous: String,
    pub tick_ms: u64,
    pub ticks: u64,
    pub actions: u64,
    pub errors: u64,
    pub fallbacks: u64,
    pub last_decision: String,
    pub last_error: String,
    pub durable: bool,
    /// The top of the stack when it is not running (`--no-policy`), else empty.
    pub suspended: String,
    pub activated_at_us: u64,
    /// The parameters, each value as `POLICY PARAM` would set it.
    pub params: BTreeMap<String, String>,
    /// How long the engine has been busy with its current tick or request, 0 when idle; past
    /// 2 s it counts as wedged (see `live::watchdog`).
    pub busy_ms: u64,
    /// The tick or request it is busy with, empty when idle.
    pub busy_with: String,
}

/// `POLICY TICK`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TickReport {
    pub tick: u64,
    /// The policy clock after the tick.
    pub now: f64,
    /// Replay's notation: `capacity:N`, `evict:N`, empty for none.
    pub action: String,
    pub error: Option<String>,
    pub cache_objects: u64,
    pub cache_bytes: u64,
    pub capacity_objects: Option<u64>,
    pub capacity_bytes: Option<u64>,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub store_reads: u64,
    pub store_writes: u64,
    pub series_events: u64,
    pub series_keys: u64,
}
