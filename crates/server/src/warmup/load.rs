//! The jobs that run beside the server: opening the warm-up record at start, the background
//! bulk fill of `--warmup`, and the periodic persister (which also drives the monitor's clock).

use super::{key_walk, persist};
use super::{Fill, WarmupSpec};
use crate::config::Config;
use crate::db::Db;
use crate::db::Room;
use crate::live::space::Space;
use std::time::{Duration, Instant};
use store::Storage;
use tokio::sync::watch;

/// Keys filled between yields to the scheduler (RocksDB reads are synchronous).
const YIELD_EVERY: usize = 64;

/// Configures the monitor from `config` and restores what the last run persisted in `space`.
/// Returns `space`, or `None` when it is memory (in front of an upstream without
/// `--state-dir`: nowhere to keep the record, so the monitor is off). A damaged record is
/// reported and ignored: it is advice, never data.
pub fn open(db: &Db, config: &Config, space: Space) -> anyhow::Result<Option<Space>> {
    let monitor = db.monitor();
    monitor.set_track(config.warmup_track);
    if let Some(period) = config.warmup.and_then(|s| s.period) {
        monitor.set_period(period.as_secs().max(1));
    }
    if !space.is_durable() {
        if config.warmup.is_some() {
            anyhow::bail!(
                "--warmup in front of an upstream needs --state-dir DIR: the warm-up record is \
                 kept there (with the policy registry; no keys)"
            );
        }
        monitor.set_track(0);
        return Ok(None);
    }
    match persist::load(&space, hash_check(db), |key| db.key_hash(key)) {
        Ok(units) => monitor.restore(units),
        Err(e) => store::log_line!("mantle: ignoring the warm-up record: {e}"),
    }
    Ok(Some(space))
}

/// Loads the keys `spec` picks into the cache, recording progress: the longest prefix of the
/// ranking that fits, the rule replay applies too (`cache::warmup::LoadBudget` says why). The
/// server learns a value's size only by reading it, so it reads in rank order and stops at the
/// first key that does not fit; replay, which knows sizes from its record, chooses the same
/// prefix and then reads it in key order. A key skipped because a client cached or wrote it
/// meanwhile (or it is gone) does not end the load: it was not offered to the budget.
///
/// The monitor keeps no key bytes, so the keys are found first ([`key_walk`]): the stored
/// keys the monitor tracks, from the embedded store's pages (on a blocking thread) or the
/// upstream's SCAN (within [`key_walk::UPSTREAM_WALK_LIMIT`]).
pub async fn fill(db: Db, spec: WarmupSpec) {
    let progress = &db.metrics().warmup;
    let now = super::monitor::unix_seconds();
    let units = tracked_keys(&db).await;
    let keys = db.monitor().choose(
        units,
        spec.strategy,
        spec.k,
        now,
        cache::warmup::DEFAULT_SEED,
    );
    progress.begin(spec, keys.len() as u64);
    let bump = |counter: &std::sync::atomic::AtomicU64, n: u64| {
        counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    };
    for (i, key) in keys.iter().enumerate() {
        let fits = |room: Room| {
            cache::warmup::LoadBudget::new(&spec, room.capacity).admits(
                room.objects,
                room.bytes,
                room.size,
            )
        };
        match db.fill_from_store(key, fits).await {
            Ok(Fill::Loaded) => bump(&progress.loaded, 1),
            Ok(Fill::Skipped) => bump(&progress.skipped, 1),
            Ok(Fill::Full) => {
                bump(&progress.skipped, (keys.len() - i) as u64);
                break;
            }
            Err(_) => bump(&progress.errors, 1),
        }
        if i % YIELD_EVERY == YIELD_EVERY - 1 {
            tokio::task::yield_now().await;
        }
    }
    progress.finish();
}

/// The tracked keys the store holds, with their records; a failed walk is logged and
/// counted as an error (the keys met before it stay).
async fn tracked_keys(db: &Db) -> Vec<cache::warmup::Unit<bytes::Bytes>> {
    let errors = &db.metrics().warmup.errors;
    let count_error = || errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if db.store().upstream().is_some() {
        let walked = key_walk::upstream(db, key_walk::UPSTREAM_WALK_LIMIT).await;
        if matches!(walked.end, key_walk::WalkEnd::Failed(_)) {
            count_error();
        }
        return walked.units;
    }
    let walker = db.clone();
    match tokio::task::spawn_blocking(move || key_walk::stored(&walker)).await {
        Ok(Ok(units)) => units,
        Ok(Err(e)) => {
            store::log_line!("mantle: the warm-up could not list the stored keys: {e}");
            count_error();
            Vec::new()
        }
        Err(e) => {
            store::log_line!("mantle: the warm-up's key walk failed: {e}");
            count_error();
            Vec::new()
        }
    }
}

/// The check that persisted tags were made by this table hash.
fn hash_check(db: &Db) -> u64 {
    db.key_hash(persist::HASH_CHECK_KEY)
}

/// Until `stop`: refreshes the monitor's clock every second (or every `every`, if shorter)
/// and persists the record every `every` when something was accessed since the last time.
pub async fn persist_periodically(
    db: Db,
    space: Space,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut clock = tokio::time::interval(every.min(Duration::from_secs(1)));
    clock.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut saved_seq = db.monitor().last_seq();
    let mut saved_at = Instant::now();
    loop {
        tokio::select! {
            _ = clock.tick() => {}
            _ = stop.changed() => return,
        }
        let monitor = db.monitor();
        monitor.tick_clock();
        let seq = monitor.last_seq();
        if saved_at.elapsed() < every || seq == saved_seq {
            continue;
        }
        let (job_db, job_space) = (db.clone(), space.clone());
        let saved = tokio::task::spawn_blocking(move || save(&job_db, &job_space, false)).await;
        if let Ok(Err(e)) = saved {
            store::log_line!("mantle: persisting the warm-up record failed: {e}");
        }
        saved_seq = seq;
        saved_at = Instant::now();
    }
}

/// Persists the record now; `sync` forces it to disk (shutdown).
pub fn save(db: &Db, space: &Space, sync: bool) -> Result<(), store::StoreError> {
    let seq = db.monitor().last_seq();
    let keys = persist::save(space, db.monitor(), hash_check(db), sync)?;
    let order = std::sync::atomic::Ordering::Relaxed;
    let progress = &db.metrics().warmup;
    progress.persisted_seq.store(seq, order);
    progress.persists.fetch_add(1, order);
    progress.persisted_keys.store(keys, order);
    Ok(())
}
