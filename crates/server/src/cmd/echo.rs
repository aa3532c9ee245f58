//! ECHO message.

use crate::frame::Frame;
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct Echo {
    message: Bytes,
}

impl Echo {
    pub fn parse(parse: &mut Parse<'_>) -> Result<Echo, ParseError> {
        Ok(Echo {
            message: parse.next_bytes()?,
        })
    }

    pub fn apply(self) -> Frame {
        Frame::Bulk(self.message)
    }
}
