//! DBSIZE: keys in the store behind the cache (the whole data set, not just what is cached).

use super::{store_error, CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};

pub struct DbSize;

impl Declared<'_> for DbSize {
    const SPEC: CommandSpec = CommandSpec {
        name: "dbsize",
        arity: 1,
        flags: Flags::READONLY.with(Flags::FAST),
        keys: Keys::NONE,
        reveals_data: true,
    };

    fn parse(_: &mut Parse<'_>) -> Result<DbSize, ParseError> {
        Ok(DbSize)
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        match instance.db.dbsize().await {
            Ok(n) => Frame::Integer(n as i64),
            Err(e) => store_error(e),
        }
    }
}
