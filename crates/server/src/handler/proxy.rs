//! Proxy mode's reply ordering: requests forwarded to their key's owner, and the answers of
//! the same pipeline held back behind them so the client gets its replies in request order.
//!
//! Consecutive requests of one read that go to the same owner are forwarded as one unit
//! (`cluster::proxy::Unit`): encoded back to back as they are decoded, submitted when a
//! request that is not theirs comes (a local one, another owner's) or the read's requests
//! run out, and answered with one buffer of replies that is queued on the connection in one
//! go. Only a unit whose answer holds a `-MOVED`, a `-TRYAGAIN` or an error is taken apart
//! and relayed reply by reply.
//!
//! A unit with nothing of the client's before it (no answer held, nothing queued on the
//! connection) goes with the client's socket (`cluster::proxy::Direct`): the link writes its
//! replies there itself, and the client's task, instead of waiting to be woken with them,
//! goes back to reading its client. It waits for the unit only when it has something to
//! write after it, or when the link hands the unit back.

use super::Outcome;
use crate::cluster::proxy::{Direct, Single, Unit};
use crate::cluster::Redirect;
use crate::cmd::Command;
use crate::connection::Connection;
use crate::frame::{Frame, Protocol};
use crate::instance::{Instance, Session};
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;
use store::upstream::wire::{self, ReplyLimits};

/// Answers held back, in request order, behind a request of the same pipeline that is still
/// at its owner (proxy mode): the pipeline goes on to the owner as a pipeline and the client
/// still gets its replies in the order it asked. Always empty outside proxy mode.
pub(super) struct Held {
    answers: VecDeque<(Outcome, Protocol)>,
    /// Requests in `answers` (a unit counts as many as it carries) and in `building`.
    requests: usize,
    /// The unit being built: its requests are the bytes of `encoded`.
    building: Option<Building>,
    /// Encoded requests, split off as each unit is submitted; one allocation serves many.
    encoded: BytesMut,
    /// The client's socket, for the link to write replies to.
    socket: RawFd,
    /// Made for the connection's first unit that may go with its socket.
    direct: Option<Arc<Direct>>,
}

struct Building {
    addr: Arc<str>,
    count: usize,
    protocol: Protocol,
}

/// A unit is submitted once its requests take this much (later ones start another), and a
/// request at least this large does not leave its buffer behind.
const ENCODE_CHUNK: usize = 16 * 1024;
/// Free space the encoding buffer is given when it runs short: small, because it is held
/// per client connection and not counted in the clients' memory.
const ENCODE_RESERVE: usize = 2048;

impl Held {
    /// Requests one client may have at other nodes at once (also the most one unit carries).
    const MAX: usize = 256;

    /// Held answers of the connection on `socket`, which must stay open until
    /// [`Held::close`].
    pub(super) fn new(socket: RawFd) -> Held {
        Held {
            answers: VecDeque::new(),
            requests: 0,
            building: None,
            encoded: BytesMut::new(),
            socket,
            direct: None,
        }
    }

    /// The connection is closing: the link writes nothing more to its socket.
    pub(super) fn close(&mut self) {
        if let Some(direct) = &self.direct {
            direct.close();
        }
    }

    /// Drops the first answer if it is a unit the link wrote to the client already.
    pub(super) fn reap(&mut self) {
        if let Some((Outcome::Sent(sent), _)) = self.answers.front() {
            if sent.direct().is_some_and(|d| d.delivered()) {
                self.requests -= sent.count();
                self.answers.pop_front();
            }
        }
    }

    /// Waits until the link hands back a unit it was to write to the client itself (the
    /// client's task then writes its replies); never, when there is none.
    pub(super) async fn handed_back(&self) {
        match self.answers.front() {
            Some((Outcome::Sent(sent), _)) if sent.direct().is_some() => {
                sent.direct().expect("checked").handed_back().await
            }
            _ => std::future::pending().await,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.answers.is_empty() && self.building.is_none()
    }

    pub(super) fn is_full(&self) -> bool {
        self.requests >= Self::MAX
    }

    /// Whether forwarded requests wait to be submitted: [`Held::seal`] comes before any
    /// other answer is queued or held.
    #[inline]
    pub(super) fn is_building(&self) -> bool {
        self.building.is_some()
    }

    /// `protocol` is the one the reply is encoded in, as it was when the request ran.
    pub(super) fn push(&mut self, outcome: Outcome, protocol: Protocol) {
        debug_assert!(self.building.is_none(), "sealed before a later answer");
        self.answers.push_back((outcome, protocol));
        self.requests += 1;
    }

    /// Adds the request `args` for `addr` to the unit being built, first submitting that unit
    /// if it is for another owner or full. `output_empty`: nothing is queued on the
    /// connection.
    pub(super) async fn forward(
        &mut self,
        instance: &Instance,
        session: &Session,
        args: &[Bytes],
        addr: Arc<str>,
        output_empty: bool,
    ) {
        if let Some(building) = &self.building {
            let same = Arc::ptr_eq(&building.addr, &addr) || *building.addr == *addr;
            if !same || building.count >= Self::MAX || self.encoded.len() >= ENCODE_CHUNK {
                self.seal(instance, session, output_empty).await;
            }
        }
        let building = self.building.get_or_insert(Building {
            addr,
            count: 0,
            protocol: session.protocol,
        });
        if self.encoded.capacity() - self.encoded.len() < ENCODE_RESERVE / 4 {
            self.encoded.reserve(ENCODE_RESERVE);
        }
        wire::encode(&mut self.encoded, args);
        building.count += 1;
        self.requests += 1;
    }

    /// Submits the unit being built to its owner; its replies are read when the pipeline's
    /// replies are written. Waits while the owner's link is full: the client is not read
    /// meanwhile. `output_empty`: nothing is queued on the connection (then, with no answer
    /// held either, the link may write the unit's replies to the client itself).
    pub(super) async fn seal(
        &mut self,
        instance: &Instance,
        session: &Session,
        output_empty: bool,
    ) {
        let Some(building) = self.building.take() else {
            return;
        };
        self.reap();
        let direct = if output_empty && self.answers.is_empty() {
            let socket = self.socket;
            Some(&*self.direct.get_or_insert_with(|| Direct::new(socket)))
        } else {
            None
        };
        let requests = self.encoded.split().freeze();
        if requests.len() >= ENCODE_CHUNK {
            // Do not keep a large request's buffer for the rest of the connection.
            self.encoded = BytesMut::new();
        }
        let node = instance
            .cluster
            .as_deref()
            .expect("forwarding only in a cluster");
        let unit = Unit {
            requests,
            count: building.count,
        };
        // The unit's requests were counted as they were added.
        self.requests -= building.count;
        match node
            .proxy
            .submit_to(building.addr, unit, session.id, limits(instance), direct)
            .await
        {
            Ok(sent) => {
                self.answers
                    .push_back((Outcome::Sent(sent), building.protocol));
                self.requests += building.count;
            }
            Err(refused) => {
                node.unreachable(&refused.addr);
                for _ in 0..building.count {
                    self.push(
                        Outcome::Reply(Frame::err(&refused.error)),
                        building.protocol,
                    );
                }
            }
        }
    }

    /// Queues every held answer on `connection`, waiting for the owners' replies in order.
    /// With `idle` (the client's task goes on to read its client next), a unit the link is
    /// writing to the client itself is left held when nothing is behind it: nobody waits
    /// for it (see [`Held::handed_back`]).
    pub(super) async fn release(
        &mut self,
        instance: &Instance,
        session: &mut Session,
        connection: &mut Connection,
        idle: bool,
    ) {
        let output_empty = connection.pending_output() == 0;
        self.seal(instance, session, output_empty).await;
        while let Some((outcome, protocol)) = self.answers.pop_front() {
            let sent = match outcome {
                Outcome::Sent(sent) => sent,
                outcome => {
                    self.requests -= 1;
                    queue(connection, outcome, protocol);
                    continue;
                }
            };
            if idle && self.answers.is_empty() && sent.direct().is_some() {
                let direct = sent.direct().expect("checked");
                if direct.delivered() {
                    self.requests -= sent.count();
                    continue;
                }
                if !direct.is_handed_back() {
                    self.answers.push_front((Outcome::Sent(sent), protocol));
                    return;
                }
            }
            self.requests -= sent.count();
            let node = instance
                .cluster
                .as_deref()
                .expect("forwarding in a cluster");
            let (owner, answered) = node.proxy.answer_from(sent).await;
            if answered.delivered {
                continue;
            }
            if answered.is_plain() {
                connection.queue_relayed(&answered.replies, answered.complete);
                continue;
            }
            if answered.error.is_some() {
                // The owner may be dead (`cluster::suspect`).
                node.unreachable(&owner);
            }
            for single in answered.singles() {
                let outcome = relay(instance, session, single).await;
                queue(connection, outcome, protocol);
            }
        }
    }
}

fn queue(connection: &mut Connection, outcome: Outcome, protocol: Protocol) {
    match outcome {
        Outcome::Reply(reply) => connection.queue(&reply, protocol),
        Outcome::Relayed(raw) => connection.queue_raw(&raw),
        Outcome::Deferred | Outcome::Forward(_) | Outcome::Sent(_) => {
            unreachable!("a relayed answer is final")
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
async fn relay(instance: &Instance, session: &mut Session, mut answered: Single) -> Outcome {
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
