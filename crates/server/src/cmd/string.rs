//! APPEND, STRLEN, GETRANGE and SETRANGE: a value read and changed as bytes. Writes are
//! transactions over the key (atomic, the expiry kept); a result longer than
//! `proto-max-bulk-len` (512 MB by default) is refused before anything is allocated.

use super::{atomically, txn_error, CommandSpec, Declared, Flags, Keys};
use crate::db::{Transaction, TxnError};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::{Bytes, BytesMut};

use super::number::strict_int;

fn too_long() -> Frame {
    Frame::err("string exceeds maximum allowed size (proto-max-bulk-len)")
}

fn int_arg(parse: &mut Parse<'_>) -> Result<i64, ParseError> {
    strict_int(parse.next_slice()?).ok_or(ParseError::NotInteger)
}

/// APPEND key value: the new length.
pub struct Append {
    key: Bytes,
    value: Bytes,
}

impl Append {
    async fn run(self, txn: &mut Transaction<'_>, limit: u64) -> Result<Frame, TxnError> {
        let (current, expires_at_ms) = match txn.record(&self.key).await? {
            Some(record) => (record.value, record.expires_at_ms),
            None => (Bytes::new(), 0),
        };
        let length = current.len() as u64 + self.value.len() as u64;
        if length > limit {
            return Ok(too_long());
        }
        let mut joined = BytesMut::with_capacity(length as usize);
        joined.extend_from_slice(&current);
        joined.extend_from_slice(&self.value);
        txn.set(&self.key, joined.freeze(), expires_at_ms)?;
        Ok(Frame::Integer(length as i64))
    }
}

impl Declared<'_> for Append {
    const SPEC: CommandSpec = CommandSpec {
        name: "append",
        arity: 3,
        flags: Flags::WRITE.with(Flags::DENYOOM).with(Flags::FAST),
        keys: Keys::ONE,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Append, ParseError> {
        Ok(Append {
            key: parse.next_bytes()?,
            value: parse.next_bytes()?,
        })
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        let keys = [self.key.clone()];
        atomically!(self, &keys, instance, session)
    }

    async fn apply_in(
        self,
        txn: &mut Transaction<'_>,
        instance: &Instance,
        _: &mut Session,
    ) -> Frame {
        let limit = instance.max_bulk_len();
        self.run(txn, limit).await.unwrap_or_else(txn_error)
    }
}

/// STRLEN key: the value's length (0 for a missing key).
pub struct Strlen {
    key: Bytes,
}

impl Declared<'_> for Strlen {
    const SPEC: CommandSpec = CommandSpec {
        name: "strlen",
        arity: 2,
        flags: Flags::READONLY.with(Flags::FAST),
        keys: Keys::ONE,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Strlen, ParseError> {
        Ok(Strlen {
            key: parse.next_bytes()?,
        })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        match instance.db.get(&self.key).await {
            Ok(value) => Frame::Integer(value.map_or(0, |v| v.len() as i64)),
            Err(e) => super::store_error(e),
        }
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        match txn.get(&self.key).await {
            Ok(value) => Frame::Integer(value.map_or(0, |v| v.len() as i64)),
            Err(e) => txn_error(e),
        }
    }
}

/// GETRANGE key start end: the bytes from start to end inclusive; negative offsets count
/// from the end, as in Redis.
pub struct GetRange {
    key: Bytes,
    start: i64,
    end: i64,
}

impl GetRange {
    fn cut(&self, value: &Bytes) -> Bytes {
        let length = value.len() as i64;
        let (mut start, mut end) = (self.start, self.end);
        if start < 0 && end < 0 && start > end {
            return Bytes::new();
        }
        if start < 0 {
            start += length;
        }
        if end < 0 {
            end += length;
        }
        start = start.max(0);
        end = end.max(0).min(length - 1);
        if length == 0 || start > end {
            return Bytes::new();
        }
        value.slice(start as usize..=end as usize)
    }
}

impl Declared<'_> for GetRange {
    const SPEC: CommandSpec = CommandSpec {
        name: "getrange",
        arity: 4,
        flags: Flags::READONLY,
        keys: Keys::ONE,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<GetRange, ParseError> {
        Ok(GetRange {
            key: parse.next_bytes()?,
            start: int_arg(parse)?,
            end: int_arg(parse)?,
        })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        match instance.db.get(&self.key).await {
            Ok(value) => Frame::Bulk(value.map(|v| self.cut(&v)).unwrap_or_default()),
            Err(e) => super::store_error(e),
        }
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        match txn.get(&self.key).await {
            Ok(value) => Frame::Bulk(value.map(|v| self.cut(&v)).unwrap_or_default()),
            Err(e) => txn_error(e),
        }
    }
}

/// SETRANGE key offset value: overwrites from `offset`, padding with zero bytes; the new
/// length. The length is checked against `proto-max-bulk-len` before any allocation.
pub struct SetRange {
    key: Bytes,
    offset: i64,
    value: Bytes,
}

impl SetRange {
    async fn run(self, txn: &mut Transaction<'_>, limit: u64) -> Result<Frame, TxnError> {
        if self.offset < 0 {
            return Ok(Frame::err("offset is out of range"));
        }
        let record = txn.record(&self.key).await?;
        let current_len = record.as_ref().map_or(0, |r| r.value.len());
        if self.value.is_empty() {
            // Nothing to write: Redis neither creates the key nor checks the offset's size.
            return Ok(Frame::Integer(current_len as i64));
        }
        let offset = self.offset as u64;
        if offset + self.value.len() as u64 > limit {
            return Ok(too_long());
        }
        let offset = offset as usize;
        let length = current_len.max(offset + self.value.len());
        let (current, expires_at_ms) = match record {
            Some(record) => (record.value, record.expires_at_ms),
            None => (Bytes::new(), 0),
        };
        let mut out = BytesMut::zeroed(length);
        out[..current.len()].copy_from_slice(&current);
        out[offset..offset + self.value.len()].copy_from_slice(&self.value);
        txn.set(&self.key, out.freeze(), expires_at_ms)?;
        Ok(Frame::Integer(length as i64))
    }
}

impl Declared<'_> for SetRange {
    const SPEC: CommandSpec = CommandSpec {
        name: "setrange",
        arity: 4,
        flags: Flags::WRITE.with(Flags::DENYOOM),
        keys: Keys::ONE,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<SetRange, ParseError> {
        Ok(SetRange {
            key: parse.next_bytes()?,
            offset: int_arg(parse)?,
            value: parse.next_bytes()?,
        })
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        let keys = [self.key.clone()];
        atomically!(self, &keys, instance, session)
    }

    async fn apply_in(
        self,
        txn: &mut Transaction<'_>,
        instance: &Instance,
        _: &mut Session,
    ) -> Frame {
        let limit = instance.max_bulk_len();
        self.run(txn, limit).await.unwrap_or_else(txn_error)
    }
}
