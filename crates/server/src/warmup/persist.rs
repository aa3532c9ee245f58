//! Where the monitor's record outlives the process: values under `warmup/units/` in the policy
//! registry's column family of the server's RocksDB (the registry's own keys never start with
//! `warmup/`). It is rewritten every `--warmup-persist` period when something was accessed,
//! and at clean shutdown; each write reaches the operating system before it returns, so a
//! SIGKILL loses at most the accesses since the last persist.
//!
//! The record is cut into chunks of at most [`CHUNK_BYTES`] (plus one entry), each written in
//! a batch of its own, so no persist builds a write batch (or a log record to replay at start)
//! larger than that however many keys are tracked. `warmup/chunks` holds how many chunks the
//! last complete persist wrote; chunks past it are deleted after it is written. A crash in the
//! middle leaves some chunks of the new record beside the old ones: restoring keeps the newer
//! record of a key seen twice, so that costs nothing but some staleness.
//!
//! Layout of a chunk (little-endian): the magic `MWU2` and the hash check (the table hash of
//! [`HASH_CHECK_KEY`]: tags mean something only to a server hashing keys the same way, so a
//! record from other seeds, another build or another CPU is refused), then per key its tag
//! (`AccessMonitor`'s `Tag::id`), count, last order number, last access (Unix seconds), run
//! start (Unix seconds) and run order number, a `u64` each: 48 bytes per tracked key, whatever
//! the key's length. Releases up to 0.30 wrote `MWU1` chunks with the key's bytes instead of
//! the tag; they are read (each key hashed to its tag) and replaced at the next persist, as is
//! the single value under `warmup/units` of releases before the chunks.
//!
//! The table hash's seeds are kept here too, under [`SEEDS_KEY`] (see [`table_seeds`]), so
//! that a restarted server tags keys as the one that wrote the record did.

use super::monitor::{AccessMonitor, MAX_TRACKED_KEY_LEN};
use crate::live::space::{Change, Space};
use cache::warmup::Record;
use store::StoreError;

/// A unit as persisted: the key's tag and its record.
pub type Tagged = (u64, Record);

/// The single-value record of earlier releases.
pub const LEGACY_KEY: &[u8] = b"warmup/units";
/// Chunk `i` is stored under this prefix and `i` in eight decimal digits.
const CHUNK_PREFIX: &str = "warmup/units/";
/// The number of chunks of the last complete persist (decimal).
const COUNT_KEY: &[u8] = b"warmup/chunks";
/// Bytes a chunk is closed at (it may exceed this by one entry, 48 bytes).
pub const CHUNK_BYTES: usize = 1024 * 1024;
const MAGIC: &[u8; 4] = b"MWU2";
/// The chunks of releases that kept key bytes.
const MAGIC_WITH_KEYS: &[u8; 4] = b"MWU1";
/// What the hash check hashes.
pub const HASH_CHECK_KEY: &[u8] = b"mantle warm-up hash check";
/// The table hash's four seeds, 32 bytes.
const SEEDS_KEY: &[u8] = b"warmup/hash-seeds";

fn chunk_key(i: u64) -> Vec<u8> {
    format!("{CHUNK_PREFIX}{i:08}").into_bytes()
}

/// Encodes every tracked key, passing each chunk of at most about `chunk_bytes` to `emit`;
/// returns the keys encoded. `check` is the table hash of [`HASH_CHECK_KEY`].
pub fn encode(
    monitor: &AccessMonitor,
    check: u64,
    chunk_bytes: usize,
    mut emit: impl FnMut(Vec<u8>) -> Result<(), StoreError>,
) -> Result<u64, StoreError> {
    let fresh = || {
        let mut out = Vec::with_capacity(chunk_bytes.min(64 * 1024));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&check.to_le_bytes());
        out
    };
    let header = MAGIC.len() + 8;
    let mut out = fresh();
    let units = monitor.units();
    for (tag, r) in &units {
        // Times are whole Unix seconds (the monitor's clock is), so the format keeps them as
        // integers.
        let (last_s, run_s) = (r.last_time as u64, r.run_time as u64);
        for field in [*tag, r.count, r.last_seq, last_s, run_s, r.run_seq] {
            out.extend_from_slice(&field.to_le_bytes());
        }
        if out.len() >= chunk_bytes {
            emit(std::mem::replace(&mut out, fresh()))?;
        }
    }
    if out.len() > header {
        emit(out)?;
    }
    Ok(units.len() as u64)
}

/// Decodes what [`encode`] wrote (or a chunk of keys an earlier release wrote, each key
/// tagged through `hash`); an error names the key and the byte offset, or says the record
/// was written with another table hash.
pub fn decode(
    raw: &[u8],
    key: &[u8],
    check: u64,
    hash: impl Fn(&[u8]) -> u64,
) -> Result<Vec<Tagged>, StoreError> {
    let bad = |offset: usize, what: &str| {
        StoreError(format!(
            "warm-up record '{}' is malformed at byte {offset}: {what}",
            String::from_utf8_lossy(key)
        ))
    };
    let with_keys = raw.starts_with(MAGIC_WITH_KEYS);
    if !with_keys && !raw.starts_with(MAGIC) {
        return Err(bad(0, "expected the magic MWU2 (or MWU1)"));
    }
    let mut at = MAGIC.len();
    if !with_keys {
        let written = take(raw, &mut at, 8).ok_or_else(|| bad(4, "truncated hash check"))?;
        if u64::from_le_bytes(written.try_into().unwrap_or_default()) != check {
            return Err(StoreError(format!(
                "warm-up record '{}' was written by a server that hashes keys differently \
                 (other seeds, build or CPU); it is ignored",
                String::from_utf8_lossy(key)
            )));
        }
    }
    let mut units = Vec::new();
    while at < raw.len() {
        let start = at;
        let tag = if with_keys {
            let len = take(raw, &mut at, 4).ok_or_else(|| bad(start, "truncated key length"))?;
            let len = u32::from_le_bytes(len.try_into().unwrap_or_default()) as usize;
            let key = take(raw, &mut at, len).ok_or_else(|| bad(start + 4, "truncated key"))?;
            if key.len() > MAX_TRACKED_KEY_LEN {
                None
            } else {
                Some(super::monitor::Tag::of(hash(key)).id())
            }
        } else {
            let id = take(raw, &mut at, 8).ok_or_else(|| bad(start, "truncated tag"))?;
            Some(u64::from_le_bytes(id.try_into().unwrap_or_default()))
        };
        let mut fields = [0u64; 5];
        for field in &mut fields {
            let bytes = take(raw, &mut at, 8).ok_or_else(|| bad(at, "truncated counters"))?;
            *field = u64::from_le_bytes(bytes.try_into().unwrap_or_default());
        }
        let [count, last_seq, last_s, run_s, run_seq] = fields;
        if let Some(tag) = tag {
            let record = Record {
                count,
                last_seq,
                last_time: last_s as f64,
                run_time: run_s as f64,
                run_seq,
            };
            units.push((tag, record));
        }
    }
    Ok(units)
}

fn take<'a>(raw: &'a [u8], at: &mut usize, n: usize) -> Option<&'a [u8]> {
    let slice = raw.get(*at..at.checked_add(n)?)?;
    *at += n;
    Some(slice)
}

/// Writes the monitor's record, chunk by chunk; returns the keys written. `sync` also forces
/// it to disk.
pub fn save(
    space: &Space,
    monitor: &AccessMonitor,
    check: u64,
    sync: bool,
) -> Result<u64, StoreError> {
    save_in_chunks(space, monitor, check, sync, CHUNK_BYTES)
}

fn save_in_chunks(
    space: &Space,
    monitor: &AccessMonitor,
    check: u64,
    sync: bool,
    chunk_bytes: usize,
) -> Result<u64, StoreError> {
    let before = stored_chunks(space)?;
    let mut chunks = 0;
    let keys = encode(monitor, check, chunk_bytes, |chunk| {
        space.write(&[(chunk_key(chunks), Some(chunk))], false)?;
        chunks += 1;
        Ok(())
    })?;
    space.write(
        &[(COUNT_KEY.to_vec(), Some(chunks.to_string().into_bytes()))],
        sync,
    )?;
    // Chunks the previous record had beyond this one's, and the legacy value: a batch of
    // deletes, one key each, so small however many there are.
    let mut stale: Vec<Change> = (chunks..before.max(chunks))
        .map(|i| (chunk_key(i), None))
        .collect();
    stale.push((LEGACY_KEY.to_vec(), None));
    for batch in stale.chunks(1024) {
        space.write(batch, sync)?;
    }
    Ok(keys)
}

fn stored_chunks(space: &Space) -> Result<u64, StoreError> {
    Ok(space
        .get(COUNT_KEY)?
        .and_then(|raw| String::from_utf8(raw).ok()?.parse().ok())
        .unwrap_or(0))
}

/// What an earlier run persisted (empty when nothing was): tags and records. `check` and
/// `hash` are the table hash's (see [`decode`]).
pub fn load(
    space: &Space,
    check: u64,
    hash: impl Fn(&[u8]) -> u64,
) -> Result<Vec<Tagged>, StoreError> {
    let mut units = Vec::new();
    if let Some(raw) = space.get(LEGACY_KEY)? {
        units.extend(decode(&raw, LEGACY_KEY, check, &hash)?);
    }
    for i in 0..stored_chunks(space)? {
        let key = chunk_key(i);
        if let Some(raw) = space.get(&key)? {
            units.extend(decode(&raw, &key, check, &hash)?);
        }
    }
    Ok(units)
}

/// The table hash's seeds: those an earlier run kept in `space`, or fresh ones, kept there
/// for the next run. The seeds stay secret (they are in the data directory, never in a
/// reply), so clients still cannot aim keys at one bucket.
pub fn table_seeds(space: &Space) -> Result<[u64; 4], StoreError> {
    if let Some(raw) = space.get(SEEDS_KEY)? {
        if raw.len() == 32 {
            let mut seeds = [0u64; 4];
            for (seed, bytes) in seeds.iter_mut().zip(raw.chunks_exact(8)) {
                *seed = u64::from_le_bytes(bytes.try_into().unwrap_or_default());
            }
            return Ok(seeds);
        }
    }
    let random = ahash::RandomState::new();
    let seeds = [0u64, 1, 2, 3].map(|i| random.hash_one(i));
    let raw: Vec<u8> = seeds.iter().flat_map(|s| s.to_le_bytes()).collect();
    space.write(&[(SEEDS_KEY.to_vec(), Some(raw))], true)?;
    Ok(seeds)
}

/// The hash the key table, the cache and the access monitor know keys by: seeded (clients
/// cannot aim keys at one bucket), with seeds kept in `space` (the store's policy space, or
/// `--state-dir`'s in front of an upstream) so that a restarted server tags keys as the
/// warm-up record it reads does (`warmup::persist`). With nowhere durable to keep them, or if
/// they cannot be kept, the seeds are fresh.
pub fn table_hasher(space: &Space) -> ahash::RandomState {
    if !space.is_durable() {
        return ahash::RandomState::new();
    }
    match table_seeds(space) {
        Ok([a, b, c, d]) => ahash::RandomState::with_seeds(a, b, c, d),
        Err(e) => {
            store::log_line!("mantle: the key hash's seeds could not be kept: {e}");
            ahash::RandomState::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warmup::Strategy;

    fn hash(key: &[u8]) -> u64 {
        ahash::RandomState::with_seeds(5, 6, 7, 8).hash_one(key)
    }

    const CHECK: u64 = 77;

    fn record(monitor: &AccessMonitor, key: &[u8]) {
        monitor.record(hash(key), key);
    }

    #[test]
    fn a_saved_record_loads_back_and_damage_is_named() {
        let monitor = AccessMonitor::new(100, 60);
        for key in [&b"alpha"[..], b"", b"beta", b"alpha"] {
            record(&monitor, key);
        }
        let space = Space::memory();
        assert!(load(&space, CHECK, hash).unwrap().is_empty());
        assert_eq!(save(&space, &monitor, CHECK, false).unwrap(), 3);
        let mut units = load(&space, CHECK, hash).unwrap();
        let mut saved = monitor.units();
        units.sort_by_key(|u| u.0);
        saved.sort_by_key(|u| u.0);
        assert_eq!(units, saved);
        assert!(units.iter().any(|u| u.1.count == 2));

        let other_seeds = load(&space, CHECK + 1, hash).unwrap_err();
        assert!(
            other_seeds.0.contains("hashes keys differently"),
            "{other_seeds}"
        );

        let mut raw = Vec::new();
        encode(&monitor, CHECK, CHUNK_BYTES, |chunk| {
            raw = chunk;
            Ok(())
        })
        .unwrap();
        let error =
            decode(&raw[..raw.len() - 3], b"warmup/units/00000000", CHECK, hash).unwrap_err();
        assert!(
            error.0.contains("warmup/units/00000000") && error.0.contains("byte"),
            "{error}"
        );
        assert!(decode(b"nope", LEGACY_KEY, CHECK, hash).is_err());
    }

    /// Issue 30: the record keeps tags, not keys; a restarted monitor ranks the stored keys
    /// exactly as the one that wrote it did, for every strategy.
    #[test]
    fn a_restored_record_picks_the_same_keys() {
        let monitor = AccessMonitor::new(10_000, 3600);
        let keys: Vec<String> = (0..500).map(|i| format!("key:{i:06}")).collect();
        for i in 0..5_000usize {
            let key = &keys[(i * i + 7 * i) % 500 / (1 + i % 3)];
            record(&monitor, key.as_bytes());
        }
        let space = Space::memory();
        save(&space, &monitor, CHECK, false).unwrap();
        let restarted = AccessMonitor::new(10_000, 3600);
        restarted.restore(load(&space, CHECK, hash).unwrap());
        let now = super::super::monitor::unix_seconds();
        for strategy in [
            Strategy::LastK,
            Strategy::TopK,
            Strategy::FirstK,
            Strategy::RandomK,
        ] {
            let pick = |m: &AccessMonitor| {
                let units = keys
                    .iter()
                    .filter_map(|k| m.tracked(hash(k.as_bytes()), k.clone()))
                    .collect();
                m.choose(units, strategy, 100, now, 1)
            };
            let before = pick(&monitor);
            assert_eq!(before.len(), 100);
            assert_eq!(pick(&restarted), before, "{strategy:?}");
        }
    }

    #[test]
    fn a_record_of_keys_from_an_earlier_release_is_read_by_tag() {
        let mut chunk = MAGIC_WITH_KEYS.to_vec();
        for (key, count, seq) in [(&b"hot"[..], 9u64, 5u64), (b"cold", 1, 2)] {
            chunk.extend_from_slice(&(key.len() as u32).to_le_bytes());
            chunk.extend_from_slice(key);
            for field in [count, seq, 100, 100, seq] {
                chunk.extend_from_slice(&field.to_le_bytes());
            }
        }
        let units = decode(&chunk, LEGACY_KEY, CHECK, hash).unwrap();
        let monitor = AccessMonitor::new(100, 60);
        monitor.restore(units);
        let hot = monitor.tracked(hash(b"hot"), "hot").unwrap();
        assert_eq!(hot.record.count, 9);
        assert!(monitor.tracked(hash(b"cold"), "cold").is_some());
        assert!(monitor.tracked(hash(b"warm"), "warm").is_none());
    }

    #[test]
    fn the_seeds_are_kept_for_the_next_run() {
        let space = Space::memory();
        let seeds = table_seeds(&space).unwrap();
        assert_eq!(table_seeds(&space).unwrap(), seeds);
        assert_ne!(table_seeds(&Space::memory()).unwrap(), seeds);
    }

    /// Issue 25 item 4: the record was one value (and one write batch) holding every tracked
    /// key whole; 300 tracked 4 MB keys made a 1.2 GB batch that RocksDB aborted on.
    #[test]
    fn the_record_is_written_in_bounded_chunks_and_shrinks_cleanly() {
        let monitor = AccessMonitor::new(10_000, 60);
        for i in 0..2_000u64 {
            let key = format!("key-{i:0>200}");
            record(&monitor, key.as_bytes());
        }
        let space = Space::memory();
        // An earlier release's single value is read once, then deleted.
        let mut legacy = MAGIC_WITH_KEYS.to_vec();
        legacy.extend_from_slice(&1u32.to_le_bytes());
        legacy.extend_from_slice(b"L");
        legacy.extend_from_slice(&[0; 40]);
        space
            .write(&[(LEGACY_KEY.to_vec(), Some(legacy))], false)
            .unwrap();
        assert_eq!(load(&space, CHECK, hash).unwrap().len(), 1);

        let chunk_bytes = 16 * 1024;
        assert_eq!(
            save_in_chunks(&space, &monitor, CHECK, false, chunk_bytes).unwrap(),
            2_000
        );
        let stored = space.scan(b"warmup/units").unwrap();
        assert!(stored.iter().all(|(_, v)| v.len() <= chunk_bytes + 48));
        let chunks = stored_chunks(&space).unwrap();
        assert!(chunks > 5, "{chunks} chunks");
        assert_eq!(space.get(LEGACY_KEY).unwrap(), None);
        assert_eq!(load(&space, CHECK, hash).unwrap().len(), 2_000);

        // A smaller record deletes the chunks it no longer needs.
        let small = AccessMonitor::new(10_000, 60);
        record(&small, b"only");
        assert_eq!(
            save_in_chunks(&space, &small, CHECK, false, chunk_bytes).unwrap(),
            1
        );
        assert_eq!(space.scan(b"warmup/units/").unwrap().len(), 1);
        assert_eq!(load(&space, CHECK, hash).unwrap().len(), 1);
    }
}
