//! EXISTS key [key ...]: how many of the named keys exist (in the cache or the store).

use super::store_error;
use super::{CommandSpec, Declared, Flags, Keys};
use crate::db::Transaction;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct Exists {
    keys: Vec<Bytes>,
}

impl Declared<'_> for Exists {
    const SPEC: CommandSpec = CommandSpec {
        name: "exists",
        arity: -2,
        flags: Flags::READONLY.with(Flags::FAST),
        keys: Keys::ALL,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Exists, ParseError> {
        Ok(Exists {
            keys: parse.rest().to_vec(),
        })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        match instance.db.exists(&self.keys).await {
            Ok(n) => Frame::Integer(n as i64),
            Err(e) => store_error(e),
        }
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        let mut found = 0;
        for key in &self.keys {
            match txn.exists(key).await {
                Ok(exists) => found += i64::from(exists),
                Err(e) => return super::txn_error(e),
            }
        }
        Frame::Integer(found)
    }
}
