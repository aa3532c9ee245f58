//! INCR / DECR / INCRBY / DECRBY / INCRBYFLOAT key [amount]: read the value as a number, add,
//! write it back, atomically (a transaction over the key); the key keeps its expiry.

use super::number::{float, format_float, strict_int};
use super::{atomically, txn_error, CommandSpec, Declared, Flags, Keys};
use crate::db::{Transaction, TxnError};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

const NOT_INTEGER: &str = "value is not an integer or out of range";

const fn spec(name: &'static str, arity: i64) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags: Flags::WRITE.with(Flags::DENYOOM).with(Flags::FAST),
        keys: Keys::ONE,
        reveals_data: true,
    }
}

/// INCR, DECR, INCRBY and DECRBY: the key and what to add.
pub struct IncrBy {
    key: Bytes,
    delta: i64,
    /// DECRBY of the most negative amount cannot be negated: Redis's own error.
    unnegatable: bool,
}

pub struct Incr(IncrBy);
pub struct Decr(IncrBy);
pub struct DecrBy(IncrBy);

fn amount(parse: &mut Parse<'_>) -> Result<i64, ParseError> {
    let arg = parse.next_slice()?;
    strict_int(arg).ok_or(ParseError::NotInteger)
}

impl IncrBy {
    async fn run(self, txn: &mut Transaction<'_>) -> Result<Frame, TxnError> {
        if self.unnegatable {
            return Ok(Frame::err("decrement would overflow"));
        }
        let (current, expires_at_ms) = match txn.record(&self.key).await? {
            None => (0, 0),
            Some(record) => match strict_int(&record.value) {
                Some(n) => (n, record.expires_at_ms),
                None => return Ok(Frame::err(NOT_INTEGER)),
            },
        };
        let Some(next) = current.checked_add(self.delta) else {
            return Ok(Frame::err("increment or decrement would overflow"));
        };
        let text = itoa::Buffer::new().format(next).as_bytes().to_vec();
        txn.set(&self.key, Bytes::from(text), expires_at_ms)?;
        Ok(Frame::Integer(next))
    }
}

macro_rules! integer_command {
    ($ty:ident, $name:literal, $arity:literal, |$parse:ident| $build:expr) => {
        impl Declared<'_> for $ty {
            const SPEC: CommandSpec = spec($name, $arity);

            fn parse($parse: &mut Parse<'_>) -> Result<$ty, ParseError> {
                $build.map($ty)
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

integer_command!(Incr, "incr", 2, |parse| Ok::<_, ParseError>(IncrBy {
    key: parse.next_bytes()?,
    delta: 1,
    unnegatable: false,
}));
integer_command!(Decr, "decr", 2, |parse| Ok::<_, ParseError>(IncrBy {
    key: parse.next_bytes()?,
    delta: -1,
    unnegatable: false,
}));
integer_command!(IncrByCmd, "incrby", 3, |parse| Ok::<_, ParseError>(
    IncrBy {
        key: parse.next_bytes()?,
        delta: amount(parse)?,
        unnegatable: false,
    }
));
integer_command!(DecrBy, "decrby", 3, |parse| {
    let key = parse.next_bytes()?;
    let delta = amount(parse)?;
    Ok::<_, ParseError>(IncrBy {
        key,
        delta: delta.checked_neg().unwrap_or(0),
        unnegatable: delta == i64::MIN,
    })
});

/// INCRBY (the table's name for it; `IncrBy` is the shared body).
pub struct IncrByCmd(IncrBy);

/// INCRBYFLOAT key increment. Computed in `f64` (Redis uses `long double`): results are
/// printed with the shortest digits that round-trip, which matches Redis for increments that
/// are exact in binary and may differ in the last digits otherwise (see docs/server.md).
pub struct IncrByFloat {
    key: Bytes,
    delta: Result<f64, ()>,
}

impl IncrByFloat {
    async fn run(self, txn: &mut Transaction<'_>) -> Result<Frame, TxnError> {
        let Ok(delta) = self.delta else {
            return Ok(Frame::err("value is not a valid float"));
        };
        let (current, expires_at_ms) = match txn.record(&self.key).await? {
            None => (0.0, 0),
            Some(record) => match float(&record.value) {
                Some(n) => (n, record.expires_at_ms),
                None => return Ok(Frame::err("value is not a valid float")),
            },
        };
        let next = current + delta;
        if !next.is_finite() {
            return Ok(Frame::err("increment would produce NaN or Infinity"));
        }
        let text = Bytes::from(format_float(next));
        txn.set(&self.key, text.clone(), expires_at_ms)?;
        Ok(Frame::Bulk(text))
    }
}

impl Declared<'_> for IncrByFloat {
    const SPEC: CommandSpec = spec("incrbyfloat", 3);

    fn parse(parse: &mut Parse<'_>) -> Result<IncrByFloat, ParseError> {
        let key = parse.next_bytes()?;
        // A bad increment is a reply, not a parse error: Redis reads the key first (a wrong
        // type would win), and inside MULTI it is a runtime error either way.
        let delta = float(parse.next_slice()?).ok_or(());
        Ok(IncrByFloat { key, delta })
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        let keys = [self.key.clone()];
        atomically!(self, &keys, instance, session)
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        self.run(txn).await.unwrap_or_else(txn_error)
    }
}
