//! One connection to the upstream: RESP2 requests out, replies in, parsed without trusting
//! anything the upstream announces. A bulk longer than this server's `proto-max-bulk-len`, an
//! over-long line or a reply type the commands sent cannot produce is a protocol failure (the
//! connection is dropped), never an allocation of the announced size: buffers grow only by
//! what actually arrived. Arrays (SCAN's reply) are bounded too: in elements
//! ([`MAX_ARRAY_ELEMENTS`], nested ones counted), in bytes ([`MAX_ARRAY_BYTES`]) and in nesting
//! ([`MAX_ARRAY_DEPTH`]).

use bytes::{Buf, Bytes, BytesMut};
use std::fmt;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest status, error or integer line accepted (Redis's inline limit).
const MAX_LINE: usize = 64 * 1024;
/// Least free space offered to each read.
const CHUNK: usize = 16 * 1024;
/// Most elements of one array reply, those of nested arrays included (a SCAN page of
/// `COUNT 1000` has about a thousand).
pub const MAX_ARRAY_ELEMENTS: usize = 65_536;
/// Longest array reply, in bytes as sent.
pub const MAX_ARRAY_BYTES: usize = 8 * 1024 * 1024;
/// Deepest nesting of arrays (SCAN's reply nests one in another).
pub const MAX_ARRAY_DEPTH: usize = 4;

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
    /// `None`: the null bulk (and the null array, RESP2's other nil).
    Bulk(Option<Bytes>),
    Array(Vec<Reply>),
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

/// What one reply may hold: the bulk bound is `proto-max-bulk-len`, the array bounds are
/// [`MAX_ARRAY_ELEMENTS`] and [`MAX_ARRAY_BYTES`] (smaller in tests, to cross them cheaply).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub max_bulk_len: u64,
    pub max_array_elements: usize,
    pub max_array_bytes: usize,
}

impl Bounds {
    pub fn new(max_bulk_len: u64) -> Bounds {
        Bounds {
            max_bulk_len,
            max_array_elements: MAX_ARRAY_ELEMENTS,
            max_array_bytes: MAX_ARRAY_BYTES,
        }
    }
}

/// Takes one complete reply off the front of `buf`; `Ok(None)` when more bytes are needed.
pub fn parse(buf: &mut BytesMut, max_bulk_len: u64) -> Result<Option<Reply>, Failure> {
    parse_within(buf, Bounds::new(max_bulk_len))
}

/// [`parse`] under explicit bounds.
pub fn parse_within(buf: &mut BytesMut, bounds: Bounds) -> Result<Option<Reply>, Failure> {
    let max_bulk_len = bounds.max_bulk_len;
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
        b'*' => {
            let mut walk = ArrayWalk {
                buf: &buf[..],
                bounds,
                elements_left: bounds.max_array_elements,
            };
            let Some((reply, end)) = walk.element(0, 0)? else {
                if buf.len() > bounds.max_array_bytes {
                    return Err(array_too_long(bounds));
                }
                return Ok(None);
            };
            if end > bounds.max_array_bytes {
                return Err(array_too_long(bounds));
            }
            buf.advance(end);
            reply
        }
        other => return Err(unexpected_type(other)),
    };
    Ok(Some(reply))
}

fn unexpected_type(kind: u8) -> Failure {
    Failure::Protocol(format!(
        "unexpected reply type '{}'",
        (kind as char).escape_default()
    ))
}

fn array_too_long(bounds: Bounds) -> Failure {
    Failure::Protocol(format!(
        "an array reply longer than {} bytes",
        bounds.max_array_bytes
    ))
}

/// Reads an array reply from the front of a buffer without consuming it (it may still be
/// incomplete), within the bounds: elements are counted against one budget for the whole
/// reply, and no element vector is sized by a count before that many elements could have
/// arrived.
struct ArrayWalk<'a> {
    buf: &'a [u8],
    bounds: Bounds,
    elements_left: usize,
}

impl ArrayWalk<'_> {
    /// The element starting at `pos` and where it ends; `None` when incomplete.
    fn element(&mut self, pos: usize, depth: usize) -> Result<Option<(Reply, usize)>, Failure> {
        let rest = &self.buf[pos..];
        let Some(line_end) = find_crlf(rest) else {
            if rest.len() > MAX_LINE {
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
        let line = &rest[1..line_end];
        let after = pos + line_end + 2;
        let reply = match rest[0] {
            b'+' => Reply::Status(Bytes::copy_from_slice(line)),
            b'-' => Reply::Error(String::from_utf8_lossy(line).into_owned()),
            b':' => Reply::Integer(number(line)?),
            b'$' => return self.bulk(number(line)?, after),
            b'*' => return self.array(number(line)?, after, depth),
            other => return Err(unexpected_type(other)),
        };
        Ok(Some((reply, after)))
    }

    fn bulk(&self, n: i64, start: usize) -> Result<Option<(Reply, usize)>, Failure> {
        if n < 0 {
            return Ok(Some((Reply::Bulk(None), start)));
        }
        if n as u64 > self.bounds.max_bulk_len {
            return Err(Failure::Protocol(format!(
                "the upstream announced a bulk of {n} bytes, above proto-max-bulk-len ({})",
                self.bounds.max_bulk_len
            )));
        }
        let end = start as u64 + n as u64 + 2;
        if end > self.bounds.max_array_bytes as u64 {
            return Err(array_too_long(self.bounds));
        }
        let end = end as usize;
        if self.buf.len() < end {
            return Ok(None);
        }
        if &self.buf[end - 2..end] != b"\r\n" {
            return Err(Failure::Protocol("bulk not ended by CRLF".into()));
        }
        let data = Bytes::copy_from_slice(&self.buf[start..end - 2]);
        Ok(Some((Reply::Bulk(Some(data)), end)))
    }

    fn array(
        &mut self,
        n: i64,
        start: usize,
        depth: usize,
    ) -> Result<Option<(Reply, usize)>, Failure> {
        if n < 0 {
            return Ok(Some((Reply::Bulk(None), start)));
        }
        if depth == MAX_ARRAY_DEPTH {
            return Err(Failure::Protocol(format!(
                "an array reply nested deeper than {MAX_ARRAY_DEPTH} levels"
            )));
        }
        let n = n as u64;
        if n > self.elements_left as u64 {
            return Err(Failure::Protocol(format!(
                "an array reply of more than {} elements (this one announces {n})",
                self.bounds.max_array_elements
            )));
        }
        let n = n as usize;
        self.elements_left -= n;
        // Each element takes at least three bytes ("+\r\n"): until that many have arrived
        // the reply is incomplete, and nothing is allocated for it.
        if (self.buf.len() - start) / 3 < n {
            return Ok(None);
        }
        let mut elements = Vec::with_capacity(n);
        let mut pos = start;
        for _ in 0..n {
            let Some((element, end)) = self.element(pos, depth + 1)? else {
                return Ok(None);
            };
            elements.push(element);
            pos = end;
        }
        Ok(Some((Reply::Array(elements), pos)))
    }
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
        let err = parse_all(b"*2000000000\r\n", 10).unwrap_err().to_string();
        assert!(err.contains("more than 65536 elements"), "{err}");
        assert!(parse_all(b"$3\r\nabcXY", 10).is_err());
        assert!(parse_all(b":twelve\r\n", 10).is_err());
    }

    fn bulk(text: &str) -> Reply {
        Reply::Bulk(Some(Bytes::from(text.to_string())))
    }

    #[test]
    fn arrays_parse_whole_nested_and_wait_for_more() {
        let scan = b"*2\r\n$2\r\n17\r\n*3\r\n$1\r\na\r\n$2\r\nbc\r\n$0\r\n\r\n";
        let expected = Reply::Array(vec![
            bulk("17"),
            Reply::Array(vec![bulk("a"), bulk("bc"), bulk("")]),
        ]);
        for cut in 0..scan.len() {
            let mut buf = BytesMut::from(&scan[..cut]);
            assert_eq!(parse(&mut buf, 10).unwrap(), None, "cut at {cut}");
            assert_eq!(buf.len(), cut, "nothing consumed before the reply is whole");
        }
        let mut buf = BytesMut::from(&scan[..]);
        buf.extend_from_slice(b":1\r\n");
        assert_eq!(parse(&mut buf, 10).unwrap(), Some(expected));
        assert_eq!(parse(&mut buf, 10).unwrap(), Some(Reply::Integer(1)));
        assert_eq!(
            parse_all(b"*3\r\n+s\r\n-E x\r\n:-4\r\n", 10).unwrap(),
            Some(Reply::Array(vec![
                Reply::Status(Bytes::from_static(b"s")),
                Reply::Error("E x".into()),
                Reply::Integer(-4)
            ]))
        );
        assert_eq!(
            parse_all(b"*0\r\n", 10).unwrap(),
            Some(Reply::Array(vec![]))
        );
        assert_eq!(parse_all(b"*-1\r\n", 10).unwrap(), Some(Reply::Bulk(None)));
        assert_eq!(
            parse_all(b"*1\r\n$-1\r\n", 10).unwrap(),
            Some(Reply::Array(vec![Reply::Bulk(None)]))
        );
    }

    #[test]
    fn arrays_stay_within_their_bounds() {
        let bounds = Bounds {
            max_bulk_len: 8,
            max_array_elements: 4,
            max_array_bytes: 64,
        };
        let within = |bytes: &[u8]| parse_within(&mut BytesMut::from(bytes), bounds);
        // Elements, counted over the nested arrays too, refused from the headers alone.
        assert!(within(b"*4\r\n:1\r\n:2\r\n:3\r\n:4\r\n").unwrap().is_some());
        let err = within(b"*5\r\n").unwrap_err().to_string();
        assert!(err.contains("more than 4 elements"), "{err}");
        let err = within(b"*2\r\n*2\r\n:1\r\n:2\r\n*1\r\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("more than 4 elements"), "{err}");
        // Bytes: a bulk whose announced end is past the bound (refused before its bytes
        // arrive), a complete reply too long, a partial one already too long.
        let roomy = Bounds {
            max_array_elements: 100,
            ..bounds
        };
        let bytes = |bytes: &[u8]| parse_within(&mut BytesMut::from(bytes), roomy);
        let bulks = [b"*5\r\n".to_vec(), b"$8\r\n01234567\r\n".repeat(4)].concat();
        assert_eq!(bulks.len(), 60);
        assert!(
            bytes(&bulks).unwrap().is_none(),
            "60 bytes: within, waiting"
        );
        let err = bytes(&[&bulks[..], b"$8\r\n"].concat())
            .unwrap_err()
            .to_string();
        assert!(err.contains("longer than 64 bytes"), "{err}");
        let statuses = [b"*4\r\n".to_vec(), b"+0123456789abcdef\r\n".repeat(4)].concat();
        let err = bytes(&statuses).unwrap_err().to_string();
        assert!(err.contains("longer than 64 bytes"), "{err}");
        let err = bytes(&statuses[..70]).unwrap_err().to_string();
        assert!(err.contains("longer than 64 bytes"), "{err}");
        // A bulk inside an array keeps the bulk bound; nesting is bounded.
        let err = within(b"*1\r\n$9\r\n").unwrap_err().to_string();
        assert!(err.contains("proto-max-bulk-len (8)"), "{err}");
        let deep = format!("{}:1\r\n", "*1\r\n".repeat(MAX_ARRAY_DEPTH + 1));
        let err = parse_all(deep.as_bytes(), 10).unwrap_err().to_string();
        assert!(err.contains("nested deeper"), "{err}");
        let deepest = format!("{}:1\r\n", "*1\r\n".repeat(MAX_ARRAY_DEPTH));
        assert!(parse_all(deepest.as_bytes(), 10).unwrap().is_some());
        assert!(within(b"*1\r\n%1\r\n").is_err(), "only RESP2 types");
    }

    #[test]
    fn an_announced_array_is_not_allocated_before_it_arrives() {
        // 65,536 elements announced, 2 arrived: incomplete, and no vector of 65,536 made
        // (the walk waits for three bytes per announced element first).
        let mut buf = BytesMut::from(&b"*65536\r\n:1\r\n:2\r\n"[..]);
        assert_eq!(parse(&mut buf, 10).unwrap(), None);
        let big = [b"*65536\r\n".to_vec(), b":1\r\n".repeat(65_536)].concat();
        match parse_all(&big, 10).unwrap() {
            Some(Reply::Array(elements)) => assert_eq!(elements.len(), 65_536),
            other => panic!("{other:?}"),
        }
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
