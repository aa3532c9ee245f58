//! DEL key [key ...] and UNLINK key [key ...]: from the store and the cache; replies how many
//! existed. UNLINK is DEL: a value is one string, so there is nothing to free in the
//! background.

use super::store_error;
use super::{CommandSpec, Declared, Flags, Keys};
use crate::db::Transaction;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct Del {
    keys: Vec<Bytes>,
}

pub struct Unlink(Del);

impl Declared<'_> for Del {
    const SPEC: CommandSpec = CommandSpec {
        name: "del",
        arity: -2,
        flags: Flags::WRITE,
        keys: Keys::ALL,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Del, ParseError> {
        Ok(Del {
            keys: parse.rest().to_vec(),
        })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        match instance.db.delete(&self.keys).await {
            Ok(n) => Frame::Integer(n as i64),
            Err(e) => store_error(e),
        }
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        let mut removed = 0;
        for key in &self.keys {
            match txn.delete(key).await {
                Ok(existed) => removed += i64::from(existed),
                Err(e) => return super::txn_error(e),
            }
        }
        Frame::Integer(removed)
    }
}

impl Declared<'_> for Unlink {
    const SPEC: CommandSpec = CommandSpec {
        name: "unlink",
        ..Del::SPEC
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Unlink, ParseError> {
        Del::parse(parse).map(Unlink)
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        self.0.apply(instance, session).await
    }
}
