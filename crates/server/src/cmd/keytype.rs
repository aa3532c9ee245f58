//! TYPE key: `string` for a key that exists (every value Mantle stores is a string), `none`
//! otherwise. Not an access for the eviction algorithm.

use super::{store_error, CommandSpec, Declared, Flags, Keys};
use crate::db::Transaction;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct KeyType {
    key: Bytes,
}

impl Declared<'_> for KeyType {
    const SPEC: CommandSpec = CommandSpec {
        name: "type",
        arity: 2,
        flags: Flags::READONLY.with(Flags::FAST),
        keys: Keys::ONE,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<KeyType, ParseError> {
        Ok(KeyType {
            key: parse.next_bytes()?,
        })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        match instance.db.exists(std::slice::from_ref(&self.key)).await {
            Ok(0) => Frame::simple("none"),
            Ok(_) => Frame::simple("string"),
            Err(e) => store_error(e),
        }
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        match txn.exists(&self.key).await {
            Ok(false) => Frame::simple("none"),
            Ok(true) => Frame::simple("string"),
            Err(e) => super::txn_error(e),
        }
    }
}
