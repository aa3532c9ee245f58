//! MSET key value [key value ...]: written to the store in one atomic batch.

use super::store_error;
use crate::frame::Frame;
use crate::instance::Instance;
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct MSet {
    pairs: Vec<(Bytes, Bytes)>,
}

impl MSet {
    pub fn parse(parse: &mut Parse<'_>) -> Result<MSet, ParseError> {
        let rest = parse.rest();
        if rest.is_empty() || rest.len() % 2 == 1 {
            return Err(ParseError::Arity);
        }
        Ok(MSet {
            pairs: rest
                .chunks_exact(2)
                .map(|pair| (pair[0].clone(), pair[1].clone()))
                .collect(),
        })
    }

    pub async fn apply(self, instance: &Instance) -> Frame {
        match instance.db.set_many(&self.pairs).await {
            Ok(()) => Frame::ok(),
            Err(e) => store_error(e),
        }
    }
}
