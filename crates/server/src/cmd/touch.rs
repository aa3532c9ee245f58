//! TOUCH key [key ...]: an access to each key that exists, as a GET without the reply (a key
//! only in the store is read into the cache); replies how many exist.

use super::{store_error, CommandSpec, Declared, Flags, Keys};
use crate::db::Transaction;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct Touch {
    keys: Vec<Bytes>,
}

impl Declared<'_> for Touch {
    const SPEC: CommandSpec = CommandSpec {
        name: "touch",
        arity: -2,
        flags: Flags::READONLY.with(Flags::FAST),
        keys: Keys::ALL,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Touch, ParseError> {
        Ok(Touch {
            keys: parse.rest().to_vec(),
        })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        match instance.db.touch(&self.keys).await {
            Ok(n) => Frame::Integer(n as i64),
            Err(e) => store_error(e),
        }
    }

    /// Inside a transaction (EXEC, a function): the keys that exist as it sees them.
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
