//! The metrics a policy sees of one simulated cache at a tick: the one definition `replay`
//! and every node of `replay --nodes` use, so a policy decides alike under both.

use adapt::control::TickMetrics;
use cache::{Cache, ClassLayer, RequestCounts};

/// One cache's counters now and at the last tick, and what the back-end model says.
pub struct CacheSample<'a, L: ClassLayer> {
    pub cache: &'a Cache<L>,
    pub now: &'a RequestCounts,
    pub then: &'a RequestCounts,
    /// Back-end operations (reads and writes) this cache caused, now and at the last tick.
    pub backend_ops: (u64, u64),
    pub backend_queue: f64,
    /// Seconds the tick covered; rates are 0 over an empty interval.
    pub seconds: f64,
}

/// The metrics of `s`, as the policy's `servers[i]` shows them.
pub fn cache_metrics<L: ClassLayer>(s: &CacheSample<'_, L>) -> TickMetrics {
    let (c, p, dt) = (s.now, s.then, s.seconds);
    let per_s = |a: u64, b: u64| if dt > 0.0 { (a - b) as f64 / dt } else { 0.0 };
    let cap = s.cache.capacity();
    TickMetrics {
        cachesize: s.cache.len() as f64,
        cachebytes: s.cache.bytes() as f64,
        capacity: cap
            .objects
            .or(cap.bytes)
            .map_or(f64::INFINITY, |c| c as f64),
        hits: c.hits as f64,
        misses: c.misses as f64,
        gets: c.lookups() as f64,
        puts: c.puts as f64,
        reqrate: per_s(c.requests, p.requests),
        getrate: per_s(c.lookups(), p.lookups()),
        putrate: per_s(c.puts, p.puts),
        missrate: per_s(c.misses, p.misses),
        hitrate: per_s(c.hits, p.hits),
        backend_rate: per_s(s.backend_ops.0, s.backend_ops.1),
        backend_queue: s.backend_queue,
        evictions: s.cache.evictions() as f64,
        load: per_s(c.requests, p.requests),
        cpu: None,
        mem: None,
    }
}
