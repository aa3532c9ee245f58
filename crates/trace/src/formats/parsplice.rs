//! ParSplice key-value traces (Mantle paper, CCGrid'18), in both shapes:
//!
//! * the raw `semanticPerf.<rank>` logs, `unix_seconds,event,db_index,key`. The in-memory
//!   tiers (ranks 3 and 4) log one logical get as `DBMemoryGet` + `DBMemoryMRUGet` and one
//!   put as `DBMemoryPut` + `DBMemoryPutUnique` + `DBMemoryMRUPut`: the request is emitted
//!   at `DBMemoryGet` / `DBMemoryPut` and the companion lines are skipped. The persistent
//!   tier (rank 2) logs `LDBGet` / `LDBPut` (one line each) and `LDBCreate` (no key,
//!   skipped).
//! * the derived CSV with header `timestamp_s,op,key`, op `GET` or `PUT`.
//!
//! Keys are the 64-bit state ids as logged (a non-zero `db_index` is folded in with
//! [`crate::block::volume_key`]); size 1 (the logs record none); time in seconds (1 s
//! resolution, so replay order is line order).
//!
//! Replay reads a million of these lines per second of wall time, so the usual shapes
//! (integer time, no spaces or quotes) go through a one-pass byte parser; any other line,
//! including every malformed one, falls back to the general field parser, which gives the
//! same result for what the fast path accepts and words the errors.

use crate::block::volume_key;
use crate::input::Input;
use crate::parse::{
    fields_array, is_valid_time, parse_f64, parse_u64, snippet, trim, TIME_EXPECTED,
};
use crate::source::Source;
use crate::{Op, Request, TraceError, TraceReader};

pub(crate) struct ParspliceReader {
    input: Input,
}

impl ParspliceReader {
    pub(crate) fn new(source: Source) -> Self {
        ParspliceReader {
            input: Input::new(source),
        }
    }
}

/// What a line stands for.
enum Event {
    /// A request at `(db_index, key)`.
    Request(Op, u64, u64),
    /// A companion line of a request already emitted, or a line without a key.
    Skip,
}

fn event(name: &[u8]) -> Option<(Op, bool)> {
    // (op, whether the line is the one that counts)
    Some(match name {
        b"DBMemoryGet" | b"LDBGet" => (Op::Get, true),
        b"DBMemoryPut" | b"LDBPut" => (Op::Put, true),
        b"DBMemoryMRUGet" => (Op::Get, false),
        b"DBMemoryPutUnique" | b"DBMemoryMRUPut" | b"LDBCreate" => (Op::Put, false),
        _ => return None,
    })
}

fn parse_line(line: &[u8]) -> Result<(f64, Event), String> {
    let (f, n) = fields_array::<4>(line, b',');
    let time = parse_f64(f[0]).ok_or_else(|| {
        format!(
            "expected `unix_seconds,event,db_index,key` or `timestamp_s,op,key`, found `{}`",
            snippet(line)
        )
    })?;
    if !is_valid_time(time) {
        return Err(format!(
            "expected {TIME_EXPECTED} in field 1, found `{}`",
            snippet(trim(f[0]))
        ));
    }
    let name = trim(f[1]);
    let numeric = |i: usize, what: &str| {
        parse_u64(f[i]).ok_or_else(|| {
            format!(
                "expected {what} in field {}, found `{}`",
                i + 1,
                snippet(trim(f[i]))
            )
        })
    };
    let derived = match name {
        b"GET" | b"get" => Some(Op::Get),
        b"PUT" | b"put" => Some(Op::Put),
        _ => None,
    };
    if let Some(op) = derived {
        return Ok((time, Event::Request(op, 0, numeric(2, "a key")?)));
    }
    match event(name) {
        Some((op, true)) => {
            if n < 4 {
                return Err(format!(
                    "expected 4 fields for `{}`, found {n}",
                    snippet(name)
                ));
            }
            Ok((
                time,
                Event::Request(op, numeric(2, "a db index")?, numeric(3, "a key")?),
            ))
        }
        Some((_, false)) => Ok((time, Event::Skip)),
        None => Err(format!(
            "unknown event `{}` (expected GET, PUT, DBMemoryGet, DBMemoryMRUGet, DBMemoryPut, \
             DBMemoryPutUnique, DBMemoryMRUPut, LDBGet, LDBPut or LDBCreate)",
            snippet(name)
        )),
    }
}

/// How far ahead the fast path looks: the longest canonical line (20-digit time, the longest
/// event name, 5-digit db index, 20-digit key) fits with room to spare.
const LOOKAHEAD: usize = 128;

/// The op fields of the derived CSV with their comma, as words.
const GET_: u32 = u32::from_le_bytes(*b"GET,");
const GET_LOWER: u32 = u32::from_le_bytes(*b"get,");
const PUT_: u32 = u32::from_le_bytes(*b"PUT,");
const PUT_LOWER: u32 = u32::from_le_bytes(*b"put,");

/// The canonical shapes, `<int>,GET,<int>` and `<int>,<event>,<int>,<int>` without spaces,
/// quotes or extra fields, read where they lie in the unread bytes `b`: the event and the
/// length of the line with its terminator. `None` for anything else, and for a last line
/// without terminator (the general parser decides then).
#[inline]
fn parse_fast(b: &[u8]) -> Option<(f64, Event, usize)> {
    let (time, n) = leading_u64(b)?;
    let time = time as f64;
    // Out-of-range times take the general parser, which says why the line is rejected.
    if !is_valid_time(time) {
        return None;
    }
    if b.get(n) != Some(&b',') {
        return None;
    }
    let at = n + 1;
    let derived = match u32::from_le_bytes(*b.get(at..)?.first_chunk::<4>()?) {
        GET_ | GET_LOWER => Some(Op::Get),
        PUT_ | PUT_LOWER => Some(Op::Put),
        _ => None,
    };
    if let Some(op) = derived {
        let (key, n) = leading_u64(&b[at + 4..])?;
        let len = line_end(b, at + 4 + n)?;
        return Some((time, Event::Request(op, 0, key), len));
    }
    let name_end = at + memchr::memchr2(b',', b'\n', &b[at..])?;
    match event(&b[at..name_end])? {
        (op, true) => {
            let at = name_end + 1;
            let (db, n) = leading_u64(b.get(at..)?)?;
            let at = at + n;
            if b.get(at) != Some(&b',') {
                return None;
            }
            let (key, n) = leading_u64(&b[at + 1..])?;
            let len = line_end(b, at + 1 + n)?;
            Some((time, Event::Request(op, db, key), len))
        }
        // The rest of a companion line is never looked at.
        (_, false) => {
            let newline = name_end + memchr::memchr(b'\n', &b[name_end..])?;
            Some((time, Event::Skip, newline + 1))
        }
    }
}

/// The length up to and including the line terminator that must follow at `at`.
#[inline]
fn line_end(b: &[u8], at: usize) -> Option<usize> {
    match b.get(at..at + 2) {
        Some([b'\n', _]) => Some(at + 1),
        Some(b"\r\n") => Some(at + 2),
        Some(_) => None,
        None => (b.get(at) == Some(&b'\n')).then_some(at + 1),
    }
}

const POW10: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// The number spelt by the digits `b` starts with and how many digits that is; `None` when
/// there are none, or more than [`parse_u64`] accepts (20, or a value past `u64::MAX`).
/// Eight digits at a time, as one word, in straight-line code when 24 bytes are there to
/// read (always, but near the end of the data).
#[inline(always)]
fn leading_u64(b: &[u8]) -> Option<(u64, usize)> {
    let Some(bytes) = b.first_chunk::<24>() else {
        return leading_u64_near_end(b);
    };
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let first = word(0);
    let n = digit_run(first);
    if n < 8 {
        return (n > 0).then(|| (word_digits(first, n), n));
    }
    let high = eight_digits(first);
    let second = word(8);
    let n = digit_run(second);
    if n < 8 {
        // Below 10^15: no overflow.
        let low = if n == 0 { 0 } else { word_digits(second, n) };
        return Some((high * POW10[n] + low, 8 + n));
    }
    let sixteen = high * POW10[8] + eight_digits(second);
    let third = word(16);
    match digit_run(third) {
        0 => Some((sixteen, 16)),
        n @ 1..=4 => {
            let v = sixteen
                .checked_mul(POW10[n])?
                .checked_add(word_digits(third, n))?;
            Some((v, 16 + n))
        }
        _ => None,
    }
}

/// [`leading_u64`] for the last bytes of the data, where whole words may not be there.
fn leading_u64_near_end(b: &[u8]) -> Option<(u64, usize)> {
    let (mut value, mut len) = (0u64, 0usize);
    for &c in b {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(d))?;
        len += 1;
    }
    (len > 0 && len <= 20).then_some((value, len))
}

/// How many of the eight bytes of `word` (first byte lowest) are ASCII digits before the
/// first one that is not.
#[inline]
fn digit_run(word: u64) -> usize {
    const HIGH_NIBBLES: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    // A byte is a digit when its high nibble is 3 and adding 6 keeps it so (low nibble <= 9).
    // A carry out of a byte >= 0xFA only disturbs the bytes after it, past the first non-digit.
    let high = (word & HIGH_NIBBLES) ^ ZEROS;
    let low = (word.wrapping_add(0x0606_0606_0606_0606) & HIGH_NIBBLES) ^ ZEROS;
    ((high | low).trailing_zeros() / 8) as usize
}

/// The value of the first `n` (1..=8) bytes of `word`, all ASCII digits, first byte most
/// significant: moved to the top, they leave zero bytes in front, which read as leading zeros.
#[inline]
fn word_digits(word: u64, n: usize) -> u64 {
    eight_digits(word << (8 * (8 - n)))
}

/// The value of eight ASCII digits (or zero bytes, read as zeros), first byte most
/// significant: pairs, then quads, then the octet, one multiply each.
#[inline]
fn eight_digits(word: u64) -> u64 {
    let v = ((word & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(2561)) >> 8;
    let v = ((v & 0x00FF_00FF_00FF_00FF).wrapping_mul(6_553_601)) >> 16;
    ((v & 0x0000_FFFF_0000_FFFF).wrapping_mul(42_949_672_960_001)) >> 32
}

impl ParspliceReader {
    /// The next line through the general parser: its time and event, `Skip` for a header or
    /// blank line, `None` at the end of the data. Kept out of line so the fast loop stays small.
    #[cold]
    #[inline(never)]
    fn general_line(&mut self) -> Result<Option<(f64, Event)>, TraceError> {
        let Some(line) = self.input.line()? else {
            return Ok(None);
        };
        let t = trim(line);
        if t.is_empty() || t.starts_with(b"timestamp_s") {
            return Ok(Some((0.0, Event::Skip)));
        }
        match parse_line(t) {
            Ok(parsed) => Ok(Some(parsed)),
            Err(msg) => Err(self.input.line_error(msg)),
        }
    }
}

impl TraceReader for ParspliceReader {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        loop {
            let (time, event) = match parse_fast(self.input.peek(LOOKAHEAD)?) {
                Some((time, event, len)) => {
                    self.input.advance_line(len);
                    (time, event)
                }
                None => match self.general_line()? {
                    Some(parsed) => parsed,
                    None => return Ok(None),
                },
            };
            if let Event::Request(op, db, key) = event {
                return Ok(Some(Request {
                    time,
                    key: volume_key(db, key),
                    size: 1,
                    op,
                    offset: 0,
                }));
            }
        }
    }

    fn progress(&self) -> Option<(u64, u64)> {
        Some(self.input.progress())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `b` as a decimal number when it is nothing but digits.
    fn whole_u64(b: &[u8]) -> Option<u64> {
        let (v, n) = leading_u64(b)?;
        (n == b.len()).then_some(v)
    }

    /// A line's time and request (`None` for a companion line), in a comparable form.
    type Parsed = (f64, Option<(Op, u64, u64)>);

    /// What the general parser makes of a line.
    fn general(line: &[u8]) -> Option<Parsed> {
        let t = trim(line);
        match parse_line(t).ok()? {
            (time, Event::Request(op, db, key)) => Some((time, Some((op, db, key)))),
            (time, Event::Skip) => Some((time, None)),
        }
    }

    /// What the fast path makes of `line` followed by more lines, checking that it steps
    /// exactly past the line and its terminator (`\n` or `\r\n`) or declines both.
    fn fast(line: &[u8]) -> Option<Parsed> {
        let mut results = Vec::new();
        for terminator in [&b"\n"[..], b"\r\n"] {
            let data = [line, terminator, b"1504318813,GET,1\n"].concat();
            let got = parse_fast(&data).map(|(time, event, len)| {
                let shown = String::from_utf8_lossy(line);
                assert_eq!(len, line.len() + terminator.len(), "{shown}");
                match event {
                    Event::Request(op, db, key) => (time, Some((op, db, key))),
                    Event::Skip => (time, None),
                }
            });
            results.push(got);
        }
        // `\r\n` does not change what a line says (only a companion line, whose name then
        // ends in `\r`, is left to the general parser).
        if results[0].as_ref().is_some_and(|r| r.1.is_some()) {
            assert_eq!(results[0], results[1], "{}", String::from_utf8_lossy(line));
        }
        results.swap_remove(0)
    }

    #[test]
    fn leading_numbers_agree_with_parse_u64() {
        let mut cases: Vec<String> = vec![
            "0".into(),
            "7".into(),
            "12345678".into(),
            "123456789".into(),
            "18446744073709551615".into(),
            "18446744073709551616".into(),
            "99999999999999999999".into(),
            "00000000000000000001".into(),
            "000000000000000000001".into(),
            "1504318813".into(),
            "14045287823504495930".into(),
        ];
        for len in 1..=22 {
            cases.push("9".repeat(len));
            cases.push(
                (0..len)
                    .map(|i| char::from(b'0' + (i * 7 % 10) as u8))
                    .collect(),
            );
        }
        for digits in &cases {
            let b = digits.as_bytes();
            assert_eq!(
                whole_u64(b),
                parse_u64(b),
                "{digits}: fast and general disagree"
            );
            let padded = [b, b",".repeat(24).as_slice()].concat();
            assert_eq!(
                leading_u64(&padded),
                parse_u64(b).map(|v| (v, b.len())),
                "{digits} with room to read whole words"
            );
            for tail in [b',', b'\n', b':', b'/', 0xff, 0xfa, b' ', b'a', 0] {
                for pad in [1, 24] {
                    let mut line = b.to_vec();
                    line.push(tail);
                    line.extend(std::iter::repeat_n(b'7', pad));
                    let got = leading_u64(&line);
                    let want = parse_u64(b).map(|v| (v, b.len()));
                    assert_eq!(got, want, "{digits} then {tail:#x}");
                }
            }
        }
        assert_eq!(leading_u64(b""), None);
        assert_eq!(leading_u64(b",1"), None);
        assert_eq!(leading_u64(b"12\xfa34567890"), Some((12, 2)));
    }

    #[test]
    fn every_byte_outside_the_digits_ends_a_run() {
        for c in 0..=255u8 {
            let mut word = *b"12345678";
            word[3] = c;
            let n = digit_run(u64::from_le_bytes(word));
            assert_eq!(n, if c.is_ascii_digit() { 8 } else { 3 }, "byte {c:#x}");
        }
    }

    #[test]
    fn fast_path_agrees_with_the_general_parser() {
        let lines: &[&[u8]] = &[
            b"1504318813,GET,14045287823504495930",
            b"1504318813,PUT,1",
            b"1504318813,get,18446744073709551615",
            b"1504318813,put,18446744073709551616",
            b"1504318813,DBMemoryGet,0,14045287823504495930",
            b"1504318813,DBMemoryPut,3,77",
            b"1504318813,LDBGet,0,77",
            b"1504318813,LDBPut,70000,77",
            b"1504318813,DBMemoryMRUGet,0,14045287823504495930",
            b"1504318813,DBMemoryPutUnique,0,1",
            b"1504318813,LDBCreate",
            b"1504318813,DBMemoryMRUPut",
            b"1,GET,5,extra",
            b"1,DBMemoryGet,0,5,extra",
            b"1,DBMemoryGet,0",
            b"1,DBMemoryGet,,5",
            b"1,GET,",
            b"1,GET",
            b"1,GET,5 ",
            b" 1,GET,5",
            b"1.5,GET,5",
            b"1,\"GET\",5",
            b"1,Get,5",
            b"1,GETS,5",
            b"1,DBMemoryFly,0,5",
            b"timestamp_s,op,key",
            b"",
        ];
        for line in lines {
            let shown = String::from_utf8_lossy(line);
            if let Some(got) = fast(line) {
                assert_eq!(Some(got), general(line), "{shown}");
            }
        }
        // The shapes of the real logs take the fast path.
        for line in &lines[..12] {
            assert!(
                fast(line).is_some() || general(line).is_none(),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        assert!(fast(b"1504318813,GET,14045287823504495930").is_some());
        assert!(fast(b"1504318813,DBMemoryMRUGet,0,1").is_some());
        // The last line without a terminator is left to the general parser.
        assert!(parse_fast(b"1504318813,GET,14045287823504495930").is_none());
        assert!(parse_fast(b"1504318813,GET,1\r").is_none());
        assert!(parse_fast(b"1504318813,LDBCreate").is_none());
    }

    /// A stream that hands out at most `step` bytes per read, so lines straddle refills.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl std::io::Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn reader(name: &str, data: &[u8], step: usize) -> ParspliceReader {
        use crate::source::Progress;
        use std::sync::{atomic::AtomicU64, Arc};
        ParspliceReader::new(Source {
            path: name.into(),
            stream: Box::new(Trickle {
                data: data.to_vec(),
                at: 0,
                step,
            }),
            head: Vec::new(),
            content_name: name.into(),
            decompressed: false,
            progress: Progress::for_tests(Arc::new(AtomicU64::new(0)), 0),
        })
    }

    #[test]
    fn lines_read_in_place_and_by_the_general_parser_mix() {
        let data = b"timestamp_s,op,key\n1,GET,5\n 2,PUT,6\n3,GET,7\r\n\n\
            4,DBMemoryGet,2,9\n4,DBMemoryMRUGet,2,9\n5,PUT,18446744073709551615";
        let want = [
            (1.0, Op::Get, 5),
            (2.0, Op::Put, 6),
            (3.0, Op::Get, 7),
            (4.0, Op::Get, volume_key(2, 9)),
            (5.0, Op::Put, u64::MAX),
        ];
        for step in [1, 3, 7, 64, 4096] {
            let mut r = reader("mixed.csv", data, step);
            let mut got = Vec::new();
            while let Some(r) = r.next_request().unwrap() {
                got.push((r.time, r.op, r.key));
            }
            assert_eq!(got, want, "reads of {step} bytes");
        }
    }

    #[test]
    fn errors_name_the_line_after_lines_read_in_place() {
        let data = b"1,GET,5\n2,DBMemoryMRUPut,0,5\n\n3,GOT,7\n";
        let mut r = reader("bad.csv", data, 5);
        assert!(r.next_request().unwrap().is_some());
        let err = r.next_request().unwrap_err().to_string();
        assert!(err.starts_with("bad.csv:4: unknown event `GOT`"), "{err}");
        let data = b"1,GET,5\n2,GET,18446744073709551616\n";
        let mut r = reader("big.csv", data, 4096);
        assert!(r.next_request().unwrap().is_some());
        let err = r.next_request().unwrap_err().to_string();
        assert_eq!(
            err,
            "big.csv:2: expected a key in field 3, found `18446744073709551616`"
        );
    }
}
