//! A typed client of Mantle's shared log (CORFU/ZLog; docs/shared-log.md).
//!
//! The servers keep two small things: write-once storage objects guarded by an epoch
//! (`ZLOG.WRITE/READ/FILL/TRIM/TRIMTO/SEAL`) and, on the node owning a log name's slot, an
//! in-memory sequencer (`ZLOG.NEXT/TAIL/INIT/OPEN`). Everything that spans nodes is here, as
//! in CORFU: [`layout`] maps a position to its chain of objects; an append takes a position
//! from the sequencer and writes the chain head to tail; a read asks the tail (the
//! authority) and repairs a chain an append left half-written; and when the sequencer is
//! gone (its node died, or never ran) or storage says the epoch is stale, [`Log`] seals
//! every object at a newer epoch, learns the tail from the seals and installs a new
//! sequencer, then carries on — the caller only sees the append succeed.
//!
//! ```no_run
//! let mut log = zlog::Log::open("redis://127.0.0.1:6380", "orders").unwrap();
//! let pos = log.append(b"first").unwrap();
//! assert_eq!(log.read(pos).unwrap(), zlog::Entry::Data(b"first".to_vec()));
//! ```

pub mod layout;
mod lease;

pub use layout::Layout;
pub use lease::{MAX_WANT, WANT_CAP};
use redis::{ConnectionLike, ErrorKind, RedisError, Value};
use std::time::{Duration, Instant};

/// What a position holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Data(Vec<u8>),
    /// Never written (yet): a reader that must move past it fills it.
    NotWritten,
    /// Invalidated by a fill.
    Filled,
    Trimmed,
}

/// Why a log operation failed.
#[derive(Debug)]
pub enum Error {
    /// The servers did not answer (or kept refusing) within [`Log::set_deadline`].
    Unavailable(String),
    /// `fill` found the position written: it holds data, which stays.
    Written,
    /// The server refused the request (the message says why).
    Refused(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Unavailable(why) => write!(f, "shared log unavailable: {why}"),
            Error::Written => f.write_str("the position is written"),
            Error::Refused(why) => write!(f, "refused: {why}"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Positions reserved by one `next`: `first..first + count`, valid at `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Positions {
    pub epoch: u64,
    pub first: u64,
    pub count: u64,
}

/// How long an operation keeps retrying through failovers by default.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);

/// Seal rounds before recovery gives up (each is lost only to a concurrent recoverer).
const MAX_RECOVERY_ROUNDS: u32 = 64;

/// A storage reply the client acts on.
enum Reply {
    Ok(Value),
    Stale(u64),
    Written,
    Filled,
    Trimmed,
    NoSequencer,
}

/// An open log over a connection: a single node's (`redis::Connection`) or a cluster's
/// (`redis::cluster::ClusterConnection`, routing every request by its key).
pub struct Log<C> {
    conn: C,
    /// Makes a fresh connection: after a node died a cluster connection keeps its dead
    /// socket and the old slot map, so a transient failure is followed by a reconnect.
    connect: Connector<C>,
    name: String,
    layout: Layout,
    /// The newest epoch this client has seen; requests carry it.
    epoch: u64,
    deadline: Duration,
    /// Positions held under the log's lease (`lease`), and how many to ask for next.
    held: Option<lease::Held>,
    sizing: lease::Sizing,
    /// Unused leased positions handed back to the sequencer, and filled ([`Log::given_up`]).
    given_back: u64,
    filled: u64,
    /// The nodes `open_cluster` was given: asked who runs the sequencer when its owner
    /// does not answer (empty on a single node).
    seeds: Vec<String>,
    /// A direct connection to the node running the sequencer in place of the slot's owner
    /// (a successor after the owner died, see [`Log::sequencer_call`]); dropped when that
    /// node redirects or fails.
    stand_in: Option<redis::Connection>,
}

/// What opens a connection of type `C`.
pub type Connector<C> = Box<dyn FnMut() -> redis::RedisResult<C> + Send>;

impl Log<redis::Connection> {
    /// Opens `name` on the single node at `url` (`redis://HOST:PORT`).
    pub fn open(url: &str, name: &str) -> Result<Log<redis::Connection>> {
        let client = redis::Client::open(url).map_err(unavailable)?;
        Log::build(Box::new(move || client.get_connection()), name, Vec::new())
    }
}

impl Log<redis::cluster::ClusterConnection> {
    /// Opens `name` on the cluster reachable at any of `urls`.
    pub fn open_cluster(
        urls: &[String],
        name: &str,
    ) -> Result<Log<redis::cluster::ClusterConnection>> {
        let client = redis::cluster::ClusterClientBuilder::new(urls.to_vec())
            // Few fast retries inside redis-rs: this client retries whole steps itself, up
            // to its deadline, so a failover is waited out once, not per request. They
            // must be short: a node's `-CLUSTERDOWN` (a dead node's slot) is waited on
            // twice here before this client sees it and gives the object up, and a
            // recovery's seal meets one per object of the dead node (at 10-100 ms a wait,
            // that alone held the first append after a takeover back by 0.5-0.8 s).
            .retries(2)
            .min_retry_wait(1)
            .max_retry_wait(5)
            .build()
            .map_err(unavailable)?;
        Log::build(
            Box::new(move || client.get_connection()),
            name,
            urls.to_vec(),
        )
    }
}

fn unavailable(e: RedisError) -> Error {
    Error::Unavailable(e.to_string())
}

/// Whether `e` says the node holding the key is gone (dead, or its slot has no live owner),
/// rather than busy or moving: an append then gives its position up at once.
fn unreachable(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::IoError | ErrorKind::ClusterDown | ErrorKind::ClusterConnectionNotFound
    ) || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.code() == Some("CLUSTERDOWN")
}

/// The address a `-SEQAT slot host:port` redirection names.
fn stand_in_address(e: &RedisError) -> Option<&str> {
    if e.code() != Some("SEQAT") {
        return None;
    }
    e.detail()?.split(' ').nth(1)
}

/// A connection to one node, given up quickly if it does not answer.
fn connect_to(url: &str) -> Option<redis::Connection> {
    let client = redis::Client::open(url).ok()?;
    let conn = client.get_connection_with_timeout(LOOKUP_TIMEOUT).ok()?;
    conn.set_read_timeout(Some(LOOKUP_TIMEOUT)).ok()?;
    conn.set_write_timeout(Some(LOOKUP_TIMEOUT)).ok()?;
    Some(conn)
}

/// How long a node asked who runs a sequencer (or the stand-in itself) may take to answer.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(1);

/// Whether `e` is worth retrying after a pause: the node is down or the slot is moving.
fn transient(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::IoError
            | ErrorKind::ClusterDown
            | ErrorKind::TryAgain
            | ErrorKind::Moved
            | ErrorKind::Ask
            | ErrorKind::MasterDown
            | ErrorKind::BusyLoadingError
            | ErrorKind::ClusterConnectionNotFound
    ) || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_io_error()
        || e.code() == Some("CLUSTERDOWN")
}

impl<C: ConnectionLike> Log<C> {
    /// Opens `name` over the connections `connect` makes: asks its sequencer's node for
    /// the layout.
    pub fn with_connector(connect: Connector<C>, name: &str) -> Result<Log<C>> {
        Log::build(connect, name, Vec::new())
    }

    fn build(mut connect: Connector<C>, name: &str, seeds: Vec<String>) -> Result<Log<C>> {
        let conn = connect().map_err(unavailable)?;
        let mut log = Log {
            conn,
            connect,
            name: name.to_string(),
            layout: Layout::new(name, 1, 1),
            epoch: 0,
            deadline: DEFAULT_DEADLINE,
            held: None,
            sizing: lease::Sizing::default(),
            given_back: 0,
            filled: 0,
            seeds,
            stand_in: None,
        };
        let started = Instant::now();
        let info = log.sequencer_call(started, redis::cmd("ZLOG.OPEN").arg(name))?;
        let Reply::Ok(value) = info else {
            return Err(Error::Refused("ZLOG.OPEN".into()));
        };
        let fields = map_fields(value)?;
        let field = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| *v)
                .ok_or_else(|| Error::Refused(format!("ZLOG.OPEN gave no {name}")))
        };
        let (replicas, stripes) = (field("replicas")?, field("stripes")?);
        if !(1..=16).contains(&replicas) || !(1..=1024).contains(&stripes) {
            return Err(Error::Refused(format!(
                "ZLOG.OPEN gave replicas {replicas}, stripes {stripes}"
            )));
        }
        log.layout = Layout::new(name, stripes as u32, replicas as u32);
        log.epoch = field("epoch")?.max(0) as u64;
        Ok(log)
    }

    /// How long one operation retries through failures before it fails.
    pub fn set_deadline(&mut self, deadline: Duration) {
        self.deadline = deadline;
    }

    /// The newest epoch this client has seen.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sends `cmd`, retrying transient failures until the deadline; the reply, classified.
    fn call(&mut self, started: Instant, cmd: &redis::Cmd) -> Result<Reply> {
        // Without `gone_is_final` there is always a reply or an error.
        self.call_unless_gone(started, cmd, false)?
            .ok_or_else(|| Error::Unavailable("no reply".into()))
    }

    /// [`Log::call`], but `None` at once if `gone_is_final` and the key's node is gone
    /// ([`unreachable`]) instead of waiting for its slot to be given to another node.
    fn call_unless_gone(
        &mut self,
        started: Instant,
        cmd: &redis::Cmd,
        gone_is_final: bool,
    ) -> Result<Option<Reply>> {
        let mut pause = Duration::from_millis(5);
        loop {
            match cmd.query::<Value>(&mut self.conn) {
                Ok(value) => return Ok(Some(Reply::Ok(value))),
                Err(e) => match classify(&e) {
                    Some(reply) => return Ok(Some(reply)),
                    None if gone_is_final && unreachable(&e) => return Ok(None),
                    None if transient(&e) && started.elapsed() < self.deadline => {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(100));
                        // Kept if no node answers yet: the next round tries again.
                        if let Ok(fresh) = (self.connect)() {
                            self.conn = fresh;
                        }
                    }
                    None if transient(&e) => return Err(unavailable(e)),
                    None => return Err(Error::Refused(e.to_string())),
                },
            }
        }
    }

    /// Sends a sequencer command (`ZLOG.NEXT/TAIL/INIT/OPEN`). It goes to the owner of the
    /// log's slot, or to the node standing in for it: when the owner does not answer, the
    /// seeds are asked, and the one running the sequencer in its place (the successor of a
    /// dead owner, named by `-SEQAT slot host:port`; docs/shared-log.md, "Sequencer
    /// takeover") is used directly until it redirects.
    fn sequencer_call(&mut self, started: Instant, cmd: &redis::Cmd) -> Result<Reply> {
        let mut pause = Duration::from_millis(2);
        loop {
            let answer = match self.stand_in.as_mut() {
                Some(stand_in) => cmd.query::<Value>(stand_in),
                None => cmd.query::<Value>(&mut self.conn),
            };
            let e = match answer {
                Ok(value) => return Ok(Reply::Ok(value)),
                Err(e) => e,
            };
            if let Some(reply) = classify(&e) {
                return Ok(reply);
            }
            let via_stand_in = self.stand_in.take().is_some();
            if let Some(addr) = stand_in_address(&e) {
                // Another node runs the sequencer in the owner's place.
                self.stand_in = connect_to(&redis_url(addr));
            } else if !transient(&e) {
                return Err(Error::Refused(e.to_string()));
            } else if !via_stand_in {
                // The owner does not answer: who runs the sequencer now?
                if let Some(reply) = self.find_stand_in(cmd) {
                    return Ok(reply);
                }
            }
            // A stand-in that redirected or failed is retried through the map at once;
            // anything else after a pause.
            if via_stand_in && self.stand_in.is_none() {
                continue;
            }
            if started.elapsed() >= self.deadline {
                return Err(unavailable(e));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
            if self.stand_in.is_none() {
                if let Ok(fresh) = (self.connect)() {
                    self.conn = fresh;
                }
            }
        }
    }

    /// Asks each seed for the sequencer command `cmd`; the first node that runs it (or
    /// answers as its sequencer would: `NOSEQ`, `STALE`) becomes the stand-in.
    fn find_stand_in(&mut self, cmd: &redis::Cmd) -> Option<Reply> {
        for seed in self.seeds.clone() {
            let Some(mut conn) = connect_to(&seed) else {
                continue;
            };
            let mut answer = cmd.query::<Value>(&mut conn);
            if let Err(e) = &answer {
                if let Some(addr) = stand_in_address(e) {
                    let Some(redirected) = connect_to(&redis_url(addr)) else {
                        continue;
                    };
                    conn = redirected;
                    answer = cmd.query::<Value>(&mut conn);
                }
            }
            let reply = match answer {
                Ok(value) => Reply::Ok(value),
                Err(e) => match classify(&e) {
                    Some(reply) => reply,
                    // MOVED (the owner's lease has not lapsed yet), CLUSTERDOWN, no answer.
                    None => continue,
                },
            };
            self.stand_in = Some(conn);
            return Some(reply);
        }
        None
    }

    fn give_up<T>(&self, started: Instant, what: &str) -> Result<T> {
        Err(Error::Unavailable(format!(
            "{what} did not succeed within {:?} (after {:?})",
            self.deadline,
            started.elapsed()
        )))
    }

    /// Reserves `count` positions from the sequencer (recovering it if it is gone).
    pub fn next(&mut self, count: u64) -> Result<Positions> {
        let started = Instant::now();
        loop {
            match self
                .sequencer_call(started, redis::cmd("ZLOG.NEXT").arg(&self.name).arg(count))?
            {
                Reply::Ok(value) => {
                    let (epoch, first) = pair(value)?;
                    self.epoch = self.epoch.max(epoch);
                    return Ok(Positions {
                        epoch,
                        first,
                        count,
                    });
                }
                Reply::NoSequencer => self.recover(started, self.epoch + 1)?,
                _ => return Err(Error::Refused("ZLOG.NEXT".into())),
            }
        }
    }

    /// CheckTail: the position the next append will get.
    pub fn tail(&mut self) -> Result<u64> {
        let started = Instant::now();
        loop {
            match self.sequencer_call(started, redis::cmd("ZLOG.TAIL").arg(&self.name))? {
                Reply::Ok(value) => {
                    let (epoch, tail) = pair(value)?;
                    self.epoch = self.epoch.max(epoch);
                    return Ok(tail);
                }
                Reply::NoSequencer => self.recover(started, self.epoch + 1)?,
                _ => return Err(Error::Refused("ZLOG.TAIL".into())),
            }
        }
    }

    /// Appends `data`: its position, once every replica holds it. The position comes from
    /// [`Log::reserve`], so the log's lease policy decides whether this is a round trip to
    /// the sequencer or a position this client holds. A position whose chain has a replica
    /// on a node that is gone is given up at once for the next one (it stays a hole, or a
    /// chain a reader completes), so appends go on while a dead node's slots wait to be
    /// reassigned.
    pub fn append(&mut self, data: &[u8]) -> Result<u64> {
        let started = Instant::now();
        let mut lost = 0u32;
        while started.elapsed() < self.deadline {
            let (epoch, pos) = self.reserve()?;
            if self.write_at(started, epoch, pos, data)? {
                return Ok(pos);
            }
            // Positions given up one after another (a replica's node is down): pause a
            // little more each time, so a long outage does not burn positions by the
            // thousand.
            lost += 1;
            std::thread::sleep(Duration::from_millis(u64::from(lost.min(20))));
        }
        self.give_up(started, "append")
    }

    /// Writes `data` at a reserved position, head to tail. `false`: the position was lost
    /// (filled by a reader, the epoch moved on, or a replica's node is gone) and the caller
    /// takes another.
    pub fn write_at(
        &mut self,
        started: Instant,
        epoch: u64,
        pos: u64,
        data: &[u8],
    ) -> Result<bool> {
        for obj in self.layout.chain(pos).collect::<Vec<_>>() {
            let cmd = storage("ZLOG.WRITE", &obj, epoch, pos).arg(data).clone();
            let Some(reply) = self.call_unless_gone(started, &cmd, true)? else {
                return Ok(false);
            };
            match reply {
                Reply::Ok(_) => {}
                // Ours already (a retried request, or a reader's repair), or someone else's.
                Reply::Written => match self.read_object(started, &obj, pos)? {
                    Reply::Ok(Value::Data(held)) if held == data => {}
                    _ => return Ok(false),
                },
                Reply::Filled | Reply::Trimmed => return Ok(false),
                Reply::Stale(sealed) => {
                    self.after_stale(started, sealed)?;
                    return Ok(false);
                }
                Reply::NoSequencer => return Err(Error::Refused("ZLOG.WRITE".into())),
            }
        }
        Ok(true)
    }

    fn read_object(&mut self, started: Instant, obj: &str, pos: u64) -> Result<Reply> {
        let cmd = storage("ZLOG.READ", obj, self.epoch, pos);
        self.call(started, &cmd)
    }

    /// What `pos` holds. The chain's tail decides; a tail that lacks what the head holds is
    /// an append (or fill) caught half way, completed here before answering.
    pub fn read(&mut self, pos: u64) -> Result<Entry> {
        let started = Instant::now();
        while started.elapsed() < self.deadline {
            let chain: Vec<String> = self.layout.chain(pos).collect();
            let mut found = Entry::NotWritten;
            let mut stale = None;
            let mut at = chain.len();
            for (i, obj) in chain.iter().enumerate().rev() {
                match self.read_object(started, obj, pos)? {
                    Reply::Ok(Value::Data(data)) => found = Entry::Data(data),
                    Reply::Ok(_) => continue,
                    Reply::Filled => found = Entry::Filled,
                    Reply::Trimmed => found = Entry::Trimmed,
                    Reply::Stale(sealed) => {
                        stale = Some(sealed);
                        break;
                    }
                    Reply::Written | Reply::NoSequencer => {
                        return Err(Error::Refused("ZLOG.READ".into()))
                    }
                }
                at = i;
                break;
            }
            if let Some(sealed) = stale {
                self.after_stale(started, sealed)?;
                continue;
            }
            if at + 1 < chain.len() {
                self.repair(started, &chain[at + 1..], pos, &found)?;
            }
            return Ok(found);
        }
        self.give_up(started, "read")
    }

    /// Copies what the chain's prefix holds onto the rest of it.
    fn repair(&mut self, started: Instant, rest: &[String], pos: u64, entry: &Entry) -> Result<()> {
        for obj in rest {
            let cmd = match entry {
                Entry::Data(data) => storage("ZLOG.WRITE", obj, self.epoch, pos)
                    .arg(data.as_slice())
                    .clone(),
                Entry::Filled => storage("ZLOG.FILL", obj, self.epoch, pos),
                Entry::Trimmed => storage("ZLOG.TRIM", obj, self.epoch, pos),
                Entry::NotWritten => return Ok(()),
            };
            // A refusal means the object holds something already: the tail's word stands.
            self.call(started, &cmd)?;
        }
        Ok(())
    }

    /// Invalidates `pos` if nothing was written there; [`Error::Written`] if it was.
    pub fn fill(&mut self, pos: u64) -> Result<()> {
        let started = Instant::now();
        'retry: while started.elapsed() < self.deadline {
            let chain: Vec<String> = self.layout.chain(pos).collect();
            for (i, obj) in chain.iter().enumerate() {
                match self.call(started, &storage("ZLOG.FILL", obj, self.epoch, pos))? {
                    Reply::Ok(_) | Reply::Trimmed => {}
                    Reply::Written => {
                        // The position holds data from here on: complete its chain.
                        if let Reply::Ok(Value::Data(data)) = self.read_object(started, obj, pos)? {
                            self.repair(started, &chain[i + 1..], pos, &Entry::Data(data))?;
                        }
                        return Err(Error::Written);
                    }
                    Reply::Filled => {}
                    Reply::Stale(sealed) => {
                        self.after_stale(started, sealed)?;
                        continue 'retry;
                    }
                    Reply::NoSequencer => return Err(Error::Refused("ZLOG.FILL".into())),
                }
            }
            return Ok(());
        }
        self.give_up(started, "fill")
    }

    /// Trims `pos` on every replica.
    pub fn trim(&mut self, pos: u64) -> Result<()> {
        let started = Instant::now();
        let chain: Vec<String> = self.layout.chain(pos).collect();
        for obj in chain {
            while let Reply::Stale(sealed) =
                self.call(started, &storage("ZLOG.TRIM", &obj, self.epoch, pos))?
            {
                self.after_stale(started, sealed)?;
            }
        }
        Ok(())
    }

    /// Trims every position below `pos`, object by object, in steps the server accepts.
    pub fn trim_to(&mut self, pos: u64) -> Result<()> {
        let started = Instant::now();
        let objects: Vec<String> = self.layout.objects().collect();
        for obj in objects {
            let mut to = 0;
            while to < pos {
                to = (to + 65_536).min(pos);
                while let Reply::Stale(sealed) =
                    self.call(started, &storage("ZLOG.TRIMTO", &obj, self.epoch, to))?
                {
                    self.after_stale(started, sealed)?;
                }
            }
        }
        Ok(())
    }

    /// Storage is sealed at `sealed`: adopt the sequencer if it runs at that epoch or newer
    /// (a client that was merely behind), otherwise recover past it.
    fn after_stale(&mut self, started: Instant, sealed: u64) -> Result<()> {
        self.recover(started, sealed)
    }

    /// Makes sure a sequencer runs at epoch `at_least` or newer: adopts one if it runs,
    /// otherwise seals the objects at a newer epoch than any has, takes the highest
    /// position the seals report, and installs a sequencer past it (ZLOG.INIT).
    ///
    /// Objects whose node is gone are skipped, but a seal counts only if it reached at
    /// least one replica of every stripe and more than half of all objects
    /// ([`SealCover`]): the first means no append of an older epoch can still complete
    /// (its chain has a sealed replica) and the new tail is past every acknowledged
    /// position (each is on every replica of its stripe); the second means two clients
    /// sealing at the same epoch share an object, so only one of them wins it.
    fn recover(&mut self, started: Instant, at_least: u64) -> Result<()> {
        let mut epoch = at_least.max(1);
        let mut jitter = Jitter::new();
        let mut lost_rounds = 0;
        let mut short_pause = Duration::from_millis(2);
        while lost_rounds < MAX_RECOVERY_ROUNDS {
            if started.elapsed() >= self.deadline {
                break;
            }
            match self.sequencer_call(started, redis::cmd("ZLOG.TAIL").arg(&self.name))? {
                Reply::Ok(value) => {
                    let (running, _) = pair(value)?;
                    if running >= at_least {
                        self.epoch = self.epoch.max(running);
                        return Ok(());
                    }
                    epoch = epoch.max(running + 1);
                }
                Reply::NoSequencer => {}
                _ => return Err(Error::Refused("ZLOG.TAIL".into())),
            }
            let mut max: i64 = -1;
            let mut lost = false;
            let mut cover = SealCover::new(&self.layout);
            let (stripes, replicas) = (self.layout.stripes(), self.layout.replicas());
            for (stripe, replica) in (0..stripes).flat_map(|s| (0..replicas).map(move |r| (s, r))) {
                let obj = self.layout.object(stripe, replica);
                let seal = redis::cmd("ZLOG.SEAL").arg(&obj).arg(epoch).clone();
                match self.call_unless_gone(started, &seal, true)? {
                    Some(Reply::Ok(Value::Int(pos))) => {
                        max = max.max(pos);
                        cover.sealed(stripe);
                    }
                    Some(Reply::Stale(sealed)) => {
                        epoch = epoch.max(sealed + 1);
                        lost = true;
                        break;
                    }
                    None => {}
                    Some(_) => return Err(Error::Refused("ZLOG.SEAL".into())),
                }
            }
            if lost {
                // Another client is recovering too: let it finish, then adopt its sequencer.
                lost_rounds += 1;
                std::thread::sleep(jitter.pause());
                continue;
            }
            if !cover.enough() {
                // Too much of the storage is gone to fence the old sequencer: wait for its
                // slots to come back (to a new owner), then seal at a newer epoch (this one
                // is taken on the objects that were sealed).
                epoch += 1;
                std::thread::sleep(short_pause);
                short_pause = (short_pause * 2).min(Duration::from_millis(100));
                continue;
            }
            let tail = (max + 1) as u64;
            let init = redis::cmd("ZLOG.INIT")
                .arg(&self.name)
                .arg(epoch)
                .arg(tail)
                .clone();
            match self.sequencer_call(started, &init)? {
                Reply::Ok(_) => {
                    self.epoch = self.epoch.max(epoch);
                    return Ok(());
                }
                Reply::Stale(running) => {
                    self.epoch = self.epoch.max(running);
                    return Ok(());
                }
                _ => return Err(Error::Refused("ZLOG.INIT".into())),
            }
        }
        self.give_up(started, "sequencer recovery")
    }
}

/// Which objects a seal reached (see [`Log::recover`]).
struct SealCover {
    stripes: Vec<bool>,
    sealed: usize,
    objects: usize,
}

impl SealCover {
    fn new(layout: &Layout) -> SealCover {
        SealCover {
            stripes: vec![false; layout.stripes() as usize],
            sealed: 0,
            objects: (layout.stripes() * layout.replicas()) as usize,
        }
    }

    fn sealed(&mut self, stripe: u32) {
        self.stripes[stripe as usize] = true;
        self.sealed += 1;
    }

    /// Every stripe has a sealed replica, and more than half the objects are sealed.
    fn enough(&self) -> bool {
        self.stripes.iter().all(|s| *s) && self.sealed * 2 > self.objects
    }
}

/// The replies the client acts on; `None` for the rest (failures, redirections).
fn classify(e: &RedisError) -> Option<Reply> {
    Some(match e.code()? {
        "STALE" => Reply::Stale(stale_epoch(e)),
        "WRITTEN" => Reply::Written,
        "FILLED" => Reply::Filled,
        "TRIMMED" => Reply::Trimmed,
        "NOSEQ" => Reply::NoSequencer,
        _ => return None,
    })
}

fn redis_url(addr: &str) -> String {
    format!("redis://{addr}")
}

/// `NAME obj epoch pos`.
fn storage(name: &str, obj: &str, epoch: u64, pos: u64) -> redis::Cmd {
    let mut cmd = redis::cmd(name);
    cmd.arg(obj).arg(epoch).arg(pos);
    cmd
}

/// The sealed epoch a `STALE` refusal ends with.
fn stale_epoch(e: &RedisError) -> u64 {
    e.detail()
        .and_then(|d| d.rsplit(' ').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

fn pair(value: Value) -> Result<(u64, u64)> {
    match value {
        Value::Bulk(items) if items.len() == 2 => match (&items[0], &items[1]) {
            (Value::Int(a), Value::Int(b)) if *a >= 0 && *b >= 0 => Ok((*a as u64, *b as u64)),
            _ => Err(Error::Refused("expected two positive integers".into())),
        },
        other => Err(Error::Refused(format!(
            "expected [epoch, position], got {other:?}"
        ))),
    }
}

/// `[a, b, ...]`: `N` non-negative integers.
fn pair_at<const N: usize>(value: Value) -> Result<[u64; N]> {
    let mut out = [0; N];
    match &value {
        Value::Bulk(items) if items.len() == N => {
            for (slot, item) in out.iter_mut().zip(items) {
                match item {
                    Value::Int(n) if *n >= 0 => *slot = *n as u64,
                    _ => {
                        return Err(Error::Refused(format!(
                            "expected {N} integers, got {value:?}"
                        )))
                    }
                }
            }
            Ok(out)
        }
        _ => Err(Error::Refused(format!(
            "expected {N} integers, got {value:?}"
        ))),
    }
}

/// A flat `[name, integer, ...]` reply (RESP2's form of a map).
fn map_fields(value: Value) -> Result<Vec<(String, i64)>> {
    let Value::Bulk(items) = value else {
        return Err(Error::Refused(format!("expected a map, got {value:?}")));
    };
    let mut fields = Vec::new();
    for pair in items.chunks(2) {
        if let [name, Value::Int(n)] = pair {
            let name = match name {
                Value::Status(s) => s.clone(),
                Value::Data(d) => String::from_utf8_lossy(d).into_owned(),
                _ => continue,
            };
            fields.push((name, *n));
        }
    }
    Ok(fields)
}

/// Pauses of 1-16 ms, varied so concurrent recoverers fall out of step.
struct Jitter(u64);

impl Jitter {
    fn new() -> Jitter {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() as u64)
            .unwrap_or(1)
            ^ u64::from(std::process::id()) << 32;
        Jitter(seed | 1)
    }

    fn pause(&mut self) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_millis(1 + self.0 % 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_counts_with_every_stripe_and_most_objects() {
        let layout = Layout::new("l", 4, 2);
        // One replica of every stripe: 4 of 8 objects, not more than half.
        let mut cover = SealCover::new(&layout);
        (0..4).for_each(|s| cover.sealed(s));
        assert!(!cover.enough());
        cover.sealed(0);
        assert!(cover.enough());
        // Most objects, but one stripe has no sealed replica: an old append could still
        // complete there.
        let mut cover = SealCover::new(&layout);
        [0, 0, 1, 1, 2, 2].into_iter().for_each(|s| cover.sealed(s));
        assert!(!cover.enough());
    }

    #[test]
    fn redirections_and_dead_nodes_are_told_apart() {
        let seqat = redis::parse_redis_value(b"-SEQAT 1234 127.0.0.1:7001\r\n").unwrap_err();
        assert_eq!(stand_in_address(&seqat), Some("127.0.0.1:7001"));
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(unreachable(&refused) && transient(&refused));
        let busy = RedisError::from((ErrorKind::TryAgain, "TRYAGAIN"));
        assert!(!unreachable(&busy) && transient(&busy));
        assert_eq!(stand_in_address(&busy), None);
    }
}
