//! EXISTS key [key ...]: how many of the named keys exist (in the cache or the store).

use super::store_error;
use crate::frame::Frame;
use crate::instance::Instance;
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct Exists {
    keys: Vec<Bytes>,
}

impl Exists {
    pub fn parse(parse: &mut Parse<'_>) -> Result<Exists, ParseError> {
        Ok(Exists {
            keys: parse.rest().to_vec(),
        })
    }

    pub async fn apply(self, instance: &Instance) -> Frame {
        match instance.db.exists(&self.keys).await {
            Ok(n) => Frame::Integer(n as i64),
            Err(e) => store_error(e),
        }
    }
}
