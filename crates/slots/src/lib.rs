//! Key slots, as Redis Cluster defines them, so cluster-aware Redis clients route keys to the
//! node that owns them without knowing anything about Mantle: CRC16 (XMODEM) of the key, or of
//! its hash tag, modulo 16,384.

use crc::{Crc, CRC_16_XMODEM};

/// Number of slots the key space is divided into.
pub const SLOTS: u16 = 16_384;

const CRC16: Crc<u16> = Crc::<u16>::new(&CRC_16_XMODEM);

/// The slot of `key`. A key with a hash tag (`{...}` with at least one byte inside, the first
/// `{` and the first `}` after it) hashes only the tag, so related keys can share a slot.
pub fn key_slot(key: &[u8]) -> u16 {
    CRC16.checksum(hash_tag(key)) % SLOTS
}

/// The part of `key` that is hashed.
fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(0) | None => key,
        Some(len) => &key[open + 1..open + 1 + len],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_is_xmodem() {
        assert_eq!(CRC16.checksum(b"123456789"), 0x31C3);
    }

    #[test]
    fn slots_match_redis_cluster() {
        // Vectors checked against Redis's CLUSTER KEYSLOT.
        for (key, slot) in [
            ("x", 16287),
            ("y", 12222),
            ("a", 15495),
            ("d", 11298),
            ("foo", 12182),
            ("{user1000}.following", 3443),
            ("{user1000}.followers", 3443),
            ("foo{}{bar}", 8363),
            ("foo{{bar}}zap", 4015),
            ("foo{bar}{zap}", 5061),
        ] {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
        }
    }

    #[test]
    fn every_slot_is_below_the_count() {
        for i in 0..100_000u32 {
            assert!(key_slot(&i.to_le_bytes()) < SLOTS);
        }
    }
}
