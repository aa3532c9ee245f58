//! PING [message]: `+PONG`, or the message back as a bulk string.

use crate::frame::Frame;
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct Ping {
    message: Option<Bytes>,
}

impl Ping {
    pub fn parse(parse: &mut Parse<'_>) -> Result<Ping, ParseError> {
        let message = parse.next_optional();
        parse.finish()?;
        Ok(Ping { message })
    }

    pub fn apply(self) -> Frame {
        match self.message {
            None => Frame::simple("PONG"),
            Some(message) => Frame::Bulk(message),
        }
    }
}
