//! Proxy mode's reply ordering: requests forwarded to their key's owner, and the answers of
//! the same pipeline held back behind them so the client gets its replies in request order.

use super::Outcome;
use crate::cluster::proxy::Answered;
use crate::cluster::Redirect;
use crate::cmd::Command;
use crate::connection::Connection;
use crate::frame::{Frame, Protocol};
use crate::instance::{Instance, Session};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use store::upstream::wire::ReplyLimits;

/// Answers held back, in request order, behind a request of the same pipeline that is still
/// at its owner (proxy mode): the pipeline goes on to the owner as a pipeline and the client
/// still gets its replies in the order it asked. Always empty outside proxy mode.
#[derive(Default)]
pub(super) struct Held(VecDeque<(Outcome, Protocol)>);

impl Held {
    /// Requests one client may have at other nodes at once.
    const MAX: usize = 256;

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn is_full(&self) -> bool {
        self.0.len() >= Self::MAX
    }

    /// `protocol` is the one the reply is encoded in, as it was when the request ran.
    pub(super) fn push(&mut self, outcome: Outcome, protocol: Protocol) {
        self.0.push_back((outcome, protocol));
    }

    /// Queues every held answer on `connection`, waiting for the owners' replies in order.
    pub(super) async fn release(
        &mut self,
        instance: &Instance,
        session: &mut Session,
        connection: &mut Connection,
    ) {
        while let Some((outcome, protocol)) = self.0.pop_front() {
            let outcome = match outcome {
                Outcome::Sent(sent) => {
                    let node = instance
                        .cluster
                        .as_deref()
                        .expect("forwarding in a cluster");
                    let (owner, first) = node.proxy.answer_from(sent).await;
                    if first.reply.is_err() {
                        // The owner may be dead (`cluster::suspect`).
                        node.unreachable(&owner);
                    }
                    relay(instance, session, first).await
                }
                outcome => outcome,
            };
            match outcome {
                Outcome::Reply(reply) => connection.queue(&reply, protocol),
                Outcome::Relayed(raw) => connection.queue_raw(&raw),
                Outcome::Deferred | Outcome::Forward(_) | Outcome::Sent(_) => {
                    unreachable!("a relayed answer is final")
                }
            }
        }
    }
}

/// Sends the request to the slot's owner; its reply is read when the pipeline's replies are
/// written (see [`Held`]). Waits while the owner's link is full: the client is not read
/// meanwhile.
pub(super) async fn submit(
    instance: &Instance,
    session: &Session,
    args: &[Bytes],
    addr: Arc<str>,
) -> Outcome {
    let node = instance
        .cluster
        .as_deref()
        .expect("forwarding only in a cluster");
    match node
        .proxy
        .submit(addr, args.to_vec(), session.id, limits(instance))
        .await
    {
        Ok(sent) => Outcome::Sent(sent),
        Err(refused) => {
            node.unreachable(&refused.addr);
            Outcome::Reply(Frame::err(refused.answered.reply.err().unwrap_or_default()))
        }
    }
}

/// The bounds on an owner's reply: those on this node's own replies.
fn limits(instance: &Instance) -> ReplyLimits {
    ReplyLimits {
        max_bulk_len: instance.max_bulk_len(),
        max_reply_len: instance.output_limit,
    }
}

/// Turns the owner's reply into the client's. An owner that answers `-MOVED` (this node's
/// map was behind, e.g. during a migration) is asked again once the map here moved on.
async fn relay(instance: &Instance, session: &mut Session, mut answered: Answered) -> Outcome {
    let node = instance
        .cluster
        .as_deref()
        .expect("forwarding only in a cluster");
    let mut addr;
    // Backing off to ~1.4 s in all: long enough for two nodes' maps to agree again after a
    // hand-over, when a forwarded request came back as `-MOVED` (it is never forwarded twice).
    for attempt in 0..16u32 {
        let raw = match answered.reply {
            Ok(raw) => raw,
            Err(e) => return Outcome::Reply(Frame::err(e)),
        };
        let moved = crate::cluster::proxy::moved_to(&raw).map(Arc::<str>::from);
        if moved.is_none() && !crate::cluster::proxy::is_tryagain(&raw) {
            return Outcome::Relayed(raw);
        }
        let args = answered.args;
        tokio::time::sleep(Duration::from_millis(2u64 << attempt.min(6))).await;
        match crate::cluster::migrate::settle(|| Command::parse_routed(&args, session, instance))
            .await
        {
            Ok((command, guard)) => {
                let reply = command.apply(instance, session).await;
                drop(guard);
                return Outcome::Reply(reply);
            }
            // The owner's word is fresher than this node's map, unless it names this node.
            Err(Redirect::Forward(next)) => {
                addr = moved.filter(|m| **m != *node.addr).unwrap_or(next)
            }
            Err(Redirect::Reply(reply)) => return Outcome::Reply(reply),
            Err(Redirect::Wait) => return Outcome::Relayed(raw),
        }
        answered = node
            .proxy
            .forward(addr, args, session.id, limits(instance))
            .await;
    }
    Outcome::Reply(Frame::Error(
        "TRYAGAIN the key's owner kept changing; retry".into(),
    ))
}
