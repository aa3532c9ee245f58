//! TTL / PTTL key: time left before a key expires, in seconds or milliseconds (-1: no expiry,
//! -2: no such key). An upstream tier uses PTTL to learn the expiry of values it hands down.

use super::store_error;
use crate::frame::Frame;
use crate::instance::Instance;
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct Ttl {
    key: Bytes,
    millis: bool,
}

impl Ttl {
    pub fn parse(parse: &mut Parse<'_>, millis: bool) -> Result<Ttl, ParseError> {
        Ok(Ttl {
            key: parse.next_bytes()?,
            millis,
        })
    }

    pub async fn apply(self, instance: &Instance) -> Frame {
        match instance.db.pttl(&self.key).await {
            Ok(ms) if ms < 0 || self.millis => Frame::Integer(ms),
            // Redis rounds to the nearest second.
            Ok(ms) => Frame::Integer((ms + 500) / 1000),
            Err(e) => store_error(e),
        }
    }
}
