//! WATCH key [key ...] / UNWATCH: optimistic locking for MULTI/EXEC. A write to a watched
//! key by anyone (this connection included), or its expiry, between WATCH and EXEC makes
//! EXEC answer a null array and apply nothing (see `db::watch`).

use super::{store_error, CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct Watch {
    keys: Vec<Bytes>,
}

impl Declared<'_> for Watch {
    const SPEC: CommandSpec = CommandSpec {
        name: "watch",
        arity: -2,
        flags: Flags::NOSCRIPT
            .with(Flags::LOADING)
            .with(Flags::STALE)
            .with(Flags::FAST),
        keys: Keys::ALL,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Watch, ParseError> {
        Ok(Watch {
            keys: parse.rest().to_vec(),
        })
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        if session.multi.is_some() {
            return Frame::err("WATCH inside MULTI is not allowed");
        }
        for key in &self.keys {
            if let Err(e) = instance.db.watch(&mut session.watched, key).await {
                return store_error(e);
            }
        }
        Frame::ok()
    }
}

pub struct Unwatch;

impl Declared<'_> for Unwatch {
    const SPEC: CommandSpec = CommandSpec {
        name: "unwatch",
        arity: 1,
        flags: Flags::NOSCRIPT
            .with(Flags::LOADING)
            .with(Flags::STALE)
            .with(Flags::FAST),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(_: &mut Parse<'_>) -> Result<Unwatch, ParseError> {
        Ok(Unwatch)
    }

    async fn apply(self, _: &Instance, session: &mut Session) -> Frame {
        session.watched = None;
        Frame::ok()
    }
}
