//! What the engine's thread answers to an [`Op`](super::Op): plain values, so the thread knows
//! nothing of the protocol. `cmd::policy` turns them into RESP frames; the dashboard reads
//! the same frames.

use super::journal::Event;
use super::registry::VersionRef;
use crate::metrics::{CandidateFigures, ShadowReport};

/// The reply to one `POLICY` subcommand.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// PARAM, and SYNC.
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

/// One line of `POLICY LIST`.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionSummary {
    pub id: VersionRef,
    pub loaded_at_ms: u64,
    pub author: String,
    pub bytes: usize,
    /// The version running now.
    pub active: bool,
}

/// `POLICY STATUS`.
#[derive(Debug, Clone, PartialEq)]
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
    /// `k=v k2=v2`.
    pub params: String,
}

/// `POLICY TICK`.
#[derive(Debug, Clone, PartialEq)]
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
