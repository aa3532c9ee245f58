//! Key slots, as Redis Cluster defines them, so cluster-aware Redis clients route keys to the
//! node that owns them without knowing anything about Mantle: CRC16 (XMODEM) of the key, or of
//! its hash tag, modulo 16,384; and [`SlotRange`], the contiguous run of slots that the slot map
//! assigns, a migration moves and the store deletes, so the store can name one without the
//! control plane.

use crc::{Crc, Table, CRC_16_XMODEM};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::RangeInclusive;

/// Number of slots the key space is divided into.
pub const SLOTS: u16 = 16_384;

/// Slice-by-16 tables (8 KiB): every request's key is hashed, sometimes twice (read ahead and
/// routed), and a key of 16 bytes takes about a third of the time it takes a byte at a time.
const CRC16: Crc<u16, Table<16>> = Crc::<u16, Table<16>>::new(&CRC_16_XMODEM);

/// The slot of `key`. A key with a hash tag (`{...}` with at least one byte inside, the first
/// `{` and the first `}` after it) hashes only the tag, so related keys can share a slot.
pub fn key_slot(key: &[u8]) -> u16 {
    CRC16.checksum(hash_tag(key)) % SLOTS
}

/// The part of `key` that is hashed: its hash tag, or the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = find(b'{', key) else {
        return key;
    };
    match find(b'}', &key[open + 1..]) {
        Some(0) | None => key,
        Some(len) => &key[open + 1..open + 1 + len],
    }
}

/// The first `byte` in `bytes`. Most keys hold no brace, so the scan usually runs to the end:
/// from a vector's width on, `memchr` checks 16 or 32 bytes a step (a 16-byte key in about a
/// quarter of the time); below that its set-up costs more than a plain loop.
#[inline]
fn find(byte: u8, bytes: &[u8]) -> Option<usize> {
    if bytes.len() >= 16 {
        memchr::memchr(byte, bytes)
    } else {
        bytes.iter().position(|&b| b == byte)
    }
}

/// A contiguous, inclusive range of slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SlotRange {
    pub start: u16,
    pub end: u16,
}

/// Text that is not a slot range; names the text and the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSlotRange(pub String);

impl fmt::Display for BadSlotRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad slot range {:?}: expected N or A-B with 0 <= A <= B <= {}",
            self.0,
            SLOTS - 1
        )
    }
}

impl std::error::Error for BadSlotRange {}

impl SlotRange {
    /// A range of `start..=end`; `None` when it is empty or leaves the slot space.
    pub fn new(start: u16, end: u16) -> Option<SlotRange> {
        (start <= end && end < SLOTS).then_some(SlotRange { start, end })
    }

    /// Every slot.
    pub fn all() -> SlotRange {
        SlotRange {
            start: 0,
            end: SLOTS - 1,
        }
    }

    pub fn len(&self) -> usize {
        usize::from(self.end - self.start) + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn slots(&self) -> RangeInclusive<u16> {
        self.start..=self.end
    }

    pub fn contains(&self, slot: u16) -> bool {
        (self.start..=self.end).contains(&slot)
    }

    /// Whether the two ranges share a slot.
    pub fn overlaps(&self, other: &SlotRange) -> bool {
        self.start <= other.end && other.start <= self.end
    }

    /// Parses `N` or `A-B` (the form the CLI and `CLUSTER` replies use).
    pub fn parse(text: &str) -> Result<SlotRange, BadSlotRange> {
        let bad = || BadSlotRange(text.to_string());
        let (a, b) = match text.split_once('-') {
            Some((a, b)) => (a, b),
            None => (text, text),
        };
        let start: u16 = a.trim().parse().map_err(|_| bad())?;
        let end: u16 = b.trim().parse().map_err(|_| bad())?;
        SlotRange::new(start, end).ok_or_else(bad)
    }
}

impl fmt::Display for SlotRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start == self.end {
            write!(f, "{}", self.start)
        } else {
            write!(f, "{}-{}", self.start, self.end)
        }
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
            // Keys long enough for the vector scan, with the tag before, across and after the
            // first 16 bytes.
            ("{user1000}.following.and.more.bytes", 3443),
            ("a.long.prefix.before.{user1000}.x", 3443),
            ("a.long.prefix.before.the.tag.{user1000}", 3443),
        ] {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
        }
    }

    #[test]
    fn sliced_tables_hash_as_one_byte_at_a_time_does() {
        // Lengths around the 16-byte steps, where the sliced tables hand over to the tail.
        let bytewise = Crc::<u16>::new(&CRC_16_XMODEM);
        let data: Vec<u8> = (0..80u32).map(|i| (i * 37 + 11) as u8).collect();
        for len in 0..data.len() {
            assert_eq!(
                CRC16.checksum(&data[..len]),
                bytewise.checksum(&data[..len]),
                "{len}"
            );
        }
    }

    #[test]
    fn every_slot_is_below_the_count() {
        for i in 0..100_000u32 {
            assert!(key_slot(&i.to_le_bytes()) < SLOTS);
        }
    }

    #[test]
    fn ranges_parse_and_print() {
        assert_eq!(
            SlotRange::parse("5").unwrap(),
            SlotRange::new(5, 5).unwrap()
        );
        assert_eq!(SlotRange::parse("0-16383").unwrap(), SlotRange::all());
        assert_eq!(SlotRange::parse("10-20").unwrap().to_string(), "10-20");
        for bad in ["", "x", "5-3", "0-16384", "-1", "1-2-3"] {
            let error = SlotRange::parse(bad).unwrap_err().to_string();
            assert!(error.contains(&format!("{bad:?}")), "{error}");
        }
    }
}
