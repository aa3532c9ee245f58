//! One connection to the upstream: RESP2 requests out, replies in, parsed without trusting
//! anything the upstream announces. A bulk longer than this server's `proto-max-bulk-len`, an
//! over-long line or a reply type the commands sent cannot produce is a protocol failure (the
//! connection is dropped), never an allocation of the announced size: buffers grow only by
//! what actually arrived.

use bytes::{Buf, Bytes, BytesMut};
use std::fmt;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest status, error or integer line accepted (Redis's inline limit).
const MAX_LINE: usize = 64 * 1024;
/// Least free space offered to each read.
const CHUNK: usize = 16 * 1024;

/// Where the upstream is and how to log in, from `redis://[[user]:password@]host[:port][/db]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub username: Option<String>,
    pub password: Option<String>,
    pub db: u32,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target, String> {
        let rest = url
            .strip_prefix("redis://")
            .ok_or("expected redis://HOST:PORT[/DB] (TLS and unix sockets are not supported)")?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let db = match path.trim_end_matches('/') {
            "" => 0,
            digits => digits
                .parse()
                .map_err(|_| format!("database '{digits}' is not a number"))?,
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((userinfo, hostport)) => (Some(userinfo), hostport),
            None => (None, authority),
        };
        let (username, password) = match userinfo {
            None => (None, None),
            Some(info) => match info.split_once(':') {
                Some((user, pass)) => (
                    (!user.is_empty()).then(|| percent_decode(user)),
                    Some(percent_decode(pass)),
                ),
                None => (Some(percent_decode(info)), None),
            },
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or("unclosed '[' in host")?;
            (host, after.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err("no host".into());
        }
        let port = match port {
            None | Some("") => 6379,
            Some(p) => p
                .parse()
                .map_err(|_| format!("port '{p}' is not a number"))?,
        };
        Ok(Target {
            host: host.to_string(),
            port,
            username,
            password,
            db,
        })
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A reply of the kinds the commands Mantle sends upstream can produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Status(Bytes),
    /// An error the upstream answered with: it is healthy, the request was refused.
    Error(String),
    Integer(i64),
    /// `None`: the null bulk.
    Bulk(Option<Bytes>),
}

/// Why an exchange with the upstream failed; the connection is not reused after one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    Io(String),
    Closed,
    /// The upstream broke the protocol or a bound (an announced bulk too long, ...).
    Protocol(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Io(e) => write!(f, "{e}"),
            Failure::Closed => f.write_str("connection closed by the upstream"),
            Failure::Protocol(e) => write!(f, "protocol error: {e}"),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::Io(e.to_string())
    }
}

pub struct Conn {
    stream: TcpStream,
    input: BytesMut,
    output: BytesMut,
    max_bulk_len: u64,
}

impl Conn {
    /// Connects within `connect_timeout` and logs in (AUTH, SELECT) as the target asks; the
    /// caller bounds the whole call.
    pub async fn open(
        target: &Target,
        connect_timeout: Duration,
        max_bulk_len: u64,
    ) -> Result<Conn, Failure> {
        let stream = tokio::time::timeout(
            connect_timeout,
            TcpStream::connect((target.host.as_str(), target.port)),
        )
        .await
        .map_err(|_| {
            Failure::Io(format!(
                "no connection within {connect_timeout:?} (--upstream-connect-timeout)"
            ))
        })??;
        let _ = stream.set_nodelay(true);
        let mut conn = Conn {
            stream,
            input: BytesMut::with_capacity(CHUNK),
            output: BytesMut::with_capacity(CHUNK),
            max_bulk_len,
        };
        if let Some(password) = &target.password {
            match &target.username {
                Some(user) => conn.push(&[b"AUTH", user.as_bytes(), password.as_bytes()]),
                None => conn.push(&[b"AUTH", password.as_bytes()]),
            }
            conn.expect_ok("AUTH").await?;
        }
        if target.db != 0 {
            let db = target.db.to_string();
            conn.push(&[b"SELECT", db.as_bytes()]);
            conn.expect_ok("SELECT").await?;
        }
        Ok(conn)
    }

    async fn expect_ok(&mut self, what: &str) -> Result<(), Failure> {
        self.flush().await?;
        match self.read_reply().await? {
            Reply::Status(_) => Ok(()),
            Reply::Error(e) => Err(Failure::Protocol(format!("{what} refused: {e}"))),
            other => Err(Failure::Protocol(format!(
                "unexpected {what} reply {other:?}"
            ))),
        }
    }

    /// Queues one command; [`Conn::flush`] sends everything queued.
    pub fn push(&mut self, args: &[&[u8]]) {
        encode(&mut self.output, args);
    }

    pub async fn flush(&mut self) -> Result<(), Failure> {
        self.stream.write_all(&self.output).await?;
        self.output.clear();
        if self.output.capacity() > 1024 * 1024 {
            self.output = BytesMut::with_capacity(CHUNK);
        }
        Ok(())
    }

    pub async fn read_reply(&mut self) -> Result<Reply, Failure> {
        loop {
            if let Some(reply) = parse(&mut self.input, self.max_bulk_len)? {
                return Ok(reply);
            }
            if self.input.capacity() - self.input.len() < CHUNK {
                self.input.reserve(CHUNK);
            }
            if self.stream.read_buf(&mut self.input).await? == 0 {
                return Err(Failure::Closed);
            }
        }
    }

    /// False when the upstream closed this pooled connection (or sent something unasked)
    /// while it sat idle; costs no system call unless the socket became readable.
    pub fn is_alive(&self) -> bool {
        let mut probe = [0u8; 1];
        matches!(self.stream.try_read(&mut probe),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }

    /// Whether nothing unread is buffered: a connection is reused only between replies.
    pub fn is_idle(&self) -> bool {
        self.input.is_empty() && self.output.is_empty()
    }
}

/// Appends a RESP multibulk request.
pub fn encode<A: AsRef<[u8]>>(out: &mut BytesMut, args: &[A]) {
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(b"*");
    out.extend_from_slice(digits.format(args.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    for arg in args {
        let arg = arg.as_ref();
        out.reserve(arg.len() + 16);
        out.extend_from_slice(b"$");
        out.extend_from_slice(digits.format(arg.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// Takes one complete reply off the front of `buf`; `Ok(None)` when more bytes are needed.
pub fn parse(buf: &mut BytesMut, max_bulk_len: u64) -> Result<Option<Reply>, Failure> {
    let Some(line_end) = find_crlf(buf) else {
        if buf.len() > MAX_LINE {
            return Err(Failure::Protocol(format!(
                "reply line longer than {MAX_LINE} bytes"
            )));
        }
        return Ok(None);
    };
    if line_end > MAX_LINE {
        return Err(Failure::Protocol(format!(
            "reply line longer than {MAX_LINE} bytes"
        )));
    }
    let kind = buf[0];
    let line = &buf[1..line_end];
    let reply = match kind {
        b'+' => {
            let text = Bytes::copy_from_slice(line);
            buf.advance(line_end + 2);
            Reply::Status(text)
        }
        b'-' => {
            let text = String::from_utf8_lossy(line).into_owned();
            buf.advance(line_end + 2);
            Reply::Error(text)
        }
        b':' => {
            let n = number(line)?;
            buf.advance(line_end + 2);
            Reply::Integer(n)
        }
        b'$' => {
            let n = number(line)?;
            if n < 0 {
                buf.advance(line_end + 2);
                return Ok(Some(Reply::Bulk(None)));
            }
            if n as u64 > max_bulk_len {
                return Err(Failure::Protocol(format!(
                    "the upstream announced a bulk of {n} bytes, above proto-max-bulk-len \
                     ({max_bulk_len})"
                )));
            }
            let n = n as usize;
            let start = line_end + 2;
            if buf.len() < start + n + 2 {
                return Ok(None);
            }
            if &buf[start + n..start + n + 2] != b"\r\n" {
                return Err(Failure::Protocol("bulk not ended by CRLF".into()));
            }
            buf.advance(start);
            let data = buf.split_to(n).freeze();
            buf.advance(2);
            Reply::Bulk(Some(data))
        }
        other => {
            return Err(Failure::Protocol(format!(
                "unexpected reply type '{}'",
                (other as char).escape_default()
            )))
        }
    };
    Ok(Some(reply))
}

/// Bounds on a reply that is read whole before it is passed on (a proxy relays its owner's
/// replies byte for byte): nothing the peer announces is allocated, only what arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyLimits {
    /// Longest bulk string (`proto-max-bulk-len`).
    pub max_bulk_len: u64,
    /// Longest whole reply, nested elements included (`--client-output-limit`).
    pub max_reply_len: u64,
}

/// Deepest nesting of aggregates accepted in a relayed reply (no command nests deeper than a
/// few levels; the bound keeps a hostile peer from making the scan track unbounded state).
pub const MAX_DEPTH: usize = 32;

/// Length of the complete reply (any RESP2 or RESP3 type) at the start of `buf`; `Ok(None)`
/// when more bytes are needed. Errors name the bound crossed: a bulk above
/// `limits.max_bulk_len`, a reply above `limits.max_reply_len` (announced or buffered), a
/// line above 64 KiB, nesting beyond [`MAX_DEPTH`], or bytes that are not RESP.
pub fn reply_len(buf: &[u8], limits: ReplyLimits) -> Result<Option<usize>, Failure> {
    let too_long = || {
        Failure::Protocol(format!(
            "reply longer than the output limit ({} bytes)",
            limits.max_reply_len
        ))
    };
    let mut pos = 0usize;
    // Elements still to read at each open nesting level; `remaining[0]` is the reply itself.
    let mut remaining = [0u64; MAX_DEPTH + 1];
    remaining[0] = 1;
    let mut depth = 0usize;
    loop {
        while remaining[depth] == 0 {
            if depth == 0 {
                return Ok(Some(pos));
            }
            depth -= 1;
        }
        remaining[depth] -= 1;
        let rest = &buf[pos..];
        let Some(line_end) = find_crlf(rest) else {
            if rest.len() > MAX_LINE {
                return Err(Failure::Protocol(format!(
                    "reply line longer than {MAX_LINE} bytes"
                )));
            }
            if buf.len() as u64 > limits.max_reply_len {
                return Err(too_long());
            }
            return Ok(None);
        };
        if line_end > MAX_LINE {
            return Err(Failure::Protocol(format!(
                "reply line longer than {MAX_LINE} bytes"
            )));
        }
        let kind = rest[0];
        let line = &rest[1..line_end];
        pos += line_end + 2;
        let children = match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => 0,
            b'$' | b'=' | b'!' => {
                let n = number(line)?;
                if n >= 0 {
                    if n as u64 > limits.max_bulk_len {
                        return Err(Failure::Protocol(format!(
                            "a bulk of {n} bytes, above proto-max-bulk-len ({})",
                            limits.max_bulk_len
                        )));
                    }
                    let end = pos as u64 + n as u64 + 2;
                    if end > limits.max_reply_len {
                        return Err(too_long());
                    }
                    let end = end as usize;
                    if buf.len() < end {
                        return Ok(None);
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return Err(Failure::Protocol("bulk not ended by CRLF".into()));
                    }
                    pos = end;
                }
                0
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let n = number(line)?.max(0) as u64;
                let n = if matches!(kind, b'%' | b'|') {
                    n.saturating_mul(2)
                } else {
                    n
                };
                // Each element takes at least three bytes ("_\r\n").
                if (pos as u64).saturating_add(n.saturating_mul(3)) > limits.max_reply_len {
                    return Err(too_long());
                }
                n
            }
            other => {
                return Err(Failure::Protocol(format!(
                    "unexpected reply type '{}'",
                    (other as char).escape_default()
                )))
            }
        };
        if children > 0 {
            if depth == MAX_DEPTH {
                return Err(Failure::Protocol(format!(
                    "reply nested deeper than {MAX_DEPTH} levels"
                )));
            }
            depth += 1;
            remaining[depth] = children;
        }
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    let scan = &buf[..buf.len().min(MAX_LINE + 2)];
    scan.windows(2).position(|w| w == b"\r\n")
}

fn number(line: &[u8]) -> Result<i64, Failure> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            Failure::Protocol(format!(
                "'{}' is not a number",
                String::from_utf8_lossy(&line[..line.len().min(32)])
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(bytes: &[u8], max: u64) -> Result<Option<Reply>, Failure> {
        parse(&mut BytesMut::from(bytes), max)
    }

    #[test]
    fn replies_parse_whole_and_wait_for_more() {
        assert_eq!(
            parse_all(b"+OK\r\n", 10).unwrap(),
            Some(Reply::Status(Bytes::from_static(b"OK")))
        );
        assert_eq!(parse_all(b":-2\r\n", 10).unwrap(), Some(Reply::Integer(-2)));
        assert_eq!(parse_all(b"$-1\r\n", 10).unwrap(), Some(Reply::Bulk(None)));
        assert_eq!(
            parse_all(b"$3\r\nabc\r\n", 10).unwrap(),
            Some(Reply::Bulk(Some(Bytes::from_static(b"abc"))))
        );
        assert_eq!(parse_all(b"$3\r\nab", 10).unwrap(), None);
        assert_eq!(parse_all(b"+O", 10).unwrap(), None);
        let mut two = BytesMut::from(&b"$1\r\na\r\n:5\r\n"[..]);
        assert!(matches!(parse(&mut two, 10), Ok(Some(Reply::Bulk(_)))));
        assert_eq!(parse(&mut two, 10).unwrap(), Some(Reply::Integer(5)));
        assert!(two.is_empty());
    }

    #[test]
    fn announced_lengths_are_not_trusted() {
        // Refused from the header alone, before any of the announced bytes are awaited.
        let err = parse_all(b"$2000000000\r\n", 1 << 20).unwrap_err();
        assert!(err.to_string().contains("2000000000"), "{err}");
        assert!(parse_all(b"$99999999999999999999999\r\n", 1 << 20).is_err());
        let long_line = vec![b'+'; MAX_LINE + 10];
        assert!(parse_all(&long_line, 10).is_err());
        assert!(parse_all(b"*2000000000\r\n", 10).is_err(), "no arrays");
        assert!(parse_all(b"$3\r\nabcXY", 10).is_err());
        assert!(parse_all(b":twelve\r\n", 10).is_err());
    }

    const ROOMY: ReplyLimits = ReplyLimits {
        max_bulk_len: 1 << 20,
        max_reply_len: 1 << 20,
    };

    #[test]
    fn whole_replies_are_measured_and_partial_ones_wait() {
        let cases: &[&[u8]] = &[
            b"+OK\r\n",
            b"-ERR x\r\n",
            b":12\r\n",
            b"$3\r\nabc\r\n",
            b"$-1\r\n",
            b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"%1\r\n+k\r\n$2\r\nvv\r\n",
            b"$4\r\na\r\nb\r\n",
            b"*1\r\n*1\r\n*0\r\n",
        ];
        for case in cases {
            let mut buf = case.to_vec();
            buf.extend_from_slice(b"+NEXT\r\n");
            let shown = String::from_utf8_lossy(case);
            assert_eq!(reply_len(&buf, ROOMY).unwrap(), Some(case.len()), "{shown}");
            for cut in 0..case.len() {
                assert_eq!(
                    reply_len(&case[..cut], ROOMY).unwrap(),
                    None,
                    "{cut} of {shown}"
                );
            }
        }
    }

    #[test]
    fn relayed_replies_stay_within_their_bounds() {
        let small = ReplyLimits {
            max_bulk_len: 10,
            max_reply_len: 100,
        };
        // Refused from the header alone, before any of the announced bytes arrive.
        let err = reply_len(b"$11\r\n", small).unwrap_err().to_string();
        assert!(err.contains("proto-max-bulk-len (10)"), "{err}");
        let err = reply_len(b"*1000\r\n", small).unwrap_err().to_string();
        assert!(err.contains("output limit (100 bytes)"), "{err}");
        let mut many = b"*9\r\n".to_vec();
        many.extend_from_slice(&b"$10\r\n0123456789\r\n".repeat(6));
        let err = reply_len(&many, small).unwrap_err().to_string();
        assert!(err.contains("output limit"), "{err}");
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1);
        let err = reply_len(deep.as_bytes(), ROOMY).unwrap_err().to_string();
        assert!(err.contains("nested deeper"), "{err}");
        let nested = format!("{}:1\r\n", "*1\r\n".repeat(MAX_DEPTH));
        assert_eq!(
            reply_len(nested.as_bytes(), ROOMY).unwrap(),
            Some(nested.len())
        );
        assert!(reply_len(&vec![b'+'; MAX_LINE + 10], ROOMY).is_err());
        assert!(reply_len(b"$3\r\nabcXY", ROOMY).is_err());
        assert!(reply_len(b"*x\r\n", ROOMY).is_err());
        assert!(reply_len(b"hello\r\n", ROOMY).is_err());
    }

    #[test]
    fn urls_parse_like_redis_urls() {
        let t = Target::parse("redis://127.0.0.1:6390").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.db), ("127.0.0.1", 6390, 0));
        assert_eq!(t.password, None);
        let t = Target::parse("redis://:p%40ss@localhost/2").unwrap();
        assert_eq!(t.password.as_deref(), Some("p@ss"));
        assert_eq!((t.port, t.db), (6379, 2));
        let t = Target::parse("redis://alice:pw@[::1]:7000").unwrap();
        assert_eq!(t.username.as_deref(), Some("alice"));
        assert_eq!((t.host.as_str(), t.port), ("::1", 7000));
        assert!(Target::parse("rediss://x:1").is_err());
        assert!(Target::parse("redis://:1").is_err());
        assert!(Target::parse("redis://h:port").is_err());
    }
}
