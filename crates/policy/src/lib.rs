//! The Mantle policy engine: cache-management policies written in sandboxed Lua 5.4.
//!
//! A policy defines any of `load`, `when`, `howmuch` and `where` (libmantle style), or is a
//! Ceph balancer chunk that returns its targets. At each decision tick the host builds a
//! [`TickInput`] (metrics of every server, parameters, the recent access [`TimeSeries`]) and
//! calls [`PolicyEngine::tick`], which returns a [`Decision`] to apply: evict N objects now, or
//! set the target capacity, plus load targets for a cluster. The engine never lets a policy
//! take the host down; see `docs/policy-language.md` for the language reference.

mod access_log;
mod budget;
mod decision;
mod engine;
mod env;
mod error;
mod fans;
mod hooks;
mod host;
mod lease;
mod limits;
mod metrics;
mod pattern;
mod program;
mod projection;
mod sandbox;
mod series;
mod series_object;
mod source_file;
mod source_scan;
mod straight_line;
mod value;

pub mod check;
pub mod switch;
pub mod testenv;

pub use budget::Interrupt;
pub use decision::{Action, Decision};
pub use engine::{EngineStats, Fallback, PolicyEngine, TickOutcome};
pub use env::TickInput;
pub use error::{ErrorKind, LoadError, PolicyError, PolicyId};
pub use fans::Fan;
pub use hooks::{hook_source, hook_source_of, mentions_hooks, ScriptHooks};
pub use host::{LogLevel, LogRecord, SequencerLoad, SlotLoad};
pub use lease::{Contention, Lease, LeaseHook, LEASE_HOOK, MAX_LEASE_MS, MAX_LEASE_POSITIONS};
pub use limits::Limits;
pub use metrics::Metrics;
/// The Lua binding the sandbox is built on, for hosts that run other Lua in a [`Sandbox`].
pub use mlua;
pub use program::CALLBACKS;
pub use program::HOOKS;
pub use sandbox::{Meter, Sandbox, FORBIDDEN_GLOBALS};
pub use series::{NoSeries, TimeSeries, VecSeries};
pub use source_file::{read_policy_file, read_policy_source};
pub use source_scan::{check_compile_cost, MAX_CHAIN_TOKENS};
pub use value::{parse_param, Params, Scalar, StateValue};
