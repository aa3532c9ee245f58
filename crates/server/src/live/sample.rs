//! The metrics a live policy sees, measured on the running server: the cache's counters and
//! gauges turned into the names of DESIGN.md §3 (rates over the last tick, from the wall
//! clock), plus the process's `cpu` (share of the machine's cores used over the last tick)
//! and `mem` (resident bytes), read from `/proc/self` where it exists.

use crate::db::Db;
use crate::metrics::Stats;
use policy::Metrics;

/// Counter values at one sample, to turn the next sample's totals into rates.
#[derive(Clone, Copy)]
struct Totals {
    /// Seconds on the clock the caller samples by.
    at: f64,
    commands: u64,
    hits: u64,
    misses: u64,
    writes: u64,
    backend: u64,
    cpu_seconds: Option<f64>,
}

pub struct Sampler {
    previous: Option<Totals>,
    cores: f64,
}

impl Default for Sampler {
    fn default() -> Sampler {
        Sampler {
            previous: None,
            cores: std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64),
        }
    }
}

impl Sampler {
    /// Measures the server at `at` seconds (wall seconds since start, or the manual policy
    /// clock); rates cover the time since the previous call.
    pub fn sample(&mut self, db: &Db, at: f64) -> Metrics {
        let stats = db.stats();
        let snapshot = db.cache_snapshot();
        let now = Totals {
            at,
            commands: Stats::read(&stats.commands_processed),
            hits: Stats::read(&stats.cache_hits),
            misses: Stats::read(&stats.cache_misses),
            writes: Stats::read(&stats.store_writes),
            backend: Stats::read(&stats.store_reads) + Stats::read(&stats.store_writes),
            cpu_seconds: process_cpu_seconds(),
        };
        let previous = self.previous.replace(now).unwrap_or(Totals {
            at: now.at,
            commands: now.commands,
            hits: now.hits,
            misses: now.misses,
            writes: now.writes,
            backend: now.backend,
            cpu_seconds: now.cpu_seconds,
        });
        let seconds = (now.at - previous.at).max(0.0);
        let rate = |a: u64, b: u64| {
            if seconds > 0.0 {
                a.saturating_sub(b) as f64 / seconds
            } else {
                0.0
            }
        };
        let hitrate = rate(now.hits, previous.hits);
        let missrate = rate(now.misses, previous.misses);
        let reqrate = rate(now.commands, previous.commands);
        let cpu = match (now.cpu_seconds, previous.cpu_seconds) {
            (Some(a), Some(b)) if seconds > 0.0 => Some(((a - b) / seconds / self.cores).max(0.0)),
            (Some(_), Some(_)) => Some(0.0),
            _ => None,
        };
        Metrics {
            cachesize: snapshot.objects as f64,
            cachebytes: snapshot.bytes as f64,
            capacity: snapshot
                .capacity
                .objects
                .map_or(f64::INFINITY, |n| n as f64),
            hits: now.hits as f64,
            misses: now.misses as f64,
            gets: (now.hits + now.misses) as f64,
            puts: now.writes as f64,
            reqrate,
            getrate: hitrate + missrate,
            putrate: rate(now.writes, previous.writes),
            missrate,
            hitrate,
            backend_rate: rate(now.backend, previous.backend),
            backend_queue: 0.0,
            evictions: snapshot.evictions as f64,
            load: reqrate,
            cpu,
            mem: resident_bytes(),
        }
    }
}

/// User plus system CPU time of this process (`/proc/self/stat` fields 14 and 15).
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may contain spaces; the fields after it follow its ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then(|| (utime + stime) / ticks as f64)
}

/// Resident set size (`/proc/self/statm` field 2, in pages).
fn resident_bytes() -> Option<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    (page > 0).then_some(pages * page as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn process_numbers_are_read() {
        assert!(process_cpu_seconds().is_some_and(|s| s >= 0.0));
        assert!(resident_bytes().is_some_and(|b| b > 1_000_000.0));
    }
}
