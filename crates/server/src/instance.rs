//! What one running server shares between its connections besides the data: the settings it
//! was started with, those that CONFIG SET can change while it runs, and its identity.

use crate::config::Config;
use crate::db::Db;
use crate::frame::{Frame, Protocol};
use crate::stamp::Stamp;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub struct Instance {
    pub db: Db,
    /// The policy engine's thread and its registry (`POLICY` commands).
    pub live: crate::live::LivePolicy,
    pub config: Config,
    /// The address actually bound (the port is chosen by the OS when asked for port 0).
    pub local_addr: SocketAddr,
    pub started: Instant,
    /// `proto-max-bulk-len`, changeable by CONFIG SET; new requests see the new value.
    pub proto_max_bulk_len: AtomicU64,
    /// `--client-output-limit`, with 0 (unlimited) as `u64::MAX`.
    pub output_limit: u64,
    /// What all clients hold together, and its bound (`--maxmemory-clients`).
    pub client_memory: std::sync::Arc<crate::client_memory::ClientMemory>,
    /// This node's place in a cluster (`--cluster`); `None` for a node on its own.
    pub cluster: Option<std::sync::Arc<crate::cluster::ClusterNode>>,
    /// The connected clients (`CLIENT LIST`).
    pub clients: crate::client_list::ClientList,
    /// `SLOWLOG`.
    pub slowlog: crate::slowlog::SlowLog,
    /// Where each SCAN stands.
    pub scan_cursors: crate::scan_cursors::ScanCursors,
    /// Libraries, scripts and the thread that runs them (`FUNCTION`, `FCALL`, `EVAL`).
    pub functions: crate::functions::Functions,
    /// The shared logs this node sequences (`ZLOG.NEXT`), in memory only; a cluster node's
    /// balancer reads them too.
    pub sequencers: std::sync::Arc<crate::log::sequencer::Sequencers>,
    next_client_id: AtomicU64,
}

pub use crate::metrics::Guards;

impl Instance {
    pub fn new(
        db: Db,
        live: crate::live::LivePolicy,
        config: Config,
        local_addr: SocketAddr,
    ) -> Instance {
        let sequencers = std::sync::Arc::new(crate::log::sequencer::Sequencers::new(
            live.lease.clone(),
            config.policy_limits,
        ));
        Instance {
            db,
            live,
            proto_max_bulk_len: AtomicU64::new(config.proto_max_bulk_len),
            output_limit: match config.client_output_limit {
                0 => u64::MAX,
                limit => limit,
            },
            client_memory: crate::client_memory::ClientMemory::new(config.maxmemory_clients),
            config,
            local_addr,
            started: Instant::now(),
            cluster: None,
            clients: Default::default(),
            slowlog: Default::default(),
            scan_cursors: Default::default(),
            functions: crate::functions::Functions::new(),
            sequencers,
            next_client_id: AtomicU64::new(1),
        }
    }

    /// What the per-client bounds turned away (in the server's metrics).
    pub fn guards(&self) -> &Guards {
        &self.db.metrics().guards
    }

    pub fn next_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn max_bulk_len(&self) -> u64 {
        self.proto_max_bulk_len.load(Ordering::Relaxed)
    }

    /// The error to send instead of `reply` when it is larger than `--client-output-limit`:
    /// one command can then never make the server hold more than that for one client. Checks
    /// by reference and, for a scalar or a bulk string, by one comparison: this runs for every
    /// reply.
    #[inline]
    pub fn oversized(&self, reply: &Frame, protocol: Protocol) -> Option<Frame> {
        // A scalar's wire form is its payload plus at most 32 bytes of framing.
        let payload = match reply {
            Frame::Bulk(data) | Frame::Verbatim(data) | Frame::Simple(data) => data.len(),
            Frame::Value(data) => data.len(),
            Frame::Error(text) => text.len(),
            Frame::Integer(_) | Frame::Pair(..) | Frame::Null | Frame::NullArray => 0,
            Frame::Array(_) | Frame::Map(_) => return self.oversized_aggregate(reply, protocol),
        };
        let size = payload as u64 + 32;
        if size <= self.output_limit && size < crate::client_memory::SMALL_REPLY {
            None
        } else {
            self.oversized_aggregate(reply, protocol)
        }
    }

    #[cold]
    fn oversized_aggregate(&self, reply: &Frame, protocol: Protocol) -> Option<Frame> {
        let size = reply.encoded_len(protocol);
        if size > self.output_limit {
            return Some(self.output_limit_error(size));
        }
        if size >= crate::client_memory::SMALL_REPLY {
            if let Err(exceeded) = self.client_memory.check(size) {
                return Some(client_memory_error(exceeded));
            }
        }
        None
    }

    /// The error for a reply of at least `size` bytes (counted).
    pub fn output_limit_error(&self, size: u64) -> Frame {
        self.guards()
            .output_rejections
            .fetch_add(1, Ordering::Relaxed);
        Frame::err(format!(
            "reply of {size} bytes or more exceeds client-output-limit ({} bytes); ask for \
             fewer keys at a time",
            self.config.client_output_limit
        ))
    }

    /// Takes room for a reply growing to `size` bytes while it is gathered (`MGET`), so
    /// replies built at once by many clients are held to the server-wide bound together.
    pub fn grow_reply(
        &self,
        reply: &mut crate::client_memory::Account,
        size: u64,
    ) -> Result<(), Frame> {
        if size > self.output_limit {
            return Err(self.output_limit_error(size));
        }
        if size >= crate::client_memory::SMALL_REPLY && size > reply.held() {
            // Taken in 1 MiB steps: one atomic operation per MiB gathered, not per value.
            let step = size.div_ceil(1 << 20) << 20;
            reply.hold(step).map_err(client_memory_error)?;
        }
        Ok(())
    }

    pub fn requires_auth(&self) -> bool {
        self.config.requirepass.is_some()
    }

    /// Records a command that ran from `started` until now: its latency, the slow log, the
    /// client's last command. A few atomic operations; the slow log locks only when slow.
    /// Returns now, the next command's start when nothing else runs in between.
    #[inline]
    pub fn ran(
        &self,
        row: usize,
        started: Stamp,
        args: &[bytes::Bytes],
        session: &Session,
    ) -> Stamp {
        let ended = Stamp::now();
        let ns = ended.nanos_since(started);
        self.db.metrics().commands.record_ns(row, ns, 1);
        let us = ns / 1000;
        if self.slowlog.is_slow(us) {
            self.slowlog
                .push(us, args, session.peer, session.name.as_ref());
        }
        self.ran_by(row, started, session);
        ended
    }

    /// Records a batch of deferred plain writes (`handler::write_run`), each at its share of
    /// the batch's time.
    pub fn ran_writes(
        &self,
        row: usize,
        started: Stamp,
        pairs: &[(bytes::Bytes, bytes::Bytes)],
        session: &Session,
    ) {
        let ns = Stamp::now().nanos_since(started);
        let n = pairs.len().max(1) as u64;
        self.db.metrics().commands.record_ns(row, ns, n);
        let each_us = ns / n / 1000;
        if self.slowlog.is_slow(each_us) {
            for (key, value) in pairs {
                let args = [
                    bytes::Bytes::from_static(b"SET"),
                    key.clone(),
                    value.clone(),
                ];
                self.slowlog
                    .push(each_us, &args, session.peer, session.name.as_ref());
            }
        }
        self.ran_by(row, started, session);
    }

    fn ran_by(&self, row: usize, started: Stamp, session: &Session) {
        if let Some(slot) = &session.slot {
            let resp = match session.protocol {
                Protocol::Resp2 => 2,
                Protocol::Resp3 => 3,
            };
            slot.ran(row, started, resp);
        }
    }
}

/// The reply to a request whose reply would take the clients' memory past its bound.
pub fn client_memory_error(exceeded: crate::client_memory::Exceeded) -> Frame {
    Frame::err(format!("{exceeded}; retry later or ask for less"))
}

/// Per-connection state that commands read and change.
#[derive(Debug)]
pub struct Session {
    pub id: u64,
    pub protocol: crate::frame::Protocol,
    pub authenticated: bool,
    pub name: Option<bytes::Bytes>,
    pub peer: Option<SocketAddr>,
    /// Set by QUIT: the connection closes after sending the reply.
    pub closing: bool,
    /// Replies queued acknowledge writes not yet committed to the store's log: commit first.
    pub uncommitted: bool,
    /// Wrong passwords given on this connection (see `cmd::auth`).
    pub auth_failures: u32,
    /// Another cluster node's forwarding link (CLUSTER FORWARDED): its requests are never
    /// forwarded again.
    pub forwarded: bool,
    /// Between MULTI and EXEC or DISCARD: the requests queued (see `cmd::multi`).
    pub multi: Option<Queued>,
    /// The keys WATCHed, until EXEC, DISCARD, UNWATCH or the connection's end.
    pub watched: Option<crate::db::Watched>,
    /// This connection's entry in `CLIENT LIST` (none for sessions outside a connection).
    pub slot: Option<std::sync::Arc<crate::client_list::ClientSlot>>,
    /// The shared log's sequencer this connection asked last (`ZLOG.NEXT`, `ZLOG.LEASE`).
    pub sequencer: crate::log::sequencer::Cached,
}

/// A transaction's queued requests (MULTI ... EXEC).
#[derive(Debug, Default)]
pub struct Queued {
    pub requests: Vec<Vec<bytes::Bytes>>,
    /// Argument bytes queued, against `cmd::multi::MAX_QUEUED_BYTES`.
    pub bytes: u64,
    /// A request was refused while queueing: EXEC discards the transaction.
    pub failed: bool,
}

impl Session {
    pub fn new(id: u64, requires_auth: bool, peer: Option<SocketAddr>) -> Session {
        Session {
            id,
            protocol: crate::frame::Protocol::Resp2,
            authenticated: !requires_auth,
            name: None,
            peer,
            closing: false,
            uncommitted: false,
            auth_failures: 0,
            forwarded: false,
            multi: None,
            watched: None,
            slot: None,
            sequencer: Default::default(),
        }
    }

    /// CLIENT SETNAME and HELLO SETNAME (an empty name clears it).
    pub fn set_name(&mut self, name: bytes::Bytes) {
        self.name = (!name.is_empty()).then_some(name);
        if let Some(slot) = &self.slot {
            slot.set_name(self.name.clone());
        }
    }
}
