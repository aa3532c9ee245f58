//! Numbers the way Redis reads and writes them in strings: integers strictly (no sign `+`,
//! no leading zeros or spaces, at most 20 characters), floats as `strtold` would take them
//! and printed without exponent or trailing zeros.

/// A stored value or argument read as Redis's `string2ll` reads it.
pub fn strict_int(bytes: &[u8]) -> Option<i64> {
    let digits = bytes.strip_prefix(b"-").unwrap_or(bytes);
    let well_formed = match digits {
        [] => false,
        [b'0'] => bytes.len() == 1, // "-0" is refused, as in Redis
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if !well_formed || bytes.len() > 20 {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// A float as Redis's `string2ld` takes it: no leading space, not NaN.
pub fn float(bytes: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(bytes).ok()?;
    if text.is_empty() || text.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    (!value.is_nan()).then_some(value)
}

/// A finite float as INCRBYFLOAT stores it: the shortest digits that read back as the same
/// value, never an exponent, no trailing zeros ("3", "10.5", "0.0001").
pub fn format_float(value: f64) -> String {
    let text = format!("{value}");
    match text.as_str() {
        "-0" => "0".to_string(),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_as_strictly_as_redis_does() {
        assert_eq!(strict_int(b"0"), Some(0));
        assert_eq!(strict_int(b"-12"), Some(-12));
        assert_eq!(strict_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(strict_int(b"-9223372036854775808"), Some(i64::MIN));
        for refused in [
            &b""[..],
            b"-",
            b"-0",
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"1.0",
            b"9223372036854775808",
            b"abc",
        ] {
            assert_eq!(strict_int(refused), None, "{refused:?}");
        }
    }

    #[test]
    fn floats_are_printed_without_exponent_or_trailing_zeros() {
        assert_eq!(format_float(3.0), "3");
        assert_eq!(format_float(10.5), "10.5");
        assert_eq!(format_float(-0.0), "0");
        assert_eq!(format_float(1e20), "100000000000000000000");
        assert_eq!(float(b"1e3"), Some(1000.0));
        assert_eq!(float(b" 1"), None);
        assert_eq!(float(b"nan"), None);
        assert_eq!(float(b""), None);
    }
}
