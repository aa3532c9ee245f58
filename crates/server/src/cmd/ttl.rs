//! TTL / PTTL key: time left before a key expires, in seconds or milliseconds (-1: no expiry,
//! -2: no such key). An upstream tier uses PTTL to learn the expiry of values it hands down.

use super::{store_error, CommandSpec, Declared, Flags, Keys};
use crate::db::Transaction;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct Ttl {
    key: Bytes,
}

/// PTTL: TTL in milliseconds.
pub struct Pttl(Ttl);

const fn spec(name: &'static str) -> CommandSpec {
    CommandSpec {
        name,
        arity: 2,
        flags: Flags::READONLY.with(Flags::FAST),
        keys: Keys::ONE,
        reveals_data: true,
    }
}

impl Declared<'_> for Ttl {
    const SPEC: CommandSpec = spec("ttl");

    fn parse(parse: &mut Parse<'_>) -> Result<Ttl, ParseError> {
        Ok(Ttl {
            key: parse.next_bytes()?,
        })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        self.remaining(instance, false).await
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        self.remaining_in(txn, false).await
    }
}

impl Declared<'_> for Pttl {
    const SPEC: CommandSpec = spec("pttl");

    fn parse(parse: &mut Parse<'_>) -> Result<Pttl, ParseError> {
        Ttl::parse(parse).map(Pttl)
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        self.0.remaining(instance, true).await
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        self.0.remaining_in(txn, true).await
    }
}

impl Ttl {
    async fn remaining(self, instance: &Instance, millis: bool) -> Frame {
        match instance.db.pttl(&self.key).await {
            Ok(ms) => in_unit(ms, millis),
            Err(e) => store_error(e),
        }
    }

    async fn remaining_in(self, txn: &mut Transaction<'_>, millis: bool) -> Frame {
        match txn.pttl(&self.key).await {
            Ok(ms) => in_unit(ms, millis),
            Err(e) => super::txn_error(e),
        }
    }
}

fn in_unit(ms: i64, millis: bool) -> Frame {
    if ms < 0 || millis {
        Frame::Integer(ms)
    } else {
        // Redis rounds to the nearest second.
        Frame::Integer((ms + 500) / 1000)
    }
}
