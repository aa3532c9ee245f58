//! GET key: from the cache, or read through from the store on a miss.

use super::store_error;
use crate::frame::Frame;
use crate::instance::Instance;
use crate::parse::{Parse, ParseError};

/// Borrows its key from the request (no reference-count traffic on the hottest command).
pub struct Get<'a> {
    key: &'a [u8],
}

impl<'a> Get<'a> {
    pub fn parse(parse: &mut Parse<'a>) -> Result<Get<'a>, ParseError> {
        Ok(Get {
            key: parse.next_slice()?,
        })
    }

    pub async fn apply(self, instance: &Instance) -> Frame {
        match instance.db.get(self.key).await {
            Ok(Some(value)) => Frame::Bulk(value),
            Ok(None) => Frame::Null,
            Err(e) => store_error(e),
        }
    }
}
