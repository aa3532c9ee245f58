//! SELECT index: Mantle has one keyspace, database 0, as a cache tier needs no more.

use crate::frame::Frame;
use crate::parse::{Parse, ParseError};

pub struct Select {
    index: i64,
}

impl Select {
    pub fn parse(parse: &mut Parse<'_>) -> Result<Select, ParseError> {
        let index = parse.next_int()?;
        Ok(Select { index })
    }

    pub fn apply(self) -> Frame {
        if self.index == 0 {
            Frame::ok()
        } else {
            Frame::err("DB index is out of range")
        }
    }
}
