//! Byte-level parsing shared by the text readers: fields, numbers and keys, all working on
//! borrowed slices so a line costs no allocation.

use xxhash_rust::xxh3::xxh3_64;

/// The stable hash that turns a string key into a 64-bit id (XXH3-64, seed 0).
#[inline]
pub fn hash_key(key: &[u8]) -> u64 {
    xxh3_64(key)
}

/// `b` without leading and trailing ASCII whitespace.
#[inline]
pub(crate) fn trim(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

/// A decimal unsigned integer (surrounding whitespace allowed), or `None`.
#[inline]
pub(crate) fn parse_u64(b: &[u8]) -> Option<u64> {
    let b = trim(b);
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in b {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(d as u64)?;
    }
    Some(v)
}

/// A hexadecimal unsigned integer without prefix, or `None`.
pub(crate) fn parse_hex_u64(b: &[u8]) -> Option<u64> {
    let b = trim(b);
    if b.is_empty() || b.len() > 16 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in b {
        let d = (c as char).to_digit(16)?;
        v = (v << 4) | d as u64;
    }
    Some(v)
}

/// A decimal integer or a `0x`-prefixed hexadecimal one.
#[inline]
pub(crate) fn parse_u64_auto(b: &[u8]) -> Option<u64> {
    let t = trim(b);
    match t.strip_prefix(b"0x").or_else(|| t.strip_prefix(b"0X")) {
        Some(hex) => parse_hex_u64(hex),
        None => parse_u64(t),
    }
}

/// A finite decimal number; integers take a fast path.
#[inline]
pub(crate) fn parse_f64(b: &[u8]) -> Option<f64> {
    let t = trim(b);
    if let Some(v) = parse_u64(t) {
        return Some(v as f64);
    }
    let v: f64 = std::str::from_utf8(t).ok()?.parse().ok()?;
    v.is_finite().then_some(v)
}

/// The largest trace time accepted, in seconds: 2^53, beyond which an `f64` no longer holds
/// every whole second, so consecutive timestamps (and tick boundaries) would merge.
pub const MAX_TIME: f64 = 9_007_199_254_740_992.0;

/// What every reader says it expected when a time field is rejected.
pub(crate) const TIME_EXPECTED: &str = "a time in seconds from 0 to 2^53";

/// A time field: a finite decimal number of seconds in `0..MAX_TIME`. Negative, infinite and
/// larger values are rejected rather than clamped, so a unit mistake (nanoseconds read as
/// seconds) or a corrupt field stops the read at its line.
#[inline]
pub(crate) fn parse_time(b: &[u8]) -> Option<f64> {
    parse_f64(b).filter(|t| is_valid_time(*t))
}

/// Whether `t` is a time every consumer can schedule ticks on (see [`MAX_TIME`]).
#[inline]
pub fn is_valid_time(t: f64) -> bool {
    (0.0..MAX_TIME).contains(&t)
}

/// A key field as a 64-bit id: decimal numbers are kept, anything else is hashed.
#[inline]
pub(crate) fn key_of(field: &[u8]) -> u64 {
    let t = trim(field);
    parse_u64(t).unwrap_or_else(|| hash_key(t))
}

/// Splits a line on one delimiter byte. A field that starts with `"` runs to the matching
/// closing quote (delimiters inside are kept) and is returned without its quotes.
pub(crate) struct Fields<'a> {
    rest: Option<&'a [u8]>,
    delim: u8,
}

impl<'a> Fields<'a> {
    #[inline]
    pub(crate) fn new(line: &'a [u8], delim: u8) -> Self {
        Fields {
            rest: Some(line),
            delim,
        }
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest?;
        let lead = rest.iter().take_while(|c| **c == b' ').count();
        if rest.get(lead) == Some(&b'"') {
            let body = &rest[lead + 1..];
            let mut i = 0;
            while i < body.len() {
                if body[i] == b'"' {
                    if body.get(i + 1) == Some(&b'"') {
                        i += 2;
                        continue;
                    }
                    break;
                }
                i += 1;
            }
            let field = &body[..i.min(body.len())];
            let after = &body[(i + 1).min(body.len())..];
            self.rest = memchr::memchr(self.delim, after).map(|d| &after[d + 1..]);
            return Some(field);
        }
        match memchr::memchr(self.delim, rest) {
            Some(d) => {
                self.rest = Some(&rest[d + 1..]);
                Some(&rest[..d])
            }
            None => {
                self.rest = None;
                Some(rest)
            }
        }
    }
}

/// The first `N` fields of a line (missing ones empty) and how many fields it has in all.
#[inline]
pub(crate) fn fields_array<const N: usize>(line: &[u8], delim: u8) -> ([&[u8]; N], usize) {
    let mut out: [&[u8]; N] = [&[]; N];
    let mut n = 0;
    for f in Fields::new(line, delim) {
        if n < N {
            out[n] = f;
        }
        n += 1;
    }
    (out, n)
}

/// Splits on runs of ASCII whitespace, skipping empty fields.
#[inline]
pub(crate) fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|c| c.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
}

/// A short, single-line rendering of untrusted bytes for error messages.
pub(crate) fn snippet(b: &[u8]) -> String {
    const MAX: usize = 80;
    let text = String::from_utf8_lossy(&b[..b.len().min(MAX)]);
    let mut out: String = text.escape_debug().collect();
    if b.len() > MAX {
        out.push_str("...");
    }
    out
}

/// Seconds since the Unix epoch of a civil UTC date-time (proleptic Gregorian calendar).
pub(crate) fn unix_seconds(y: i64, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> i64 {
    // Days from 1970-01-01, counting years from March so the leap day is last.
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + h as i64 * 3600 + mi as i64 * 60 + s as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(parse_u64(b" 42 "), Some(42));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"4x"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64_auto(b"0x1F"), Some(31));
        assert_eq!(parse_hex_u64(b"2a"), Some(42));
        assert_eq!(parse_f64(b"1456095145.133076000"), Some(1456095145.133076));
        assert_eq!(parse_f64(b"7"), Some(7.0));
        assert_eq!(parse_f64(b"inf"), None);
        assert_eq!(parse_f64(b"abc"), None);
    }

    #[test]
    fn times_are_bounded_and_never_negative() {
        assert_eq!(parse_time(b"0"), Some(0.0));
        assert_eq!(parse_time(b" 1456095145.25 "), Some(1456095145.25));
        assert_eq!(parse_time(b"9007199254740991"), Some(9007199254740991.0));
        for bad in [
            &b"-5"[..],
            b"-0.5",
            b"9007199254740992",
            b"100000000000000000000",
            b"1e300",
            b"inf",
            b"NaN",
            b"",
        ] {
            assert_eq!(parse_time(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn keys_keep_numbers_and_hash_strings() {
        assert_eq!(key_of(b" 123"), 123);
        assert_eq!(key_of(b"abc"), hash_key(b"abc"));
        assert_ne!(key_of(b"abc"), key_of(b"abd"));
        // Pinned so that ids stay stable across releases.
        assert_eq!(hash_key(b""), 0x2d06800538d394c2);
    }

    #[test]
    fn fields_with_quotes_and_empties() {
        let got: Vec<&[u8]> = Fields::new(b"a,,\"x,y\",d", b',').collect();
        assert_eq!(got, [&b"a"[..], b"", b"x,y", b"d"]);
        let got: Vec<&[u8]> = Fields::new(b"a,", b',').collect();
        assert_eq!(got, [&b"a"[..], b""]);
        let got: Vec<&[u8]> = words(b"  1 2\t3 ").collect();
        assert_eq!(got, [&b"1"[..], b"2", b"3"]);
    }

    #[test]
    fn civil_time() {
        assert_eq!(unix_seconds(1970, 1, 1, 0, 0, 0), 0);
        assert_eq!(unix_seconds(2016, 2, 1, 16, 46, 4), 1_454_345_164);
        assert_eq!(unix_seconds(2000, 3, 1, 0, 0, 0), 951_868_800);
    }

    #[test]
    fn snippets_stay_on_one_line() {
        assert_eq!(snippet(b"a\tb"), "a\\tb");
        assert!(snippet(&[b'x'; 200]).ends_with("..."));
    }
}
