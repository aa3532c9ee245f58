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
//! Layout of a chunk (little-endian): the magic `MWU1`, then per key: key length (u32), the
//! key, count, last order number, last access (Unix seconds), run start (Unix seconds), run
//! order number (u64 each). About 44 bytes plus the key per tracked key. Releases before the
//! chunks kept one such value under `warmup/units`; it is read once and deleted at the next
//! persist.

use super::monitor::{AccessMonitor, Unit, MAX_TRACKED_KEY_LEN};
use crate::live::space::{Change, Space};
use cache::warmup::Record;
use store::StoreError;

/// The single-value record of earlier releases.
pub const LEGACY_KEY: &[u8] = b"warmup/units";
/// Chunk `i` is stored under this prefix and `i` in eight decimal digits.
const CHUNK_PREFIX: &str = "warmup/units/";
/// The number of chunks of the last complete persist (decimal).
const COUNT_KEY: &[u8] = b"warmup/chunks";
/// Bytes a chunk is closed at (it may exceed this by one entry, at most 300 bytes).
pub const CHUNK_BYTES: usize = 1024 * 1024;
const MAGIC: &[u8; 4] = b"MWU1";

fn chunk_key(i: u64) -> Vec<u8> {
    format!("{CHUNK_PREFIX}{i:08}").into_bytes()
}

/// Encodes every tracked key (one monitor shard locked at a time), passing each chunk of at
/// most about `chunk_bytes` to `emit`; returns the keys encoded.
pub fn encode(
    monitor: &AccessMonitor,
    chunk_bytes: usize,
    mut emit: impl FnMut(Vec<u8>) -> Result<(), StoreError>,
) -> Result<u64, StoreError> {
    let fresh = || {
        let mut out = Vec::with_capacity(chunk_bytes.min(64 * 1024));
        out.extend_from_slice(MAGIC);
        out
    };
    let mut out = fresh();
    let mut n = 0;
    let mut failed = Ok(());
    monitor.for_each(|u| {
        if failed.is_err() {
            return;
        }
        n += 1;
        let r = &u.record;
        out.extend_from_slice(&(u.payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&u.payload);
        // Times are whole Unix seconds (the monitor's clock is), so the format keeps them as
        // integers.
        let (last_s, run_s) = (r.last_time as u64, r.run_time as u64);
        for field in [r.count, r.last_seq, last_s, run_s, r.run_seq] {
            out.extend_from_slice(&field.to_le_bytes());
        }
        if out.len() >= chunk_bytes {
            failed = emit(std::mem::replace(&mut out, fresh()));
        }
    });
    failed?;
    if out.len() > MAGIC.len() {
        emit(out)?;
    }
    Ok(n)
}

/// Decodes what [`encode`] wrote; an error names the key and the byte offset.
pub fn decode(raw: &[u8], key: &[u8]) -> Result<Vec<Unit>, StoreError> {
    let bad = |offset: usize, what: &str| {
        StoreError(format!(
            "warm-up record '{}' is malformed at byte {offset}: {what}",
            String::from_utf8_lossy(key)
        ))
    };
    if !raw.starts_with(MAGIC) {
        return Err(bad(0, "expected the magic MWU1"));
    }
    let mut at = MAGIC.len();
    let mut units = Vec::new();
    while at < raw.len() {
        let start = at;
        let len = take(raw, &mut at, 4).ok_or_else(|| bad(start, "truncated key length"))?;
        let len = u32::from_le_bytes(len.try_into().unwrap_or_default()) as usize;
        let key = take(raw, &mut at, len).ok_or_else(|| bad(start + 4, "truncated key"))?;
        let mut fields = [0u64; 5];
        for field in &mut fields {
            let bytes = take(raw, &mut at, 8).ok_or_else(|| bad(at, "truncated counters"))?;
            *field = u64::from_le_bytes(bytes.try_into().unwrap_or_default());
        }
        let [count, last_seq, last_s, run_s, run_seq] = fields;
        units.push(Unit {
            record: Record {
                count,
                last_seq,
                last_time: last_s as f64,
                run_time: run_s as f64,
                run_seq,
            },
            payload: key.into(),
        });
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
pub fn save(space: &Space, monitor: &AccessMonitor, sync: bool) -> Result<u64, StoreError> {
    save_in_chunks(space, monitor, sync, CHUNK_BYTES)
}

fn save_in_chunks(
    space: &Space,
    monitor: &AccessMonitor,
    sync: bool,
    chunk_bytes: usize,
) -> Result<u64, StoreError> {
    let before = stored_chunks(space)?;
    let mut chunks = 0;
    let keys = encode(monitor, chunk_bytes, |chunk| {
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

/// What an earlier run persisted (empty when nothing was). Keys longer than the monitor
/// tracks (a record of an earlier release) are dropped.
pub fn load(space: &Space) -> Result<Vec<Unit>, StoreError> {
    let mut units = Vec::new();
    if let Some(raw) = space.get(LEGACY_KEY)? {
        units.extend(decode(&raw, LEGACY_KEY)?);
    }
    for i in 0..stored_chunks(space)? {
        let key = chunk_key(i);
        if let Some(raw) = space.get(&key)? {
            units.extend(decode(&raw, &key)?);
        }
    }
    units.retain(|u| u.payload.len() <= MAX_TRACKED_KEY_LEN);
    Ok(units)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_record_loads_back_and_damage_is_named() {
        let monitor = AccessMonitor::new(100, 60);
        for key in [&b"alpha"[..], b"", b"beta", b"alpha"] {
            monitor.record(key.len() as u64 * 7919, key);
        }
        let space = Space::memory();
        assert!(load(&space).unwrap().is_empty());
        assert_eq!(save(&space, &monitor, false).unwrap(), 3);
        let mut units = load(&space).unwrap();
        units.sort_by(|a, b| a.payload.cmp(&b.payload));
        let keys: Vec<&[u8]> = units.iter().map(|u| &*u.payload).collect();
        assert_eq!(keys, [&b""[..], b"alpha", b"beta"]);
        assert_eq!(units[1].record.count, 2);

        let mut raw = Vec::new();
        encode(&monitor, CHUNK_BYTES, |chunk| {
            raw = chunk;
            Ok(())
        })
        .unwrap();
        let error = decode(&raw[..raw.len() - 3], b"warmup/units/00000000").unwrap_err();
        assert!(
            error.0.contains("warmup/units/00000000") && error.0.contains("byte"),
            "{error}"
        );
        assert!(decode(b"nope", LEGACY_KEY).is_err());
    }

    /// Issue 25 item 4: the record was one value (and one write batch) holding every tracked
    /// key whole; 300 tracked 4 MB keys made a 1.2 GB batch that RocksDB aborted on.
    #[test]
    fn the_record_is_written_in_bounded_chunks_and_shrinks_cleanly() {
        let monitor = AccessMonitor::new(10_000, 60);
        for i in 0..2_000u64 {
            let key = format!("key-{i:0>200}");
            monitor.record(i.wrapping_mul(0x9e37_79b9_7f4a_7c15), key.as_bytes());
        }
        let space = Space::memory();
        // An earlier release's single value is read once, then deleted.
        let mut legacy = MAGIC.to_vec();
        legacy.extend_from_slice(&1u32.to_le_bytes());
        legacy.extend_from_slice(b"L");
        legacy.extend_from_slice(&[0; 40]);
        space
            .write(&[(LEGACY_KEY.to_vec(), Some(legacy))], false)
            .unwrap();
        assert_eq!(load(&space).unwrap().len(), 1);

        let chunk_bytes = 64 * 1024;
        assert_eq!(
            save_in_chunks(&space, &monitor, false, chunk_bytes).unwrap(),
            2_000
        );
        let stored = space.scan(b"warmup/").unwrap();
        assert!(stored.iter().all(|(_, v)| v.len() <= chunk_bytes + 300));
        let chunks = stored_chunks(&space).unwrap();
        assert!(chunks > 5, "{chunks} chunks");
        assert_eq!(space.get(LEGACY_KEY).unwrap(), None);
        assert_eq!(load(&space).unwrap().len(), 2_000);

        // A smaller record deletes the chunks it no longer needs.
        let small = AccessMonitor::new(10_000, 60);
        small.record(1, b"only");
        assert_eq!(
            save_in_chunks(&space, &small, false, chunk_bytes).unwrap(),
            1
        );
        assert_eq!(space.scan(b"warmup/units/").unwrap().len(), 1);
        assert_eq!(load(&space).unwrap().len(), 1);
    }
}
