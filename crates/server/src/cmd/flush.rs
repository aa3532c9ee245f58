//! FLUSHDB / FLUSHALL [ASYNC|SYNC]: delete every key of this node, from the store and the
//! cache (one database, so the two are the same). Refused unless the server was started with
//! `--enable-flush`: one stray command would otherwise empty the store behind the cache,
//! which, unlike Redis's memory, is meant to outlive everything in front of it. In a cluster
//! it deletes this node's keys only. ASYNC is accepted and runs as SYNC: the reply comes
//! once the deletion is durable.

use super::{store_error, CommandSpec, Declared, Flags, Keys};
use crate::db::Transaction;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};

pub struct FlushDb;
pub struct FlushAll;

const fn spec(name: &'static str) -> CommandSpec {
    CommandSpec {
        name,
        arity: -1,
        flags: Flags::WRITE.with(Flags::NOSCRIPT),
        keys: Keys::NONE,
        reveals_data: false,
    }
}

fn parse_mode(parse: &mut Parse<'_>) -> Result<(), ParseError> {
    if let Some(mode) = parse.next_optional() {
        if !mode.eq_ignore_ascii_case(b"async") && !mode.eq_ignore_ascii_case(b"sync") {
            return Err(ParseError::Syntax);
        }
    }
    parse.finish().map_err(|_| ParseError::Syntax)
}

async fn flush(instance: &Instance) -> Frame {
    if !instance.config.enable_flush {
        return Frame::err(
            "FLUSHDB and FLUSHALL are disabled: they delete every key from the store; start \
             the server with --enable-flush to allow them",
        );
    }
    match instance.db.flush_all().await {
        Ok(_) => Frame::ok(),
        Err(e) => store_error(e),
    }
}

fn refused_in_transaction(name: &str) -> Frame {
    Frame::err(format!(
        "{} cannot run inside MULTI/EXEC: send it on its own",
        name.to_ascii_uppercase()
    ))
}

impl Declared<'_> for FlushDb {
    const SPEC: CommandSpec = spec("flushdb");

    fn parse(parse: &mut Parse<'_>) -> Result<FlushDb, ParseError> {
        parse_mode(parse).map(|()| FlushDb)
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        flush(instance).await
    }

    /// Refused inside EXEC: a flush holds every key, and the transaction already holds some
    /// (it would wait for itself).
    async fn apply_in(self, _: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        refused_in_transaction(Self::SPEC.name)
    }
}

impl Declared<'_> for FlushAll {
    const SPEC: CommandSpec = spec("flushall");

    fn parse(parse: &mut Parse<'_>) -> Result<FlushAll, ParseError> {
        parse_mode(parse).map(|()| FlushAll)
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        flush(instance).await
    }

    /// Refused inside EXEC: a flush holds every key, and the transaction already holds some
    /// (it would wait for itself).
    async fn apply_in(self, _: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        refused_in_transaction(Self::SPEC.name)
    }
}
