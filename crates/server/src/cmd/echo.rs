//! ECHO message.

use super::{CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct Echo {
    message: Bytes,
}

impl Declared<'_> for Echo {
    const SPEC: CommandSpec = CommandSpec {
        name: "echo",
        arity: 2,
        flags: Flags::FAST,
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Echo, ParseError> {
        Ok(Echo {
            message: parse.next_bytes()?,
        })
    }

    async fn apply(self, _: &Instance, _: &mut Session) -> Frame {
        Frame::Bulk(self.message)
    }
}
