//! Parsing of `--cache-size`: objects, bytes with a unit, or a percentage of the working set.

use std::fmt;
use std::str::FromStr;

/// A cache size as the user wrote it; percentages are resolved against the trace's working set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CacheSize {
    Objects(u64),
    Bytes(u64),
    /// Percent of the working set (0 < p ≤ 100 is typical; larger is allowed).
    Percent(f64),
    Unlimited,
}

impl FromStr for CacheSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let s = text.trim();
        if s.eq_ignore_ascii_case("unlimited") || s.eq_ignore_ascii_case("inf") {
            return Ok(CacheSize::Unlimited);
        }
        if let Some(pct) = s.strip_suffix('%') {
            let p: f64 = pct
                .trim()
                .parse()
                .map_err(|_| format!("invalid cache size '{text}': '{pct}' is not a number"))?;
            if !(p > 0.0 && p.is_finite()) {
                return Err(format!(
                    "invalid cache size '{text}': percentage must be > 0"
                ));
            }
            return Ok(CacheSize::Percent(p));
        }
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            let n: u64 = s
                .parse()
                .map_err(|_| format!("invalid cache size '{text}': number too large"))?;
            if n == 0 {
                return Err(format!("invalid cache size '{text}': must be > 0"));
            }
            return Ok(CacheSize::Objects(n));
        }
        let bytes = parse_size::parse_size(s)
            .map_err(|e| {
                format!(
                    "invalid cache size '{text}': {e} (expected objects like 1000, bytes like 64MiB or 1GB, or a percentage like 10%)"
                )
            })?;
        if bytes == 0 {
            return Err(format!("invalid cache size '{text}': must be > 0"));
        }
        Ok(CacheSize::Bytes(bytes))
    }
}

impl fmt::Display for CacheSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheSize::Objects(n) => write!(f, "{n}"),
            CacheSize::Bytes(n) => write!(f, "{n}B"),
            CacheSize::Percent(p) => write!(f, "{p}%"),
            CacheSize::Unlimited => write!(f, "unlimited"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_documented_form() {
        assert_eq!("1000".parse(), Ok(CacheSize::Objects(1000)));
        assert_eq!("292272B".parse(), Ok(CacheSize::Bytes(292_272)));
        assert_eq!("64MiB".parse(), Ok(CacheSize::Bytes(64 << 20)));
        assert_eq!("1GB".parse(), Ok(CacheSize::Bytes(1_000_000_000)));
        assert_eq!("1GiB".parse(), Ok(CacheSize::Bytes(1 << 30)));
        assert_eq!("10%".parse(), Ok(CacheSize::Percent(10.0)));
        assert_eq!("0.5%".parse(), Ok(CacheSize::Percent(0.5)));
        assert_eq!("unlimited".parse(), Ok(CacheSize::Unlimited));
    }

    #[test]
    fn rejects_nonsense_with_the_input_in_the_message() {
        for bad in ["", "0", "-5", "abc", "10%%", "0%", "12XB"] {
            let err = bad.parse::<CacheSize>().unwrap_err();
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }
}
