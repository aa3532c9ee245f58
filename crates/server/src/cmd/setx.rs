//! The SET variants with a fixed condition or expiry: SETNX, SETEX, PSETEX and MSETNX, each
//! a transaction over its keys (MSETNX writes all or none, in one batch).

use super::number::strict_int;
use super::{atomically, txn_error, CommandSpec, Declared, Flags, Keys};
use crate::db::{Transaction, TxnError};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

/// How an expiry argument counts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Millis,
}

/// The absolute expiry (ms since the epoch) for `amount` as SET, SETEX and GETEX take it:
/// positive, and not overflowing once in milliseconds (relative ones: once `now` is added).
/// `None`: Redis's "invalid expire time".
pub fn expire_at(amount: i64, unit: Unit, absolute: bool, now: u64) -> Option<u64> {
    if amount <= 0 {
        return None;
    }
    let ms = match unit {
        Unit::Seconds => amount.checked_mul(1000)?,
        Unit::Millis => amount,
    };
    let at = if absolute {
        ms
    } else {
        ms.checked_add(i64::try_from(now).ok()?)?
    };
    Some(at as u64)
}

pub fn invalid_expire(name: &str) -> Frame {
    Frame::err(format!("invalid expire time in '{name}' command"))
}

/// SETNX key value: 1 if it wrote (the key did not exist), else 0.
pub struct SetNx {
    key: Bytes,
    value: Bytes,
}

impl SetNx {
    async fn run(self, txn: &mut Transaction<'_>) -> Result<Frame, TxnError> {
        if txn.exists(&self.key).await? {
            return Ok(Frame::Integer(0));
        }
        txn.set(&self.key, self.value, 0)?;
        Ok(Frame::Integer(1))
    }
}

impl Declared<'_> for SetNx {
    const SPEC: CommandSpec = CommandSpec {
        name: "setnx",
        arity: 3,
        flags: Flags::WRITE.with(Flags::DENYOOM).with(Flags::FAST),
        keys: Keys::ONE,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<SetNx, ParseError> {
        Ok(SetNx {
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

/// SETEX key seconds value / PSETEX key milliseconds value.
pub struct SetEx {
    key: Bytes,
    /// The amount as given; checked when run (Redis's errors come after the arity check).
    amount: Option<i64>,
    value: Bytes,
    unit: Unit,
}

/// PSETEX: SETEX in milliseconds.
pub struct PSetEx(SetEx);

impl SetEx {
    fn parse_as(parse: &mut Parse<'_>, unit: Unit) -> Result<SetEx, ParseError> {
        let key = parse.next_bytes()?;
        let amount = strict_int(parse.next_slice()?);
        let value = parse.next_bytes()?;
        Ok(SetEx {
            key,
            amount,
            value,
            unit,
        })
    }

    fn run(self, txn: &mut Transaction<'_>, name: &str) -> Frame {
        let Some(amount) = self.amount else {
            return Frame::err("value is not an integer or out of range");
        };
        let Some(at) = expire_at(amount, self.unit, false, txn.now_ms()) else {
            return invalid_expire(name);
        };
        match txn.set(&self.key, self.value, at) {
            Ok(()) => Frame::ok(),
            Err(e) => txn_error(e),
        }
    }
}

const fn setex_spec(name: &'static str) -> CommandSpec {
    CommandSpec {
        name,
        arity: 4,
        flags: Flags::WRITE.with(Flags::DENYOOM),
        keys: Keys::ONE,
        reveals_data: false,
    }
}

impl Declared<'_> for SetEx {
    const SPEC: CommandSpec = setex_spec("setex");

    fn parse(parse: &mut Parse<'_>) -> Result<SetEx, ParseError> {
        SetEx::parse_as(parse, Unit::Seconds)
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        let keys = [self.key.clone()];
        atomically!(self, &keys, instance, session)
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        self.run(txn, "setex")
    }
}

impl Declared<'_> for PSetEx {
    const SPEC: CommandSpec = setex_spec("psetex");

    fn parse(parse: &mut Parse<'_>) -> Result<PSetEx, ParseError> {
        SetEx::parse_as(parse, Unit::Millis).map(PSetEx)
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        let keys = [self.0.key.clone()];
        atomically!(self, &keys, instance, session)
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        self.0.run(txn, "psetex")
    }
}

/// MSETNX key value [key value ...]: sets them all (one batch) if none exists; 1, else 0.
pub struct MSetNx {
    pairs: Vec<(Bytes, Bytes)>,
}

impl MSetNx {
    async fn run(self, txn: &mut Transaction<'_>) -> Result<Frame, TxnError> {
        for (key, _) in &self.pairs {
            if txn.exists(key).await? {
                return Ok(Frame::Integer(0));
            }
        }
        for (key, value) in self.pairs {
            txn.set(&key, value, 0)?;
        }
        Ok(Frame::Integer(1))
    }
}

impl Declared<'_> for MSetNx {
    const SPEC: CommandSpec = CommandSpec {
        name: "msetnx",
        arity: -3,
        flags: Flags::WRITE.with(Flags::DENYOOM),
        keys: Keys::new(1, -1, 2),
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<MSetNx, ParseError> {
        let rest = parse.rest();
        if rest.is_empty() || rest.len() % 2 == 1 {
            return Err(ParseError::Arity);
        }
        Ok(MSetNx {
            pairs: rest
                .chunks_exact(2)
                .map(|pair| (pair[0].clone(), pair[1].clone()))
                .collect(),
        })
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        let keys: Vec<Bytes> = self.pairs.iter().map(|(key, _)| key.clone()).collect();
        atomically!(self, &keys, instance, session)
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        self.run(txn).await.unwrap_or_else(txn_error)
    }
}
