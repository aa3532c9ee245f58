//! MGET key [key ...]: one reply per key, null for missing ones. The one command whose reply
//! a short request can make huge (the same big key named thousands of times), so it stops
//! gathering values as soon as the reply would pass `--client-output-limit`, or the room left
//! in `--maxmemory-clients` (counted while it gathers, so many large MGETs at once cannot
//! pass it together).

use super::store_error;
use super::{CommandSpec, Declared, Flags, Keys};
use crate::db::Transaction;
use crate::frame::{bulk_len, Frame};
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct MGet {
    keys: Vec<Bytes>,
}

impl Declared<'_> for MGet {
    const SPEC: CommandSpec = CommandSpec {
        name: "mget",
        arity: -2,
        flags: Flags::READONLY.with(Flags::FAST),
        keys: Keys::ALL,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<MGet, ParseError> {
        Ok(MGet {
            keys: parse.rest().to_vec(),
        })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        let mut gathered = crate::client_memory::Account::new(instance.client_memory.clone());
        // Each key's reply is at least a null (5 bytes): the array is counted from the start.
        let mut size = bulk_len(self.keys.len() as u64) + 5 * self.keys.len() as u64;
        if let Err(error) = instance.grow_reply(&mut gathered, size) {
            return error;
        }
        let mut values = Vec::with_capacity(self.keys.len());
        for key in &self.keys {
            match instance.db.get_value(key).await {
                Ok(Some(value)) => {
                    size += bulk_len(value.len() as u64);
                    if let Err(error) = instance.grow_reply(&mut gathered, size) {
                        return error;
                    }
                    values.push(Frame::from(value));
                }
                Ok(None) => values.push(Frame::Null),
                Err(e) => return store_error(e),
            }
        }
        Frame::Array(values)
    }

    /// Inside a transaction: the reply's size is checked once built (`Command::run_in`).
    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        let mut values = Vec::with_capacity(self.keys.len());
        for key in &self.keys {
            match txn.get(key).await {
                Ok(value) => values.push(value.map_or(Frame::Null, Frame::Bulk)),
                Err(e) => return super::txn_error(e),
            }
        }
        Frame::Array(values)
    }
}
