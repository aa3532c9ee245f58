//! Durations: `100ms`, `2s`, `1.5s`, `1m`, `24h`, or a bare number of seconds.
//!
//! The arithmetic is exact decimal, like sizes': `1.5s` is 1,500,000,000 ns, and a value that
//! is not a whole number of nanoseconds (`0.5ns`) is an error rather than a rounded guess.
//! Compound forms (`1h 30m`) are not accepted: one number, one unit.

use crate::size::{exact_product, split_number, Inexact};
use std::time::Duration;

const UNITS: &str = "ns, us, ms, s, m, min, h or d";

/// Parses a duration greater than zero (every flag that takes one needs a positive period).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("invalid duration '{text}': {why}");
    let Some((number, unit)) = split_number(text.trim()) else {
        return Err(bad(&format!(
            "expected a number with a unit ({UNITS}), e.g. 100ms, 2s or 1m"
        )));
    };
    let nanos_per_unit: u64 = match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "" | "s" => 1_000_000_000,
        "m" | "min" => 60 * 1_000_000_000,
        "h" => 3_600 * 1_000_000_000,
        "d" => 86_400 * 1_000_000_000,
        other => return Err(bad(&format!("unknown unit '{other}' (use {UNITS})"))),
    };
    let nanos = exact_product(number, nanos_per_unit).map_err(|why| match why {
        Inexact::NotWhole => bad(&format!(
            "{number}{unit} is not a whole number of nanoseconds"
        )),
        other => bad(&other.to_string()),
    })?;
    if nanos == 0 {
        return Err(bad("must be > 0"));
    }
    Ok(Duration::from_nanos(nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_and_a_bare_number_of_seconds() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("100ms"), Ok(ms(100)));
        assert_eq!(parse_duration("2s"), Ok(ms(2000)));
        assert_eq!(parse_duration("2"), Ok(ms(2000)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration(" 1m "), Ok(ms(60_000)));
        assert_eq!(parse_duration("1min"), Ok(ms(60_000)));
        assert_eq!(parse_duration("24h"), Ok(ms(86_400_000)));
        assert_eq!(parse_duration("1d"), Ok(ms(86_400_000)));
        assert_eq!(parse_duration("0.5ms"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1ns"), Ok(Duration::from_nanos(1)));
    }

    #[test]
    fn nothing_signed_rounded_compound_or_zero_is_accepted() {
        for (bad, why) in [
            ("", "expected a number with a unit"),
            ("soon", "expected a number with a unit"),
            ("-1s", "expected a number with a unit"),
            ("+1s", "expected a number with a unit"),
            ("1e3ms", "unknown unit 'e3ms'"),
            ("5 fortnights", "unknown unit 'fortnights'"),
            ("1h 30m", "unknown unit 'h 30m'"),
            ("1S", "unknown unit 'S'"),
            ("0.5ns", "not a whole number of nanoseconds"),
            ("0s", "must be > 0"),
            ("0", "must be > 0"),
            ("99999999999999d", "too large"),
            ("1.2.3s", "expected a number"),
        ] {
            let err = parse_duration(bad).unwrap_err();
            assert!(
                err.starts_with(&format!("invalid duration '{bad}'")),
                "{err}"
            );
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
