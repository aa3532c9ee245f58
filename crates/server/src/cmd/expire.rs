//! EXPIRE / PEXPIRE / EXPIREAT / PEXPIREAT key amount [NX | XX | GT | LT], PERSIST key and
//! EXPIRETIME / PEXPIRETIME key: a key's expiry read and changed in a transaction over it.
//! An expiry already past deletes the key (and the reply is still 1), as in Redis.

use super::number::strict_int;
use super::setx::Unit;
use super::{atomically, txn_error, CommandSpec, Declared, Flags, Keys};
use crate::db::{Transaction, TxnError};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

/// NX / XX / GT / LT: when the new expiry may replace the current one (each given must hold).
#[derive(Clone, Copy, Default)]
struct When {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

impl When {
    /// Whether the new expiry `at` applies given the current one (0: none, which GT and LT
    /// treat as infinite).
    fn allows(self, current: u64, at: i64) -> bool {
        let has = current != 0;
        !(self.nx && has
            || self.xx && !has
            || self.gt && (!has || at <= current as i64)
            || self.lt && has && at >= current as i64)
    }
}

/// One EXPIRE-family request; errors found while parsing are replies when it runs, as
/// Redis checks them after the arity (and inside MULTI they are runtime errors).
pub struct Expire {
    key: Bytes,
    amount: Option<i64>,
    when: Result<When, String>,
    unit: Unit,
    absolute: bool,
    name: &'static str,
}

impl Expire {
    fn parse_as(
        parse: &mut Parse<'_>,
        unit: Unit,
        absolute: bool,
        name: &'static str,
    ) -> Result<Expire, ParseError> {
        let key = parse.next_bytes()?;
        let amount = strict_int(parse.next_slice()?);
        let mut flags = When::default();
        let mut unsupported = None;
        for option in parse.rest() {
            match option.to_ascii_uppercase().as_slice() {
                b"NX" => flags.nx = true,
                b"XX" => flags.xx = true,
                b"GT" => flags.gt = true,
                b"LT" => flags.lt = true,
                _ => {
                    unsupported = Some(super::printable(option, 128));
                    break;
                }
            }
        }
        let when = if let Some(option) = unsupported {
            Err(format!("Unsupported option {option}"))
        } else if flags.nx && (flags.xx || flags.gt || flags.lt) {
            Err("NX and XX, GT or LT options at the same time are not compatible".into())
        } else if flags.gt && flags.lt {
            Err("GT and LT options at the same time are not compatible".into())
        } else {
            Ok(flags)
        };
        Ok(Expire {
            key,
            amount,
            when,
            unit,
            absolute,
            name,
        })
    }

    async fn run(self, txn: &mut Transaction<'_>) -> Result<Frame, TxnError> {
        let when = match self.when {
            Ok(when) => when,
            Err(message) => return Ok(Frame::err(message)),
        };
        let Some(amount) = self.amount else {
            return Ok(Frame::err("value is not an integer or out of range"));
        };
        let invalid = || Frame::err(format!("invalid expire time in '{}' command", self.name));
        let ms = match self.unit {
            Unit::Seconds => match amount.checked_mul(1000) {
                Some(ms) => ms,
                None => return Ok(invalid()),
            },
            Unit::Millis => amount,
        };
        let base = if self.absolute {
            0
        } else {
            txn.now_ms() as i64
        };
        let Some(at) = ms.checked_add(base) else {
            return Ok(invalid());
        };
        let Some(record) = txn.record(&self.key).await? else {
            return Ok(Frame::Integer(0));
        };
        if !when.allows(record.expires_at_ms, at) {
            return Ok(Frame::Integer(0));
        }
        if at <= txn.now_ms() as i64 {
            txn.delete(&self.key).await?;
        } else {
            txn.set(&self.key, record.value, at as u64)?;
        }
        Ok(Frame::Integer(1))
    }
}

const fn expire_spec(name: &'static str) -> CommandSpec {
    CommandSpec {
        name,
        arity: -3,
        flags: Flags::WRITE.with(Flags::FAST),
        keys: Keys::ONE,
        reveals_data: true,
    }
}

macro_rules! expire_command {
    ($ty:ident, $name:literal, $unit:expr, $absolute:expr) => {
        pub struct $ty(Expire);

        impl Declared<'_> for $ty {
            const SPEC: CommandSpec = expire_spec($name);

            fn parse(parse: &mut Parse<'_>) -> Result<$ty, ParseError> {
                Expire::parse_as(parse, $unit, $absolute, $name).map($ty)
            }

            async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
                let keys = [self.0.key.clone()];
                atomically!(self, &keys, instance, session)
            }

            async fn apply_in(
                self,
                txn: &mut Transaction<'_>,
                _: &Instance,
                _: &mut Session,
            ) -> Frame {
                self.0.run(txn).await.unwrap_or_else(txn_error)
            }
        }
    };
}

expire_command!(ExpireCmd, "expire", Unit::Seconds, false);
expire_command!(PExpire, "pexpire", Unit::Millis, false);
expire_command!(ExpireAt, "expireat", Unit::Seconds, true);
expire_command!(PExpireAt, "pexpireat", Unit::Millis, true);

/// PERSIST key: removes the expiry; 1 if there was one.
pub struct Persist {
    key: Bytes,
}

impl Persist {
    async fn run(self, txn: &mut Transaction<'_>) -> Result<Frame, TxnError> {
        match txn.record(&self.key).await? {
            Some(record) if record.expires_at_ms != 0 => {
                txn.set(&self.key, record.value, 0)?;
                Ok(Frame::Integer(1))
            }
            _ => Ok(Frame::Integer(0)),
        }
    }
}

impl Declared<'_> for Persist {
    const SPEC: CommandSpec = CommandSpec {
        name: "persist",
        arity: 2,
        flags: Flags::WRITE.with(Flags::FAST),
        keys: Keys::ONE,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Persist, ParseError> {
        Ok(Persist {
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

/// EXPIRETIME key: when the key expires, in Unix seconds (-1: never, -2: no such key).
pub struct ExpireTime {
    key: Bytes,
    unit: Unit,
}

/// PEXPIRETIME: EXPIRETIME in milliseconds.
pub struct PExpireTime(ExpireTime);

impl ExpireTime {
    async fn run(self, txn: &mut Transaction<'_>) -> Result<Frame, TxnError> {
        Ok(Frame::Integer(match txn.record(&self.key).await? {
            None => -2,
            Some(record) if record.expires_at_ms == 0 => -1,
            Some(record) => match self.unit {
                Unit::Seconds => (record.expires_at_ms / 1000) as i64,
                Unit::Millis => record.expires_at_ms as i64,
            },
        }))
    }
}

const fn expiretime_spec(name: &'static str) -> CommandSpec {
    CommandSpec {
        name,
        arity: 2,
        flags: Flags::READONLY.with(Flags::FAST),
        keys: Keys::ONE,
        reveals_data: true,
    }
}

impl Declared<'_> for ExpireTime {
    const SPEC: CommandSpec = expiretime_spec("expiretime");

    fn parse(parse: &mut Parse<'_>) -> Result<ExpireTime, ParseError> {
        Ok(ExpireTime {
            key: parse.next_bytes()?,
            unit: Unit::Seconds,
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

impl Declared<'_> for PExpireTime {
    const SPEC: CommandSpec = expiretime_spec("pexpiretime");

    fn parse(parse: &mut Parse<'_>) -> Result<PExpireTime, ParseError> {
        Ok(PExpireTime(ExpireTime {
            key: parse.next_bytes()?,
            unit: Unit::Millis,
        }))
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        let keys = [self.0.key.clone()];
        atomically!(self, &keys, instance, session)
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        self.0.run(txn).await.unwrap_or_else(txn_error)
    }
}
