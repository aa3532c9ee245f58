//! Proxy mode (`--cluster-mode proxy`): a request for a key another node owns is forwarded
//! to the owner and its reply relayed byte for byte, so clients that know nothing of the
//! cluster (plain `redis-cli`, `redis-benchmark`) work against any node.
//!
//! **Units.** What a link carries is a [`Unit`]: one client's consecutive requests of one
//! read (one pipeline) that go to the same owner, encoded back to back. The unit is queued,
//! written and answered as one: one queue entry, one reply channel and one wake-up of the
//! client's task for a `-P 16` batch, not sixteen, and the link copies the unit's bytes as
//! they are. Its replies come back as one buffer holding them all in order.
//!
//! **Replies written by the link.** A unit submitted with the client's socket
//! ([`Pool::submit_to`], [`Direct`]: nothing of the client's is queued before it) has its
//! replies written there by the link, with no wake-up of the client's task, which is waiting
//! for its client meanwhile; what the link cannot write whole (a full socket, a `-MOVED` or
//! `-TRYAGAIN`, an error) goes back through the unit's answer as before, with the bytes
//! already written cut off.
//!
//! Each owner is reached over one long-lived link shared by every client of this node.
//! A link is one task owning one connection at a time, run on the workers or on a thread of
//! its own as its traffic needs ([`Placement`]): it writes whatever units are queued in one
//! go (with `BUSY` units unanswered, what comes next waits for their replies, so a busy link
//! writes about once per batch of replies it reads) and matches the owner's
//! replies to their requests in order, measuring each reply with the store's wire reader
//! (`store::upstream::wire::reply_len`) under the requesting client's bounds
//! (`proto-max-bulk-len`, `--client-output-limit`). A reply that crosses one fails its
//! request with an error naming the bound and closes that connection (the requests after it
//! fail too; those of its unit before it keep their replies); the link opens a fresh one for
//! the units after.
//!
//! Everything is bounded, in requests (a unit counts as many as it carries): a link takes at
//! most [`QUEUE`] requests into its queue, keeps at most about [`IN_FLIGHT`] unanswered and
//! [`OUTPUT_HIGH`] bytes unwritten. A client whose unit finds the queue full waits (and so
//! stops reading its own connection) for up to the forward timeout; a connection whose oldest
//! request is unanswered for that long is closed.
//!
//! Each connection starts with `CLUSTER FORWARDED`: what arrives on it is never forwarded
//! again. Two nodes that briefly each think the other owns a slot (a hand-over seen in a
//! different order) would otherwise pass a request back and forth until the forward timed
//! out; instead the second node answers `-MOVED`, and the first asks again once its map has
//! moved on (`handler::proxy::relay`). A unit's answer says whether any of its replies is a
//! `-MOVED` or `-TRYAGAIN`, so only such a unit is taken apart reply by reply.
//!
//! **Restarted owners.** A pooled connection to an owner that restarted is closed at the
//! owner's end. Before anything is written on a connection with nothing in flight, the link
//! checks it (a non-blocking read: end of stream, a reset or unasked bytes mean it is dead)
//! and, if it is dead, opens a fresh one and writes the units there. Those requests are
//! safe to send again because none of their bytes were handed to the old socket: the old
//! owner could not have read, let alone run, them. A connection that dies after a request
//! was written fails that request (`connection to ... lost`): it may have run, and a write is
//! never sent twice.

use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use store::upstream::wire::{self, ReplyLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Semaphore, TryAcquireError};

mod direct;
pub use direct::Direct;
use direct::Ticket;

/// Connections per owner. One carries every client's requests, so its batches are as large
/// as the clients' requests in flight allow: with two, each carried half, and the owner woke,
/// read and wrote twice as often for the same GETs (50 unpipelined clients: ~10 GETs per
/// batch against ~16 with one, and 4.2 against 3.4 µs of the owner's CPU per forwarded GET;
/// bench/RESULTS.md, h-proxy4). The owner serves one connection on one task, which at about
/// a microsecond per GET is not the path's bottleneck.
const LINKS: usize = 1;
/// Bound on one forwarded request, from its queueing to its reply.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests one link queues before the clients submitting more wait; also the most one
/// unit may carry.
pub const QUEUE: usize = 1024;
/// Requests one link has written and not yet had answered, beyond which it takes no more
/// off its queue (so at most this plus [`QUEUE`] are in flight).
pub const IN_FLIGHT: usize = 1024;
/// Bytes of requests one link holds unwritten (the owner is not reading).
pub const OUTPUT_HIGH: usize = 1 << 20;
/// Units taken off the queue at once (one write carries them all).
const BATCH: usize = 128;
/// Units in flight from which a link counts as busy: then it holds what it takes next
/// until they are answered (or, on the workers, a whole [`BATCH`] waits; on its own thread
/// it takes nothing off its queue meanwhile, so submits do not wake that thread), and what
/// arrived meanwhile goes out in one write instead of one per wake-up of the link. With
/// fewer (a handful of clients)
/// the clients wait on round trips rather than on CPU, and holding a unit back for another's
/// replies would only add to its wait.
const BUSY: usize = 4;
/// Least free space offered to each read.
const CHUNK: usize = 16 * 1024;
/// Requests per unit, on average, from which a link on the workers moves to the links'
/// thread, and below which it moves back (see [`Placement`]).
const OWN_FROM: u32 = 4;
const WORKERS_BELOW: u32 = 2;
/// Units a link writes where it is before it may move again: a traffic that sits between
/// the two thresholds cannot make it hop to and fro.
const DWELL: u32 = 256;

/// The owner's raw reply to one forwarded request, or why there is none.
pub type Reply = Result<Bytes, String>;

/// Requests for one owner, each a RESP array of bulk strings, back to back.
pub struct Unit {
    pub requests: Bytes,
    pub count: usize,
}

impl Unit {
    /// A unit of the one request `args`.
    pub fn one<A: AsRef<[u8]>>(args: &[A]) -> Unit {
        let mut requests = BytesMut::new();
        wire::encode(&mut requests, args);
        Unit {
            requests: requests.freeze(),
            count: 1,
        }
    }
}

/// What a link hands back for a unit: its requests (to ask one again after `-MOVED`) and the
/// replies to as many of them as were answered.
pub struct Answered {
    pub unit: Unit,
    /// The replies to the first `complete` requests, back to back.
    pub replies: Bytes,
    pub complete: usize,
    /// Why the requests after the first `complete` have no reply (`None` when all have).
    pub error: Option<String>,
    /// Some reply in `replies` is a `-MOVED` or `-TRYAGAIN`.
    pub redirected: bool,
    /// The link wrote every reply to the client's socket itself (see [`Direct`]): nothing is
    /// left to write.
    pub delivered: bool,
}

/// One request of a unit and its reply.
pub struct Single {
    pub args: Vec<Bytes>,
    pub reply: Reply,
}

impl Answered {
    fn failed(unit: Unit, error: String) -> Answered {
        Answered {
            unit,
            replies: Bytes::new(),
            complete: 0,
            error: Some(error),
            redirected: false,
            delivered: false,
        }
    }

    /// The unit whose replies the link wrote to the client.
    fn delivered(count: usize) -> Answered {
        Answered {
            unit: Unit {
                requests: Bytes::new(),
                count,
            },
            replies: Bytes::new(),
            complete: count,
            error: None,
            redirected: false,
            delivered: true,
        }
    }

    /// Whether every request has its reply and none asks to be sent elsewhere: then
    /// `replies` goes to the client as it is.
    pub fn is_plain(&self) -> bool {
        self.error.is_none() && !self.redirected
    }

    /// The unit taken apart: each request's arguments and its reply, in order.
    pub fn singles(self) -> Vec<Single> {
        // Both were measured (requests when encoded, replies under the client's bounds).
        let unbounded = ReplyLimits {
            max_bulk_len: u64::MAX,
            max_reply_len: u64::MAX,
        };
        let mut requests = BytesMut::from(&self.unit.requests[..]);
        let mut replies = self.replies;
        let mut singles = Vec::with_capacity(self.unit.count);
        for i in 0..self.unit.count {
            let args = match wire::parse(&mut requests, u64::MAX) {
                Ok(Some(wire::Reply::Array(args))) => args
                    .into_iter()
                    .map(|arg| match arg {
                        wire::Reply::Bulk(Some(arg)) => arg,
                        _ => Bytes::new(),
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let reply = if i < self.complete {
                match wire::reply_len(&replies, unbounded) {
                    Ok(Some(len)) => Ok(replies.split_to(len)),
                    _ => Err("proxy: a relayed reply could not be split".to_string()),
                }
            } else {
                Err(self.error.clone().unwrap_or_default())
            };
            singles.push(Single { args, reply });
        }
        singles
    }
}

/// A forwarded unit whose replies have not been read yet.
pub struct Sent {
    addr: Arc<str>,
    count: usize,
    reply: oneshot::Receiver<Answered>,
    /// The client's socket, when the link may write the replies there itself.
    direct: Option<Arc<Direct>>,
}

impl Sent {
    /// The node the unit went to.
    pub fn addr(&self) -> &Arc<str> {
        &self.addr
    }

    /// Requests in the unit.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The client's socket the link may write the replies to, if it may.
    pub fn direct(&self) -> Option<&Arc<Direct>> {
        self.direct.as_ref()
    }
}

/// The shared connections to other nodes.
pub struct Pool {
    /// By owner: a handful of nodes, found by a scan that first compares the pointer of the
    /// routing table's address (the same `Arc` for every request routed by one table).
    links: Mutex<Vec<(Arc<str>, Vec<Link>)>>,
    /// The cluster's `--requirepass`, sent as AUTH on every new connection.
    password: Option<Arc<str>>,
    timeout: Duration,
}

#[derive(Clone)]
struct Link {
    tx: mpsc::UnboundedSender<Queued>,
    /// Requests the queue has room for: a unit takes as many permits as it carries, and the
    /// link gives them back as it writes the unit.
    room: Arc<Semaphore>,
    /// The link's task runs on the links' thread ([`Placement::Own`]); read by the tests.
    #[cfg_attr(not(test), allow(dead_code))]
    own: Arc<AtomicBool>,
}

struct Queued {
    unit: Unit,
    limits: ReplyLimits,
    /// Dropped (handed back) before `answer` is, so the client's task that wakes for the
    /// answer finds the ticket back.
    direct: Option<Ticket>,
    answer: oneshot::Sender<Answered>,
}

impl Queued {
    fn fail(self, error: &str) {
        self.respond(|unit| Answered::failed(unit, error.to_string()));
    }

    /// Hands the ticket back, if any, then the answer.
    fn respond(self, answered: impl FnOnce(Unit) -> Answered) {
        drop(self.direct);
        let _ = self.answer.send(answered(self.unit));
    }
}

/// A unit the pool could not queue at once.
enum NotQueued {
    /// The link's queue is full: wait on this link for room.
    Full(Queued, Link),
    /// The link's task is gone.
    Closed,
}

/// A unit that could not be queued: its owner and why.
pub struct Refused {
    pub addr: Arc<str>,
    pub error: String,
}

impl Pool {
    pub fn new(password: Option<String>) -> Pool {
        Pool::with_timeout(password, FORWARD_TIMEOUT)
    }

    fn with_timeout(password: Option<String>, timeout: Duration) -> Pool {
        Pool {
            links: Mutex::default(),
            password: password.map(Arc::from),
            timeout,
        }
    }

    /// Runs the one request `args` at `addr` and returns its raw reply.
    pub async fn forward(
        &self,
        addr: Arc<str>,
        args: Vec<Bytes>,
        affinity: u64,
        limits: ReplyLimits,
    ) -> Single {
        let reply = match self.submit(addr, Unit::one(&args), affinity, limits).await {
            Ok(sent) => {
                let answered = self.answer(sent).await;
                match answered.error {
                    None => Ok(answered.replies),
                    Some(error) => Err(error),
                }
            }
            Err(refused) => Err(refused.error),
        };
        Single { args, reply }
    }

    /// Queues `unit` for `addr` without waiting for its replies, so a client's pipeline goes
    /// on as a pipeline. Units with the same `affinity` (one client's) to one owner share a
    /// connection, so they run and are answered in the order sent. Waits while the link's
    /// queue is full (back-pressure: the client is not read meanwhile), at most the forward
    /// timeout.
    pub async fn submit(
        &self,
        addr: Arc<str>,
        unit: Unit,
        affinity: u64,
        limits: ReplyLimits,
    ) -> Result<Sent, Refused> {
        self.submit_to(addr, unit, affinity, limits, None).await
    }

    /// [`Pool::submit`], letting the link write the replies to the client's socket `direct`
    /// when it can (nothing of the client's may be queued before them).
    pub async fn submit_to(
        &self,
        addr: Arc<str>,
        unit: Unit,
        affinity: u64,
        limits: ReplyLimits,
        direct: Option<&Arc<Direct>>,
    ) -> Result<Sent, Refused> {
        let count = unit.count;
        assert!(
            (1..=QUEUE).contains(&count),
            "a unit carries 1..={QUEUE} requests"
        );
        let (answer, reply) = oneshot::channel();
        let queued = Queued {
            unit,
            limits,
            direct: direct.map(Direct::ticket),
            answer,
        };
        let closed = match self.queue(&addr, affinity, queued) {
            Ok(()) => false,
            Err(NotQueued::Full(queued, link)) => {
                match tokio::time::timeout(self.timeout, link.room.acquire_many(count as u32)).await
                {
                    Ok(Ok(permits)) => {
                        permits.forget();
                        link.tx.send(queued).is_err()
                    }
                    Ok(Err(_)) => true,
                    Err(_) => {
                        let error = format!(
                            "proxy: {addr} has {QUEUE} requests queued and took none for {:?}",
                            self.timeout
                        );
                        return Err(Refused { addr, error });
                    }
                }
            }
            Err(NotQueued::Closed) => true,
        };
        if closed {
            self.drop_link(&addr);
            let error = lost(&addr);
            return Err(Refused { addr, error });
        }
        Ok(Sent {
            addr,
            count,
            reply,
            direct: direct.cloned(),
        })
    }

    /// Waits for the replies to a submitted unit (the link answers within its timeout).
    pub async fn answer(&self, sent: Sent) -> Answered {
        self.answer_from(sent).await.1
    }

    /// [`Pool::answer`], and the node that answered (or failed to).
    pub async fn answer_from(&self, sent: Sent) -> (Arc<str>, Answered) {
        if sent.direct.as_ref().is_some_and(|d| d.delivered()) {
            return (sent.addr, Answered::delivered(sent.count));
        }
        match sent.reply.await {
            Ok(answered) => (sent.addr, answered),
            // The link wrote the replies and let the channel go.
            Err(_) if sent.direct.as_ref().is_some_and(|d| d.delivered()) => {
                (sent.addr, Answered::delivered(sent.count))
            }
            Err(_) => {
                self.drop_link(&sent.addr);
                let error = lost(&sent.addr);
                let unit = Unit {
                    requests: Bytes::new(),
                    count: sent.count,
                };
                (sent.addr, Answered::failed(unit, error))
            }
        }
    }

    /// Hands `queued` to `addr`'s link under the pool's lock, without cloning the link's
    /// sender (which would write the channel's shared counts twice per unit).
    fn queue(&self, addr: &Arc<str>, affinity: u64, queued: Queued) -> Result<(), NotQueued> {
        let i = (affinity % LINKS as u64) as usize;
        let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        let at = links
            .iter()
            .position(|(a, _)| Arc::ptr_eq(a, addr))
            .or_else(|| links.iter().position(|(a, _)| **a == **addr));
        let entry = match at {
            Some(at) => &mut links[at].1,
            None => {
                links.push((Arc::clone(addr), Vec::with_capacity(LINKS)));
                &mut links.last_mut().expect("just pushed").1
            }
        };
        if entry.len() != LINKS || entry[i].tx.is_closed() {
            entry.retain(|l| !l.tx.is_closed());
            while entry.len() < LINKS {
                entry.push(Link::start(
                    Arc::clone(addr),
                    self.password.clone(),
                    self.timeout,
                ));
            }
        }
        let link = &entry[i];
        match link.room.try_acquire_many(queued.unit.count as u32) {
            Ok(permits) => permits.forget(),
            Err(TryAcquireError::NoPermits) => return Err(NotQueued::Full(queued, link.clone())),
            Err(TryAcquireError::Closed) => return Err(NotQueued::Closed),
        }
        link.tx.send(queued).map_err(|_| NotQueued::Closed)
    }

    /// Whether `addr`'s link runs on the links' own thread.
    #[cfg(test)]
    fn on_own_thread(&self, addr: &str) -> bool {
        let links = self.links.lock().unwrap();
        let (_, entry) = links.iter().find(|(a, _)| **a == *addr).expect("a link");
        entry[0].own.load(Ordering::Relaxed)
    }

    fn drop_link(&self, addr: &Arc<str>) {
        let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, entry)) = links.iter_mut().find(|(a, _)| **a == **addr) {
            entry.retain(|l| !l.tx.is_closed());
        }
    }
}

fn lost(addr: &str) -> String {
    format!("proxy: connection to {addr} lost")
}

/// The links' runtime: one thread of their own (see [`Placement`]).
fn links() -> &'static tokio::runtime::Handle {
    static LINKS: OnceLock<tokio::runtime::Handle> = OnceLock::new();
    LINKS.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the proxy links");
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("mantle-links".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .expect("a thread for the proxy links");
        handle
    })
}

impl Link {
    /// Starts a link on the runtime of the client submitting its first unit (the workers).
    fn start(addr: Arc<str>, password: Option<Arc<str>>, timeout: Duration) -> Link {
        let (tx, rx) = mpsc::unbounded_channel();
        let room = Arc::new(Semaphore::new(QUEUE));
        let own = Arc::new(AtomicBool::new(false));
        Relay {
            addr,
            password,
            timeout,
            rx,
            room: Arc::clone(&room),
            unsent: Vec::with_capacity(BATCH),
            in_flight: VecDeque::new(),
            in_flight_requests: 0,
            ready: 0,
            ready_bytes: 0,
            input: BytesMut::with_capacity(CHUNK),
            output: BytesMut::with_capacity(CHUNK),
            closed: false,
            placement: Placement::Workers,
            workers: tokio::runtime::Handle::current(),
            own: Arc::clone(&own),
            unit_size: 16,
            since_move: 0,
        }
        .launch(None);
        Link { tx, room, own }
    }
}

/// Where a link's task runs. Its traffic decides, by the requests per unit it writes
/// (a moving average over about the last 16 units).
///
/// Single requests (unpipelined clients) keep it on the workers, among the clients' tasks:
/// a client's submit wakes it there without waking another thread (an `eventfd` write and a
/// context switch per submit that finds the link idle, ~0.2 per GET at 50 clients, cost a
/// sixth of their throughput with the link on a thread of its own; bench/RESULTS.md, lead
/// re-runs after h-link).
///
/// Pipelines move it to the links' own thread (a current-thread runtime). On the workers,
/// the link's task, woken by the owner's replies, waited behind every client task woken with
/// it (at `-P 16`, up to 50 client reads of ~10 µs each) while the owner sat idle; and a link
/// woken by a submit went to the submitting worker's LIFO slot, which no other worker may
/// steal. On its own thread the kernel runs it as soon as replies arrive, and the owner
/// works on one batch while this node reads the next from its clients (`-P 16` proxied/direct
/// 0.81x -> 0.905x).
///
/// One link moves as a whole, its connection (deregistered from one runtime's reactor and
/// registered with the other's) and its queue and units in flight with it: every unit still
/// goes out in the order it was queued, on the one connection, so one client's requests run
/// in order whatever the link's placement when each was sent.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Placement {
    Workers,
    Own,
}

/// A unit written to the owner and not yet wholly answered.
struct InFlight {
    queued: Queued,
    written: Instant,
    /// Its replies complete at its start in the link's input, and their bytes.
    complete: usize,
    measured: usize,
    redirected: bool,
}

/// One link's task and state.
struct Relay {
    addr: Arc<str>,
    password: Option<Arc<str>>,
    timeout: Duration,
    rx: mpsc::UnboundedReceiver<Queued>,
    room: Arc<Semaphore>,
    /// Taken off the queue, not yet written: safe to send on any connection.
    unsent: Vec<Queued>,
    in_flight: VecDeque<InFlight>,
    /// Requests in the units of `in_flight`.
    in_flight_requests: usize,
    /// Units at the front of `in_flight` whose replies are all read, not yet answered.
    ready: usize,
    /// Bytes at the start of `input` those replies take.
    ready_bytes: usize,
    input: BytesMut,
    output: BytesMut,
    /// The queue is closed (the pool let the link go).
    closed: bool,
    placement: Placement,
    /// The clients' runtime, where the link started.
    workers: tokio::runtime::Handle,
    /// Set while the link runs on the links' thread.
    own: Arc<AtomicBool>,
    /// Moving average of requests per unit written, in sixteenths.
    unit_size: u32,
    /// Units written since the link last moved.
    since_move: u32,
}

impl Drop for Relay {
    /// Clients waiting for room in the queue of a link that ended stop waiting.
    fn drop(&mut self) {
        self.room.close();
    }
}

enum Event {
    /// Bytes of replies read (0: the owner closed the connection).
    Read(std::io::Result<usize>),
    Writable(std::io::Result<()>),
    Taken(usize),
    Tick,
}

/// Why a connection was given up.
enum Dead {
    /// Found closed with nothing of the queued units written: open another.
    Stale,
    /// Failed with requests written on it: they fail with this error.
    Lost(String),
}

/// Why [`Relay::serve`] stopped with its connection alive.
enum Served {
    /// The pool let the link go and everything in flight is answered.
    Done,
    /// The link's traffic wants the other [`Placement`].
    Move,
}

impl Relay {
    /// Runs the link's task where its placement says, with the connection it moved with.
    fn launch(self, conn: Option<std::net::TcpStream>) {
        let runtime = match self.placement {
            Placement::Workers => self.workers.clone(),
            Placement::Own => links().clone(),
        };
        runtime.spawn(async move {
            if let Some((relay, conn)) = self.run(conn).await {
                relay.launch(Some(conn));
            }
        });
    }

    /// Relays until the pool lets the link go (`None`) or the link moves: then it hands back
    /// itself and its connection, deregistered from this runtime.
    async fn run(
        mut self,
        moved: Option<std::net::TcpStream>,
    ) -> Option<(Relay, std::net::TcpStream)> {
        let mut conn: Option<TcpStream> = None;
        if let Some(moved) = moved {
            match TcpStream::from_std(moved) {
                Ok(stream) => conn = Some(stream),
                Err(e) => {
                    self.fail_in_flight(&format!("{} ({e})", lost(&self.addr)));
                    self.input.clear();
                    self.output.clear();
                }
            }
        }
        loop {
            let stream = match &mut conn {
                Some(stream) => stream,
                None => {
                    if self.unsent.is_empty()
                        && self.rx.recv_many(&mut self.unsent, BATCH).await == 0
                    {
                        return None;
                    }
                    let opened = tokio::time::timeout(
                        Duration::from_secs(5),
                        connect(&self.addr, self.password.as_deref()),
                    )
                    .await;
                    match opened {
                        Ok(Ok(stream)) => conn.insert(stream),
                        failed => {
                            let error = match failed {
                                Ok(Err(e)) => format!("proxy: connecting to {}: {e}", self.addr),
                                _ => format!("proxy: no connection to {}", self.addr),
                            };
                            self.fail_everything(&error);
                            return None;
                        }
                    }
                }
            };
            match self.serve(stream).await {
                Ok(Served::Done) => return None,
                Ok(Served::Move) => {
                    let stream = conn.take().expect("served on it");
                    match stream.into_std() {
                        Ok(moving) => {
                            self.placement = match self.placement {
                                Placement::Workers => Placement::Own,
                                Placement::Own => Placement::Workers,
                            };
                            self.own
                                .store(self.placement == Placement::Own, Ordering::Relaxed);
                            self.since_move = 0;
                            return Some((self, moving));
                        }
                        Err(e) => self.fail_in_flight(&format!("{} ({e})", lost(&self.addr))),
                    }
                }
                Err(Dead::Stale) => {}
                Err(Dead::Lost(error)) => self.fail_in_flight(&error),
            }
            conn = None;
            self.input.clear();
            self.output.clear();
        }
    }

    /// Relays over one connection until it dies, the pool lets the link go or the link is
    /// to move.
    ///
    /// Replies are read through the connection's read half, whose read takes a short read as
    /// proof that the socket is drained (epoll is edge-triggered): the next wait for replies
    /// costs no system call. Reading until `WouldBlock` instead cost one failed `recvfrom`
    /// per batch of replies on the proxying node (0.1 per forwarded GET at 50 clients).
    async fn serve(&mut self, stream: &mut TcpStream) -> Result<Served, Dead> {
        let (mut replies, requests) = stream.split();
        let stream: &TcpStream = requests.as_ref();
        let mut tick = tokio::time::interval(self.timeout.min(Duration::from_secs(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if !self.unsent.is_empty() && !self.holding() {
                if self.placement == Placement::Workers
                    && !self.in_flight.is_empty()
                    && self.unsent.len() < BATCH
                {
                    self.gather().await;
                }
                self.send_unsent(stream)?;
            }
            if self.closed && self.in_flight.is_empty() {
                return Ok(Served::Done);
            }
            if self.misplaced() {
                return Ok(Served::Move);
            }
            let room = !self.closed
                && self.output.len() < OUTPUT_HIGH
                && self.in_flight_requests < IN_FLIGHT;
            // On its own thread a busy link takes nothing off its queue until replies come:
            // the clients' submits meanwhile do not wake that thread.
            let take = room && (self.placement == Placement::Workers || !self.busy());
            if self.input.capacity() - self.input.len() < CHUNK / 4 {
                self.input.reserve(CHUNK);
            }
            let event = tokio::select! {
                biased;
                read = replies.read_buf(&mut self.input) => Event::Read(read),
                ready = stream.writable(), if !self.output.is_empty() => Event::Writable(ready),
                taken = self.rx.recv_many(&mut self.unsent, BATCH), if take => Event::Taken(taken),
                _ = tick.tick(), if !self.in_flight.is_empty() => Event::Tick,
            };
            match event {
                Event::Read(Ok(0)) => return Err(self.lost_with("closed by the owner")),
                Event::Read(Ok(_)) => {
                    let measured = self.measure();
                    // On its own thread, what queued up meanwhile goes to the owner before
                    // these replies go to their clients: the owner runs it while the link
                    // hands the replies out.
                    let sent =
                        if self.placement == Placement::Own && measured.is_ok() && !self.busy() {
                            self.take_queued();
                            if self.unsent.is_empty() {
                                Ok(())
                            } else {
                                self.send_unsent(stream)
                            }
                        } else {
                            Ok(())
                        };
                    self.answer_ready();
                    measured?;
                    sent?;
                }
                Event::Read(Err(e)) => return Err(self.lost_with(&e.to_string())),
                Event::Writable(ready) => {
                    ready.map_err(|e| self.lost_with(&e.to_string()))?;
                    self.write(stream)?;
                }
                // The pool let the link go: answer what is in flight, then end.
                Event::Taken(0) => self.closed = true,
                Event::Taken(_) => {}
                Event::Tick => {
                    if self.in_flight[0].written.elapsed() >= self.timeout {
                        return Err(Dead::Lost(format!(
                            "proxy: {} did not answer within {:?}",
                            self.addr, self.timeout
                        )));
                    }
                }
            }
        }
    }

    /// Whether [`BUSY`] units are unanswered.
    fn busy(&self) -> bool {
        self.in_flight.len() - self.ready >= BUSY
    }

    /// Whether the units taken stay unwritten for now: the link is busy and, on the workers,
    /// fewer than a [`BATCH`] wait (on its own thread it takes no more than that while busy).
    fn holding(&self) -> bool {
        self.busy() && (self.placement == Placement::Own || self.unsent.len() < BATCH)
    }

    /// Whether the link's traffic wants the other placement, and it stayed long enough here.
    fn misplaced(&self) -> bool {
        let size = self.unit_size / 16;
        self.since_move >= DWELL
            && match self.placement {
                Placement::Workers => size >= OWN_FROM,
                Placement::Own => size < WORKERS_BELOW,
            }
    }

    /// With requests already at the owner, lets the clients that are ready run once before
    /// writing, and takes what they queued: one write then carries many clients' requests.
    /// Writing as each request came cost 1.6 sends per forwarded GET on the proxying node at
    /// 50 unpipelined clients (strace -c), against the 1 a direct GET costs; an idle link
    /// still writes at once, so a lone client waits for nothing. (On the workers only: on
    /// its own thread the link would wait for nobody.)
    async fn gather(&mut self) {
        tokio::task::yield_now().await;
        self.take_queued();
    }

    /// Takes what waits in the queue, within the link's bounds, without waiting.
    fn take_queued(&mut self) {
        while self.unsent.len() < BATCH
            && self.output.len() < OUTPUT_HIGH
            && self.in_flight_requests < IN_FLIGHT
        {
            match self.rx.try_recv() {
                Ok(queued) => self.unsent.push(queued),
                Err(_) => break,
            }
        }
    }

    /// Writes the units taken (after checking an idle connection is still open).
    fn send_unsent(&mut self, stream: &TcpStream) -> Result<(), Dead> {
        if self.in_flight.is_empty() && !self.probe(stream) {
            return Err(Dead::Stale);
        }
        let now = Instant::now();
        let mut taken = 0;
        for queued in self.unsent.drain(..) {
            self.output.extend_from_slice(&queued.unit.requests);
            let count = queued.unit.count;
            taken += count;
            self.unit_size = self.unit_size - self.unit_size / 16 + count as u32;
            self.since_move = self.since_move.saturating_add(1);
            self.in_flight.push_back(InFlight {
                queued,
                written: now,
                complete: 0,
                measured: 0,
                redirected: false,
            });
        }
        self.in_flight_requests += taken;
        self.room.add_permits(taken);
        self.write(stream)
    }

    /// Whether an idle connection is still open: its owner may have closed it (a restart)
    /// while it sat in the pool. Costs no system call unless the socket became readable.
    fn probe(&mut self, stream: &TcpStream) -> bool {
        let mut byte = [0u8; 1];
        matches!(stream.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }

    fn write(&mut self, stream: &TcpStream) -> Result<(), Dead> {
        while !self.output.is_empty() {
            match stream.try_write(&self.output) {
                Ok(n) => self.output.advance(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(self.lost_with(&e.to_string())),
            }
        }
        if self.output.is_empty() && self.output.capacity() > OUTPUT_HIGH {
            self.output = BytesMut::with_capacity(CHUNK);
        }
        Ok(())
    }

    /// Measures the replies read (each once) until a unit's are incomplete: the units before
    /// it are `ready`, their replies the first `ready_bytes` of the input.
    fn measure(&mut self) -> Result<(), Dead> {
        while let Some(sent) = self.in_flight.get_mut(self.ready) {
            let start = self.ready_bytes;
            while sent.complete < sent.queued.unit.count {
                let at = start + sent.measured;
                match wire::reply_len(&self.input[at..], sent.queued.limits) {
                    Ok(Some(len)) => {
                        let reply = &self.input[at..at + len];
                        sent.redirected |= moved_to(reply).is_some() || is_tryagain(reply);
                        sent.measured += len;
                        sent.complete += 1;
                    }
                    Ok(None) => return Ok(()),
                    Err(e) => {
                        let error = format!("proxy: {} sent a bad reply: {e}", self.addr);
                        return Err(Dead::Lost(error));
                    }
                }
            }
            self.ready_bytes += sent.measured;
            self.ready += 1;
        }
        if self.input.len() > self.ready_bytes {
            return Err(self.lost_with("a reply nothing asked for"));
        }
        Ok(())
    }

    /// Answers the units whose replies are all read ([`Relay::measure`]), each with its
    /// replies together.
    fn answer_ready(&mut self) {
        for _ in 0..self.ready {
            let mut sent = self
                .in_flight
                .pop_front()
                .expect("ready units are in flight");
            let mut replies = self.input.split_to(sent.measured).freeze();
            self.in_flight_requests -= sent.complete;
            if let Some(ticket) = sent.queued.direct.take() {
                if !sent.redirected {
                    match ticket.deliver(replies) {
                        // Nobody is woken: the client's task is waiting for its client.
                        Ok(()) => continue,
                        Err(rest) => replies = rest,
                    }
                }
            }
            // A ticket not delivered was handed back above, before the answer goes.
            let _ = sent.queued.answer.send(Answered {
                unit: sent.queued.unit,
                replies,
                complete: sent.complete,
                error: None,
                redirected: sent.redirected,
                delivered: false,
            });
        }
        self.ready = 0;
        self.ready_bytes = 0;
        if self.input.is_empty() && self.input.capacity() > OUTPUT_HIGH {
            self.input = BytesMut::with_capacity(CHUNK);
        }
    }

    /// Fails every unit in flight on a connection given up; the first keeps the replies it
    /// already had.
    fn fail_in_flight(&mut self, error: &str) {
        for (i, sent) in self.in_flight.drain(..).enumerate() {
            let replies = if i == 0 {
                self.input
                    .split_to(sent.measured.min(self.input.len()))
                    .freeze()
            } else {
                Bytes::new()
            };
            let complete = if i == 0 { sent.complete } else { 0 };
            sent.queued.respond(|unit| Answered {
                unit,
                replies,
                complete,
                error: Some(error.to_string()),
                redirected: sent.redirected,
                delivered: false,
            });
        }
        self.in_flight_requests = 0;
    }

    fn lost_with(&self, why: &str) -> Dead {
        Dead::Lost(format!("{} ({why})", lost(&self.addr)))
    }

    fn fail_everything(&mut self, error: &str) {
        for queued in self.unsent.drain(..) {
            queued.fail(error);
        }
        self.rx.close();
        while let Ok(queued) = self.rx.try_recv() {
            queued.fail(error);
        }
    }
}

/// Connects, logs in when the cluster has a password, and marks the connection as a
/// forwarding link (see the module doc) before any request is relayed.
async fn connect(addr: &str, password: Option<&str>) -> Result<TcpStream, String> {
    let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    if let Some(password) = password {
        handshake(&mut stream, &[b"AUTH", password.as_bytes()], "AUTH").await?;
    }
    handshake(
        &mut stream,
        &[b"CLUSTER", b"FORWARDED"],
        "CLUSTER FORWARDED",
    )
    .await?;
    Ok(stream)
}

/// Sends `request` and expects `+OK`.
async fn handshake(stream: &mut TcpStream, request: &[&[u8]], what: &str) -> Result<(), String> {
    let mut out = BytesMut::new();
    wire::encode(&mut out, request);
    stream.write_all(&out).await.map_err(|e| e.to_string())?;
    let mut input = BytesMut::with_capacity(256);
    loop {
        match wire::parse(&mut input, 1024).map_err(|e| format!("{what}: {e}"))? {
            Some(wire::Reply::Status(_)) => return Ok(()),
            Some(other) => return Err(format!("{what} refused: {other:?}")),
            None => {}
        }
        if stream
            .read_buf(&mut input)
            .await
            .map_err(|e| e.to_string())?
            == 0
        {
            return Err(format!("closed during {what}"));
        }
    }
}

/// `Some(addr)` when `reply` is `-MOVED slot addr` (the proxy's map was behind).
pub fn moved_to(reply: &[u8]) -> Option<&str> {
    let text = reply.strip_prefix(b"-MOVED ")?;
    let text = std::str::from_utf8(text).ok()?.trim_end();
    let (_, addr) = text.split_once(' ')?;
    Some(addr)
}

/// Whether `reply` asks to try again (`-TRYAGAIN`).
pub fn is_tryagain(reply: &[u8]) -> bool {
    reply.starts_with(b"-TRYAGAIN")
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::net::TcpListener;

    /// What the fake owner does with one request.
    enum Act {
        Reply(Vec<u8>),
        /// Closes the connection without answering (a crash after reading it).
        Close,
        /// Stops reading the connection for good.
        Stall,
        /// Writes the reply in two pieces, a moment apart (it reaches the link in two reads).
        Split(Vec<u8>),
        /// Replies after a pause, first noting how many bytes of requests came meanwhile.
        Late(Vec<u8>, Arc<AtomicUsize>),
    }

    /// Splits one request off `buf` (a RESP array of bulks).
    fn request(buf: &mut BytesMut) -> Option<Vec<Vec<u8>>> {
        let limits = ReplyLimits {
            max_bulk_len: 1 << 20,
            max_reply_len: 1 << 24,
        };
        let len = wire::reply_len(buf, limits).unwrap()?;
        let frame = buf.split_to(len);
        let text = &frame[..];
        let mut lines = text
            .split(|&b| b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
        let count: usize = std::str::from_utf8(&lines.next()?[1..])
            .ok()?
            .parse()
            .ok()?;
        let mut args = Vec::new();
        for _ in 0..count {
            lines.next();
            args.push(lines.next()?.to_vec());
        }
        Some(args)
    }

    /// A node on a random port: answers `CLUSTER FORWARDED` with `+OK` and every other
    /// request with `act`; counts connections and requests seen by their first argument.
    async fn owner(
        act: impl Fn(&[Vec<u8>]) -> Act + Send + Sync + 'static,
    ) -> (Arc<str>, Arc<Mutex<Vec<Vec<u8>>>>, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: Arc<str> = Arc::from(listener.local_addr().unwrap().to_string());
        let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let connections = Arc::new(AtomicUsize::new(0));
        let act = Arc::new(act);
        let (seen2, connections2) = (Arc::clone(&seen), Arc::clone(&connections));
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                connections2.fetch_add(1, Ordering::SeqCst);
                let (seen, act) = (Arc::clone(&seen2), Arc::clone(&act));
                tokio::spawn(async move {
                    let mut input = BytesMut::new();
                    loop {
                        while let Some(args) = request(&mut input) {
                            if args[0] == b"CLUSTER" {
                                socket.write_all(b"+OK\r\n").await.unwrap();
                                continue;
                            }
                            seen.lock().unwrap().push(args[0].clone());
                            match act(&args) {
                                Act::Reply(reply) => {
                                    if socket.write_all(&reply).await.is_err() {
                                        return;
                                    }
                                }
                                Act::Split(reply) => {
                                    let (head, tail) = reply.split_at(reply.len() / 2);
                                    socket.write_all(head).await.unwrap();
                                    tokio::time::sleep(Duration::from_millis(20)).await;
                                    socket.write_all(tail).await.unwrap();
                                }
                                Act::Late(reply, waiting) => {
                                    tokio::time::sleep(Duration::from_millis(200)).await;
                                    let mut unread = [0u8; 4096];
                                    // SAFETY: a valid socket and a buffer of that length.
                                    let peeked = unsafe {
                                        libc::recv(
                                            fd(&socket),
                                            unread.as_mut_ptr().cast(),
                                            unread.len(),
                                            libc::MSG_PEEK | libc::MSG_DONTWAIT,
                                        )
                                    };
                                    let waited = input.len() + peeked.max(0) as usize;
                                    waiting.store(waited, Ordering::SeqCst);
                                    socket.write_all(&reply).await.unwrap();
                                }
                                Act::Close => return,
                                Act::Stall => {
                                    let _hold = socket;
                                    std::future::pending::<()>().await;
                                    unreachable!();
                                }
                            }
                        }
                        match socket.read_buf(&mut input).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                    }
                });
            }
        });
        (addr, seen, connections)
    }

    fn args(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::from(w.to_string())).collect()
    }

    const LIMITS: ReplyLimits = ReplyLimits {
        max_bulk_len: 1000,
        max_reply_len: 1 << 20,
    };

    #[tokio::test]
    async fn an_oversized_reply_fails_its_request_and_the_link_goes_on() {
        let (addr, _, connections) = owner(|args| {
            if args[0] == b"BIG" {
                let mut reply = b"$2000\r\n".to_vec();
                reply.extend_from_slice(&[b'x'; 2000]);
                reply.extend_from_slice(b"\r\n");
                Act::Reply(reply)
            } else {
                Act::Reply(b"+PONG\r\n".to_vec())
            }
        })
        .await;
        let pool = Pool::new(None);
        let big = pool
            .forward(Arc::clone(&addr), args(&["BIG"]), 1, LIMITS)
            .await;
        let error = big.reply.unwrap_err();
        assert!(error.contains("proto-max-bulk-len (1000)"), "{error}");
        let limits = ReplyLimits {
            max_bulk_len: 5000,
            max_reply_len: 100,
        };
        let error = pool
            .forward(Arc::clone(&addr), args(&["BIG"]), 1, limits)
            .await
            .reply
            .unwrap_err();
        assert!(error.contains("output limit (100 bytes)"), "{error}");
        let ping = pool
            .forward(Arc::clone(&addr), args(&["PING"]), 1, LIMITS)
            .await;
        assert_eq!(&ping.reply.unwrap()[..], b"+PONG\r\n");
        assert_eq!(
            ping.args,
            args(&["PING"]),
            "the arguments come back for a retry"
        );
        assert_eq!(
            connections.load(Ordering::SeqCst),
            3,
            "one per bad reply, then one"
        );
    }

    #[tokio::test]
    async fn a_connection_the_owner_closed_while_idle_is_opened_again() {
        // The owner answers and then closes, as a restarted node's old connections are.
        let (addr, seen, connections) = owner(|args| match &args[0][..] {
            b"CRASH" => Act::Close,
            _ => Act::Reply(b"+OK\r\n".to_vec()),
        })
        .await;
        let pool = Pool::new(None);
        for round in 0..20 {
            let reply = pool
                .forward(Arc::clone(&addr), args(&["SET", "k", "v"]), 7, LIMITS)
                .await;
            assert_eq!(&reply.reply.unwrap()[..], b"+OK\r\n", "round {round}");
            // The owner closes the connection after reading this one: it fails, once.
            let crashed = pool
                .forward(Arc::clone(&addr), args(&["CRASH"]), 7, LIMITS)
                .await;
            let error = crashed.reply.unwrap_err();
            assert!(error.contains("lost"), "{error}");
            // Alternate a fresh close being seen by the link and a write racing it.
            if round % 2 == 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let seen = seen.lock().unwrap();
        let crashes = seen.iter().filter(|w| &w[..] == b"CRASH").count();
        assert_eq!(
            crashes, 20,
            "a request that may have run is never sent twice"
        );
        assert_eq!(connections.load(Ordering::SeqCst), 20);
    }

    #[tokio::test]
    async fn a_stalled_owner_holds_a_bounded_queue_and_times_out() {
        let (addr, _, _) = owner(|_| Act::Stall).await;
        let pool = Arc::new(Pool::with_timeout(None, Duration::from_millis(1500)));
        let mut sent = Vec::new();
        // Each request waits at most 100 ms to be queued: the first that does not fit shows
        // where the bound is.
        loop {
            let unit = Unit::one(&args(&["GET", "key"]));
            let submit = pool.submit(Arc::clone(&addr), unit, 3, LIMITS);
            match tokio::time::timeout(Duration::from_millis(100), submit).await {
                Ok(Ok(s)) => sent.push(s),
                Ok(Err(e)) => panic!("refused early: {}", e.error),
                Err(_) => break,
            }
            assert!(sent.len() <= QUEUE + IN_FLIGHT + BATCH, "unbounded");
        }
        assert!(sent.len() >= QUEUE, "only {} queued", sent.len());
        // The owner never answers: every request fails once the oldest is overdue.
        for s in sent.drain(..) {
            let error = pool.answer(s).await.error.unwrap();
            assert!(
                error.contains("did not answer") || error.contains("lost"),
                "{error}"
            );
        }
    }

    #[tokio::test]
    async fn every_client_shares_one_connection_per_owner() {
        let (addr, seen, connections) = owner(|_| Act::Reply(b"+PONG\r\n".to_vec())).await;
        let pool = Arc::new(Pool::new(None));
        let clients: Vec<_> = (0..16u64)
            .map(|client| {
                let (pool, addr) = (Arc::clone(&pool), Arc::clone(&addr));
                tokio::spawn(async move {
                    pool.forward(Arc::clone(&addr), args(&["PING"]), client, LIMITS)
                        .await
                        .reply
                })
            })
            .collect();
        for client in clients {
            assert_eq!(&client.await.unwrap().unwrap()[..], b"+PONG\r\n");
        }
        assert_eq!(seen.lock().unwrap().len(), 16);
        assert_eq!(
            connections.load(Ordering::SeqCst),
            1,
            "sixteen clients' requests go out on one connection, in shared batches"
        );
    }

    #[tokio::test]
    async fn a_reply_that_arrives_in_pieces_is_answered_whole() {
        let mut bulk = b"$3000\r\n".to_vec();
        bulk.extend_from_slice(&[b'v'; 3000]);
        bulk.extend_from_slice(b"\r\n");
        let expected = bulk.clone();
        let (addr, _, connections) = owner(move |args| match &args[0][..] {
            b"GET" => Act::Split(bulk.clone()),
            _ => Act::Reply(b"+PONG\r\n".to_vec()),
        })
        .await;
        let pool = Pool::new(None);
        let limits = ReplyLimits {
            max_bulk_len: 1 << 20,
            max_reply_len: 1 << 20,
        };
        for round in 0..3 {
            // A short read drains the socket: the rest of the reply must still wake the link.
            let got = pool
                .forward(Arc::clone(&addr), args(&["GET", "k"]), 1, limits)
                .await;
            assert_eq!(got.reply.unwrap(), expected, "round {round}");
            let ping = pool
                .forward(Arc::clone(&addr), args(&["PING"]), 1, limits)
                .await;
            assert_eq!(&ping.reply.unwrap()[..], b"+PONG\r\n", "round {round}");
        }
        assert_eq!(connections.load(Ordering::SeqCst), 1);
    }

    fn unit(requests: &[&[&str]]) -> Unit {
        let mut encoded = BytesMut::new();
        for words in requests {
            wire::encode(&mut encoded, words);
        }
        Unit {
            requests: encoded.freeze(),
            count: requests.len(),
        }
    }

    /// Answers `GET key` with the key itself, and `GET moved...` with a `-MOVED`.
    fn echo(args: &[Vec<u8>]) -> Act {
        let key = args.get(1).cloned().unwrap_or_default();
        if key.starts_with(b"moved") {
            return Act::Reply(b"-MOVED 7 127.0.0.1:1\r\n".to_vec());
        }
        if key.starts_with(b"big") {
            let mut reply = b"$2000\r\n".to_vec();
            reply.extend_from_slice(&[b'x'; 2000]);
            reply.extend_from_slice(b"\r\n");
            return Act::Reply(reply);
        }
        let mut reply = format!("${}\r\n", key.len()).into_bytes();
        reply.extend_from_slice(&key);
        reply.extend_from_slice(b"\r\n");
        Act::Reply(reply)
    }

    #[tokio::test]
    async fn a_unit_is_answered_with_its_replies_back_to_back_in_order() {
        let (addr, seen, _) = owner(echo).await;
        let pool = Pool::new(None);
        let sent = pool
            .submit(
                Arc::clone(&addr),
                unit(&[&["GET", "a"], &["GET", "bb"], &["GET", "c"]]),
                1,
                LIMITS,
            )
            .await
            .unwrap_or_else(|r| panic!("{}", r.error));
        assert_eq!(sent.count(), 3);
        let answered = pool.answer(sent).await;
        assert!(answered.is_plain());
        assert_eq!(answered.complete, 3);
        assert_eq!(&answered.replies[..], b"$1\r\na\r\n$2\r\nbb\r\n$1\r\nc\r\n");
        assert_eq!(seen.lock().unwrap().len(), 3);
    }

    #[tokio::test]
    async fn a_unit_with_a_moved_reply_is_taken_apart_in_order() {
        let (addr, _, _) = owner(echo).await;
        let pool = Pool::new(None);
        let requests: &[&[&str]] = &[&["GET", "a"], &["GET", "moved1"], &["GET", "c"]];
        let sent = pool
            .submit(Arc::clone(&addr), unit(requests), 1, LIMITS)
            .await
            .unwrap_or_else(|r| panic!("{}", r.error));
        let answered = pool.answer(sent).await;
        assert!(!answered.is_plain(), "a -MOVED reply is flagged");
        let singles = answered.singles();
        let got: Vec<(Vec<Bytes>, Bytes)> = singles
            .into_iter()
            .map(|s| (s.args, s.reply.unwrap()))
            .collect();
        assert_eq!(got.len(), 3);
        for (i, words) in requests.iter().enumerate() {
            assert_eq!(got[i].0, args(words), "request {i}'s arguments come back");
        }
        assert_eq!(&got[0].1[..], b"$1\r\na\r\n");
        assert_eq!(moved_to(&got[1].1), Some("127.0.0.1:1"));
        assert_eq!(&got[2].1[..], b"$1\r\nc\r\n");
    }

    #[tokio::test]
    async fn an_oversized_reply_in_a_unit_keeps_the_replies_before_it() {
        let (addr, _, _) = owner(echo).await;
        let pool = Pool::new(None);
        let sent = pool
            .submit(
                Arc::clone(&addr),
                unit(&[&["GET", "a"], &["GET", "big"], &["GET", "c"]]),
                1,
                LIMITS,
            )
            .await
            .unwrap_or_else(|r| panic!("{}", r.error));
        let answered = pool.answer(sent).await;
        assert_eq!(answered.complete, 1);
        let replies: Vec<Reply> = answered.singles().into_iter().map(|s| s.reply).collect();
        assert_eq!(&replies[0].as_ref().unwrap()[..], b"$1\r\na\r\n");
        for reply in &replies[1..] {
            let error = reply.as_ref().unwrap_err();
            assert!(error.contains("proto-max-bulk-len (1000)"), "{error}");
        }
        // The link goes on over a fresh connection.
        let after = pool
            .forward(Arc::clone(&addr), args(&["GET", "d"]), 1, LIMITS)
            .await;
        assert_eq!(&after.reply.unwrap()[..], b"$1\r\nd\r\n");
    }

    #[tokio::test]
    async fn a_busy_link_holds_units_back_until_its_write_in_flight_is_answered() {
        let waiting = Arc::new(AtomicUsize::new(0));
        let noted = Arc::clone(&waiting);
        let (addr, seen, connections) = owner(move |args| match &args[0][..] {
            b"SLOW" => Act::Late(b"+SLOW\r\n".to_vec(), Arc::clone(&noted)),
            _ => echo(args),
        })
        .await;
        let pool = Pool::new(None);
        let get = |key: &str| unit(&[&["GET", key]]);
        let submit = |unit: Unit| {
            let (pool, addr) = (&pool, Arc::clone(&addr));
            async move {
                pool.submit(addr, unit, 1, LIMITS)
                    .await
                    .unwrap_or_else(|r| panic!("{}", r.error))
            }
        };
        // SLOW and three more go out as they come (fewer than BUSY units in flight) and the
        // owner sits on SLOW.
        let mut sent = vec![submit(unit(&[&["SLOW"]])).await];
        let keys = ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"];
        for key in &keys[..BUSY - 1] {
            sent.push(submit(get(key)).await);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Now busy: these wait for SLOW's write to be answered.
        for key in &keys[BUSY - 1..] {
            sent.push(submit(get(key)).await);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut sent = sent.into_iter();
        let slow = pool.answer(sent.next().unwrap()).await;
        assert_eq!(&slow.replies[..], b"+SLOW\r\n");
        for (s, key) in sent.zip(keys) {
            let answered = pool.answer(s).await;
            assert_eq!(answered.replies, format!("$2\r\n{key}\r\n").as_bytes());
        }
        let one = get("k0").requests.len();
        assert_eq!(
            waiting.load(Ordering::SeqCst),
            (BUSY - 1) * one,
            "only the units sent before the link was busy reached the owner during SLOW"
        );
        assert_eq!(seen.lock().unwrap().len(), 1 + keys.len());
        assert_eq!(connections.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn the_queue_bound_counts_the_requests_of_units() {
        let (addr, _, _) = owner(|_| Act::Stall).await;
        let pool = Arc::new(Pool::with_timeout(None, Duration::from_millis(1500)));
        const EACH: usize = 64;
        let requests: Vec<&[&str]> = vec![&["GET", "key"]; EACH];
        let mut sent = Vec::new();
        loop {
            let submit = pool.submit(Arc::clone(&addr), unit(&requests), 3, LIMITS);
            match tokio::time::timeout(Duration::from_millis(100), submit).await {
                Ok(Ok(s)) => sent.push(s),
                Ok(Err(e)) => panic!("refused early: {}", e.error),
                Err(_) => break,
            }
            assert!(
                sent.len() * EACH <= 2 * QUEUE + IN_FLIGHT,
                "{} requests taken: a unit must count as the requests it carries",
                sent.len() * EACH
            );
        }
        assert!(sent.len() * EACH >= QUEUE, "only {} queued", sent.len());
        for s in sent.drain(..) {
            let answered = pool.answer(s).await;
            assert_eq!(answered.complete, 0);
            assert_eq!(
                answered.singles().len(),
                EACH,
                "every request gets its error"
            );
        }
    }

    /// A client connection's two ends: the client's, and this node's (whose descriptor a
    /// [`Direct`] gets), with `buffer` bytes of socket buffers when given.
    async fn client_socket(buffer: Option<i32>) -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (ours, _) = listener.accept().await.unwrap();
        // As the server's client connections are (small windows would wait on delayed ACKs).
        ours.set_nodelay(true).unwrap();
        client.set_nodelay(true).unwrap();
        if let Some(size) = buffer {
            use std::os::fd::AsRawFd;
            for (fd, option) in [
                (ours.as_raw_fd(), libc::SO_SNDBUF),
                (client.as_raw_fd(), libc::SO_RCVBUF),
            ] {
                // SAFETY: a valid socket and an `int` option of the right size.
                let set = unsafe {
                    libc::setsockopt(
                        fd,
                        libc::SOL_SOCKET,
                        option,
                        (&size as *const i32).cast(),
                        std::mem::size_of::<i32>() as libc::socklen_t,
                    )
                };
                assert_eq!(set, 0);
            }
        }
        (client, ours)
    }

    fn fd(stream: &TcpStream) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(stream)
    }

    /// Reads from `client` until it has `len` bytes.
    async fn read_exactly(client: &mut TcpStream, len: usize) -> Vec<u8> {
        let mut got = vec![0; len];
        tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut got))
            .await
            .expect("the replies arrive")
            .unwrap();
        got
    }

    #[tokio::test]
    async fn the_link_writes_a_units_replies_to_the_clients_socket() {
        let (addr, _, _) = owner(echo).await;
        let pool = Pool::new(None);
        let (mut client, ours) = client_socket(None).await;
        let direct = Direct::new(fd(&ours));
        for round in 0..3 {
            let requests: &[&[&str]] = &[&["GET", "a"], &["GET", "bb"]];
            let sent = pool
                .submit_to(Arc::clone(&addr), unit(requests), 1, LIMITS, Some(&direct))
                .await
                .unwrap_or_else(|r| panic!("{}", r.error));
            let expected = b"$1\r\na\r\n$2\r\nbb\r\n";
            assert_eq!(
                read_exactly(&mut client, expected.len()).await,
                expected,
                "round {round}"
            );
            assert!(direct.delivered(), "round {round}");
            let answered = pool.answer(sent).await;
            assert!(answered.delivered && answered.error.is_none());
            assert!(answered.replies.is_empty(), "nothing is left to write");
        }
        direct.close();
    }

    #[tokio::test]
    async fn replies_the_client_socket_cannot_take_are_handed_back() {
        // One reply far larger than the client's socket buffers, arriving in two pieces.
        let mut big = b"$200000\r\n".to_vec();
        big.extend(std::iter::repeat_n(b'v', 200_000));
        big.extend_from_slice(b"\r\n");
        let expected = big.clone();
        let (addr, _, _) = owner(move |_| Act::Split(big.clone())).await;
        let pool = Pool::new(None);
        let (mut client, ours) = client_socket(Some(4096)).await;
        let direct = Direct::new(fd(&ours));
        let limits = ReplyLimits {
            max_bulk_len: 1 << 20,
            max_reply_len: 1 << 20,
        };
        let sent = pool
            .submit_to(
                Arc::clone(&addr),
                unit(&[&["GET", "k"]]),
                1,
                limits,
                Some(&direct),
            )
            .await
            .unwrap_or_else(|r| panic!("{}", r.error));
        // The client's task, reading its client meanwhile, is woken by the hand-back.
        tokio::time::timeout(Duration::from_secs(5), direct.handed_back())
            .await
            .expect("the link hands back what the socket cannot take");
        assert!(!direct.delivered());
        let answered = pool.answer(sent).await;
        assert!(answered.is_plain() && !answered.delivered);
        let rest = answered.replies;
        assert!(
            !rest.is_empty() && rest.len() < expected.len(),
            "the link wrote a part ({} of {} bytes left)",
            rest.len(),
            expected.len()
        );
        // The client's task writes the rest behind what the link wrote.
        let writer = tokio::spawn(async move {
            let mut ours = ours;
            ours.write_all(&rest).await.unwrap();
            ours
        });
        assert_eq!(read_exactly(&mut client, expected.len()).await, expected);
        let _ours = writer.await.unwrap();
        direct.close();
    }

    #[tokio::test]
    async fn a_closing_connection_or_a_redirect_gets_nothing_written_by_the_link() {
        let (addr, _, _) = owner(echo).await;
        let pool = Pool::new(None);
        let (client, ours) = client_socket(None).await;
        let direct = Direct::new(fd(&ours));
        let sent = pool
            .submit_to(
                Arc::clone(&addr),
                unit(&[&["GET", "a"], &["GET", "moved1"]]),
                1,
                LIMITS,
                Some(&direct),
            )
            .await
            .unwrap_or_else(|r| panic!("{}", r.error));
        let answered = pool.answer(sent).await;
        assert!(!answered.delivered && answered.redirected);
        assert_eq!(
            answered.complete, 2,
            "a unit with a -MOVED comes back whole"
        );
        assert!(direct.is_handed_back());
        direct.close();
        let sent = pool
            .submit_to(
                Arc::clone(&addr),
                unit(&[&["GET", "b"]]),
                1,
                LIMITS,
                Some(&direct),
            )
            .await
            .unwrap_or_else(|r| panic!("{}", r.error));
        let answered = pool.answer(sent).await;
        assert!(!answered.delivered);
        assert_eq!(&answered.replies[..], b"$1\r\nb\r\n", "handed back whole");
        let mut byte = [0u8; 1];
        let unread = client.try_read(&mut byte);
        assert!(
            matches!(&unread, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "the link wrote to a closing connection: {unread:?}"
        );
    }

    /// A unit of `count` GETs of `key`.
    fn gets(key: &str, count: usize) -> Unit {
        let words = ["GET", key];
        unit(&vec![&words[..]; count])
    }

    /// Submits and answers `units` units of `count` GETs each, one after the other.
    async fn traffic(pool: &Pool, addr: &Arc<str>, units: usize, count: usize) {
        for i in 0..units {
            let key = format!("t{i}");
            let sent = pool
                .submit(Arc::clone(addr), gets(&key, count), 1, LIMITS)
                .await
                .unwrap_or_else(|r| panic!("{}", r.error));
            let answered = pool.answer(sent).await;
            assert_eq!(answered.complete, count);
            assert_eq!(
                answered.replies.len(),
                count * format!("$2\r\n{key}\r\n").len()
            );
        }
    }

    #[tokio::test]
    async fn pipelines_move_the_link_to_its_own_thread_and_single_requests_back() {
        let (addr, _, connections) = owner(echo).await;
        let pool = Pool::new(None);
        traffic(&pool, &addr, DWELL as usize + 50, 1).await;
        assert!(
            !pool.on_own_thread(&addr),
            "single requests stay on the workers"
        );
        // A unit of 3 is below the threshold: mixed with singles, the link stays.
        for _ in 0..DWELL {
            traffic(&pool, &addr, 1, 3).await;
            traffic(&pool, &addr, 1, 1).await;
        }
        assert!(
            !pool.on_own_thread(&addr),
            "an average of 2 requests a unit stays"
        );
        traffic(&pool, &addr, 16, 16).await;
        assert!(
            pool.on_own_thread(&addr),
            "pipelines take the links' thread"
        );
        // A few single requests do not move it back at once.
        traffic(&pool, &addr, 64, 1).await;
        assert!(pool.on_own_thread(&addr), "it stays at least DWELL units");
        traffic(&pool, &addr, DWELL as usize, 1).await;
        assert!(!pool.on_own_thread(&addr), "single requests take it back");
        assert_eq!(
            connections.load(Ordering::SeqCst),
            1,
            "the link moves with its connection"
        );
    }

    #[tokio::test]
    async fn units_in_flight_keep_their_order_across_a_move() {
        let order: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let keys = Arc::clone(&order);
        let (addr, _, connections) = owner(move |args| {
            keys.lock().unwrap().push(args[1].clone());
            echo(args)
        })
        .await;
        let pool = Pool::new(None);
        let mut expected = Vec::new();
        // Submitted without waiting for answers, so units are queued and in flight whenever
        // the link moves: singles, then pipelines (a move to the links' thread), then
        // singles again (a move back).
        let phases = [(DWELL as usize + 8, 1), (300, 16), (2 * DWELL as usize, 1)];
        for (phase, (units, count)) in phases.into_iter().enumerate() {
            let mut sent = Vec::new();
            for i in 0..units {
                let key = format!("{phase}.{i}");
                sent.push(
                    pool.submit(Arc::clone(&addr), gets(&key, count), 1, LIMITS)
                        .await
                        .unwrap_or_else(|r| panic!("{}", r.error)),
                );
                expected.extend(std::iter::repeat_n(key.into_bytes(), count));
            }
            for (i, s) in sent.into_iter().enumerate() {
                let answered = pool.answer(s).await;
                let key = format!("{phase}.{i}");
                let reply = format!("${}\r\n{key}\r\n", key.len()).repeat(count);
                assert_eq!(answered.replies, reply.as_bytes(), "unit {key}");
            }
            assert_eq!(pool.on_own_thread(&addr), phase == 1, "after phase {phase}");
        }
        assert!(
            *order.lock().unwrap() == expected,
            "the owner ran every request in the order queued"
        );
        assert_eq!(connections.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_owner_lost_fails_a_link_the_same_on_either_thread() {
        let (addr, seen, connections) = owner(|args| match &args[0][..] {
            b"CRASH" => Act::Close,
            _ => echo(args),
        })
        .await;
        let pool = Pool::new(None);
        let crash = || async {
            pool.forward(Arc::clone(&addr), args(&["CRASH"]), 1, LIMITS)
                .await
                .reply
                .unwrap_err()
        };
        traffic(&pool, &addr, DWELL as usize, 1).await;
        assert!(!pool.on_own_thread(&addr));
        let on_workers = crash().await;
        traffic(&pool, &addr, 16, 16).await;
        assert!(pool.on_own_thread(&addr));
        let on_own = crash().await;
        assert_eq!(on_own, on_workers);
        assert!(on_own.contains("lost"), "{on_own}");
        // Each goes on over a fresh connection, where it was.
        traffic(&pool, &addr, 4, 16).await;
        assert!(pool.on_own_thread(&addr));
        assert_eq!(connections.load(Ordering::SeqCst), 3);
        let crashes = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|w| &w[..] == b"CRASH")
            .count();
        assert_eq!(
            crashes, 2,
            "a request that may have run is never sent twice"
        );
    }

    /// Once on its own thread, the link reads the owner's replies and writes them to the
    /// client while the clients' workers are all busy (here: not running at all).
    #[test]
    fn a_link_on_its_own_thread_needs_no_worker() {
        let owners = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (addr, _, _) = owners.block_on(owner(echo));
        let clients = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let pool = Pool::new(None);
        clients.block_on(async {
            traffic(&pool, &addr, DWELL as usize, 1).await;
            traffic(&pool, &addr, 16, 16).await;
        });
        assert!(pool.on_own_thread(&addr));
        let (client, ours) = owners.block_on(client_socket(None));
        let (client, ours) = (client.into_std().unwrap(), ours.into_std().unwrap());
        client.set_nonblocking(false).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let direct = Direct::new(std::os::fd::AsRawFd::as_raw_fd(&ours));
        for round in 0..3 {
            let key = format!("k{round}");
            // The unit is submitted, then the clients' runtime is not driven again this round.
            let sent = clients.block_on(async {
                pool.submit_to(Arc::clone(&addr), gets(&key, 16), 1, LIMITS, Some(&direct))
                    .await
                    .unwrap_or_else(|r| panic!("{}", r.error))
            });
            let expected = format!("$2\r\n{key}\r\n").repeat(16);
            let mut got = vec![0; expected.len()];
            std::io::Read::read_exact(&mut &client, &mut got).expect("the link wrote the replies");
            assert_eq!(got, expected.as_bytes(), "round {round}");
            assert!(direct.delivered(), "round {round}");
            drop(sent);
        }
        direct.close();
        drop(ours);
    }

    #[test]
    fn moved_replies_name_the_owner() {
        assert_eq!(
            moved_to(b"-MOVED 12 127.0.0.1:7002\r\n"),
            Some("127.0.0.1:7002")
        );
        assert_eq!(moved_to(b"-ERR x\r\n"), None);
        assert!(is_tryagain(b"-TRYAGAIN later\r\n"));
    }
}
