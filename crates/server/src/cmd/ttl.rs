//! TTL / PTTL key: time left before a key expires, in seconds or milliseconds (-1: no expiry,
//! -2: no such key). An upstream tier uses PTTL to learn the expiry of values it hands down.

use super::{store_error, CommandSpec, Declared, Flags, Keys};
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
}

impl Declared<'_> for Pttl {
    const SPEC: CommandSpec = spec("pttl");

    fn parse(parse: &mut Parse<'_>) -> Result<Pttl, ParseError> {
        Ttl::parse(parse).map(Pttl)
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        self.0.remaining(instance, true).await
    }
}

impl Ttl {
    async fn remaining(self, instance: &Instance, millis: bool) -> Frame {
        match instance.db.pttl(&self.key).await {
            Ok(ms) if ms < 0 || millis => Frame::Integer(ms),
            // Redis rounds to the nearest second.
            Ok(ms) => Frame::Integer((ms + 500) / 1000),
            Err(e) => store_error(e),
        }
    }
}
