//! The bounds every policy runs under. A policy is untrusted code on the cache's control path,
//! so each callback gets an instruction budget, each policy a memory ceiling, and a policy
//! that keeps failing is retired after a fixed number of consecutive failing ticks. Everything
//! a policy can make the host hold (log lines, state, parameters, error messages) is bounded
//! here too, so a policy's reach into host memory is counted and small.

use std::time::Duration;

/// Execution limits of the policy engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Lua VM instructions one callback may execute before it is stopped (counted in steps
    /// of [`Limits::HOOK_STEP`]). Default 200 million: a Fig. 9 scan over a full 1M-event
    /// series in plain Lua needs about 20 million.
    pub instructions: u64,
    /// Bytes the policy's Lua state may allocate in total. Default 64 MiB.
    pub memory_bytes: usize,
    /// Consecutive failing ticks after which the engine falls back to the previous good
    /// version (or to no management). Default 3.
    pub max_consecutive_failures: u32,
    /// Wall-clock time one callback may run, checked with the instruction budget; catches
    /// work that is slow per instruction. Default 10 s (a full 200M-instruction budget takes
    /// about one second).
    pub time_limit: Duration,
}

impl Limits {
    /// Granularity of the instruction budget: the count hook runs every this many
    /// instructions, so a callback may overrun its budget by less than one step.
    pub const HOOK_STEP: u32 = 10_000;
    /// Longest `log()`/`print()` line kept, in bytes; longer ones are cut (on the Lua side,
    /// before anything is copied) and end with `...`.
    pub const MAX_LOG_LINE_BYTES: usize = 1_024;
    /// `log()`/`print()` lines kept per tick (and per load); further ones are counted as
    /// dropped.
    pub const MAX_LOG_LINES_PER_TICK: usize = 100;
    /// Size of a `WRstate` value: the bytes of its strings plus 16 per number, boolean and
    /// table entry. Larger writes fail in the policy with an error.
    pub const MAX_STATE_BYTES: usize = 256 << 10;
    /// Parameters (`--param`, `POLICY PARAM`).
    pub const MAX_PARAMS: usize = 64;
    /// Bytes of one parameter's name.
    pub const MAX_PARAM_KEY_BYTES: usize = 64;
    /// Bytes of one parameter's value.
    pub const MAX_PARAM_VALUE_BYTES: usize = 4_096;
    /// Bytes of a policy error message kept (a policy can raise any string).
    pub const MAX_ERROR_BYTES: usize = 1_024;
    /// Largest object count `howmuch()` may return (2^53: every count is exact as a Lua
    /// number and as a signed 64-bit integer in reports).
    pub const MAX_COUNT: u64 = 1 << 53;
    /// Bytes of one policy source: a file, `POLICY LOAD`, or a chunk given to `load()`.
    pub const MAX_SOURCE_BYTES: usize = 1 << 20;
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            instructions: 200_000_000,
            memory_bytes: 64 << 20,
            max_consecutive_failures: 3,
            time_limit: Duration::from_secs(10),
        }
    }
}
