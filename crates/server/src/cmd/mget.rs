//! MGET key [key ...]: one reply per key, null for missing ones.

use super::store_error;
use crate::frame::Frame;
use crate::instance::Instance;
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct MGet {
    keys: Vec<Bytes>,
}

impl MGet {
    pub fn parse(parse: &mut Parse<'_>) -> Result<MGet, ParseError> {
        Ok(MGet {
            keys: parse.rest().to_vec(),
        })
    }

    pub async fn apply(self, instance: &Instance) -> Frame {
        let mut values = Vec::with_capacity(self.keys.len());
        for key in &self.keys {
            match instance.db.get(key).await {
                Ok(Some(value)) => values.push(Frame::Bulk(value)),
                Ok(None) => values.push(Frame::Null),
                Err(e) => return store_error(e),
            }
        }
        Frame::Array(values)
    }
}
