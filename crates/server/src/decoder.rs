//! Turns the bytes a client sends into requests (a command name and its arguments), enforcing
//! the protocol limits before any memory is committed to what the client claims. Accepts the
//! two request forms Redis accepts: RESP multibulk (`*N` then `N` bulk strings, what every
//! client library sends) and inline commands (a line of space-separated words, what a person
//! types into telnet).
//!
//! The decoder keeps its position inside an incomplete request, so a request that arrives in
//! many small reads is scanned once, not once per read.

use bytes::{Buf, Bytes, BytesMut};
use std::fmt;

/// Longest inline command line, and longest `*N`/`$N` header line, as in Redis.
pub const MAX_INLINE_LEN: usize = 64 * 1024;
/// Most arguments one request may declare (Redis accepts up to 2^31; a cache needs far fewer).
pub const MAX_ARGS: usize = 1024 * 1024;
/// A header line (`*123\r\n`, `$123\r\n`) longer than this is not a number.
const MAX_HEADER_LEN: usize = 32;

/// Limits a client's requests are held to. Unauthenticated clients of a password-protected
/// server get much smaller ones, so a stranger cannot make the server buffer much.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_bulk_len: u64,
    pub max_args: usize,
}

impl Limits {
    pub fn new(max_bulk_len: u64) -> Limits {
        Limits {
            max_bulk_len,
            max_args: MAX_ARGS,
        }
    }

    /// Redis's limits for a client that has not authenticated yet.
    pub fn unauthenticated() -> Limits {
        Limits {
            max_bulk_len: 16 * 1024,
            max_args: 10,
        }
    }
}

/// A violation of the protocol; the connection answers `-ERR Protocol error: ...` and closes,
/// because after a framing error the rest of the stream cannot be trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError {
    pub message: String,
    /// Offset in the connection's input (from the start of this request) where it was found.
    pub offset: usize,
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Protocol error: {}", self.message)
    }
}

impl std::error::Error for ProtocolError {}

/// Incremental request decoder; one per connection.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    /// Arguments the current multibulk request declared, once its header is read.
    expected: Option<usize>,
    /// `(offset, len)` of the arguments of the current request fully received so far.
    spans: Vec<(usize, usize)>,
    /// Where scanning resumes in the buffer.
    pos: usize,
    /// Length of the bulk being waited for, when its header has been read but not its data.
    pending_bulk: Option<usize>,
}

impl Decoder {
    pub fn new(limits: Limits) -> Decoder {
        Decoder {
            limits,
            expected: None,
            spans: Vec::new(),
            pos: 0,
            pending_bulk: None,
        }
    }

    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Bytes of the request being received that are already buffered (0 between requests).
    pub fn in_progress(&self) -> usize {
        self.pos
    }

    /// Decodes the next complete request at the front of `buf` into `args` (cleared first),
    /// removing it from `buf`. Returns `Ok(false)` when more bytes are needed; `buf` keeps the
    /// partial request and the decoder remembers how far it got.
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
        args: &mut Vec<Bytes>,
    ) -> Result<bool, ProtocolError> {
        args.clear();
        loop {
            if buf.is_empty() {
                return Ok(false);
            }
            if buf[0] == b'*' && self.expected.is_none() {
                // A whole request of plain headers (nearly every request) is read in one
                // pass; anything else, from its first byte again, by the careful scanner.
                if let Some(end) = scan_whole(buf, &self.limits, &mut self.spans) {
                    push_args(buf.split_to(end).freeze(), &self.spans, args);
                    self.spans.clear();
                    return Ok(true);
                }
                self.spans.clear();
            }
            let complete = if buf[0] == b'*' {
                self.scan_multibulk(buf)?
            } else {
                self.scan_inline(buf)?
            };
            let Some(consumed) = complete else {
                return Ok(false);
            };
            let request = buf.split_to(consumed).freeze();
            if request[0] == b'*' {
                push_args(request, &self.spans, args);
            } else {
                split_inline(&request, args);
            }
            self.reset();
            if !args.is_empty() {
                return Ok(true);
            }
            // `*0`, `*-1` and blank inline lines are no-ops, as in Redis: look further.
        }
    }

    fn reset(&mut self) {
        self.expected = None;
        self.spans.clear();
        self.pos = 0;
        self.pending_bulk = None;
    }

    /// Scans a multibulk request; `Some(len)` when all `len` bytes of it are in `buf`.
    fn scan_multibulk(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        let expected = match self.expected {
            Some(n) => n,
            None => {
                let Some((count, next)) = self.header(buf, 0, b'*')? else {
                    return Ok(None);
                };
                if count > self.limits.max_args as i64 {
                    return Err(error("invalid multibulk length", 0));
                }
                let count = count.max(0) as usize;
                self.expected = Some(count);
                self.pos = next;
                self.spans.reserve(count.min(1024));
                count
            }
        };
        while self.spans.len() < expected {
            let len = match self.pending_bulk {
                Some(len) => len,
                None => {
                    if self.pos >= buf.len() {
                        return Ok(None);
                    }
                    if buf[self.pos] != b'$' {
                        let got = buf[self.pos] as char;
                        return Err(error(
                            &format!("expected '$', got '{}'", got.escape_default()),
                            self.pos,
                        ));
                    }
                    let Some((len, next)) = self.header(buf, self.pos, b'$')? else {
                        return Ok(None);
                    };
                    if len < 0 || len as u64 > self.limits.max_bulk_len {
                        return Err(error("invalid bulk length", self.pos));
                    }
                    self.pos = next;
                    self.pending_bulk = Some(len as usize);
                    len as usize
                }
            };
            let end = self.pos + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(error("bulk string not followed by CRLF", end));
            }
            self.spans.push((self.pos, len));
            self.pos = end + 2;
            self.pending_bulk = None;
        }
        Ok(Some(self.pos))
    }

    /// Reads a `<kind><integer>\r\n` line starting at `at`; `None` if it is not all here yet.
    fn header(
        &self,
        buf: &[u8],
        at: usize,
        kind: u8,
    ) -> Result<Option<(i64, usize)>, ProtocolError> {
        if let Some(found) = plain_header(buf, at) {
            return Ok(Some(found));
        }
        let what = if kind == b'*' {
            "invalid multibulk length"
        } else {
            "invalid bulk length"
        };
        let window = &buf[at + 1..buf.len().min(at + 1 + MAX_HEADER_LEN)];
        let Some(cr) = window.iter().position(|&b| b == b'\r') else {
            if window.len() >= MAX_HEADER_LEN {
                return Err(error(what, at));
            }
            return Ok(None);
        };
        let lf = at + 1 + cr + 1;
        if lf >= buf.len() {
            return Ok(None);
        }
        if buf[lf] != b'\n' {
            return Err(error(what, at));
        }
        let value = parse_integer(&window[..cr]).ok_or_else(|| error(what, at))?;
        Ok(Some((value, lf + 1)))
    }

    /// Scans an inline request; `Some(len)` once its line (with the newline) is in `buf`.
    fn scan_inline(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        let from = self.pos;
        let window = &buf[from..buf.len().min(MAX_INLINE_LEN + 1)];
        match window.iter().position(|&b| b == b'\n') {
            Some(i) => Ok(Some(from + i + 1)),
            None if buf.len() > MAX_INLINE_LEN => Err(error("too big inline request", 0)),
            None => {
                self.pos = buf.len();
                Ok(None)
            }
        }
    }
}

/// A multibulk request that is all in `buf`, with at least one argument and every header
/// plain (see [`plain_header`]) and within `limits`: its arguments' spans go to `spans` and
/// its length is returned. `None` for anything else (incomplete, malformed, `*0`, over a
/// limit), which the careful scanner then reads from the start, finding the same requests
/// and the same errors; so this adds no behaviour, only a shorter way for the common case.
#[inline(always)]
fn scan_whole(buf: &[u8], limits: &Limits, spans: &mut Vec<(usize, usize)>) -> Option<usize> {
    let (count, mut pos) = plain_header(buf, 0)?;
    if count == 0 || count as u64 > limits.max_args as u64 {
        return None;
    }
    spans.clear();
    for _ in 0..count {
        if buf.get(pos) != Some(&b'$') {
            return None;
        }
        let (len, data) = plain_header(buf, pos)?;
        if len as u64 > limits.max_bulk_len {
            return None;
        }
        let end = data.checked_add(len as usize)?;
        if buf.get(end..end.checked_add(2)?) != Some(b"\r\n") {
            return None;
        }
        spans.push((data, len as usize));
        pos = end + 2;
    }
    Some(pos)
}

/// Most arguments a request may have for [`peek_keys`] to look past it: bounds the scan of
/// a large request that arrives over many reads (scanned again after each).
const PEEK_MAX_ARGS: i64 = 16;

/// The second argument (for most commands, the key) of each complete request at the start of
/// `buf`, up to `keys.len()` of them, for reading the batch's keys ahead
/// ([`crate::db::Db::prefetch`]). Stops at the first request that is incomplete, not a plain
/// multibulk (see [`scan_whole`]), of fewer than two or more than [`PEEK_MAX_ARGS`] arguments:
/// what it finds is only a hint, so it takes the common case and leaves the rest to
/// [`Decoder::decode`]. Returns how many keys it wrote, one per request.
pub fn peek_keys<'b>(buf: &'b [u8], keys: &mut [&'b [u8]]) -> usize {
    let (mut pos, mut found) = (0, 0);
    while found < keys.len() && buf.get(pos) == Some(&b'*') {
        let Some((count, mut at)) = plain_header(buf, pos) else {
            break;
        };
        if !(2..=PEEK_MAX_ARGS).contains(&count) {
            break;
        }
        let mut key: &[u8] = &[];
        for arg in 0..count {
            if buf.get(at) != Some(&b'$') {
                return found;
            }
            let Some((len, data)) = plain_header(buf, at) else {
                return found;
            };
            let Some(end) = data.checked_add(len as usize) else {
                return found;
            };
            if buf.get(end..end.saturating_add(2)) != Some(b"\r\n") {
                return found;
            }
            if arg == 1 {
                key = &buf[data..end];
            }
            at = end + 2;
        }
        keys[found] = key;
        found += 1;
        pos = at;
    }
    found
}

/// The common header, `<kind><digits>\r\n` with at most 18 digits and all of it buffered, read
/// in one pass; `None` for anything else (a sign, a missing byte, a malformed line), which
/// [`Decoder::header`] then reads carefully. Every request has one header per argument.
#[inline(always)]
fn plain_header(buf: &[u8], at: usize) -> Option<(i64, usize)> {
    let digits = buf.get(at + 1..)?;
    let mut value: i64 = 0;
    let mut i = 0;
    while i < digits.len() && i <= 18 {
        let digit = digits[i].wrapping_sub(b'0');
        if digit >= 10 {
            break;
        }
        // Wrapping: a 19th digit makes the header not plain, whatever the value became.
        value = value.wrapping_mul(10).wrapping_add(i64::from(digit));
        i += 1;
    }
    if i == 0 || i > 18 || digits.get(i..i + 2) != Some(b"\r\n") {
        return None;
    }
    Some((value, at + 1 + i + 2))
}

fn error(message: &str, offset: usize) -> ProtocolError {
    ProtocolError {
        message: message.to_string(),
        offset,
    }
}

/// A strict decimal integer: optional `-`, at least one digit, nothing else, no overflow.
fn parse_integer(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        value = value * 10 + i64::from(d - b'0');
    }
    Some(if negative { -value } else { value })
}

/// Appends the arguments at `spans` of `request`: views of it, the last one `request` itself
/// narrowed, which saves a reference-count increment and decrement per request.
fn push_args(request: Bytes, spans: &[(usize, usize)], args: &mut Vec<Bytes>) {
    let Some((&(start, len), others)) = spans.split_last() else {
        return;
    };
    args.extend(
        others
            .iter()
            .map(|&(start, len)| request.slice(start..start + len)),
    );
    let mut last = request;
    last.truncate(start + len);
    last.advance(start);
    args.push(last);
}

/// Splits an inline command line on spaces and tabs (the trailing CR/LF included).
fn split_inline(line: &Bytes, args: &mut Vec<Bytes>) {
    let mut start = None;
    for (i, &b) in line.iter().enumerate() {
        let blank = matches!(b, b' ' | b'\t' | b'\r' | b'\n');
        match (blank, start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                args.push(line.slice(s..i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        args.push(line.slice(s..));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8], limits: Limits) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
        let mut decoder = Decoder::new(limits);
        let mut buf = BytesMut::from(input);
        let mut args = Vec::new();
        let mut out = Vec::new();
        while decoder.decode(&mut buf, &mut args)? {
            out.push(args.iter().map(|a| a.to_vec()).collect());
        }
        Ok(out)
    }

    fn limits() -> Limits {
        Limits::new(512 * 1024 * 1024)
    }

    #[test]
    fn multibulk_and_inline_requests_decode() {
        let got = decode_all(
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING  hello\r\n*0\r\n\r\n*1\r\n$0\r\n\r\n",
            limits(),
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                vec![b"GET".to_vec(), b"k".to_vec()],
                vec![b"PING".to_vec(), b"hello".to_vec()],
                vec![Vec::new()],
            ]
        );
    }

    #[test]
    fn a_request_split_at_every_byte_decodes_once_complete() {
        let wire = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nva\r\nl\r\n";
        let mut decoder = Decoder::new(limits());
        let mut buf = BytesMut::new();
        let mut args = Vec::new();
        for (i, &byte) in wire.iter().enumerate() {
            buf.extend_from_slice(&[byte]);
            let done = decoder.decode(&mut buf, &mut args).unwrap();
            assert_eq!(done, i == wire.len() - 1, "byte {i}");
        }
        assert_eq!(args[2].as_ref(), b"va\r\nl");
        assert!(buf.is_empty());
        assert_eq!(decoder.in_progress(), 0);
    }

    #[test]
    fn oversized_bulk_is_rejected_from_its_header_alone() {
        let mut decoder = Decoder::new(Limits::new(1024));
        let mut buf = BytesMut::from(&b"*1\r\n$1025\r\n"[..]);
        let err = decoder.decode(&mut buf, &mut Vec::new()).unwrap_err();
        assert_eq!(err.message, "invalid bulk length");
        assert_eq!(err.offset, 4);
        // The limit itself is fine, and the decoder then just waits for the data.
        let mut decoder = Decoder::new(Limits::new(1024));
        let mut buf = BytesMut::from(&b"*1\r\n$1024\r\nabc"[..]);
        assert!(!decoder.decode(&mut buf, &mut Vec::new()).unwrap());
    }

    #[test]
    fn malformed_headers_are_protocol_errors() {
        for bad in [
            &b"*x\r\n"[..],
            b"*2\r\n:1\r\n",
            b"*1\r\n$-2\r\n",
            b"*1\r\n$3\r\nabcXY",
            b"*99999999999999999999\r\n",
            b"*1\r\n$12345678901234567890123456789012345678901234567890",
            b"*1\r\n$3\rX",
            b"*2000000\r\n",
        ] {
            assert!(decode_all(bad, limits()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_endless_inline_line_is_rejected() {
        let line = vec![b'a'; MAX_INLINE_LEN + 2];
        let err = decode_all(&line, limits()).unwrap_err();
        assert_eq!(err.message, "too big inline request");
    }

    #[test]
    fn peek_keys_reads_each_complete_requests_key_until_the_common_case_ends() {
        let get = |key: &str| format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len());
        let set = "*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$2\r\nvv\r\n";
        let mut keys: [&[u8]; 4] = [&[]; 4];
        let input = format!("{}{set}{}", get("a"), get("key:1"));
        assert_eq!(peek_keys(input.as_bytes(), &mut keys), 3);
        assert_eq!(keys[..3], [&b"a"[..], b"b", b"key:1"]);
        // Nothing is read past `keys`, an incomplete request, one of a single argument, an
        // inline command, or a request with more arguments than the scan looks through.
        let input = get("a").repeat(6);
        assert_eq!(peek_keys(input.as_bytes(), &mut keys), 4);
        let whole = format!("{}{}", get("a"), get("bb"));
        for cut in 0..whole.len() {
            let expected = usize::from(cut >= get("a").len());
            assert_eq!(
                peek_keys(&whole.as_bytes()[..cut], &mut keys),
                expected,
                "cut {cut}"
            );
        }
        let input = format!("{}*1\r\n$4\r\nPING\r\n{}", get("a"), get("b"));
        assert_eq!(peek_keys(input.as_bytes(), &mut keys), 1);
        let input = format!("{}GET c\r\n{}", get("a"), get("b"));
        assert_eq!(peek_keys(input.as_bytes(), &mut keys), 1);
        let mut long = format!("*{}\r\n", PEEK_MAX_ARGS + 1);
        for _ in 0..=PEEK_MAX_ARGS {
            long.push_str("$1\r\nk\r\n");
        }
        assert_eq!(
            peek_keys(format!("{long}{}", get("a")).as_bytes(), &mut keys),
            0
        );
    }

    /// Whatever the input, every key `peek_keys` reports is the second argument of the request
    /// the decoder decodes in the same place: a hint that is never about another request.
    #[test]
    fn peek_keys_agrees_with_the_decoder_on_random_pipelines() {
        let mut state = 0x9e37_79b9_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut peeked = 0;
        for _ in 0..2000 {
            let mut input = Vec::new();
            for _ in 0..(1 + next() % 8) {
                let args = 1 + next() % 5;
                input.extend_from_slice(format!("*{args}\r\n").as_bytes());
                for _ in 0..args {
                    let len = (next() % 12) as usize;
                    let arg: Vec<u8> = (0..len).map(|_| b'a' + (next() % 26) as u8).collect();
                    input.extend_from_slice(format!("${len}\r\n").as_bytes());
                    input.extend_from_slice(&arg);
                    input.extend_from_slice(b"\r\n");
                }
            }
            if next() % 3 == 0 {
                let at = (next() as usize) % input.len();
                input[at] = next() as u8;
            }
            let cut = (next() as usize) % (input.len() + 1);
            let input = &input[..cut];
            let mut keys: [&[u8]; 8] = [&[]; 8];
            let found = peek_keys(input, &mut keys);
            // The requests decoded before the end of the input or a protocol error.
            let mut decoded: Vec<Vec<Vec<u8>>> = Vec::new();
            let (mut decoder, mut buf, mut args) =
                (Decoder::new(limits()), BytesMut::from(input), Vec::new());
            while let Ok(true) = decoder.decode(&mut buf, &mut args) {
                decoded.push(args.iter().map(|a| a.to_vec()).collect());
            }
            for (i, key) in keys[..found].iter().enumerate() {
                let request = decoded.get(i).unwrap_or_else(|| {
                    panic!("peeked key {i} of {input:?} has no decoded request")
                });
                assert_eq!(request.get(1).map(Vec::as_slice), Some(*key), "{input:?}");
            }
            peeked += found;
        }
        assert!(peeked > 1000, "the scan finds keys ({peeked})");
    }

    #[test]
    fn unauthenticated_limits_are_small() {
        assert!(decode_all(b"*11\r\n", Limits::unauthenticated()).is_err());
        assert!(decode_all(b"*1\r\n$16385\r\n", Limits::unauthenticated()).is_err());
    }

    /// Random bytes (and random mutations of valid requests), fed whole and in small pieces:
    /// never a panic, and both ways decode the same requests and stop at the same error.
    #[test]
    fn random_input_decodes_the_same_whole_or_in_pieces() {
        fn run(input: &[u8], piece: usize) -> (Vec<Vec<Vec<u8>>>, bool) {
            let mut decoder = Decoder::new(Limits {
                max_bulk_len: 100,
                max_args: 8,
            });
            let mut buf = BytesMut::new();
            let mut args = Vec::new();
            let mut out = Vec::new();
            for chunk in input.chunks(piece) {
                buf.extend_from_slice(chunk);
                loop {
                    match decoder.decode(&mut buf, &mut args) {
                        Ok(true) => out.push(args.iter().map(|a| a.to_vec()).collect()),
                        Ok(false) => break,
                        Err(_) => return (out, true),
                    }
                }
            }
            (out, false)
        }
        let mut state = 0x5eed_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let valid = b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\nPING\r\n*1\r\n$4\r\nPING\r\n".to_vec();
        let mut decoded_some = 0;
        for round in 0..3000 {
            let input: Vec<u8> = if round % 2 == 0 {
                let len = (next() % 200) as usize;
                (0..len).map(|_| next() as u8).collect()
            } else {
                let mut input = valid.clone();
                for _ in 0..(next() % 4) {
                    let at = (next() as usize) % input.len();
                    input[at] = next() as u8;
                }
                input
            };
            let whole = run(&input, input.len().max(1));
            let pieces = run(&input, 1 + (next() % 5) as usize);
            assert_eq!(whole, pieces, "input {input:?}");
            decoded_some += whole.0.len();
        }
        assert!(
            decoded_some > 0,
            "the mutated valid requests decode at least sometimes"
        );
    }

    /// Every way of cutting a stream in two (and byte by byte) decodes the same requests, and
    /// fails at the same error, as the stream whole: the one-pass reading of whole requests
    /// and the incremental one agree, at the bounds too.
    #[test]
    fn a_stream_cut_anywhere_decodes_as_it_does_whole() {
        let limits = Limits {
            max_bulk_len: 8,
            max_args: 3,
        };
        fn run(pieces: &[&[u8]], limits: Limits) -> (Vec<Vec<Vec<u8>>>, Option<ProtocolError>) {
            let mut decoder = Decoder::new(limits);
            let (mut buf, mut args, mut out) = (BytesMut::new(), Vec::new(), Vec::new());
            for piece in pieces {
                buf.extend_from_slice(piece);
                loop {
                    match decoder.decode(&mut buf, &mut args) {
                        Ok(true) => out.push(args.iter().map(|a| a.to_vec()).collect()),
                        Ok(false) => break,
                        Err(e) => return (out, Some(e)),
                    }
                }
            }
            (out, None)
        }
        let streams: [&[u8]; 12] = [
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n",
            // Bulk lengths at the bound and arguments at the bound.
            b"*3\r\n$8\r\n12345678\r\n$0\r\n\r\n$8\r\nab\r\ncd\r\n\r\n",
            b"*1\r\n$9\r\n123456789\r\n",
            b"*4\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n",
            // No-ops, inline commands and requests mixed.
            b"*0\r\n*-1\r\nPING\r\n\r\n*1\r\n$4\r\nPING\r\n  GET  k \r\n",
            // Malformed at each place a header or a terminator can be.
            b"*2\r\n$3\r\nGET\r\n:1\r\n",
            b"*1\r\n$3\r\nGETXY",
            b"*1\r\n$-1\r\n",
            b"*1\r\n$+3\r\nGET\r\n",
            b"*+1\r\n$3\r\nGET\r\n",
            b"*1\r\n$03\r\nGET\r\n*1\r\n$3\rXGET\r\n",
            b"*1\r\n$1234567890123456789\r\n",
        ];
        for stream in streams {
            let whole = run(&[stream], limits);
            for cut in 0..=stream.len() {
                let (head, tail) = stream.split_at(cut);
                assert_eq!(run(&[head, tail], limits), whole, "{stream:?} cut at {cut}");
            }
            let bytes: Vec<&[u8]> = stream.chunks(1).collect();
            assert_eq!(run(&bytes, limits), whole, "{stream:?} byte by byte");
        }
        // The streams do cross the bounds: some decode, some stop at an error.
        assert_eq!(run(&[streams[1]], limits).0.len(), 1);
        assert_eq!(
            run(&[streams[2]], limits).1.unwrap().message,
            "invalid bulk length"
        );
        assert_eq!(
            run(&[streams[3]], limits).1.unwrap().message,
            "invalid multibulk length"
        );
    }

    #[test]
    fn plain_headers_agree_with_the_careful_reader() {
        assert_eq!(plain_header(b"$3\r\nGET", 0), Some((3, 4)));
        assert_eq!(plain_header(b"xx*12\r\n", 2), Some((12, 7)));
        let longest = b"$999999999999999999\r\n";
        assert_eq!(
            plain_header(longest, 0),
            Some((999_999_999_999_999_999, 21))
        );
        for other in [
            &b"$\r\n"[..],
            b"$-1\r\n",
            b"$3\r",
            b"$3",
            b"$3\rX",
            b"$3x\r\n",
            b"$1234567890123456789\r\n",
        ] {
            assert_eq!(plain_header(other, 0), None, "{other:?}");
        }
    }

    #[test]
    fn integers_are_strict() {
        assert_eq!(parse_integer(b"123"), Some(123));
        assert_eq!(parse_integer(b"-1"), Some(-1));
        for bad in [&b""[..], b"-", b"+1", b"1 ", b"12a", b"1234567890123456789"] {
            assert_eq!(parse_integer(bad), None, "{bad:?}");
        }
    }
}
