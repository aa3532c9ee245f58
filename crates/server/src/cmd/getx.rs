//! GETSET, GETDEL and GETEX: read a value and change the key in the same transaction.

use super::number::strict_int;
use super::setx::{expire_at, invalid_expire, Unit};
use super::{atomically, txn_error, CommandSpec, Declared, Flags, Keys};
use crate::db::{Transaction, TxnError};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

fn value_or_null(value: Option<Bytes>) -> Frame {
    value.map_or(Frame::Null, Frame::Bulk)
}

/// GETSET key value: the old value; the key gets the new one and loses its expiry.
pub struct GetSet {
    key: Bytes,
    value: Bytes,
}

impl GetSet {
    async fn run(self, txn: &mut Transaction<'_>) -> Result<Frame, TxnError> {
        let old = txn.get(&self.key).await?;
        txn.set(&self.key, self.value, 0)?;
        Ok(value_or_null(old))
    }
}

impl Declared<'_> for GetSet {
    const SPEC: CommandSpec = CommandSpec {
        name: "getset",
        arity: 3,
        flags: Flags::WRITE.with(Flags::DENYOOM).with(Flags::FAST),
        keys: Keys::ONE,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<GetSet, ParseError> {
        Ok(GetSet {
            key: parse.next_bytes()?,
            value: parse.next_bytes()?,
        })
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        let keys = [self.key.clone()];
        atomically!(self, &keys, instance, session)
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        self.run(txn).await.unwrap_or_else(txn_error)
    }
}

/// GETDEL key: the value, and the key is deleted.
pub struct GetDel {
    key: Bytes,
}

impl GetDel {
    async fn run(self, txn: &mut Transaction<'_>) -> Result<Frame, TxnError> {
        let old = txn.get(&self.key).await?;
        if old.is_some() {
            txn.delete(&self.key).await?;
        }
        Ok(value_or_null(old))
    }
}

impl Declared<'_> for GetDel {
    const SPEC: CommandSpec = CommandSpec {
        name: "getdel",
        arity: 2,
        flags: Flags::WRITE.with(Flags::FAST),
        keys: Keys::ONE,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<GetDel, ParseError> {
        Ok(GetDel {
            key: parse.next_bytes()?,
        })
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        let keys = [self.key.clone()];
        atomically!(self, &keys, instance, session)
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        self.run(txn).await.unwrap_or_else(txn_error)
    }
}

/// What GETEX does to the expiry.
enum Change {
    Keep,
    Persist,
    /// EX/PX/EXAT/PXAT: the amount as given (checked when run), its unit, absolute or not.
    Expire(Option<i64>, Unit, bool),
}

/// GETEX key [EX s | PX ms | EXAT ts | PXAT ms-ts | PERSIST]: the value, with a new expiry
/// (one already past deletes the key, as in Redis).
pub struct GetEx {
    key: Bytes,
    change: Result<Change, ()>,
}

impl GetEx {
    /// In Redis's order: the options' syntax, then the key (missing: null), then the time.
    async fn run(self, txn: &mut Transaction<'_>) -> Result<Frame, TxnError> {
        let Ok(change) = self.change else {
            return Ok(Frame::err("syntax error"));
        };
        let Some(record) = txn.record(&self.key).await? else {
            return Ok(Frame::Null);
        };
        let expires_at = match change {
            Change::Expire(None, ..) => {
                return Ok(Frame::err("value is not an integer or out of range"))
            }
            Change::Expire(Some(amount), unit, absolute) => {
                match expire_at(amount, unit, absolute, txn.now_ms()) {
                    Some(at) => Some(at),
                    None => return Ok(invalid_expire("getex")),
                }
            }
            Change::Persist => Some(0),
            Change::Keep => None,
        };
        // PERSIST of a key without expiry changes nothing (and so aborts no WATCH).
        match expires_at {
            Some(0) if record.expires_at_ms == 0 => {}
            Some(at) => {
                txn.set_expiry(&self.key, at).await?;
            }
            None => {}
        }
        Ok(Frame::Bulk(record.value))
    }
}

impl Declared<'_> for GetEx {
    const SPEC: CommandSpec = CommandSpec {
        name: "getex",
        arity: -2,
        flags: Flags::WRITE.with(Flags::FAST),
        keys: Keys::ONE,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<GetEx, ParseError> {
        let key = parse.next_bytes()?;
        let mut change = Ok(Change::Keep);
        while let Some(option) = parse.next_optional() {
            let option = option.to_ascii_uppercase();
            let (unit, absolute) = match option.as_slice() {
                b"EX" => (Unit::Seconds, false),
                b"PX" => (Unit::Millis, false),
                b"EXAT" => (Unit::Seconds, true),
                b"PXAT" => (Unit::Millis, true),
                b"PERSIST" if matches!(change, Ok(Change::Keep)) => {
                    change = Ok(Change::Persist);
                    continue;
                }
                _ => {
                    change = Err(());
                    break;
                }
            };
            match (&change, parse.next_slice()) {
                (Ok(Change::Keep), Ok(amount)) => {
                    change = Ok(Change::Expire(strict_int(amount), unit, absolute))
                }
                _ => {
                    change = Err(());
                    break;
                }
            }
        }
        Ok(GetEx { key, change })
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        let keys = [self.key.clone()];
        atomically!(self, &keys, instance, session)
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        self.run(txn).await.unwrap_or_else(txn_error)
    }
}
