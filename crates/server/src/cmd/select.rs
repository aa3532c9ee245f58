//! SELECT index: Mantle has one keyspace, database 0, as a cache tier needs no more.

use super::{CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};

pub struct Select {
    index: i64,
}

impl Declared<'_> for Select {
    const SPEC: CommandSpec = CommandSpec {
        name: "select",
        arity: 2,
        flags: Flags::LOADING.with(Flags::STALE).with(Flags::FAST),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Select, ParseError> {
        let index = parse.next_int()?;
        Ok(Select { index })
    }

    async fn apply(self, _: &Instance, _: &mut Session) -> Frame {
        if self.index == 0 {
            Frame::ok()
        } else {
            Frame::err("DB index is out of range")
        }
    }
}
