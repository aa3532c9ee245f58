//! GET key: from the cache, or read through from the store on a miss.

use super::store_error;
use super::{CommandSpec, Declared, Flags, Keys};

use crate::db::Transaction;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};

/// Borrows its key from the request (no reference-count traffic on the hottest command).
pub struct Get<'a> {
    key: &'a [u8],
}

impl<'a> Declared<'a> for Get<'a> {
    const SPEC: CommandSpec = CommandSpec {
        name: "get",
        arity: 2,
        flags: Flags::READONLY.with(Flags::FAST),
        keys: Keys::ONE,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'a>) -> Result<Get<'a>, ParseError> {
        Ok(Get {
            key: parse.next_slice()?,
        })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        match instance.db.get_value(self.key).await {
            Ok(Some(value)) => Frame::from(value),
            Ok(None) => Frame::Null,
            Err(e) => store_error(e),
        }
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        match txn.get(self.key).await {
            Ok(value) => value.map_or(Frame::Null, Frame::Bulk),
            Err(e) => super::txn_error(e),
        }
    }
}
