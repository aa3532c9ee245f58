//! How a value is laid out in the store: a one-byte tag, an optional expiry (milliseconds since
//! the Unix epoch, little-endian) and the value bytes. Expiry travels with the value so a TTL
//! survives restarts and eviction from the cache.

use bytes::Bytes;

const TAG_PLAIN: u8 = 0;
const TAG_EXPIRING: u8 = 1;

/// A value and when it expires (`0`: never).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub value: Bytes,
    pub expires_at_ms: u64,
}

impl Record {
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.expires_at_ms == 0 || self.expires_at_ms > now_ms
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.value.len() + 9);
        self.encode_into(&mut out);
        out
    }

    /// Encodes into `out`, replacing its contents (lets callers reuse one buffer).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.clear();
        self.append_to(out);
    }

    /// Bytes of the encoding.
    pub fn encoded_len(&self) -> usize {
        let expiry = if self.expires_at_ms == 0 { 0 } else { 8 };
        1 + expiry + self.value.len()
    }

    /// Encodes at the end of `out`.
    pub fn append_to(&self, out: &mut Vec<u8>) {
        if self.expires_at_ms == 0 {
            out.push(TAG_PLAIN);
        } else {
            out.push(TAG_EXPIRING);
            out.extend_from_slice(&self.expires_at_ms.to_le_bytes());
        }
        out.extend_from_slice(&self.value);
    }
}

/// Reads the expiry and the value bytes of a stored record; `None` if it is not one of ours.
pub fn decode(raw: &[u8]) -> Option<(u64, &[u8])> {
    match raw.split_first()? {
        (&TAG_PLAIN, value) => Some((0, value)),
        (&TAG_EXPIRING, rest) if rest.len() >= 8 => {
            let (when, value) = rest.split_at(8);
            Some((u64::from_le_bytes(when.try_into().ok()?), value))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_with_and_without_expiry() {
        for expires_at_ms in [0, 1_700_000_000_123] {
            let record = Record {
                value: Bytes::from_static(b"\x00\x01value"),
                expires_at_ms,
            };
            let raw = record.encode();
            assert_eq!(raw.len(), record.encoded_len());
            assert_eq!(decode(&raw), Some((expires_at_ms, &b"\x00\x01value"[..])));
        }
    }

    #[test]
    fn foreign_bytes_are_rejected() {
        assert_eq!(decode(b""), None);
        assert_eq!(decode(b"\x01short"), None);
        assert_eq!(decode(b"\x07x"), None);
    }

    #[test]
    fn liveness_follows_the_clock() {
        let record = Record {
            value: Bytes::new(),
            expires_at_ms: 100,
        };
        assert!(record.is_live(99));
        assert!(!record.is_live(100));
    }
}
