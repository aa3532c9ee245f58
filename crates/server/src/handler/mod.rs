//! One client connection, from its first byte to its close: [`Handler::run`] reads requests,
//! parses and routes them, applies them (or defers a plain write into the pipeline's
//! [`WriteRun`], or forwards it to its owner in proxy mode), holds replies until the writes
//! they acknowledge or could reveal are committed, and sends them.
//!
//! The steps have one place each, where the server-wide hooks belong: reading and the
//! connection's buffers in [`Handler::run`]; what a request does in [`Handler::dispatch`];
//! durability in [`Handler::send`]. Write batching is in `write_run`, proxy reply order in
//! `proxy`. What a command writes or reveals comes from its declaration (`cmd::Declared`).

mod proxy;
mod write_run;

use crate::cluster::Redirect;
use crate::cmd::auth::limits_for;
use crate::cmd::Command;
use crate::connection::{Connection, FLUSH_AT, QUERY_BUFFER_LIMIT};
use crate::db::READ_AHEAD;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::metrics::Stats;
use crate::stamp::Stamp;
use bytes::Bytes;
use proxy::Held;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use store::Storage;
use tokio::net::TcpStream;
use tokio::sync::watch;
use write_run::WriteRun;

/// Replies a proxy link's connection (`CLUSTER FORWARDED`) queues before it writes them
/// without waiting for the rest of the read. One read there carries many clients' requests,
/// and the proxying node hands each client its replies as they come: written at the end of
/// the read, no client could send its next requests while this node ran the others'.
const EARLY_REPLIES: usize = 128;

/// A request's answer: a reply to encode, one relayed as is from the key's owner, none yet
/// (a plain write deferred into the connection's [`WriteRun`], or a request added to the unit
/// for its owner in [`Held`]), or (proxy mode) the owner to ask, and then a unit on its way
/// there.
enum Outcome {
    Reply(Frame),
    Relayed(Bytes),
    Deferred,
    Forward(Arc<str>),
    Sent(crate::cluster::proxy::Sent),
}

/// Whether the connection goes on after a step.
enum Next {
    Continue,
    Close,
}

/// The state of one connection.
pub struct Handler<'i> {
    instance: &'i Instance,
    connection: Connection,
    session: Session,
    /// The current request's arguments (reused: no allocation per request).
    args: Vec<Bytes>,
    /// Some queued reply may reveal stored data: it waits for durability (see `send`).
    revealing: bool,
    held: Held,
    run: WriteRun,
    /// When the command recorded last ended, kept only while the connection has done nothing
    /// since but read the next request: that request's command then starts there, and a
    /// pipeline's commands read the clock once each instead of twice. Anything else between
    /// (a read, a flush, a forward, deferred writes) clears it.
    chained: Option<Stamp>,
}

/// Keeps the connected-clients gauge right however the connection ends.
struct ClientGauge<'a>(&'a Stats);

impl Drop for ClientGauge<'_> {
    fn drop(&mut self) {
        self.0.connected_clients.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves one accepted client until it leaves, breaks the protocol or `stop` turns true.
pub async fn serve(
    instance: &Instance,
    socket: TcpStream,
    peer: SocketAddr,
    stop: watch::Receiver<bool>,
) {
    let stats = instance.db.stats();
    Stats::bump(&stats.connected_clients);
    let _gauge = ClientGauge(stats);
    let _ = socket.set_nodelay(true);
    let mut session = Session::new(
        instance.next_client_id(),
        instance.requires_auth(),
        Some(peer),
    );
    let (slot, _listed) = instance.clients.register(session.id, Some(peer));
    session.slot = Some(slot);
    let connection = Connection::new(
        socket,
        limits_for(instance, &session),
        instance.client_memory.clone(),
    );
    let held = Held::new(connection.raw_fd());
    let mut handler = Handler {
        instance,
        connection,
        session,
        args: Vec::new(),
        revealing: false,
        held,
        run: WriteRun::default(),
        chained: None,
    };
    handler.run(stop).await;
}

impl Drop for Handler<'_> {
    /// Before the socket closes (with the connection, after this), so no link writes to it
    /// (see `cluster::proxy::Direct`).
    fn drop(&mut self) {
        self.held.close();
    }
}

impl Handler<'_> {
    async fn run(&mut self, stop: watch::Receiver<bool>) {
        let query_limit = QUERY_BUFFER_LIMIT.max(self.instance.max_bulk_len().saturating_mul(2));
        // One wait for shutdown for the connection's life: a fresh `changed()` per read would
        // register with the channel and deregister again for every request.
        let mut stop_wait = stop.clone();
        let stopped = stop_wait.changed();
        tokio::pin!(stopped);
        loop {
            if let Next::Close = self.run_buffered().await {
                return;
            }
            self.run.write(self.instance, &self.session).await;
            self.run
                .queue_written(&mut self.connection, self.session.protocol);
            if !self.send(true).await {
                return;
            }
            if self.connection.buffered() as u64 > query_limit {
                self.connection.queue(
                    &Frame::err("Protocol error: query buffer limit exceeded"),
                    self.session.protocol,
                );
                let _ = self.connection.flush().await;
                return;
            }
            if let Err(exceeded) = self.connection.count_next_read() {
                self.refuse_client(exceeded).await;
                return;
            }
            if *stop.borrow() {
                return;
            }
            tokio::select! {
                more = self.connection.read_more() => match more {
                    Ok(true) => {}
                    Ok(false) | Err(_) => return,
                },
                // The link could not write a unit's replies to the client: write them here.
                _ = self.held.handed_back() => {}
                _ = &mut stopped => return,
            }
        }
    }

    /// Closes a connection whose buffers would take the clients' memory past
    /// `--maxmemory-clients`, telling the client and the operator why.
    #[cold]
    async fn refuse_client(&mut self, exceeded: crate::client_memory::Exceeded) {
        // The link must not write behind the farewell.
        self.held.close();
        let session = &self.session;
        store::log_line!(
            "mantle: closing client {} ({}): {exceeded}",
            session.id,
            session.peer.map(|p| p.to_string()).unwrap_or_default()
        );
        let error = Frame::err(format!("{exceeded}; closing the connection"));
        self.connection.close_with(&error, session.protocol).await;
    }

    /// Runs every complete request buffered, queueing their replies (sent early only when
    /// the output or the held replies grow large).
    async fn run_buffered(&mut self) -> Next {
        let stats = self.instance.db.stats();
        // A unit the link wrote to the client while its task read on holds nothing back.
        self.held.reap();
        // Requests left whose keys were read ahead.
        let mut ahead = 0;
        self.chained = None;
        loop {
            if ahead == 0 {
                ahead = self.read_ahead();
                if ahead > 1 {
                    self.chained = None;
                }
            }
            ahead = ahead.saturating_sub(1);
            self.connection
                .set_limits(limits_for(self.instance, &self.session));
            let outcome = match self.connection.next_request(&mut self.args) {
                Ok(true) => {
                    Stats::bump(&stats.commands_processed);
                    match self.dispatch().await {
                        // Joins the unit for `addr`, answered when the replies are sent.
                        Outcome::Forward(addr) => {
                            let (instance, session) = (self.instance, &self.session);
                            let output_empty = self.connection.pending_output() == 0;
                            self.held
                                .forward(instance, session, &self.args, addr, output_empty)
                                .await;
                            Outcome::Deferred
                        }
                        outcome => outcome,
                    }
                }
                Ok(false) => return Next::Continue,
                Err(error) => {
                    Stats::bump(&stats.protocol_errors);
                    self.run.write(self.instance, &self.session).await;
                    self.run
                        .queue_written(&mut self.connection, self.session.protocol);
                    let output_empty = self.connection.pending_output() == 0;
                    self.held
                        .seal(self.instance, &self.session, output_empty)
                        .await;
                    self.held
                        .push(Outcome::Reply(Frame::err(&error)), self.session.protocol);
                    let _ = self.send(false).await;
                    return Next::Close;
                }
            };
            // The deferred writes that ran before this request answer first. (Never behind
            // held replies: write runs are made outside a cluster, held replies in proxy mode.)
            self.run
                .queue_written(&mut self.connection, self.session.protocol);
            // Forwarded requests before this answer are submitted before it is queued or held.
            if self.held.is_building() && !matches!(outcome, Outcome::Deferred) {
                let output_empty = self.connection.pending_output() == 0;
                self.held
                    .seal(self.instance, &self.session, output_empty)
                    .await;
                self.chained = None;
            }
            match outcome {
                Outcome::Reply(reply) if self.held.is_empty() => {
                    self.connection.queue(&reply, self.session.protocol)
                }
                Outcome::Relayed(raw) if self.held.is_empty() => self.connection.queue_raw(&raw),
                Outcome::Deferred => {}
                outcome => self.held.push(outcome, self.session.protocol),
            }
            if let Err(exceeded) = self.connection.count_buffers() {
                self.refuse_client(exceeded).await;
                return Next::Close;
            }
            if self.session.closing {
                let _ = self.send(false).await;
                return Next::Close;
            }
            if self.session.forwarded && self.connection.queued() >= EARLY_REPLIES {
                self.write_early();
                self.chained = None;
            }
            if self.connection.pending_output() >= FLUSH_AT || self.held.is_full() {
                self.chained = None;
                if !self.send(false).await {
                    return Next::Close;
                }
            }
        }
    }

    /// Writes the replies queued so far without waiting for the socket, unless [`Handler::send`]
    /// would first have to commit (a write they acknowledge, or one of others they could
    /// show) or a forwarded answer is held before them: then they wait for the read's end.
    fn write_early(&mut self) {
        if self.session.uncommitted
            || !self.held.is_empty()
            || (self.revealing && self.instance.db.store().has_undurable_writes())
        {
            return;
        }
        self.revealing = false;
        self.connection.write_early();
    }

    /// Starts loading the cache entries of the next buffered requests' keys when there are
    /// several (a pipeline, or a proxying node's unit): their lookups then find them cached
    /// instead of each waiting for its own misses (see `Db::prefetch`). Returns how many
    /// requests it read ahead for.
    fn read_ahead(&self) -> usize {
        let mut keys: [&[u8]; READ_AHEAD] = [&[]; READ_AHEAD];
        let found = self.connection.peek_keys(&mut keys);
        if found > 1 {
            self.instance.db.prefetch(&keys[..found]);
            if let Some(cluster) = &self.instance.cluster {
                cluster.prefetch_routes(&keys[..found]);
            }
        }
        found
    }

    /// Runs one request: here, or (cluster) after its slot's hand-over pause, or not at all (a
    /// redirection, or in proxy mode the owner to forward it to), or later (a plain write
    /// joins the connection's write run). Anything but a deferred write first writes the run,
    /// so it sees those writes and its reply follows theirs.
    async fn dispatch(&mut self) -> Outcome {
        let (instance, args) = (self.instance, &self.args[..]);
        let session = &mut self.session;
        // A request that runs no command here breaks the chain.
        let mut chained = self.chained.take();
        if session.multi.is_some() && !crate::cmd::multi::controls_transaction(args) {
            // Queued, not run: the writes deferred before it still answer first.
            self.run.write(instance, session).await;
            return Outcome::Reply(crate::cmd::multi::queue(args, session, instance));
        }
        let parsed = match Command::parse_routed(args, session, instance) {
            Err(Redirect::Wait) => {
                // The hand-over's pause is not the command's time.
                chained = None;
                crate::cluster::migrate::settle(|| Command::parse_routed(args, session, instance))
                    .await
            }
            other => other,
        };
        let parsed = match parsed {
            // Only outside a cluster: there a write's slot may be handed over between requests.
            Ok((command, None)) if instance.cluster.is_none() => match command.into_plain_write() {
                Ok(pair) => {
                    if self.run.is_full() {
                        self.run.write(instance, session).await;
                    }
                    session.uncommitted = true;
                    self.run.push(pair);
                    return Outcome::Deferred;
                }
                Err(command) => Ok((command, None)),
            },
            other => other,
        };
        let wrote = self.run.write(instance, session).await;
        match parsed {
            Ok((command, guard)) => {
                self.revealing |= command.spec().reveals_data;
                let started = match chained {
                    Some(stamp) if !wrote => stamp,
                    _ => Stamp::now(),
                };
                let row = command.row();
                let reply = command.apply(instance, session).await;
                self.chained = Some(instance.ran(row, started, args, session));
                drop(guard);
                Outcome::Reply(reply)
            }
            Err(Redirect::Reply(reply)) => Outcome::Reply(reply),
            Err(Redirect::Wait) => Outcome::Reply(Frame::Error(
                "TRYAGAIN the slot is being handed over to another node".into(),
            )),
            Err(Redirect::Forward(addr)) => Outcome::Forward(addr),
        }
    }

    /// Writes the queued replies, first committing the writes they acknowledge and (when a
    /// reply may reveal data) any write of others they could have seen. Returns false when
    /// the client is gone. If the store cannot commit, every queued reply is replaced by the
    /// store's error: no write that may be lost is acknowledged or shown, and the client keeps
    /// one reply per request. `idle`: the client is read next (so the last forwarded unit, if
    /// the link writes its replies itself, need not be waited for).
    async fn send(&mut self, idle: bool) -> bool {
        let (instance, session) = (self.instance, &mut self.session);
        self.held
            .release(instance, session, &mut self.connection, idle)
            .await;
        let committed = if session.uncommitted {
            instance.db.commit().await
        } else if self.revealing {
            instance.db.commit_before_reveal().await
        } else {
            Ok(())
        };
        session.uncommitted = false;
        self.revealing = false;
        if let Err(e) = committed {
            let error = Frame::Error(format!("MISCONF store write failed: {e}"));
            for _ in 0..self.connection.discard_queued() {
                self.connection.queue(&error, session.protocol);
            }
        }
        self.connection.flush().await.is_ok()
    }
}
