//! Where the monitor's record outlives the process: one value, `warmup/units`, in the policy
//! registry's column family of the server's RocksDB (the registry's own keys never start with
//! `warmup/`). It is rewritten whole every `--warmup-persist` period when something was
//! accessed, and at clean shutdown; each write reaches the operating system before it returns,
//! so a SIGKILL loses at most the accesses since the last persist.
//!
//! Layout (little-endian): the magic `MWU1`, then per key: key length (u32), the key, count,
//! last order number, last access (Unix seconds), run start (Unix seconds), run order number
//! (u64 each). About 44 bytes plus the key per tracked key.

use super::monitor::{AccessMonitor, Unit};
use crate::live::space::Space;
use crate::store::StoreError;
use cache::warmup::Record;

/// The key the record is stored under.
pub const KEY: &[u8] = b"warmup/units";
const MAGIC: &[u8; 4] = b"MWU1";

/// Encodes every tracked key (one monitor shard locked at a time).
pub fn encode(monitor: &AccessMonitor) -> (Vec<u8>, u64) {
    let mut out = Vec::with_capacity(64 * monitor.len() + MAGIC.len());
    out.extend_from_slice(MAGIC);
    let mut n = 0;
    monitor.for_each(|u| {
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
    });
    (out, n)
}

/// Decodes what [`encode`] wrote; an error names the key and the byte offset.
pub fn decode(raw: &[u8]) -> Result<Vec<Unit>, StoreError> {
    let bad = |offset: usize, what: &str| {
        StoreError(format!(
            "warm-up record '{}' is malformed at byte {offset}: {what}",
            String::from_utf8_lossy(KEY)
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

/// Writes the monitor's record; returns the keys written. `sync` also forces it to disk.
pub fn save(space: &Space, monitor: &AccessMonitor, sync: bool) -> Result<u64, StoreError> {
    let (value, n) = encode(monitor);
    space.write(&[(KEY.to_vec(), Some(value))], sync)?;
    Ok(n)
}

/// What an earlier run persisted (empty when nothing was).
pub fn load(space: &Space) -> Result<Vec<Unit>, StoreError> {
    match space.get(KEY)? {
        Some(raw) => decode(&raw),
        None => Ok(Vec::new()),
    }
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

        let (raw, _) = encode(&monitor);
        let error = decode(&raw[..raw.len() - 3]).unwrap_err();
        assert!(
            error.0.contains("warmup/units") && error.0.contains("byte"),
            "{error}"
        );
        assert!(decode(b"nope").is_err());
    }
}
