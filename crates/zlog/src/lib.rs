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
pub use lease::MAX_WANT;
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
}

/// What opens a connection of type `C`.
pub type Connector<C> = Box<dyn FnMut() -> redis::RedisResult<C> + Send>;

impl Log<redis::Connection> {
    /// Opens `name` on the single node at `url` (`redis://HOST:PORT`).
    pub fn open(url: &str, name: &str) -> Result<Log<redis::Connection>> {
        let client = redis::Client::open(url).map_err(unavailable)?;
        Log::with_connector(Box::new(move || client.get_connection()), name)
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
            // to its deadline, so a failover is waited out once, not per request.
            .retries(2)
            .min_retry_wait(10)
            .max_retry_wait(100)
            .build()
            .map_err(unavailable)?;
        Log::with_connector(Box::new(move || client.get_connection()), name)
    }
}

fn unavailable(e: RedisError) -> Error {
    Error::Unavailable(e.to_string())
}

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
    pub fn with_connector(mut connect: Connector<C>, name: &str) -> Result<Log<C>> {
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
        };
        let started = Instant::now();
        let info = log.call(started, redis::cmd("ZLOG.OPEN").arg(name))?;
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
        let mut pause = Duration::from_millis(5);
        loop {
            match cmd.query::<Value>(&mut self.conn) {
                Ok(value) => return Ok(Reply::Ok(value)),
                Err(e) => match e.code() {
                    Some("STALE") => return Ok(Reply::Stale(stale_epoch(&e))),
                    Some("WRITTEN") => return Ok(Reply::Written),
                    Some("FILLED") => return Ok(Reply::Filled),
                    Some("TRIMMED") => return Ok(Reply::Trimmed),
                    Some("NOSEQ") => return Ok(Reply::NoSequencer),
                    _ if transient(&e) && started.elapsed() < self.deadline => {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(100));
                        // Kept if no node answers yet: the next round tries again.
                        if let Ok(fresh) = (self.connect)() {
                            self.conn = fresh;
                        }
                    }
                    _ if transient(&e) => return Err(unavailable(e)),
                    _ => return Err(Error::Refused(e.to_string())),
                },
            }
        }
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
            match self.call(started, redis::cmd("ZLOG.NEXT").arg(&self.name).arg(count))? {
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
            match self.call(started, redis::cmd("ZLOG.TAIL").arg(&self.name))? {
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
    /// the sequencer or a position this client holds.
    pub fn append(&mut self, data: &[u8]) -> Result<u64> {
        let started = Instant::now();
        while started.elapsed() < self.deadline {
            let (epoch, pos) = self.reserve()?;
            if self.write_at(started, epoch, pos, data)? {
                return Ok(pos);
            }
        }
        self.give_up(started, "append")
    }

    /// Writes `data` at a reserved position, head to tail. `false`: the position was lost
    /// (filled by a reader, or the epoch moved on) and the caller takes another.
    pub fn write_at(
        &mut self,
        started: Instant,
        epoch: u64,
        pos: u64,
        data: &[u8],
    ) -> Result<bool> {
        for obj in self.layout.chain(pos).collect::<Vec<_>>() {
            let cmd = storage("ZLOG.WRITE", &obj, epoch, pos).arg(data).clone();
            match self.call(started, &cmd)? {
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
    /// otherwise seals every object at a newer epoch than any has, takes the highest
    /// position the seals report, and installs a sequencer past it (ZLOG.INIT).
    fn recover(&mut self, started: Instant, at_least: u64) -> Result<()> {
        let mut epoch = at_least.max(1);
        let mut jitter = Jitter::new();
        for _ in 0..MAX_RECOVERY_ROUNDS {
            if started.elapsed() >= self.deadline {
                break;
            }
            match self.call(started, redis::cmd("ZLOG.TAIL").arg(&self.name))? {
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
            let objects: Vec<String> = self.layout.objects().collect();
            for obj in &objects {
                match self.call(started, redis::cmd("ZLOG.SEAL").arg(obj).arg(epoch))? {
                    Reply::Ok(Value::Int(pos)) => max = max.max(pos),
                    Reply::Stale(sealed) => {
                        epoch = epoch.max(sealed + 1);
                        lost = true;
                        break;
                    }
                    _ => return Err(Error::Refused("ZLOG.SEAL".into())),
                }
            }
            if lost {
                // Another client is recovering too: let it finish, then adopt its sequencer.
                std::thread::sleep(jitter.pause());
                continue;
            }
            let tail = (max + 1) as u64;
            let init = redis::cmd("ZLOG.INIT")
                .arg(&self.name)
                .arg(epoch)
                .arg(tail)
                .clone();
            match self.call(started, &init)? {
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
