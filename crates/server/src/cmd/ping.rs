//! PING [message]: `+PONG`, or the message back as a bulk string.

use super::{CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct Ping {
    message: Option<Bytes>,
}

impl Declared<'_> for Ping {
    const SPEC: CommandSpec = CommandSpec {
        name: "ping",
        arity: -1,
        flags: Flags::FAST,
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Ping, ParseError> {
        let message = parse.next_optional();
        parse.finish()?;
        Ok(Ping { message })
    }

    async fn apply(self, _: &Instance, _: &mut Session) -> Frame {
        match self.message {
            None => Frame::simple("PONG"),
            Some(message) => Frame::Bulk(message),
        }
    }
}
