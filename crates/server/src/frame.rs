//! Protocol values the server sends, and their wire encoding in RESP2 or RESP3. Commands build
//! a [`Frame`]; the connection encodes it into its output buffer for the client's protocol
//! version, so no command needs to know which version its client speaks.

use bytes::{BufMut, Bytes, BytesMut};

/// The protocol a client speaks: RESP2 until it sends `HELLO 3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Resp2,
    Resp3,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    Simple(Bytes),
    /// The whole error line, starting with its code (`ERR`, `NOAUTH`, ...).
    Error(String),
    Integer(i64),
    Bulk(Bytes),
    /// A cached value sent as a bulk string, sharing the cache's entry (a GET hit allocates
    /// nothing and copies the value once, into the output buffer).
    Value(crate::keytable::Value),
    /// Human-readable text (INFO): a RESP3 verbatim string, a bulk string in RESP2.
    Verbatim(Bytes),
    Null,
    /// A null array: `*-1` in RESP2 (EXEC of a transaction a watched key aborted), `_` in
    /// RESP3.
    NullArray,
    Array(Vec<Frame>),
    /// An array of two integers, built and encoded without allocating: the `[epoch,
    /// position]` of a round-trip `ZLOG.NEXT`, one request per log position.
    Pair(i64, i64),
    /// A RESP3 map; RESP2 clients receive it as a flat array of key, value, key, value...
    Map(Vec<(Frame, Frame)>),
}

impl From<crate::db::Fetched> for Frame {
    fn from(value: crate::db::Fetched) -> Frame {
        match value {
            crate::db::Fetched::Cached(value) => Frame::Value(value),
            crate::db::Fetched::Stored(value) => Frame::Bulk(value),
        }
    }
}

impl Frame {
    pub fn ok() -> Frame {
        Frame::Simple(Bytes::from_static(b"OK"))
    }

    pub fn simple(text: &'static str) -> Frame {
        Frame::Simple(Bytes::from_static(text.as_bytes()))
    }

    /// A generic `ERR` error.
    pub fn err(message: impl std::fmt::Display) -> Frame {
        Frame::Error(format!("ERR {message}"))
    }

    pub fn bulk_str(text: &str) -> Frame {
        Frame::Bulk(Bytes::copy_from_slice(text.as_bytes()))
    }

    pub fn static_bulk(text: &'static str) -> Frame {
        Frame::Bulk(Bytes::from_static(text.as_bytes()))
    }

    /// Bytes [`Frame::encode`] would write, computed without encoding or allocating.
    pub fn encoded_len(&self, protocol: Protocol) -> u64 {
        // Type byte, digits and CRLF of a `<kind><n>\r\n` header.
        fn header(n: u64) -> u64 {
            3 + n.checked_ilog10().unwrap_or(0) as u64 + 1
        }
        match self {
            Frame::Simple(text) => 3 + text.len() as u64,
            Frame::Error(text) => 3 + text.len() as u64,
            Frame::Integer(n) => header(n.unsigned_abs()) + u64::from(*n < 0),
            Frame::Bulk(data) => bulk_len(data.len() as u64),
            Frame::Value(data) => bulk_len(data.len() as u64),
            Frame::Verbatim(text) => match protocol {
                Protocol::Resp2 => bulk_len(text.len() as u64),
                Protocol::Resp3 => bulk_len(text.len() as u64 + 4), // `txt:` is in the length
            },
            Frame::Null | Frame::NullArray => match protocol {
                Protocol::Resp2 => 5,
                Protocol::Resp3 => 3,
            },
            Frame::Pair(a, b) => {
                4 + Frame::Integer(*a).encoded_len(protocol)
                    + Frame::Integer(*b).encoded_len(protocol)
            }
            Frame::Array(items) => {
                header(items.len() as u64)
                    + items
                        .iter()
                        .map(|item| item.encoded_len(protocol))
                        .sum::<u64>()
            }
            Frame::Map(pairs) => {
                let count = match protocol {
                    Protocol::Resp2 => 2 * pairs.len() as u64,
                    Protocol::Resp3 => pairs.len() as u64,
                };
                header(count)
                    + pairs
                        .iter()
                        .map(|(k, v)| k.encoded_len(protocol) + v.encoded_len(protocol))
                        .sum::<u64>()
            }
        }
    }

    /// Appends the wire form of this frame to `out`.
    pub fn encode(&self, protocol: Protocol, out: &mut BytesMut) {
        match self {
            Frame::Simple(text) => {
                out.put_u8(b'+');
                put_line_safe(out, text);
                out.put_slice(b"\r\n");
            }
            Frame::Error(text) => {
                out.put_u8(b'-');
                put_line_safe(out, text.as_bytes());
                out.put_slice(b"\r\n");
            }
            Frame::Integer(n) => put_header(out, b':', *n),
            Frame::Bulk(data) => put_bulk(out, data),
            Frame::Value(data) => put_bulk(out, data),
            Frame::Verbatim(text) => match protocol {
                Protocol::Resp2 => put_bulk(out, text),
                Protocol::Resp3 => {
                    put_header(out, b'=', text.len() as i64 + 4);
                    out.put_slice(b"txt:");
                    out.put_slice(text);
                    out.put_slice(b"\r\n");
                }
            },
            Frame::Null => match protocol {
                Protocol::Resp2 => out.put_slice(b"$-1\r\n"),
                Protocol::Resp3 => out.put_slice(b"_\r\n"),
            },
            Frame::NullArray => match protocol {
                Protocol::Resp2 => out.put_slice(b"*-1\r\n"),
                Protocol::Resp3 => out.put_slice(b"_\r\n"),
            },
            Frame::Pair(a, b) => put_pair(out, *a, *b),
            Frame::Array(items) => {
                put_header(out, b'*', items.len() as i64);
                for item in items {
                    item.encode(protocol, out);
                }
            }
            Frame::Map(pairs) => {
                match protocol {
                    Protocol::Resp2 => put_header(out, b'*', 2 * pairs.len() as i64),
                    Protocol::Resp3 => put_header(out, b'%', pairs.len() as i64),
                }
                for (key, value) in pairs {
                    key.encode(protocol, out);
                    value.encode(protocol, out);
                }
            }
        }
    }
}

/// Wire size of a bulk string of `n` bytes.
pub fn bulk_len(n: u64) -> u64 {
    1 + n.checked_ilog10().unwrap_or(0) as u64 + 1 + 2 + n + 2
}

/// Writes a bulk string: `$<len>\r\n<data>\r\n`.
pub fn put_bulk(out: &mut BytesMut, data: &[u8]) {
    // The header is assembled on the stack and the reply goes out in three copies after one
    // capacity check (a GET hit's reply is most of the pipelined GET path's encoding cost).
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(data.len()).as_bytes();
    let mut head = [0u8; 24];
    head[0] = b'$';
    head[1..1 + digits.len()].copy_from_slice(digits);
    head[1 + digits.len()..3 + digits.len()].copy_from_slice(b"\r\n");
    out.reserve(data.len() + 25);
    out.extend_from_slice(&head[..3 + digits.len()]);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Writes `*2\r\n:<a>\r\n:<b>\r\n`, assembled on the stack and copied once.
fn put_pair(out: &mut BytesMut, a: i64, b: i64) {
    // Two headers and two integers of at most 20 characters each, with their framing.
    let mut line = [0u8; 4 + 2 * 23];
    line[..4].copy_from_slice(b"*2\r\n");
    let mut at = 4;
    for n in [a, b] {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(n).as_bytes();
        line[at] = b':';
        line[at + 1..at + 1 + digits.len()].copy_from_slice(digits);
        line[at + 1 + digits.len()..at + 3 + digits.len()].copy_from_slice(b"\r\n");
        at += 3 + digits.len();
    }
    out.extend_from_slice(&line[..at]);
}

fn put_header(out: &mut BytesMut, kind: u8, n: i64) {
    let mut digits = itoa::Buffer::new();
    out.put_u8(kind);
    out.put_slice(digits.format(n).as_bytes());
    out.put_slice(b"\r\n");
}

/// Simple strings and errors cannot carry CR or LF (they would end the line early and
/// desynchronise the client), so those bytes are replaced by spaces.
fn put_line_safe(out: &mut BytesMut, text: &[u8]) {
    if text.iter().any(|&b| b == b'\r' || b == b'\n') {
        out.extend(
            text.iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
    } else {
        out.put_slice(text);
    }
}

/// The reply when the store failed under a command.
pub fn store_error(e: store::StoreError) -> Frame {
    Frame::err(format!("store error: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(frame: &Frame, protocol: Protocol) -> Vec<u8> {
        let mut out = BytesMut::new();
        frame.encode(protocol, &mut out);
        out.to_vec()
    }

    #[test]
    fn scalars_encode_as_redis_does() {
        assert_eq!(wire(&Frame::ok(), Protocol::Resp2), b"+OK\r\n");
        assert_eq!(wire(&Frame::Integer(-42), Protocol::Resp2), b":-42\r\n");
        assert_eq!(
            wire(&Frame::static_bulk("hey"), Protocol::Resp2),
            b"$3\r\nhey\r\n"
        );
        assert_eq!(wire(&Frame::err("boom"), Protocol::Resp2), b"-ERR boom\r\n");
    }

    #[test]
    fn a_pair_is_the_array_of_its_two_integers_on_the_wire() {
        for (a, b) in [
            (0, 0),
            (1, 42),
            (-7, 1 << 40),
            (i64::MIN, i64::MAX),
            (i64::MAX, i64::MIN),
        ] {
            let array = Frame::Array(vec![Frame::Integer(a), Frame::Integer(b)]);
            for protocol in [Protocol::Resp2, Protocol::Resp3] {
                let pair = Frame::Pair(a, b);
                assert_eq!(wire(&pair, protocol), wire(&array, protocol));
                assert_eq!(
                    pair.encoded_len(protocol),
                    wire(&pair, protocol).len() as u64
                );
            }
        }
    }

    #[test]
    fn null_and_maps_depend_on_the_protocol() {
        assert_eq!(wire(&Frame::Null, Protocol::Resp2), b"$-1\r\n");
        assert_eq!(wire(&Frame::Null, Protocol::Resp3), b"_\r\n");
        assert_eq!(wire(&Frame::NullArray, Protocol::Resp2), b"*-1\r\n");
        assert_eq!(wire(&Frame::NullArray, Protocol::Resp3), b"_\r\n");
        let map = Frame::Map(vec![(Frame::static_bulk("a"), Frame::Integer(1))]);
        assert_eq!(wire(&map, Protocol::Resp2), b"*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(wire(&map, Protocol::Resp3), b"%1\r\n$1\r\na\r\n:1\r\n");
        let text = Frame::Verbatim(Bytes::from_static(b"x:1"));
        assert_eq!(wire(&text, Protocol::Resp3), b"=7\r\ntxt:x:1\r\n");
        assert_eq!(wire(&text, Protocol::Resp2), b"$3\r\nx:1\r\n");
    }

    #[test]
    fn encoded_len_matches_the_encoding() {
        let frames = [
            Frame::ok(),
            Frame::err("boom"),
            Frame::Integer(0),
            Frame::Integer(-1234),
            Frame::Integer(i64::MIN),
            Frame::Integer(i64::MAX),
            Frame::static_bulk(""),
            Frame::Bulk(Bytes::from(vec![7u8; 12345])),
            Frame::Verbatim(Bytes::from_static(b"a:1\r\n")),
            Frame::Null,
            Frame::Array(vec![
                Frame::Null,
                Frame::static_bulk("x"),
                Frame::Array(vec![]),
            ]),
            Frame::Map(vec![(Frame::static_bulk("k"), Frame::Integer(10))]),
        ];
        for frame in &frames {
            for protocol in [Protocol::Resp2, Protocol::Resp3] {
                assert_eq!(
                    frame.encoded_len(protocol),
                    wire(frame, protocol).len() as u64,
                    "{frame:?} {protocol:?}"
                );
            }
        }
    }

    #[test]
    fn bulk_replies_of_every_header_width() {
        for n in [0usize, 1, 9, 10, 99, 100, 12345, 1 << 20] {
            let data = vec![b'v'; n];
            let mut expected = format!("${n}\r\n").into_bytes();
            expected.extend_from_slice(&data);
            expected.extend_from_slice(b"\r\n");
            let mut out = BytesMut::from(&b"before"[..]);
            put_bulk(&mut out, &data);
            assert_eq!(&out[..6], b"before");
            assert_eq!(&out[6..], &expected[..], "{n} bytes");
        }
    }

    #[test]
    fn error_lines_cannot_be_split_by_client_supplied_text() {
        let frame = Frame::err("unknown command 'a\r\nb'");
        assert_eq!(
            wire(&frame, Protocol::Resp2),
            b"-ERR unknown command 'a  b'\r\n"
        );
    }
}
