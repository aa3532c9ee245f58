//! Proxy mode (`--cluster-mode proxy`): a request for a key another node owns is forwarded
//! to the owner and its reply relayed byte for byte, so clients that know nothing of the
//! cluster (plain `redis-cli`, `redis-benchmark`) work against any node.
//!
//! Each owner is reached over a few long-lived connections shared by every client of this
//! node; requests from many clients are pipelined onto them (one write carries all that are
//! queued) and replies come back in order. The owner is asked in RESP2, the protocol of a
//! fresh connection.
//!
//! Each connection starts with `CLUSTER FORWARDED`: what arrives on it is never forwarded
//! again. Two nodes that briefly each think the other owns a slot (a hand-over seen in a
//! different order) would otherwise pass a request back and forth until the forward timed
//! out; instead the second node answers `-MOVED`, and the first asks again once its map has
//! moved on (`server::relay`). A connection found dead before a request was written on it
//! (the owner restarted) is opened again for that request; one that dies after a request
//! was written fails that request, which may have run.

use bytes::{Bytes, BytesMut};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// Connections per owner.
const LINKS: usize = 2;
/// Bound on one forwarded request, connection included.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

type Answer = oneshot::Sender<Result<Bytes, String>>;

/// A forwarded request whose reply has not been read yet.
pub struct Sent {
    addr: Arc<str>,
    reply: oneshot::Receiver<Result<Bytes, String>>,
}

/// The shared connections to other nodes.
pub struct Pool {
    links: Mutex<HashMap<Arc<str>, Vec<Link>>>,
    /// The cluster's `--requirepass`, sent as AUTH on every new connection.
    password: Option<Arc<str>>,
}

#[derive(Clone)]
struct Link {
    tx: mpsc::UnboundedSender<Request>,
}

impl Pool {
    pub fn new(password: Option<String>) -> Pool {
        Pool {
            links: Mutex::default(),
            password: password.map(Arc::from),
        }
    }

    /// Runs `args` at `addr` and returns its raw reply.
    pub async fn forward(
        &self,
        addr: &Arc<str>,
        args: &[Bytes],
        affinity: u64,
    ) -> Result<Bytes, String> {
        let sent = self.submit(addr, args, affinity)?;
        self.answer(sent).await
    }

    /// Sends `args` to `addr` without waiting for its reply, so a client's pipeline goes on
    /// as a pipeline. Requests with the same `affinity` (one client's) to one owner share a
    /// connection, so they run and are answered in the order sent.
    pub fn submit(&self, addr: &Arc<str>, args: &[Bytes], affinity: u64) -> Result<Sent, String> {
        let mut request = BytesMut::with_capacity(64 + args.iter().map(Bytes::len).sum::<usize>());
        store::upstream::wire::encode(&mut request, args);
        let (answer, reply) = oneshot::channel();
        let link = self.link(addr, affinity);
        if link.tx.send((request, answer)).is_err() {
            self.drop_link(addr);
            return Err(format!("proxy: connection to {addr} lost"));
        }
        Ok(Sent {
            addr: Arc::clone(addr),
            reply,
        })
    }

    /// Waits for the reply to a submitted request.
    pub async fn answer(&self, sent: Sent) -> Result<Bytes, String> {
        let addr = sent.addr;
        match tokio::time::timeout(FORWARD_TIMEOUT, sent.reply).await {
            Ok(Ok(result)) => result.inspect_err(|_| self.drop_link(&addr)),
            Ok(Err(_)) => {
                self.drop_link(&addr);
                Err(format!("proxy: connection to {addr} lost"))
            }
            Err(_) => {
                self.drop_link(&addr);
                Err(format!(
                    "proxy: {addr} did not answer within {FORWARD_TIMEOUT:?}"
                ))
            }
        }
    }

    fn link(&self, addr: &Arc<str>, affinity: u64) -> Link {
        let i = (affinity % LINKS as u64) as usize;
        let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        let entry = links.entry(Arc::clone(addr)).or_default();
        entry.retain(|l| !l.tx.is_closed());
        while entry.len() < LINKS {
            entry.push(Link::start(Arc::clone(addr), self.password.clone()));
        }
        entry[i].clone()
    }

    fn drop_link(&self, addr: &Arc<str>) {
        let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = links.get_mut(addr) {
            entry.retain(|l| !l.tx.is_closed());
        }
    }
}

impl Link {
    fn start(addr: Arc<str>, password: Option<Arc<str>>) -> Link {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(addr, password, rx));
        Link { tx }
    }
}

type Request = (BytesMut, Answer);

/// One link: a connection at a time, opened again when it is found dead before a request
/// is written on it (see the module doc).
async fn run(addr: Arc<str>, password: Option<Arc<str>>, mut rx: mpsc::UnboundedReceiver<Request>) {
    let mut carried: Vec<Request> = Vec::new();
    loop {
        let failed =
            match tokio::time::timeout(Duration::from_secs(5), connect(&addr, password.as_deref()))
                .await
            {
                Ok(Ok(stream)) => {
                    if serve(&addr, stream, &mut rx, &mut carried).await {
                        continue;
                    }
                    return;
                }
                Ok(Err(e)) => format!("proxy: connecting to {addr}: {e}"),
                Err(_) => format!("proxy: no connection to {addr}"),
            };
        for (_, answer) in carried.drain(..) {
            let _ = answer.send(Err(failed.clone()));
        }
        return fail_all(&mut rx, &failed);
    }
}

/// Relays requests over one connection: writes whatever is queued in one go, matches
/// replies to requests in order. Returns true when the connection died and the link should
/// open another (requests not yet written are left in `carried`), false when the pool
/// dropped the link.
async fn serve(
    addr: &Arc<str>,
    stream: tokio::net::TcpStream,
    rx: &mut mpsc::UnboundedReceiver<Request>,
    carried: &mut Vec<Request>,
) -> bool {
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = stream.into_split();
    let waiting: Arc<Mutex<VecDeque<Answer>>> = Arc::default();
    let read_side = {
        let waiting = Arc::clone(&waiting);
        let addr = Arc::clone(addr);
        tokio::spawn(async move {
            let mut input = BytesMut::with_capacity(16 * 1024);
            loop {
                while let Some(len) = reply_len(&input) {
                    let reply = input.split_to(len).freeze();
                    let answer = waiting
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .pop_front();
                    if let Some(answer) = answer {
                        let _ = answer.send(Ok(reply));
                    }
                }
                if input.capacity() - input.len() < 4096 {
                    input.reserve(16 * 1024);
                }
                match reader.read_buf(&mut input).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            let lost = format!("proxy: connection to {addr} lost");
            for answer in waiting.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
                let _ = answer.send(Err(lost.clone()));
            }
        })
    };
    let mut output = BytesMut::with_capacity(16 * 1024);
    let reconnect = loop {
        if carried.is_empty() {
            match rx.recv().await {
                Some(request) => carried.push(request),
                None => break false,
            }
        }
        while let Ok(request) = rx.try_recv() {
            carried.push(request);
        }
        if read_side.is_finished() {
            // Closed by the owner (a restart) while idle: nothing of these was sent.
            break true;
        }
        {
            let mut queue = waiting.lock().unwrap_or_else(|p| p.into_inner());
            for (request, answer) in carried.drain(..) {
                output.extend_from_slice(&request);
                queue.push_back(answer);
            }
        }
        if writer.write_all(&output).await.is_err() || read_side.is_finished() {
            break true;
        }
        output.clear();
    };
    read_side.abort();
    let lost = format!("proxy: connection to {addr} lost");
    for answer in waiting.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
        let _ = answer.send(Err(lost.clone()));
    }
    reconnect
}

/// Connects, logs in when the cluster has a password, and marks the connection as a
/// forwarding link (see the module doc) before any request is relayed.
async fn connect(addr: &str, password: Option<&str>) -> Result<tokio::net::TcpStream, String> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
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
async fn handshake(
    stream: &mut tokio::net::TcpStream,
    request: &[&[u8]],
    what: &str,
) -> Result<(), String> {
    let mut out = BytesMut::new();
    store::upstream::wire::encode(&mut out, request);
    stream.write_all(&out).await.map_err(|e| e.to_string())?;
    let mut input = BytesMut::with_capacity(256);
    let len = loop {
        if let Some(len) = reply_len(&input) {
            break len;
        }
        if stream
            .read_buf(&mut input)
            .await
            .map_err(|e| e.to_string())?
            == 0
        {
            return Err(format!("closed during {what}"));
        }
    };
    match &input[..len] {
        b"+OK\r\n" => Ok(()),
        other => Err(format!(
            "{what} refused: {}",
            String::from_utf8_lossy(other).trim_end()
        )),
    }
}

fn fail_all(rx: &mut mpsc::UnboundedReceiver<Request>, error: &str) {
    rx.close();
    while let Ok((_, answer)) = rx.try_recv() {
        let _ = answer.send(Err(error.to_string()));
    }
}

/// Length of the complete RESP reply at the start of `buf`, if it is all there.
pub fn reply_len(buf: &[u8]) -> Option<usize> {
    let mut pos = 0;
    // Elements still to read, counting nested aggregates.
    let mut remaining: u64 = 1;
    while remaining > 0 {
        let kind = *buf.get(pos)?;
        let line_end = pos + buf[pos..].windows(2).position(|w| w == b"\r\n")?;
        let line = &buf[pos + 1..line_end];
        pos = line_end + 2;
        remaining -= 1;
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {}
            b'$' | b'=' | b'!' => {
                let n = parse_int(line)?;
                if n >= 0 {
                    pos += n as usize + 2;
                    if buf.len() < pos {
                        return None;
                    }
                }
            }
            b'*' | b'~' | b'>' => remaining += parse_int(line)?.max(0) as u64,
            b'%' | b'|' => remaining += 2 * parse_int(line)?.max(0) as u64,
            _ => return Some(pos), // not RESP: hand the line over as is
        }
    }
    Some(pos)
}

fn parse_int(line: &[u8]) -> Option<i64> {
    std::str::from_utf8(line).ok()?.parse().ok()
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

    #[test]
    fn replies_are_delimited_whole() {
        let cases: &[&[u8]] = &[
            b"+OK\r\n",
            b"-ERR x\r\n",
            b":12\r\n",
            b"$3\r\nabc\r\n",
            b"$-1\r\n",
            b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
            b"*-1\r\n",
            b"%1\r\n+k\r\n$2\r\nvv\r\n",
            b"$4\r\na\r\nb\r\n",
        ];
        for case in cases {
            let mut buf = case.to_vec();
            buf.extend_from_slice(b"+NEXT\r\n");
            assert_eq!(
                reply_len(&buf),
                Some(case.len()),
                "{:?}",
                String::from_utf8_lossy(case)
            );
            for cut in 0..case.len() {
                assert_eq!(
                    reply_len(&case[..cut]),
                    None,
                    "{cut} of {:?}",
                    String::from_utf8_lossy(case)
                );
            }
        }
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
