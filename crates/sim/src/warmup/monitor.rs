//! Bonfire's monitor: a compact record of what was accessed, from which a warm-up set is
//! chosen after a restart. It records *units* — keys for key-value traces, fixed-size
//! regions (1 MiB by default) of the address space for block traces — with a count, the
//! first and last access and the start of the current run of accesses.
//!
//! Memory is bounded: at most `limit` units (and, with regions, `limit` objects to reload)
//! are kept; when a table is full, the half accessed least recently is dropped, so the
//! monitor forgets the coldest units first (Bonfire keeps a bounded log for the same reason).
//! Each entry costs about 64 bytes with the hash table's overhead.

use cache::warmup::Strategy;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use trace::Request;

/// What the monitor records.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Granularity {
    /// One unit per key.
    Keys,
    /// One unit per `region_bytes` of the address space. A request's address is its byte
    /// offset, or `key * block_size` when the reader left the offset at 0.
    Regions { region_bytes: u64, block_size: u64 },
}

impl Granularity {
    /// The unit a request falls in.
    #[inline]
    pub fn unit(&self, req: &Request) -> u64 {
        match *self {
            Granularity::Keys => req.key,
            Granularity::Regions {
                region_bytes,
                block_size,
            } => {
                const LOW48: u64 = (1 << 48) - 1;
                if req.offset == 0 {
                    req.key.saturating_mul(block_size) / region_bytes
                } else if req.key & LOW48 == req.offset {
                    // Byte-offset keys with the volume folded into the top bits: dividing the
                    // key keeps volumes apart.
                    req.key / region_bytes
                } else {
                    req.offset / region_bytes
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Unit {
    count: u64,
    last_seq: u64,
    last_time: f64,
    /// Start of the current run: the first access after a gap longer than the period.
    run_time: f64,
    run_seq: u64,
    /// Last size and offset seen (reloading and classifying a key need them).
    size: u32,
    offset: u64,
}

#[derive(Clone, Copy, Debug)]
struct Object {
    size: u32,
    offset: u64,
    unit: u64,
    last_seq: u64,
}

pub struct Monitor {
    granularity: Granularity,
    limit: usize,
    period: f64,
    units: HashMap<u64, Unit>,
    /// Region mode only: the objects seen, to reload a chosen region's contents.
    objects: HashMap<u64, Object>,
    seq: u64,
    trims: u64,
}

impl Monitor {
    /// `limit`: most units (and objects) kept; `period`: seconds of First-K's look-back.
    pub fn new(granularity: Granularity, limit: usize, period: f64) -> Monitor {
        Monitor {
            granularity,
            limit: limit.max(2),
            period,
            units: HashMap::new(),
            objects: HashMap::new(),
            seq: 0,
            trims: 0,
        }
    }

    /// Records one access.
    pub fn record(&mut self, req: &Request) {
        self.seq += 1;
        let seq = self.seq;
        let unit = self.granularity.unit(req);
        let period = self.period;
        self.units
            .entry(unit)
            .and_modify(|u| {
                if req.time - u.last_time > period {
                    u.run_time = req.time;
                    u.run_seq = seq;
                }
                u.count += 1;
                u.last_seq = seq;
                u.last_time = req.time;
                u.size = req.size;
                u.offset = req.offset;
            })
            .or_insert(Unit {
                count: 1,
                last_seq: seq,
                last_time: req.time,
                run_time: req.time,
                run_seq: seq,
                size: req.size,
                offset: req.offset,
            });
        if matches!(self.granularity, Granularity::Regions { .. }) {
            self.objects.insert(
                req.key,
                Object {
                    size: req.size,
                    offset: req.offset,
                    unit,
                    last_seq: seq,
                },
            );
            if self.objects.len() > self.limit {
                trim(&mut self.objects, self.limit / 2, |o| o.last_seq);
                self.trims += 1;
            }
        }
        if self.units.len() > self.limit {
            trim(&mut self.units, self.limit / 2, |u| u.last_seq);
            self.trims += 1;
        }
    }

    /// Units recorded now.
    pub fn units(&self) -> usize {
        self.units.len()
    }

    /// How many times a full table dropped its colder half.
    pub fn trims(&self) -> u64 {
        self.trims
    }

    /// The units `strategy` picks, best first (at most `k`). `now` is the restart time (for
    /// First-K's period); `seed` drives Random-K.
    pub fn choose(&self, strategy: Strategy, k: u64, now: f64, seed: u64) -> Vec<u64> {
        let mut units: Vec<(u64, Unit)> = self.units.iter().map(|(&id, &u)| (id, u)).collect();
        // Deterministic order whatever the hash table's.
        units.sort_unstable_by_key(|&(id, _)| id);
        match strategy {
            Strategy::LastK => units.sort_by_key(|&(_, u)| std::cmp::Reverse(u.last_seq)),
            Strategy::TopK => units.sort_by_key(|&(_, u)| std::cmp::Reverse((u.count, u.last_seq))),
            Strategy::FirstK => {
                let window_start = now - self.period;
                units.retain(|(_, u)| u.last_time >= window_start);
                // A unit whose current run began inside the window entered it then; one whose
                // run began earlier was live when the window opened (its exact first access in
                // the window is not kept), so it ranks at the window's start, by run order.
                units.sort_by(|(_, a), (_, b)| {
                    let ea = a.run_time.max(window_start);
                    let eb = b.run_time.max(window_start);
                    ea.total_cmp(&eb).then(a.run_seq.cmp(&b.run_seq))
                });
            }
            Strategy::RandomK => {
                units.sort_by_key(|&(id, _)| {
                    let mut h = DefaultHasher::new();
                    (seed, id).hash(&mut h);
                    h.finish()
                });
            }
        }
        units
            .into_iter()
            .take(usize::try_from(k).unwrap_or(usize::MAX))
            .map(|(id, _)| id)
            .collect()
    }

    /// The objects to reload for `chosen` units, in the units' rank order (within a region,
    /// by key), as requests carrying the last size and offset seen. For keys that is the keys
    /// themselves.
    pub fn objects_of(&self, chosen: &[u64]) -> Vec<Request> {
        let object = |key: u64, size: u32, offset: u64| Request {
            time: 0.0,
            key,
            size,
            op: trace::Op::Get,
            offset,
        };
        match self.granularity {
            Granularity::Keys => chosen
                .iter()
                .filter_map(|id| self.units.get(id).map(|u| object(*id, u.size, u.offset)))
                .collect(),
            Granularity::Regions { .. } => {
                let rank: HashMap<u64, usize> =
                    chosen.iter().enumerate().map(|(i, &id)| (id, i)).collect();
                let mut out: Vec<(usize, u64, &Object)> = self
                    .objects
                    .iter()
                    .filter_map(|(&key, o)| rank.get(&o.unit).map(|&r| (r, key, o)))
                    .collect();
                out.sort_unstable_by_key(|&(r, key, _)| (r, key));
                out.into_iter()
                    .map(|(_, key, o)| object(key, o.size, o.offset))
                    .collect()
            }
        }
    }
}

/// Keeps the `keep` entries with the largest `recency`, dropping the rest.
fn trim<V>(map: &mut HashMap<u64, V>, keep: usize, recency: impl Fn(&V) -> u64) {
    let mut stamps: Vec<u64> = map.values().map(&recency).collect();
    let cut = stamps.len().saturating_sub(keep);
    if cut == 0 {
        return;
    }
    let (_, &mut threshold, _) = stamps.select_nth_unstable(cut);
    map.retain(|_, v| recency(v) >= threshold);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(time: f64, key: u64) -> Request {
        Request {
            time,
            key,
            size: 10,
            ..Request::default()
        }
    }

    fn monitor(keys: &[(f64, u64)]) -> Monitor {
        let mut m = Monitor::new(Granularity::Keys, 1000, 100.0);
        for &(t, k) in keys {
            m.record(&at(t, k));
        }
        m
    }

    #[test]
    fn last_top_and_first_k() {
        let m = monitor(&[(0.0, 5), (1.0, 6), (2.0, 5), (3.0, 7), (4.0, 8), (5.0, 5)]);
        assert_eq!(m.choose(Strategy::LastK, 2, 5.0, 0), vec![5, 8]);
        assert_eq!(m.choose(Strategy::TopK, 2, 5.0, 0), vec![5, 8]);
        assert_eq!(m.choose(Strategy::FirstK, 3, 5.0, 0), vec![5, 6, 7]);
        let r = m.choose(Strategy::RandomK, 4, 5.0, 9);
        let mut sorted = r.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![5, 6, 7, 8]);
        assert_eq!(m.choose(Strategy::RandomK, 4, 5.0, 9), r, "seeded");
    }

    #[test]
    fn first_k_looks_only_at_the_last_period() {
        // Period 100 s: at t = 300 the window opens at 200. Key 1 was last seen at 10 (out);
        // key 2 returned at 250 after a long gap (its run starts then); key 3 entered at 210.
        let m = monitor(&[(10.0, 1), (20.0, 2), (210.0, 3), (250.0, 2), (260.0, 4)]);
        assert_eq!(m.choose(Strategy::FirstK, 10, 300.0, 0), vec![3, 2, 4]);
    }

    #[test]
    fn memory_is_bounded_and_keeps_the_recent_half() {
        let mut m = Monitor::new(Granularity::Keys, 100, 1e9);
        for k in 0..1000 {
            m.record(&at(k as f64, k));
            assert!(m.units() <= 100);
        }
        assert!(m.trims() > 0);
        assert!(m.choose(Strategy::LastK, 1, 0.0, 0) == vec![999]);
        assert!(m.units.contains_key(&990) && !m.units.contains_key(&10));
    }

    #[test]
    fn regions_group_objects_and_reload_them_by_key() {
        let g = Granularity::Regions {
            region_bytes: 1 << 20,
            block_size: 512,
        };
        let mut m = Monitor::new(g, 1000, 1e9);
        // Offsets given: regions 0 and 3; a zero offset falls back to key * block size.
        for (key, offset) in [(9u64, 4096u64), (3, 512), (7, 3 << 20), (2 << 11, 0)] {
            m.record(&Request {
                key,
                offset,
                size: 512,
                ..Request::default()
            });
        }
        assert_eq!(m.units(), 3, "regions 0, 2 (key 4096 * 512 B) and 3");
        let chosen = m.choose(Strategy::LastK, 2, 0.0, 0);
        assert_eq!(chosen, vec![2, 3]);
        let keys: Vec<(u64, u32)> = m.objects_of(&[0]).iter().map(|r| (r.key, r.size)).collect();
        assert_eq!(keys, vec![(3, 512), (9, 512)]);
        assert_eq!(
            g.unit(&Request {
                key: (5 << 48) | (7 << 20),
                offset: 7 << 20,
                ..Request::default()
            }),
            (5 << 28) | 7
        );
    }
}
