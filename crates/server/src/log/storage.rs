//! One storage object of a shared log: CORFU's write-once storage unit, guarded by an epoch.
//!
//! An object is a key (`obj`) whose value is the object's header — the sealed epoch, one past
//! the highest position touched, and the trim horizon — and one key per position it holds,
//! `entry_key(obj, pos)`, in the same slot (same hash tag), so a cluster routes the object by
//! its name alone and every operation is one transaction over the header and one entry.
//!
//! The contract (ZLog's backend interface, see docs/shared-log.md):
//! - every request carries an epoch; one older than the sealed epoch is refused (`STALE`);
//! - a position is written once: a second write, or a write over a fill or trim, is refused;
//! - `fill` invalidates a position that was never written and is idempotent;
//! - `seal(e)` installs `e` only if it is newer than the sealed epoch, and returns the
//!   highest position touched (written, filled or trimmed), so a new sequencer starts past it.

use crate::db::{Transaction, TxnError};
use bytes::{BufMut, Bytes, BytesMut};

/// The most positions one `ZLOG.TRIMTO` may pass over (each is a key to delete), so one
/// request holds its stripe locks for a bounded time; the client splits longer spans.
pub const MAX_TRIM_SPAN: u64 = 65_536;

/// What a position of an object holds. Stored as one tag byte (then the entry's bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    Empty,
    Data(Bytes),
    Filled,
    Trimmed,
}

const DATA: u8 = b'D';
const FILLED: u8 = b'F';
const TRIMMED: u8 = b'T';

/// Why a request was refused: each is a distinct error reply a client can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The request's epoch is older than the object's sealed epoch (which is given).
    Stale(u64),
    /// The position already holds an entry.
    Written,
    /// The position was filled (a hole invalidated).
    Filled,
    /// The position was trimmed.
    Trimmed,
    /// A request outside the contract's bounds (the message says which).
    Invalid(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Stale(epoch) => write!(f, "STALE epoch is older than the sealed {epoch}"),
            Refusal::Written => f.write_str("WRITTEN position already written"),
            Refusal::Filled => f.write_str("FILLED position was filled"),
            Refusal::Trimmed => f.write_str("TRIMMED position was trimmed"),
            Refusal::Invalid(why) => write!(f, "ERR {why}"),
        }
    }
}

/// An object's header: its value under the object's own key, as `epoch next trimmed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Header {
    /// The sealed epoch: requests with an older one are refused.
    pub epoch: u64,
    /// One past the highest position written, filled or trimmed (0: none).
    pub next: u64,
    /// Every position below it is trimmed.
    pub trimmed: u64,
}

impl Header {
    fn decode(value: &[u8]) -> Option<Header> {
        let text = std::str::from_utf8(value).ok()?;
        let mut fields = text.split(' ').map(|f| f.parse::<u64>().ok());
        let header = Header {
            epoch: fields.next()??,
            next: fields.next()??,
            trimmed: fields.next()??,
        };
        fields.next().is_none().then_some(header)
    }

    fn encode(&self) -> Bytes {
        Bytes::from(format!("{} {} {}", self.epoch, self.next, self.trimmed))
    }

    /// The highest position touched, or -1 for none (what SEAL and MAXPOS reply).
    pub fn max_position(&self) -> i64 {
        self.next as i64 - 1
    }
}

/// The key of position `pos` of object `obj`: in `obj`'s slot, whether or not `obj` has a
/// hash tag of its own. `None` for an untagged name with a `}` (it could not be wrapped).
pub fn entry_key(obj: &[u8], pos: u64) -> Option<Bytes> {
    let tagged = slots::hash_tag(obj).len() != obj.len();
    let mut key = BytesMut::with_capacity(obj.len() + 24);
    if tagged {
        key.put_slice(obj);
    } else {
        if obj.contains(&b'}') {
            return None;
        }
        key.put_u8(b'{');
        key.put_slice(obj);
        key.put_u8(b'}');
    }
    key.put_u8(b'#');
    key.put_slice(itoa::Buffer::new().format(pos).as_bytes());
    Some(key.freeze())
}

/// The refusal for an object name that cannot hold entries.
pub fn bad_object() -> Refusal {
    Refusal::Invalid(
        "a log object's name needs a hash tag or no '}' (entries share its slot)".into(),
    )
}

/// Operations on one object, inside a transaction over the object and the entry they touch.
pub struct Object<'t, 'db> {
    txn: &'t mut Transaction<'db>,
    obj: &'t [u8],
}

type Outcome<T> = Result<Result<T, Refusal>, TxnError>;

impl<'t, 'db> Object<'t, 'db> {
    pub fn new(txn: &'t mut Transaction<'db>, obj: &'t [u8]) -> Object<'t, 'db> {
        Object { txn, obj }
    }

    async fn header(&mut self) -> Result<Header, TxnError> {
        Ok(match self.txn.get(self.obj).await? {
            // A header that does not parse was not written by this module: the key was used
            // for something else. Treat it as a fresh object would be a silent overwrite.
            Some(value) => Header::decode(&value).unwrap_or(Header {
                epoch: u64::MAX,
                next: 0,
                trimmed: 0,
            }),
            None => Header::default(),
        })
    }

    fn put_header(&mut self, header: &Header) -> Result<(), TxnError> {
        self.txn.set(self.obj, header.encode(), 0)
    }

    async fn slot(&mut self, key: &[u8]) -> Result<Slot, TxnError> {
        Ok(match self.txn.get(key).await? {
            None => Slot::Empty,
            Some(value) => match value.first() {
                Some(&DATA) => Slot::Data(value.slice(1..)),
                Some(&FILLED) => Slot::Filled,
                Some(&TRIMMED) => Slot::Trimmed,
                _ => Slot::Data(value),
            },
        })
    }

    /// The header, if `epoch` is not stale.
    async fn admitted(&mut self, epoch: u64) -> Outcome<Header> {
        let header = self.header().await?;
        Ok(if epoch < header.epoch {
            Err(Refusal::Stale(header.epoch))
        } else {
            Ok(header)
        })
    }

    /// Sets position `pos` (its key `entry`) to `value` if it is empty, and moves the header's
    /// `next` past it. The refusal says what the position already holds.
    async fn put_once(
        &mut self,
        epoch: u64,
        pos: u64,
        entry: &[u8],
        value: Bytes,
        idempotent: &Slot,
    ) -> Outcome<()> {
        let mut header = match self.admitted(epoch).await? {
            Ok(header) => header,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if pos < header.trimmed {
            return Ok(Err(Refusal::Trimmed));
        }
        match self.slot(entry).await? {
            Slot::Empty => {}
            held if &held == idempotent => return Ok(Ok(())),
            Slot::Data(_) => return Ok(Err(Refusal::Written)),
            Slot::Filled => return Ok(Err(Refusal::Filled)),
            Slot::Trimmed => return Ok(Err(Refusal::Trimmed)),
        }
        self.txn.set(entry, value, 0)?;
        if pos >= header.next {
            header.next = pos + 1;
            self.put_header(&header)?;
        }
        Ok(Ok(()))
    }

    /// Writes `data` at `pos`, once.
    pub async fn write(&mut self, epoch: u64, pos: u64, entry: &[u8], data: &[u8]) -> Outcome<()> {
        let mut value = BytesMut::with_capacity(data.len() + 1);
        value.put_u8(DATA);
        value.put_slice(data);
        // A write is never idempotent: a repeated write is refused even with the same bytes
        // (the client compares, see the zlog crate).
        self.put_once(epoch, pos, entry, value.freeze(), &Slot::Empty)
            .await
    }

    /// Invalidates `pos` if it was never written; filling a filled position succeeds.
    pub async fn fill(&mut self, epoch: u64, pos: u64, entry: &[u8]) -> Outcome<()> {
        self.put_once(
            epoch,
            pos,
            entry,
            Bytes::from_static(&[FILLED]),
            &Slot::Filled,
        )
        .await
    }

    /// What `pos` holds.
    pub async fn read(&mut self, epoch: u64, pos: u64, entry: &[u8]) -> Outcome<Slot> {
        let header = match self.admitted(epoch).await? {
            Ok(header) => header,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if pos < header.trimmed {
            return Ok(Ok(Slot::Trimmed));
        }
        Ok(Ok(self.slot(entry).await?))
    }

    /// Trims `pos`: its entry (if any) is dropped and reads say it was trimmed. Idempotent.
    pub async fn trim(&mut self, epoch: u64, pos: u64, entry: &[u8]) -> Outcome<()> {
        let mut header = match self.admitted(epoch).await? {
            Ok(header) => header,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if pos >= header.trimmed {
            self.txn.set(entry, Bytes::from_static(&[TRIMMED]), 0)?;
            if pos >= header.next {
                header.next = pos + 1;
                self.put_header(&header)?;
            }
        }
        Ok(Ok(()))
    }

    /// Trims every position below `to`: raises the horizon and deletes the entries it passes
    /// over (`entries` are their keys, from the old horizon up, at most [`MAX_TRIM_SPAN`]).
    pub async fn trim_to(&mut self, epoch: u64, to: u64, entries: &[Bytes]) -> Outcome<()> {
        let mut header = match self.admitted(epoch).await? {
            Ok(header) => header,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if to <= header.trimmed {
            return Ok(Ok(()));
        }
        for entry in entries {
            self.txn.delete(entry).await?;
        }
        header.trimmed = to;
        header.next = header.next.max(to);
        self.put_header(&header)?;
        Ok(Ok(()))
    }

    /// Installs `epoch` if it is newer than the sealed one; the highest position touched.
    pub async fn seal(&mut self, epoch: u64) -> Outcome<i64> {
        let mut header = self.header().await?;
        if epoch <= header.epoch {
            return Ok(Err(Refusal::Stale(header.epoch)));
        }
        header.epoch = epoch;
        self.put_header(&header)?;
        Ok(Ok(header.max_position()))
    }

    /// The highest position touched, without sealing.
    pub async fn max_position(&mut self, epoch: u64) -> Outcome<i64> {
        Ok(self.admitted(epoch).await?.map(|h| h.max_position()))
    }

    /// The object's header as stored (for the trim span the caller must declare).
    pub async fn peek(&mut self) -> Result<Header, TxnError> {
        self.header().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_share_their_objects_slot() {
        for obj in [&b"plain"[..], b"{tag}obj", b"x{y}z", b"{open"] {
            let key = entry_key(obj, 17).unwrap();
            assert_eq!(slots::key_slot(&key), slots::key_slot(obj), "{obj:?}");
        }
        assert!(entry_key(b"a}b", 1).is_none());
        assert!(entry_key(b"{}empty", 1).is_none());
    }

    #[test]
    fn headers_round_trip_and_reject_foreign_values() {
        let h = Header {
            epoch: 3,
            next: 10,
            trimmed: 2,
        };
        assert_eq!(Header::decode(&h.encode()), Some(h));
        assert_eq!(Header::decode(b"hello"), None);
        assert_eq!(Header::decode(b"1 2 3 4"), None);
    }
}
