//! MULTI / EXEC / DISCARD: a connection's transaction. Between MULTI and EXEC the handler
//! hands every request except the transaction's own commands to [`queue`], which checks what
//! Redis checks at queue time (the command exists, its arity, authentication, and in a
//! cluster that this node owns its keys) and answers `+QUEUED`; a refusal there makes EXEC
//! answer `-EXECABORT`. EXEC runs the queue as ONE transaction of the atomic keyspace (see
//! `db::keyspace`) over every key the queued commands declare and the WATCHed ones: no
//! other client sees or changes those keys half-way, the writes reach the store as one batch,
//! and EXEC's reply (it is declared a write) leaves only after that batch is durable. Errors
//! of a queued command while it runs are its entry in EXEC's array; the others still apply,
//! as in Redis.
//!
//! The queue is bounded: [`MAX_QUEUED`] requests and [`MAX_QUEUED_BYTES`] of arguments; the
//! request that would pass either is refused and the transaction discarded at EXEC.

use super::{arity_error, lookup, store_error, unknown_command, Command, CommandSpec, Declared};
use super::{Flags, Keys};
use crate::cluster::Redirect;
use crate::db::Transaction;
use crate::frame::Frame;
use crate::instance::{Instance, Queued, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

/// Most requests one transaction may queue.
pub const MAX_QUEUED: usize = 100_000;
/// Most argument bytes one transaction may queue.
pub const MAX_QUEUED_BYTES: u64 = 128 << 20;

const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";

/// The commands that act on the transaction itself and are never queued (QUIT too, as Redis
/// does).
pub fn controls_transaction(args: &[Bytes]) -> bool {
    let Some(name) = args.first() else {
        return false;
    };
    ["exec", "discard", "multi", "watch", "quit", "reset"]
        .iter()
        .any(|control| name.eq_ignore_ascii_case(control.as_bytes()))
}

/// Queues one request of an open transaction; the reply (`+QUEUED`, or why it was refused,
/// which also dooms the transaction).
pub fn queue(args: &[Bytes], session: &mut Session, instance: &Instance) -> Frame {
    let refusal = refusal(args, session, instance);
    let Some(queued) = session.multi.as_mut() else {
        return Frame::err("no transaction is open");
    };
    if let Some(error) = refusal {
        refuse(queued);
        return error;
    }
    let size: u64 = args.iter().map(|arg| arg.len() as u64).sum();
    if queued.requests.len() >= MAX_QUEUED || queued.bytes + size > MAX_QUEUED_BYTES {
        refuse(queued);
        return Frame::err(format!(
            "a transaction queues at most {MAX_QUEUED} commands and {} MiB of arguments; \
             it will be discarded",
            MAX_QUEUED_BYTES >> 20
        ));
    }
    queued.bytes += size;
    queued.requests.push(args.to_vec());
    Frame::simple("QUEUED")
}

/// Marks the transaction doomed and lets go of what it queued (EXEC will discard it).
fn refuse(queued: &mut Queued) {
    queued.failed = true;
    queued.requests = Vec::new();
    queued.bytes = 0;
}

/// Why a request cannot be queued, checked as Redis checks before queueing.
fn refusal(args: &[Bytes], session: &Session, instance: &Instance) -> Option<Frame> {
    let name = args.first()?;
    let Some(spec) = lookup(name) else {
        return Some(unknown_command(name, &args[1..]));
    };
    if !session.authenticated && !spec.no_auth() {
        return Some(Frame::Error("NOAUTH Authentication required.".into()));
    }
    if !spec.arity_ok(args.len()) {
        return Some(arity_error(spec.name));
    }
    let node = instance.cluster.as_ref()?;
    route_error(
        node.route(super::request_keys(spec, args), session.forwarded)
            .err()?,
    )
}

/// The reply for a transaction whose keys this node cannot serve now.
fn route_error(redirect: Redirect) -> Option<Frame> {
    Some(match redirect {
        Redirect::Reply(reply) => reply,
        Redirect::Wait => {
            Frame::Error("TRYAGAIN the slot is being handed over to another node".into())
        }
        // Proxy mode forwards single requests; a transaction must be sent to its keys' owner.
        Redirect::Forward(owner) => Frame::err(format!(
            "a transaction runs on the node that owns its keys ({owner}): send it there"
        )),
    })
}

pub struct Multi;

impl Declared<'_> for Multi {
    const SPEC: CommandSpec = CommandSpec {
        name: "multi",
        arity: 1,
        flags: Flags::NOSCRIPT
            .with(Flags::LOADING)
            .with(Flags::STALE)
            .with(Flags::FAST),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(_: &mut Parse<'_>) -> Result<Multi, ParseError> {
        Ok(Multi)
    }

    async fn apply(self, _: &Instance, session: &mut Session) -> Frame {
        if session.multi.is_some() {
            return Frame::err("MULTI calls can not be nested");
        }
        session.multi = Some(Queued::default());
        Frame::ok()
    }
}

pub struct Discard;

impl Declared<'_> for Discard {
    const SPEC: CommandSpec = CommandSpec {
        name: "discard",
        arity: 1,
        flags: Flags::NOSCRIPT
            .with(Flags::LOADING)
            .with(Flags::STALE)
            .with(Flags::FAST),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(_: &mut Parse<'_>) -> Result<Discard, ParseError> {
        Ok(Discard)
    }

    async fn apply(self, _: &Instance, session: &mut Session) -> Frame {
        if session.multi.take().is_none() {
            return Frame::err("DISCARD without MULTI");
        }
        session.watched = None;
        Frame::ok()
    }
}

pub struct Exec;

impl Declared<'_> for Exec {
    /// Declared a write: its reply waits for the commit of what the queue wrote.
    const SPEC: CommandSpec = CommandSpec {
        name: "exec",
        arity: 1,
        flags: Flags::WRITE
            .with(Flags::NOSCRIPT)
            .with(Flags::LOADING)
            .with(Flags::STALE),
        keys: Keys::NONE,
        reveals_data: true,
    };

    fn parse(_: &mut Parse<'_>) -> Result<Exec, ParseError> {
        Ok(Exec)
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        let Some(queued) = session.multi.take() else {
            return Frame::err("EXEC without MULTI");
        };
        // EXEC unwatches whatever happens.
        let watched = session.watched.take();
        if queued.failed {
            return Frame::Error(EXECABORT.into());
        }
        let mut keys: Vec<Bytes> = Vec::new();
        let mut calls_function = false;
        for args in &queued.requests {
            if let Some(spec) = lookup(&args[0]) {
                keys.extend(super::request_keys(spec, args).cloned());
                calls_function |= super::calls_function(spec);
            }
        }
        // A function runs inside EXEC's transaction: the engine catches up with the
        // registry before any key is locked.
        if calls_function {
            if let Err(e) = instance.functions.catch_up(false).await {
                return Frame::Error(e);
            }
        }
        // In a cluster every key must be in one slot this node owns, held while it runs.
        let _route = match &instance.cluster {
            None => None,
            Some(node) => match node.route(keys.iter(), session.forwarded) {
                Ok(guard) => guard,
                Err(redirect) => return route_error(redirect).unwrap_or_else(Frame::ok),
            },
        };
        keys.extend(watched.iter().flat_map(|w| w.keys().cloned()));
        let mut txn = instance.db.transaction(&keys).await;
        // Checked with the watched keys locked: none can change between this and the commit.
        if watched.as_ref().is_some_and(|w| w.changed(txn.now_ms())) {
            return Frame::NullArray;
        }
        let mut replies = Vec::with_capacity(queued.requests.len());
        for args in &queued.requests {
            let reply = match Command::parse(args, session) {
                Ok(command) => Box::pin(command.run_in(&mut txn, instance, session)).await,
                Err(error) => error,
            };
            replies.push(reply);
        }
        match txn.commit().await {
            Ok(()) => Frame::Array(replies),
            Err(e) => store_error(e),
        }
    }

    /// EXEC is never queued, so never runs inside another transaction.
    async fn apply_in(self, _: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        Frame::err("EXEC cannot run inside a transaction")
    }
}
