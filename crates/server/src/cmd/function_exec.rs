//! Where a function's `redis.call`s run: in the calling connection's task, inside the
//! transaction (`db::keyspace`) the caller opened over the function's declared keys before
//! the function started. The functions thread sends each call here (`functions::exec`);
//! this parses it with the command table, refuses what a function may not do, and runs it
//! with [`Command::run_in`], so a plain SET or INCR of another client on a declared key waits
//! until the function's writes are committed as one batch, and never lands between its read
//! and its write.

use super::Command;
use crate::db::Transaction;
use crate::frame::Frame;
use crate::functions::exec::Outcome;
use crate::functions::exec::{CallRequest, Called, FunctionRun, DENIED};
use crate::instance::{Instance, Session};
use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;

/// Serves `run`'s calls inside `txn`, whose keys are the function's declared `keys`, until
/// the function ends; its outcome. A function stopped by its limits or FUNCTION KILL leaves
/// nothing of its writes in `txn` (all or nothing, as the commit is).
pub async fn serve(
    mut run: FunctionRun,
    txn: &mut Transaction<'_>,
    instance: &Instance,
    keys: &[Bytes],
) -> Outcome {
    let before = txn.savepoint();
    // Authenticated: the caller was, to run the function at all.
    let mut session = Session::new(0, false, None);
    let mut wrote = false;
    while let Some(call) = run.next_call().await {
        let CallRequest {
            args,
            read_only,
            reply,
        } = call;
        let answer = one_call(
            &args,
            read_only,
            keys,
            txn,
            instance,
            &mut session,
            &mut wrote,
        )
        .await;
        let _ = reply.send(Called {
            reply: answer,
            wrote,
        });
    }
    let outcome = run.outcome().await;
    if outcome.stopped {
        txn.roll_back(before);
    }
    outcome
}

/// Runs one `redis.call` inside the function's transaction, or refuses it. Boxed: a command
/// run here is itself run by FCALL's `apply_in`, so the future types would nest forever.
fn one_call<'a>(
    args: &'a [Bytes],
    read_only: bool,
    keys: &'a [Bytes],
    txn: &'a mut Transaction<'_>,
    instance: &'a Instance,
    session: &'a mut Session,
    wrote: &'a mut bool,
) -> Pin<Box<dyn Future<Output = Frame> + Send + 'a>> {
    Box::pin(async move {
        let command = match Command::parse(args, session) {
            Ok(command) => command,
            Err(reply) => return reply,
        };
        let spec = command.spec();
        if DENIED.contains(&spec.name) || spec.flags.contains(super::Flags::NOSCRIPT) {
            return Frame::err("This Redis command is not allowed from script");
        }
        if let Some(key) = spec.key_args(args).find(|key| !keys.contains(key)) {
            return Frame::err(format!(
                "Script attempted to access key '{}' that was not declared in KEYS (every key \
             a function touches must be passed as a key argument)",
                super::printable(key, 128)
            ));
        }
        if command.writes() {
            if read_only {
                return Frame::err("Write commands are not allowed from read-only scripts.");
            }
            *wrote = true;
        }
        command.run_in(txn, instance, session).await
    })
}
