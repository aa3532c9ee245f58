//! GET key: from the cache, or read through from the store on a miss.

use super::store_error;
use crate::frame::Frame;
use crate::instance::Instance;
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct Get {
    key: Bytes,
}

impl Get {
    pub fn parse(parse: &mut Parse<'_>) -> Result<Get, ParseError> {
        Ok(Get {
            key: parse.next_bytes()?,
        })
    }

    pub async fn apply(self, instance: &Instance) -> Frame {
        match instance.db.get(&self.key).await {
            Ok(Some(value)) => Frame::Bulk(value),
            Ok(None) => Frame::Null,
            Err(e) => store_error(e),
        }
    }
}
