//! The bounds every policy runs under. A policy is untrusted code on the cache's control path,
//! so each callback gets an instruction budget, each policy a memory ceiling, and a policy
//! that keeps failing is retired after a fixed number of consecutive failing ticks.

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
}

impl Limits {
    /// Granularity of the instruction budget: the count hook runs every this many
    /// instructions, so a callback may overrun its budget by less than one step.
    pub const HOOK_STEP: u32 = 10_000;
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            instructions: 200_000_000,
            memory_bytes: 64 << 20,
            max_consecutive_failures: 3,
        }
    }
}
