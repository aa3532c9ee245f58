//! DEL key [key ...]: from the store and the cache; replies how many existed.

use super::store_error;
use crate::frame::Frame;
use crate::instance::Instance;
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct Del {
    keys: Vec<Bytes>,
}

impl Del {
    pub fn parse(parse: &mut Parse<'_>) -> Result<Del, ParseError> {
        Ok(Del {
            keys: parse.rest().to_vec(),
        })
    }

    pub async fn apply(self, instance: &Instance) -> Frame {
        match instance.db.delete(&self.keys).await {
            Ok(n) => Frame::Integer(n as i64),
            Err(e) => store_error(e),
        }
    }
}
