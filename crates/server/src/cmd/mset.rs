//! MSET key value [key value ...]: written to the store in one atomic batch.

use super::store_error;
use super::{CommandSpec, Declared, Flags, Keys};
use crate::db::Transaction;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct MSet {
    pairs: Vec<(Bytes, Bytes)>,
}

impl Declared<'_> for MSet {
    const SPEC: CommandSpec = CommandSpec {
        name: "mset",
        arity: -3,
        flags: Flags::WRITE.with(Flags::DENYOOM),
        keys: Keys::new(1, -1, 2),
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<MSet, ParseError> {
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

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        match instance.db.set_many(&self.pairs).await {
            Ok(()) => Frame::ok(),
            Err(e) => store_error(e),
        }
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        for (key, value) in self.pairs {
            if let Err(e) = txn.set(&key, value, 0) {
                return super::txn_error(e);
            }
        }
        Frame::ok()
    }
}
