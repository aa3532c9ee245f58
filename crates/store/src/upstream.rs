//! An upstream tier as the store: another Mantle or any Redis-compatible server. Reads that
//! miss this tier's cache go up; writes go through to it (it is the source of truth) before
//! they are acknowledged.
//!
//! Nothing the upstream does can stall this tier for longer than a bound: every operation
//! (waiting for a connection, connecting, sending, reading the reply) finishes within
//! `--upstream-timeout`, connecting within `--upstream-connect-timeout`; replies are parsed
//! under this server's `proto-max-bulk-len` ([`wire`]); and after a run of failures a
//! [`breaker`] fails requests at once instead of letting each wait out its timeout. A write
//! whose outcome is unknown (it timed out) is reported as an error, and the cache forgets the
//! keys it touched, so the next read asks the upstream.

pub mod breaker;
pub mod wire;

use super::record::Record;
use super::{Condition, StoreError};
use breaker::{Admission, Breaker, Change};
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use wire::{Conn, Failure, Reply, Target};

/// Most connections open to the upstream at once; further operations queue (within their
/// timeout) for one.
pub const MAX_CONNECTIONS: usize = 64;
/// How old INFO's cached upstream key count may get before a refresh is started.
const KEY_COUNT_REFRESH: Duration = Duration::from_secs(1);

/// The bounds an upstream is held to (from `--upstream-connect-timeout`, `--upstream-timeout`
/// and `--proto-max-bulk-len`).
#[derive(Clone, Copy, Debug)]
pub struct UpstreamOptions {
    pub connect_timeout: Duration,
    pub timeout: Duration,
    pub max_bulk_len: u64,
}

/// Counters for INFO and the metrics endpoint.
#[derive(Default)]
pub struct UpstreamCounters {
    /// Operations that failed: timeouts, connection failures, protocol violations.
    pub failures: AtomicU64,
    /// Of those, the ones that ran out of time.
    pub timeouts: AtomicU64,
    /// Operations refused at once while the breaker was open.
    pub fast_failures: AtomicU64,
}

#[derive(Clone)]
pub struct UpstreamStore {
    inner: Arc<Inner>,
}

struct Inner {
    url: String,
    target: Target,
    options: UpstreamOptions,
    idle: Mutex<Vec<Conn>>,
    slots: Semaphore,
    breaker: Breaker,
    counters: UpstreamCounters,
    /// The last DBSIZE answer (`u64::MAX`: none yet), when it came, and whether a refresh runs.
    key_count: AtomicU64,
    key_count_at: Mutex<Option<Instant>>,
    refreshing: AtomicBool,
}

impl UpstreamStore {
    /// Checks the upstream answers (`PING`) within the bounds; start-up fails otherwise,
    /// after at most the connect timeout plus the operation timeout.
    pub async fn connect(url: &str, options: UpstreamOptions) -> Result<UpstreamStore, StoreError> {
        let target =
            Target::parse(url).map_err(|e| StoreError(format!("invalid upstream '{url}': {e}")))?;
        let store = UpstreamStore {
            inner: Arc::new(Inner {
                url: url.to_string(),
                target,
                options,
                idle: Mutex::new(Vec::new()),
                slots: Semaphore::new(MAX_CONNECTIONS),
                breaker: Breaker::default(),
                counters: UpstreamCounters::default(),
                key_count: AtomicU64::new(u64::MAX),
                key_count_at: Mutex::new(None),
                refreshing: AtomicBool::new(false),
            }),
        };
        match store.call(true, [&[b"PING" as &[u8]]]).await {
            Ok([Reply::Status(_)]) => Ok(store),
            Ok([other]) => Err(StoreError(format!(
                "cannot reach upstream {url}: PING answered {}",
                describe(&other)
            ))),
            // `e` already starts with "upstream URL: ".
            Err(StoreError(e)) => Err(StoreError(format!("cannot reach {e}"))),
        }
    }

    pub fn url(&self) -> &str {
        &self.inner.url
    }

    pub fn counters(&self) -> &UpstreamCounters {
        &self.inner.counters
    }

    /// `ok`, or `failing` when the breaker is open.
    pub fn state(&self) -> &'static str {
        if self.inner.breaker.is_open() {
            "failing"
        } else {
            "ok"
        }
    }

    pub fn consecutive_failures(&self) -> u32 {
        self.inner.breaker.consecutive_failures()
    }

    /// The value and its expiry (from `PTTL`), fetched in one round trip.
    pub async fn get(&self, key: &[u8], now_ms: u64) -> Result<Option<Record>, StoreError> {
        match self.call(true, [&[b"GET", key], &[b"PTTL", key]]).await? {
            [Reply::Bulk(value), Reply::Integer(pttl)] => Ok(value.map(|value| Record {
                value,
                expires_at_ms: if pttl > 0 { now_ms + pttl as u64 } else { 0 },
            })),
            [Reply::Error(e), _] | [_, Reply::Error(e)] => Err(self.refused(&e)),
            [value, pttl] => Err(self.unexpected("GET/PTTL", &value, Some(&pttl))),
        }
    }

    pub async fn exists(&self, key: &[u8]) -> Result<bool, StoreError> {
        match self.call(true, [&[b"EXISTS", key]]).await? {
            [Reply::Integer(n)] => Ok(n > 0),
            [reply] => Err(self.unexpected("EXISTS", &reply, None)),
        }
    }

    /// `SET` upstream with the remaining time to live and the condition; the upstream decides
    /// NX/XX atomically. Returns whether it wrote.
    pub async fn set(
        &self,
        key: &[u8],
        record: &Record,
        condition: Condition,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let mut digits = itoa::Buffer::new();
        let mut args: [&[u8]; 6] = [b"SET", key, record.value.as_ref(), b"", b"", b""];
        let mut len = 3;
        if record.expires_at_ms != 0 {
            let ttl = record.expires_at_ms.saturating_sub(now_ms).max(1);
            args[3] = b"PX";
            args[4] = digits.format(ttl).as_bytes();
            len = 5;
        }
        match condition {
            Condition::Always => {}
            Condition::IfAbsent => {
                args[len] = b"NX";
                len += 1;
            }
            Condition::IfPresent => {
                args[len] = b"XX";
                len += 1;
            }
        }
        match self.call(false, [&args[..len]]).await? {
            [Reply::Status(_)] => Ok(true),
            [Reply::Bulk(None)] => Ok(false),
            [reply] => Err(self.unexpected("SET", &reply, None)),
        }
    }

    /// One `MSET`, which the upstream applies atomically: either every pair is written or
    /// none (a pipeline of `SET`s could stop half-way when the connection breaks).
    pub async fn set_many(
        &self,
        pairs: &[(Bytes, Record)],
        _now_ms: u64,
    ) -> Result<(), StoreError> {
        if pairs.iter().any(|(_, record)| record.expires_at_ms != 0) {
            // MSET carries no expiry, and MULTI is not part of the protocol every tier speaks.
            return Err(StoreError(format!(
                "upstream {}: MSET with an expiry cannot be sent atomically",
                self.inner.url
            )));
        }
        let mut args: Vec<&[u8]> = Vec::with_capacity(1 + 2 * pairs.len());
        args.push(b"MSET");
        for (key, record) in pairs {
            args.push(key);
            args.push(&record.value);
        }
        match self.call(false, [&args[..]]).await? {
            [Reply::Status(_)] => Ok(()),
            [reply] => Err(self.unexpected("MSET", &reply, None)),
        }
    }

    /// A transaction's changes, sent as one command the upstream applies atomically (see
    /// `Store::write_batch`); a mix no single command carries is refused.
    pub async fn write_batch(
        &self,
        changes: &[(Bytes, Option<Record>)],
        now_ms: u64,
    ) -> Result<(), StoreError> {
        match changes {
            [] => Ok(()),
            [(key, Some(record))] => self
                .set(key, record, Condition::Always, now_ms)
                .await
                .map(|_| ()),
            _ if changes.iter().all(|(_, change)| change.is_none()) => {
                let keys: Vec<Bytes> = changes.iter().map(|(key, _)| key.clone()).collect();
                self.delete(&keys).await.map(|_| ())
            }
            _ if changes.iter().all(|(_, change)| change.is_some()) => {
                let pairs: Vec<(Bytes, Record)> = changes
                    .iter()
                    .filter_map(|(key, change)| Some((key.clone(), change.clone()?)))
                    .collect();
                self.set_many(&pairs, now_ms).await
            }
            _ => Err(StoreError(format!(
                "upstream {}: a transaction that both writes and deletes keys cannot be sent \
                 atomically",
                self.inner.url
            ))),
        }
    }

    pub async fn delete(&self, keys: &[Bytes]) -> Result<u64, StoreError> {
        let mut args: Vec<&[u8]> = Vec::with_capacity(1 + keys.len());
        args.push(b"DEL");
        args.extend(keys.iter().map(|k| k.as_ref()));
        match self.call(false, [&args[..]]).await? {
            [Reply::Integer(n)] => Ok(n.max(0) as u64),
            [reply] => Err(self.unexpected("DEL", &reply, None)),
        }
    }

    pub async fn key_count(&self) -> Result<u64, StoreError> {
        match self.call(true, [&[b"DBSIZE" as &[u8]]]).await? {
            [Reply::Integer(n)] => {
                let n = n.max(0) as u64;
                self.inner.key_count.store(n, Ordering::Relaxed);
                *lock(&self.inner.key_count_at) = Some(Instant::now());
                Ok(n)
            }
            [reply] => Err(self.unexpected("DBSIZE", &reply, None)),
        }
    }

    /// One page of the upstream's keys: `SCAN cursor COUNT count`. Returns the cursor to ask
    /// for next (0 once the walk is over) and the keys. As SCAN promises, a key present for the
    /// whole walk comes at least once; it may come more than once.
    pub async fn scan(&self, cursor: u64, count: usize) -> Result<(u64, Vec<Bytes>), StoreError> {
        let (mut cursor_digits, mut count_digits) = (itoa::Buffer::new(), itoa::Buffer::new());
        let args: [&[u8]; 4] = [
            b"SCAN",
            cursor_digits.format(cursor).as_bytes(),
            b"COUNT",
            count_digits.format(count.max(1)).as_bytes(),
        ];
        let reply = match self.call(true, [&args[..]]).await? {
            [Reply::Array(parts)] => parts,
            [reply] => return Err(self.unexpected("SCAN", &reply, None)),
        };
        let malformed = |what: &str| {
            StoreError(format!(
                "upstream {}: unexpected reply to SCAN: {what}",
                self.inner.url
            ))
        };
        let [next, Reply::Array(found)] = <[Reply; 2]>::try_from(reply)
            .map_err(|parts| malformed(&format!("an array of {} elements", parts.len())))?
        else {
            return Err(malformed("no array of keys"));
        };
        let next = match &next {
            Reply::Bulk(Some(text)) => std::str::from_utf8(text).ok().and_then(|t| t.parse().ok()),
            _ => None,
        }
        .ok_or_else(|| malformed(&format!("cursor {}", describe(&next))))?;
        let keys = found
            .into_iter()
            .map(|key| match key {
                Reply::Bulk(Some(key)) => Ok(key),
                other => Err(malformed(&format!("key {}", describe(&other)))),
            })
            .collect::<Result<Vec<Bytes>, StoreError>>()?;
        Ok((next, keys))
    }

    /// The upstream's key count as last seen, without waiting (INFO must answer while the
    /// upstream does not); starts a refresh in the background when it is stale.
    pub fn key_count_without_waiting(&self) -> Option<u64> {
        let stale =
            lock(&self.inner.key_count_at).is_none_or(|at| at.elapsed() > KEY_COUNT_REFRESH);
        if stale
            && !self.inner.refreshing.swap(true, Ordering::AcqRel)
            && tokio::runtime::Handle::try_current().is_ok()
        {
            let store = self.clone();
            tokio::spawn(async move {
                let _ = store.key_count().await;
                store.inner.refreshing.store(false, Ordering::Release);
            });
        }
        match self.inner.key_count.load(Ordering::Relaxed) {
            u64::MAX => None,
            n => Some(n),
        }
    }

    /// Sends `commands` in one write and reads one reply to each, within the operation
    /// timeout and through the breaker. `idempotent` operations are retried once on a fresh
    /// connection when a pooled one turns out to be dead.
    async fn call<const N: usize>(
        &self,
        idempotent: bool,
        commands: [&[&[u8]]; N],
    ) -> Result<[Reply; N], StoreError> {
        let inner = &*self.inner;
        let admission = inner.breaker.admit();
        if let Admission::Refused(wait) = admission {
            inner.counters.fast_failures.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError(format!(
                "upstream {}: unavailable after {} consecutive failures; failing fast, next \
                 try in {} ms",
                inner.url,
                inner.breaker.consecutive_failures(),
                wait.as_millis()
            )));
        }
        let mut probe = ProbeGuard((admission == Admission::Probe).then_some(&inner.breaker));
        let outcome =
            tokio::time::timeout(inner.options.timeout, self.exchange(idempotent, &commands)).await;
        probe.0 = None;
        let error = match outcome {
            Ok(Ok(replies)) => {
                if inner.breaker.success() == Change::Closed {
                    crate::log_line!("mantle: upstream {} answers again", inner.url);
                }
                return Ok(replies);
            }
            Ok(Err(failure)) => failure.to_string(),
            Err(_) => {
                inner.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                format!(
                    "no reply within {} ms (--upstream-timeout)",
                    inner.options.timeout.as_millis()
                )
            }
        };
        inner.counters.failures.fetch_add(1, Ordering::Relaxed);
        if inner.breaker.failure() == Change::Opened {
            crate::log_line!(
                "mantle: upstream {} failed {} times in a row (last: {error}); failing requests \
                 at once, probing every {} ms",
                inner.url,
                breaker::THRESHOLD,
                breaker::COOL_DOWN.as_millis()
            );
        }
        Err(StoreError(format!("upstream {}: {error}", inner.url)))
    }

    async fn exchange<const N: usize>(
        &self,
        idempotent: bool,
        commands: &[&[&[u8]]; N],
    ) -> Result<[Reply; N], Failure> {
        let inner = &*self.inner;
        let _slot = inner
            .slots
            .acquire()
            .await
            .map_err(|_| Failure::Io("shutting down".into()))?;
        let mut retried = false;
        loop {
            let pooled = lock(&inner.idle).pop();
            let reused = pooled.is_some();
            let mut conn = match pooled {
                Some(conn) if conn.is_alive() => conn,
                _ => {
                    Conn::open(
                        &inner.target,
                        inner.options.connect_timeout,
                        inner.options.max_bulk_len,
                    )
                    .await?
                }
            };
            match round_trip(&mut conn, commands).await {
                Ok(replies) => {
                    if conn.is_idle() {
                        let mut idle = lock(&inner.idle);
                        if idle.len() < MAX_CONNECTIONS {
                            idle.push(conn);
                        }
                    }
                    return Ok(replies);
                }
                Err(Failure::Io(_) | Failure::Closed) if idempotent && reused && !retried => {
                    retried = true;
                }
                Err(failure) => return Err(failure),
            }
        }
    }

    fn refused(&self, error: &str) -> StoreError {
        StoreError(format!("upstream {}: {error}", self.inner.url))
    }

    fn unexpected(&self, what: &str, reply: &Reply, second: Option<&Reply>) -> StoreError {
        if let Reply::Error(e) = reply {
            return self.refused(e);
        }
        let second = second
            .map(|r| format!(", {}", describe(r)))
            .unwrap_or_default();
        StoreError(format!(
            "upstream {}: unexpected reply to {what}: {}{second}",
            self.inner.url,
            describe(reply)
        ))
    }
}

/// Releases a half-open probe whose request was cancelled (its client went away), so the
/// breaker does not wait for an outcome that will never come.
struct ProbeGuard<'a>(Option<&'a Breaker>);

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if let Some(breaker) = self.0 {
            breaker.abandon();
        }
    }
}

async fn round_trip<const N: usize>(
    conn: &mut Conn,
    commands: &[&[&[u8]]; N],
) -> Result<[Reply; N], Failure> {
    for command in commands {
        conn.push(command);
    }
    conn.flush().await?;
    let mut replies: [Reply; N] = std::array::from_fn(|_| Reply::Bulk(None));
    for reply in &mut replies {
        *reply = conn.read_reply().await?;
    }
    Ok(replies)
}

fn describe(reply: &Reply) -> String {
    match reply {
        Reply::Status(s) => format!("+{}", String::from_utf8_lossy(&s[..s.len().min(64)])),
        Reply::Error(e) => format!("-{e}"),
        Reply::Integer(n) => format!(":{n}"),
        Reply::Bulk(None) => "null".into(),
        Reply::Bulk(Some(b)) => format!("a bulk of {} bytes", b.len()),
        Reply::Array(elements) => format!("an array of {} elements", elements.len()),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An upstream that answers each request it knows (whole, as sent) with its scripted reply.
    async fn scripted(script: Vec<(Vec<u8>, Vec<u8>)>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let script = script.clone();
                tokio::spawn(async move {
                    let mut pending = Vec::new();
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = socket.read(&mut buf).await {
                        pending.extend_from_slice(&buf[..n]);
                        while let Some((request, reply)) = script
                            .iter()
                            .find(|(request, _)| pending.starts_with(request))
                        {
                            pending.drain(..request.len());
                            if socket.write_all(reply).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        format!("redis://{addr}")
    }

    fn request(args: &[&str]) -> Vec<u8> {
        let mut out = bytes::BytesMut::new();
        wire::encode(&mut out, args);
        out.to_vec()
    }

    fn options() -> UpstreamOptions {
        UpstreamOptions {
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(5),
            max_bulk_len: 1 << 20,
        }
    }

    #[tokio::test]
    async fn scan_pages_follow_the_cursor() {
        let url = scripted(vec![
            (request(&["PING"]), b"+PONG\r\n".to_vec()),
            (
                request(&["SCAN", "0", "COUNT", "2"]),
                b"*2\r\n$2\r\n12\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n".to_vec(),
            ),
            (
                request(&["SCAN", "12", "COUNT", "2"]),
                b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\nc\r\n".to_vec(),
            ),
        ])
        .await;
        let upstream = UpstreamStore::connect(&url, options()).await.unwrap();
        let (next, keys) = upstream.scan(0, 2).await.unwrap();
        assert_eq!((next, keys), (12, vec![Bytes::from("a"), Bytes::from("b")]));
        let (next, keys) = upstream.scan(12, 2).await.unwrap();
        assert_eq!((next, keys), (0, vec![Bytes::from("c")]));
    }

    #[tokio::test]
    async fn a_scan_reply_of_another_shape_is_an_error_naming_it() {
        let cases: [(&[u8], &str); 5] = [
            (b"*1\r\n$1\r\n0\r\n", "an array of 1 elements"),
            (b"*2\r\n$1\r\nx\r\n*0\r\n", "cursor a bulk of 1 bytes"),
            (b"*2\r\n$1\r\n0\r\n$1\r\na\r\n", "no array of keys"),
            (b"*2\r\n$1\r\n0\r\n*1\r\n:3\r\n", "key :3"),
            (b"-ERR unknown command 'SCAN'\r\n", "unknown command"),
        ];
        for (reply, named) in cases {
            let url = scripted(vec![
                (request(&["PING"]), b"+PONG\r\n".to_vec()),
                (request(&["SCAN", "0", "COUNT", "10"]), reply.to_vec()),
            ])
            .await;
            let upstream = UpstreamStore::connect(&url, options()).await.unwrap();
            let err = upstream.scan(0, 10).await.unwrap_err().to_string();
            assert!(err.contains(named) && err.contains(&url), "{err}");
        }
    }
}
