//! MEMORY USAGE key [SAMPLES n] / MEMORY HELP: what the cache charges for a key — its bytes,
//! its value's and the per-object metadata (`cache_object_overhead_bytes` in INFO) — whether the key
//! is cached now or only stored; nil for a key that does not exist. SAMPLES is accepted and
//! ignored (a value is one string: nothing to sample).

use super::{store_error, CommandSpec, Declared, Flags, Keys};
use crate::db::Transaction;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub enum Memory {
    Usage(Bytes),
    Help,
}

const HELP: &[&str] = &[
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "USAGE <key> [SAMPLES <count>]",
    "    Bytes the cache charges for <key>: key, value and per-object metadata.",
    "HELP",
    "    Prints this help.",
];

impl Declared<'_> for Memory {
    const SPEC: CommandSpec = CommandSpec {
        name: "memory",
        arity: -2,
        flags: Flags::READONLY,
        // MEMORY USAGE's key, so a cluster routes it to the key's owner.
        keys: Keys::new(2, 2, 1),
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Memory, ParseError> {
        let sub = parse.next_bytes()?;
        match sub.to_ascii_lowercase().as_slice() {
            b"usage" => {
                let key = parse.next_bytes()?;
                if parse.remaining() > 0 {
                    let option = parse.next_bytes()?;
                    if !option.eq_ignore_ascii_case(b"samples") {
                        return Err(ParseError::Syntax);
                    }
                    parse.next_int()?;
                    parse.finish().map_err(|_| ParseError::Syntax)?;
                }
                Ok(Memory::Usage(key))
            }
            b"help" => {
                parse.finish()?;
                Ok(Memory::Help)
            }
            _ => Err(ParseError::Other(format!(
                "unknown subcommand '{}'. Try MEMORY HELP.",
                super::printable(&sub, 64)
            ))),
        }
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        match self {
            Memory::Usage(key) => match instance.db.memory_usage(&key).await {
                Ok(Some(bytes)) => Frame::Integer(bytes as i64),
                Ok(None) => Frame::Null,
                Err(e) => store_error(e),
            },
            Memory::Help => super::help_reply(HELP),
        }
    }

    /// MEMORY USAGE reads what is committed (it takes no lock), so it may run inside a
    /// transaction as it does outside.
    async fn apply_in(
        self,
        _: &mut Transaction<'_>,
        instance: &Instance,
        session: &mut Session,
    ) -> Frame {
        self.apply(instance, session).await
    }
}
