//! Finding the tracked keys for a warm-up. The monitor keeps no key bytes (a tag and counters
//! per key), so a warm-up walks the keys the store holds and keeps those the monitor tracks:
//! the embedded store in pages of its sorted key space, an upstream tier with `SCAN`. A tracked
//! key the store does not hold (a GET of a missing key) is never met, so never offered.

use crate::db::Db;
use bytes::Bytes;
use cache::warmup::Unit;
use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, Instant};
use store::{Storage, StoreError};

/// Keys walked per page of the embedded store.
const PAGE: usize = 1024;
/// Keys asked per `SCAN` of the upstream (Redis examines about this many per call).
pub const SCAN_COUNT: usize = 1000;
/// Longest upstream walk: past it the warm-up ranks the tracked keys met so far.
pub const UPSTREAM_WALK_LIMIT: Duration = Duration::from_secs(600);
/// Keys walked between progress lines in the log.
const PROGRESS_EVERY: u64 = 100_000;

/// Every stored key the monitor tracks, with its record (synchronous: RocksDB reads block).
pub fn stored(db: &Db) -> Result<Vec<Unit<Bytes>>, StoreError> {
    let monitor = db.monitor();
    let mut units = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = db.store().key_page(after.as_deref(), PAGE)?;
        for (key, _) in page.keys {
            if let Some(unit) = monitor.tracked(db.key_hash(&key), key) {
                units.push(unit);
            }
        }
        match page.resume_after {
            Some(position) => after = Some(position),
            None => return Ok(units),
        }
    }
}

/// How an upstream walk ended.
#[derive(Debug, PartialEq, Eq)]
pub enum WalkEnd {
    /// The cursor came back to 0: every key was met.
    Complete,
    /// The time limit passed first.
    OutOfTime,
    /// A page failed (the upstream's error); the keys met before it stand.
    Failed(String),
}

/// What an upstream walk found.
pub struct Walked {
    pub units: Vec<Unit<Bytes>>,
    /// Keys the upstream returned (duplicates included).
    pub keys: u64,
    pub end: WalkEnd,
}

/// Walks the upstream's keys by `SCAN` and keeps those the monitor tracks (each once, though
/// SCAN may return a key twice), for at most `limit`; logs its progress and its end.
pub async fn upstream(db: &Db, limit: Duration) -> Walked {
    let Some(upstream) = db.store().upstream() else {
        return Walked {
            units: Vec::new(),
            keys: 0,
            end: WalkEnd::Failed("no upstream".into()),
        };
    };
    let started = Instant::now();
    let monitor = db.monitor();
    let walked = by_pages(
        |cursor| upstream.scan(cursor, SCAN_COUNT),
        |key| monitor.tracked(db.key_hash(&key), key),
        |key| db.key_hash(key),
        limit,
        |keys, tracked| {
            store::log_line!(
                "mantle: warm-up: {keys} keys of upstream {} walked, {tracked} of them tracked, \
                 {:.1} s",
                upstream.url(),
                started.elapsed().as_secs_f64()
            )
        },
    )
    .await;
    let (keys, tracked) = (walked.keys, walked.units.len());
    match &walked.end {
        WalkEnd::Complete => store::log_line!(
            "mantle: warm-up: walked the {keys} keys of upstream {} in {:.1} s, {tracked} of \
             them tracked",
            upstream.url(),
            started.elapsed().as_secs_f64()
        ),
        WalkEnd::OutOfTime => store::log_line!(
            "mantle: warm-up: the walk of upstream {} stopped after {} s and {keys} keys; \
             ranking the {tracked} tracked keys met",
            upstream.url(),
            limit.as_secs()
        ),
        WalkEnd::Failed(e) => store::log_line!(
            "mantle: warm-up: the walk of the upstream failed after {keys} keys ({e}); \
             ranking the {tracked} tracked keys met"
        ),
    }
    walked
}

/// The walk itself, over any source of `SCAN` pages (`page(cursor)` returns the next cursor,
/// 0 at the end, and the keys): `keep` makes a key's unit when it is tracked, `hash` names a
/// key for the duplicate check, `progress(keys, tracked)` is called every
/// [`PROGRESS_EVERY`] keys. Stops at the end, at the first failure or after `limit`.
pub async fn by_pages<P, F>(
    mut page: P,
    mut keep: impl FnMut(Bytes) -> Option<Unit<Bytes>>,
    hash: impl Fn(&[u8]) -> u64,
    limit: Duration,
    mut progress: impl FnMut(u64, usize),
) -> Walked
where
    P: FnMut(u64) -> F,
    F: Future<Output = Result<(u64, Vec<Bytes>), StoreError>>,
{
    let deadline = Instant::now() + limit;
    let mut kept = HashSet::new();
    let mut walked = Walked {
        units: Vec::new(),
        keys: 0,
        end: WalkEnd::Complete,
    };
    let mut cursor = 0;
    let mut report_at = PROGRESS_EVERY;
    loop {
        let fetched = match tokio::time::timeout_at(deadline.into(), page(cursor)).await {
            Ok(fetched) => fetched,
            Err(_) => {
                walked.end = WalkEnd::OutOfTime;
                return walked;
            }
        };
        let (next, keys) = match fetched {
            Ok(found) => found,
            Err(e) => {
                walked.end = WalkEnd::Failed(e.to_string());
                return walked;
            }
        };
        walked.keys += keys.len() as u64;
        for key in keys {
            let id = hash(&key);
            if kept.contains(&id) {
                continue;
            }
            if let Some(unit) = keep(key) {
                kept.insert(id);
                walked.units.push(unit);
            }
        }
        if walked.keys >= report_at {
            progress(walked.keys, walked.units.len());
            report_at = (walked.keys / PROGRESS_EVERY + 1) * PROGRESS_EVERY;
        }
        if next == 0 {
            return walked;
        }
        if Instant::now() >= deadline {
            walked.end = WalkEnd::OutOfTime;
            return walked;
        }
        cursor = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cache::warmup::Record;

    fn unit(key: Bytes) -> Unit<Bytes> {
        Unit {
            record: Record {
                count: 1,
                last_seq: 1,
                last_time: 0.0,
                run_time: 0.0,
                run_seq: 1,
            },
            payload: key,
        }
    }

    fn hash(key: &[u8]) -> u64 {
        ahash::RandomState::with_seeds(1, 2, 3, 4).hash_one(key)
    }

    fn keys(names: &[&str]) -> Vec<Bytes> {
        names.iter().map(|n| Bytes::from(n.to_string())).collect()
    }

    #[tokio::test]
    async fn a_walk_follows_the_cursor_to_zero_and_keeps_each_tracked_key_once() {
        let pages = [
            (7, keys(&["a", "x", "b"])),
            (3, keys(&["b", "c"])),
            (0, keys(&["a", "d"])),
        ];
        let mut asked = Vec::new();
        let walked = by_pages(
            |cursor| {
                asked.push(cursor);
                let i = asked.len() - 1;
                let page = pages[i].clone();
                async move { Ok(page) }
            },
            |key| (key.as_ref() != b"x").then(|| unit(key)),
            hash,
            Duration::from_secs(5),
            |_, _| {},
        )
        .await;
        assert_eq!(asked, [0, 7, 3]);
        assert_eq!(walked.end, WalkEnd::Complete);
        assert_eq!(walked.keys, 7);
        let kept: Vec<&[u8]> = walked.units.iter().map(|u| u.payload.as_ref()).collect();
        assert_eq!(kept, [b"a", b"b", b"c", b"d"]);
    }

    #[tokio::test]
    async fn a_walk_that_never_ends_stops_at_its_limit_with_what_it_met() {
        let mut reports = 0;
        let mut n = 0u64;
        let walked = by_pages(
            |_| {
                n += 1;
                let page = (n, vec![Bytes::from(n.to_string()); 50_000]);
                async move {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Ok(page)
                }
            },
            |key| Some(unit(key)),
            hash,
            Duration::from_millis(200),
            |_, _| reports += 1,
        )
        .await;
        assert_eq!(walked.end, WalkEnd::OutOfTime);
        assert!(walked.keys >= 50_000, "{}", walked.keys);
        assert_eq!(walked.units.len() as u64, walked.keys / 50_000);
        assert!(reports >= 1, "progress every {PROGRESS_EVERY} keys");
    }

    #[tokio::test]
    async fn a_page_that_hangs_is_cut_at_the_limit() {
        let walked = by_pages(
            |_| std::future::pending::<Result<(u64, Vec<Bytes>), StoreError>>(),
            |key| Some(unit(key)),
            hash,
            Duration::from_millis(50),
            |_, _| {},
        )
        .await;
        assert_eq!(walked.end, WalkEnd::OutOfTime);
    }

    #[tokio::test]
    async fn a_failed_page_ends_the_walk_keeping_the_keys_met() {
        let mut calls = 0;
        let walked = by_pages(
            |_| {
                calls += 1;
                let result = if calls == 1 {
                    Ok((5, keys(&["a"])))
                } else {
                    Err(StoreError("upstream u: gone".into()))
                };
                async move { result }
            },
            |key| Some(unit(key)),
            hash,
            Duration::from_secs(5),
            |_, _| {},
        )
        .await;
        assert_eq!(walked.end, WalkEnd::Failed("upstream u: gone".into()));
        assert_eq!(walked.units.len(), 1);
    }
}
