//! Proxy mode (`--cluster-mode proxy`): a request for a key another node owns is forwarded
//! to the owner and its reply relayed byte for byte, so clients that know nothing of the
//! cluster (plain `redis-cli`, `redis-benchmark`) work against any node.
//!
//! Each owner is reached over one long-lived link shared by every client of this node.
//! A link is one task owning one connection at a time: it writes whatever requests are
//! queued in one go and matches the owner's replies to them in order, measuring each reply
//! with the store's wire reader (`store::upstream::wire::reply_len`) under the requesting
//! client's bounds (`proto-max-bulk-len`, `--client-output-limit`). A reply that crosses one
//! fails its request with an error naming the bound and closes that connection (its other
//! requests fail too); the link opens a fresh one for the requests after.
//!
//! Everything is bounded: a link takes at most [`QUEUE`] requests into its queue, keeps at
//! most [`IN_FLIGHT`] unanswered and [`OUTPUT_HIGH`] bytes unwritten. A client whose request
//! finds the queue full waits (and so stops reading its own connection) for up to the
//! forward timeout; a connection whose oldest request is unanswered for that long is closed.
//!
//! Each connection starts with `CLUSTER FORWARDED`: what arrives on it is never forwarded
//! again. Two nodes that briefly each think the other owns a slot (a hand-over seen in a
//! different order) would otherwise pass a request back and forth until the forward timed
//! out; instead the second node answers `-MOVED`, and the first asks again once its map has
//! moved on (`handler::proxy::relay`).
//!
//! **Restarted owners.** A pooled connection to an owner that restarted is closed at the
//! owner's end. Before anything is written on a connection with nothing in flight, the link
//! checks it (a non-blocking read: end of stream, a reset or unasked bytes mean it is dead)
//! and, if it is dead, opens a fresh one and writes the requests there. Those requests are
//! safe to send again because none of their bytes were handed to the old socket: the old
//! owner could not have read, let alone run, them. A connection that dies after a request
//! was written fails that request (`connection to ... lost`): it may have run, and a write is
//! never sent twice.

use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use store::upstream::wire::{self, ReplyLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// Connections per owner. One carries every client's requests, so its batches are as large
/// as the clients' requests in flight allow: with two, each carried half, and the owner woke,
/// read and wrote twice as often for the same GETs (50 unpipelined clients: ~10 GETs per
/// batch against ~16 with one, and 4.2 against 3.4 µs of the owner's CPU per forwarded GET;
/// bench/RESULTS.md, h-proxy4). The owner serves one connection on one task, which at about
/// a microsecond per GET is not the path's bottleneck.
const LINKS: usize = 1;
/// Bound on one forwarded request, from its queueing to its reply.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests one link queues before the clients submitting more wait.
pub const QUEUE: usize = 1024;
/// Requests one link has written and not yet had answered.
pub const IN_FLIGHT: usize = 1024;
/// Bytes of requests one link holds unwritten (the owner is not reading).
pub const OUTPUT_HIGH: usize = 1 << 20;
/// Requests taken off the queue at once (one write carries them all).
const BATCH: usize = 128;
/// Least free space offered to each read.
const CHUNK: usize = 16 * 1024;

/// The owner's raw reply to a forwarded request, or why there is none.
pub type Reply = Result<Bytes, String>;

/// What a link hands back: the request's arguments (to ask again after `-MOVED`) and its reply.
pub struct Answered {
    pub args: Vec<Bytes>,
    pub reply: Reply,
}

/// A forwarded request whose reply has not been read yet.
pub struct Sent {
    addr: Arc<str>,
    reply: oneshot::Receiver<Answered>,
}

impl Sent {
    /// The node the request went to.
    pub fn addr(&self) -> &Arc<str> {
        &self.addr
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
    tx: mpsc::Sender<Request>,
}

struct Request {
    args: Vec<Bytes>,
    limits: ReplyLimits,
    answer: oneshot::Sender<Answered>,
}

impl Request {
    fn fail(self, error: &str) {
        let _ = self.answer.send(Answered {
            args: self.args,
            reply: Err(error.to_string()),
        });
    }
}

/// A request the pool could not queue at once.
enum NotQueued {
    /// The link's queue is full: wait on this link for room.
    Full(Request, Link),
    /// The link's task is gone.
    Closed(Request),
}

/// A request that could not be queued: its owner and why.
pub struct Refused {
    pub addr: Arc<str>,
    pub answered: Answered,
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

    /// Runs `args` at `addr` and returns its raw reply.
    pub async fn forward(
        &self,
        addr: Arc<str>,
        args: Vec<Bytes>,
        affinity: u64,
        limits: ReplyLimits,
    ) -> Answered {
        match self.submit(addr, args, affinity, limits).await {
            Ok(sent) => self.answer(sent).await,
            Err(refused) => refused.answered,
        }
    }

    /// Queues `args` for `addr` without waiting for its reply, so a client's pipeline goes on
    /// as a pipeline. Requests with the same `affinity` (one client's) to one owner share a
    /// connection, so they run and are answered in the order sent. Waits while the link's
    /// queue is full (back-pressure: the client is not read meanwhile), at most the forward
    /// timeout.
    pub async fn submit(
        &self,
        addr: Arc<str>,
        args: Vec<Bytes>,
        affinity: u64,
        limits: ReplyLimits,
    ) -> Result<Sent, Refused> {
        let (answer, reply) = oneshot::channel();
        let request = Request {
            args,
            limits,
            answer,
        };
        let refused = match self.queue(&addr, affinity, request) {
            Ok(()) => None,
            Err(NotQueued::Full(request, link)) => {
                match tokio::time::timeout(self.timeout, link.tx.send(request)).await {
                    Ok(Ok(())) => None,
                    Ok(Err(mpsc::error::SendError(request))) => Some(request),
                    Err(_) => {
                        let error = format!(
                            "proxy: {addr} has {QUEUE} requests queued and took none for {:?}",
                            self.timeout
                        );
                        return Err(Refused {
                            addr,
                            answered: Answered {
                                args: Vec::new(),
                                reply: Err(error),
                            },
                        });
                    }
                }
            }
            Err(NotQueued::Closed(request)) => Some(request),
        };
        match refused {
            None => Ok(Sent { addr, reply }),
            Some(request) => {
                self.drop_link(&addr);
                let error = lost(&addr);
                Err(Refused {
                    addr,
                    answered: Answered {
                        args: request.args,
                        reply: Err(error),
                    },
                })
            }
        }
    }

    /// Waits for the reply to a submitted request (the link answers within its timeout).
    pub async fn answer(&self, sent: Sent) -> Answered {
        self.answer_from(sent).await.1
    }

    /// [`Pool::answer`], and the node that answered (or failed to).
    pub async fn answer_from(&self, sent: Sent) -> (Arc<str>, Answered) {
        match sent.reply.await {
            Ok(answered) => (sent.addr, answered),
            Err(_) => {
                self.drop_link(&sent.addr);
                let error = lost(&sent.addr);
                let answered = Answered {
                    args: Vec::new(),
                    reply: Err(error),
                };
                (sent.addr, answered)
            }
        }
    }

    /// Hands `request` to `addr`'s link under the pool's lock, without cloning the link's
    /// sender (which would write the channel's shared counts twice per request).
    fn queue(&self, addr: &Arc<str>, affinity: u64, request: Request) -> Result<(), NotQueued> {
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
        match entry[i].tx.try_send(request) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(request)) => {
                Err(NotQueued::Full(request, entry[i].clone()))
            }
            Err(mpsc::error::TrySendError::Closed(request)) => Err(NotQueued::Closed(request)),
        }
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

impl Link {
    fn start(addr: Arc<str>, password: Option<Arc<str>>, timeout: Duration) -> Link {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(
            Relay {
                addr,
                password,
                timeout,
                rx,
                unsent: Vec::with_capacity(BATCH),
                in_flight: VecDeque::new(),
                input: BytesMut::with_capacity(CHUNK),
                output: BytesMut::with_capacity(CHUNK),
                closed: false,
            }
            .run(),
        );
        Link { tx }
    }
}

/// A request written to the owner and not yet answered.
struct InFlight {
    request: Request,
    written: Instant,
}

/// One link's task and state.
struct Relay {
    addr: Arc<str>,
    password: Option<Arc<str>>,
    timeout: Duration,
    rx: mpsc::Receiver<Request>,
    /// Taken off the queue, not yet encoded: safe to send on any connection.
    unsent: Vec<Request>,
    in_flight: VecDeque<InFlight>,
    input: BytesMut,
    output: BytesMut,
    /// The queue is closed (the pool let the link go).
    closed: bool,
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
    /// Found closed with nothing of the queued requests written: open another.
    Stale,
    /// Failed with requests written on it: they fail with this error.
    Lost(String),
}

impl Relay {
    async fn run(mut self) {
        let mut conn: Option<TcpStream> = None;
        loop {
            let stream = match &mut conn {
                Some(stream) => stream,
                None => {
                    if self.unsent.is_empty()
                        && self.rx.recv_many(&mut self.unsent, BATCH).await == 0
                    {
                        return;
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
                            return;
                        }
                    }
                }
            };
            match self.serve(stream).await {
                Ok(()) => return,
                Err(Dead::Stale) => {}
                Err(Dead::Lost(error)) => {
                    for sent in self.in_flight.drain(..) {
                        sent.request.fail(&error);
                    }
                }
            }
            conn = None;
            self.input.clear();
            self.output.clear();
        }
    }

    /// Relays over one connection until it dies or the pool lets the link go (`Ok`).
    ///
    /// Replies are read through the connection's read half, whose read takes a short read as
    /// proof that the socket is drained (epoll is edge-triggered): the next wait for replies
    /// costs no system call. Reading until `WouldBlock` instead cost one failed `recvfrom`
    /// per batch of replies on the proxying node (0.1 per forwarded GET at 50 clients).
    async fn serve(&mut self, stream: &mut TcpStream) -> Result<(), Dead> {
        let (mut replies, requests) = stream.split();
        let stream: &TcpStream = requests.as_ref();
        let mut tick = tokio::time::interval(self.timeout.min(Duration::from_secs(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if !self.unsent.is_empty() {
                if !self.in_flight.is_empty() && self.unsent.len() < BATCH {
                    self.gather().await;
                }
                if self.in_flight.is_empty() && !self.probe(stream) {
                    return Err(Dead::Stale);
                }
                let now = Instant::now();
                for request in self.unsent.drain(..) {
                    wire::encode(&mut self.output, &request.args);
                    self.in_flight.push_back(InFlight {
                        request,
                        written: now,
                    });
                }
                self.write(stream)?;
            }
            if self.closed && self.in_flight.is_empty() {
                return Ok(());
            }
            let room =
                !self.closed && self.output.len() < OUTPUT_HIGH && self.in_flight.len() < IN_FLIGHT;
            if self.input.capacity() - self.input.len() < CHUNK / 4 {
                self.input.reserve(CHUNK);
            }
            let event = tokio::select! {
                biased;
                read = replies.read_buf(&mut self.input) => Event::Read(read),
                ready = stream.writable(), if !self.output.is_empty() => Event::Writable(ready),
                taken = self.rx.recv_many(&mut self.unsent, BATCH), if room => Event::Taken(taken),
                _ = tick.tick(), if !self.in_flight.is_empty() => Event::Tick,
            };
            match event {
                Event::Read(Ok(0)) => return Err(self.lost_with("closed by the owner")),
                Event::Read(Ok(_)) => self.answer_complete()?,
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

    /// With requests already at the owner, lets the clients that are ready run once before
    /// writing, and takes what they queued: one write then carries many clients' requests.
    /// Writing as each request came cost 1.6 sends per forwarded GET on the proxying node at
    /// 50 unpipelined clients (strace -c), against the 1 a direct GET costs; an idle link
    /// still writes at once, so a lone client waits for nothing.
    async fn gather(&mut self) {
        tokio::task::yield_now().await;
        while self.unsent.len() < BATCH {
            match self.rx.try_recv() {
                Ok(request) => self.unsent.push(request),
                Err(_) => break,
            }
        }
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

    /// Answers every request whose reply is complete in what was read.
    fn answer_complete(&mut self) -> Result<(), Dead> {
        while !self.input.is_empty() {
            let Some(sent) = self.in_flight.front() else {
                return Err(self.lost_with("a reply nothing asked for"));
            };
            match wire::reply_len(&self.input, sent.request.limits) {
                Ok(Some(len)) => {
                    let reply = self.input.split_to(len).freeze();
                    let sent = self.in_flight.pop_front().expect("checked above");
                    let _ = sent.request.answer.send(Answered {
                        args: sent.request.args,
                        reply: Ok(reply),
                    });
                }
                Ok(None) => break,
                Err(e) => {
                    let error = format!("proxy: {} sent a bad reply: {e}", self.addr);
                    return Err(Dead::Lost(error));
                }
            }
        }
        if self.input.is_empty() && self.input.capacity() > OUTPUT_HIGH {
            self.input = BytesMut::with_capacity(CHUNK);
        }
        Ok(())
    }

    fn lost_with(&self, why: &str) -> Dead {
        Dead::Lost(format!("{} ({why})", lost(&self.addr)))
    }

    fn fail_everything(&mut self, error: &str) {
        for request in self.unsent.drain(..) {
            request.fail(error);
        }
        self.rx.close();
        while let Ok(request) = self.rx.try_recv() {
            request.fail(error);
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
            let submit = pool.submit(Arc::clone(&addr), args(&["GET", "key"]), 3, LIMITS);
            match tokio::time::timeout(Duration::from_millis(100), submit).await {
                Ok(Ok(s)) => sent.push(s),
                Ok(Err(e)) => panic!("refused early: {:?}", e.answered.reply),
                Err(_) => break,
            }
            assert!(sent.len() <= QUEUE + IN_FLIGHT + BATCH, "unbounded");
        }
        assert!(sent.len() >= QUEUE, "only {} queued", sent.len());
        // The owner never answers: every request fails once the oldest is overdue.
        for s in sent.drain(..) {
            let error = pool.answer(s).await.reply.unwrap_err();
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
