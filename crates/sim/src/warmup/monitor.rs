//! Bonfire's monitor: a compact record of what was accessed, from which a warm-up set is
//! chosen after a restart. It records *units* — keys for key-value traces, fixed-size
//! regions (1 MiB by default) of the address space for block traces — with a count, the
//! first and last access and the start of the current run of accesses.
//!
//! Memory is bounded: at most `limit` units (and, with regions, `limit` objects to reload)
//! are kept; when a table is full, the half accessed least recently is dropped, so the
//! monitor forgets the coldest units first (Bonfire keeps a bounded log for the same reason).
//! Each entry costs about 64 bytes with the hash table's overhead.
//!
//! The record, the bounded table and the rankings are `cache::warmup`'s, shared with the
//! server's monitor; this file adds regions and the objects to reload.

use cache::warmup::{choose, recency_threshold, Name, Stamp, Strategy, UnitTable};
use std::collections::HashMap;
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
    /// `--region`: an explicit size or `keys`; by default 1 MiB regions for block formats
    /// (where keys are blocks and a region is what a device reads ahead), keys otherwise.
    pub fn from_flag(
        region: Option<&str>,
        format: Option<trace::Format>,
        block_size: u32,
    ) -> anyhow::Result<Granularity> {
        use trace::Format as F;
        let regions = |bytes: u64| Granularity::Regions {
            region_bytes: bytes,
            block_size: u64::from(block_size),
        };
        match region {
            Some(r) if r.eq_ignore_ascii_case("keys") => Ok(Granularity::Keys),
            Some(r) => {
                let bytes = units::parse_bytes(r).map_err(|e| anyhow::anyhow!("--region: {e}"))?;
                if bytes == 0 {
                    anyhow::bail!("--region must be > 0 bytes (or `keys`)");
                }
                Ok(regions(bytes))
            }
            None => Ok(match format {
                Some(F::Vscsi | F::Msr | F::Arc | F::Systor | F::TencentCbs | F::Lirs) => {
                    regions(1 << 20)
                }
                _ => Granularity::Keys,
            }),
        }
    }

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

/// Last size and offset seen of a unit (reloading and classifying a key need them).
#[derive(Clone, Copy, Debug)]
struct Seen {
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
    units: UnitTable<Seen>,
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
            units: UnitTable::default(),
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
        let seen = Seen {
            size: req.size,
            offset: req.offset,
        };
        let at = Stamp {
            seq,
            time: req.time,
        };
        let trimmed = self.units.record(
            unit,
            at,
            self.period,
            self.limit,
            |s| {
                *s = seen;
                true
            },
            || seen,
        );
        self.trims += u64::from(trimmed);
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
                let stamps = self.objects.values().map(|o| o.last_seq);
                if let Some(t) = recency_threshold(stamps, self.limit / 2) {
                    self.objects.retain(|_, o| o.last_seq >= t);
                }
                self.trims += 1;
            }
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

    /// The units `strategy` picks, best first (at most `k`), ranked as the server ranks keys
    /// (`cache::warmup::choose`). `now` is the restart time (for First-K's period); `seed`
    /// drives Random-K.
    pub fn choose(&self, strategy: Strategy, k: u64, now: f64, seed: u64) -> Vec<u64> {
        let units: Vec<_> = self.units.iter().map(|(id, u)| (id, u.record)).collect();
        choose(
            units,
            strategy,
            k,
            (now, self.period),
            seed,
            |u| &u.1,
            |u| Name::Id(u.0),
        )
        .into_iter()
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
                .filter_map(|&id| {
                    let seen = self.units.get(id)?.payload;
                    Some(object(id, seen.size, seen.offset))
                })
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
        assert!(m.units.get(990).is_some() && m.units.get(10).is_none());
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
