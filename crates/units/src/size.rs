//! Sizes: `--cache-size` (objects, bytes with a unit, or a percentage of the working set)
//! and every flag that takes bytes (`--policy-memory`, `--region`, `--maxmemory`, ...).
//!
//! The rule keeps every spelling unambiguous and exact: a plain whole number is a count
//! (objects for a cache size, bytes for a byte flag), a number with a unit is bytes and must
//! come to a whole number of bytes, and anything else — an exponent (`1e3`), a fraction
//! without a unit (`0.5`), a sign — is an error that says what was expected, rather than a
//! guess that silently changes the meaning or rounds.

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

const CACHE_SIZE_FORMS: &str =
    "expected objects like 1000, bytes with a unit like 292272B, 64MiB or 1GB, a percentage like 10%, or unlimited";

impl FromStr for CacheSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let s = text.trim();
        let bad = |why: &str| format!("invalid cache size '{text}': {why}");
        if s.eq_ignore_ascii_case("unlimited") || s.eq_ignore_ascii_case("inf") {
            return Ok(CacheSize::Unlimited);
        }
        if let Some(pct) = s.strip_suffix('%') {
            let p = plain_decimal(pct.trim())
                .ok_or_else(|| bad(&format!("'{pct}' is not a plain decimal number")))?;
            if !(p > 0.0 && p.is_finite()) {
                return Err(bad("percentage must be > 0"));
            }
            return Ok(CacheSize::Percent(p));
        }
        match split_number(s) {
            Some((number, "")) => match whole(number) {
                Some(0) => Err(bad("must be > 0")),
                Some(n) => Ok(CacheSize::Objects(n)),
                None if number.contains('.') => Err(bad(
                    "a number of objects must be whole; add a unit for bytes (e.g. 512B, 1.5KiB)",
                )),
                None => Err(bad("number too large")),
            },
            Some((number, unit)) => match bytes_with_unit(number, unit) {
                Ok(0) => Err(bad("must be > 0")),
                Ok(n) => Ok(CacheSize::Bytes(n)),
                Err(why) => Err(bad(&why)),
            },
            None => Err(bad(CACHE_SIZE_FORMS)),
        }
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

/// A byte count: a plain whole number of bytes, or a number with a unit (`B`, decimal `KB`
/// `MB` `GB` `TB`, binary `KiB` `MiB` `GiB` `TiB`, case-insensitive) that comes to a whole
/// number of bytes. The message starts with the input, for the caller to prefix the flag.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let s = text.trim();
    let bad = |why: &str| format!("invalid size '{text}': {why}");
    match split_number(s) {
        Some((number, "")) => whole(number).ok_or_else(|| {
            bad(if number.contains('.') {
                "a number of bytes must be whole, or carry a unit (e.g. 1.5KiB)"
            } else {
                "number too large"
            })
        }),
        Some((number, unit)) => bytes_with_unit(number, unit).map_err(|why| bad(&why)),
        None => Err(bad(
            "expected bytes like 4096, or a number with a unit like 64MiB or 1GB",
        )),
    }
}

/// Splits `1.5 GiB` into (`1.5`, `GiB`): a plain decimal (digits with at most one point, no
/// sign, no exponent) and what follows it. `None` when it does not start with one.
pub(crate) fn split_number(s: &str) -> Option<(&str, &str)> {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, rest) = s.split_at(end);
    plain_decimal(number)?;
    Some((number, rest.trim()))
}

/// Digits with at most one decimal point and at least one digit.
fn plain_decimal(s: &str) -> Option<f64> {
    let digits = s.bytes().filter(u8::is_ascii_digit).count();
    let points = s.bytes().filter(|&b| b == b'.').count();
    if digits == 0 || points > 1 || digits + points != s.len() {
        return None;
    }
    s.parse().ok()
}

fn whole(number: &str) -> Option<u64> {
    number.parse().ok()
}

fn bytes_with_unit(number: &str, unit: &str) -> Result<u64, String> {
    let mut after_e = unit.strip_prefix(['e', 'E']).unwrap_or("").chars();
    if after_e
        .next()
        .is_some_and(|c| c.is_ascii_digit() || c == '-' || c == '+')
    {
        return Err(
            "exponents are not accepted: write the number out (1000 objects, or 1000B for bytes)"
                .to_string(),
        );
    }
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => {
            return Err(format!(
                "unknown unit '{unit}' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)"
            ))
        }
    };
    exact_product(number, multiplier).map_err(|why| match why {
        Inexact::NotWhole => format!("{number}{unit} is not a whole number of bytes"),
        other => other.to_string(),
    })
}

/// Why a decimal times a unit is not a `u64`.
#[derive(Debug, PartialEq)]
pub(crate) enum Inexact {
    NotWhole,
    TooLarge,
    TooManyDecimals,
}

impl std::fmt::Display for Inexact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Inexact::NotWhole => "not a whole number of the smallest unit",
            Inexact::TooLarge => "number too large",
            Inexact::TooManyDecimals => "too many decimal places",
        })
    }
}

/// `number` (a plain decimal) times `multiplier`, in exact decimal arithmetic: the whole part
/// times the unit, plus the fraction's digits, which must come to a whole number.
pub(crate) fn exact_product(number: &str, multiplier: u64) -> Result<u64, Inexact> {
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let int: u64 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| Inexact::TooLarge)?
    };
    let mut total = int.checked_mul(multiplier).ok_or(Inexact::TooLarge)?;
    let frac = frac.trim_end_matches('0');
    if !frac.is_empty() {
        if frac.len() > 18 {
            return Err(Inexact::TooManyDecimals);
        }
        let scale = 10u128.pow(frac.len() as u32);
        let part = u128::from(frac.parse::<u64>().map_err(|_| Inexact::TooLarge)?)
            * u128::from(multiplier);
        if part % scale != 0 {
            return Err(Inexact::NotWhole);
        }
        let part = u64::try_from(part / scale).map_err(|_| Inexact::TooLarge)?;
        total = total.checked_add(part).ok_or(Inexact::TooLarge)?;
    }
    Ok(total)
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
        assert_eq!("1.5KiB".parse(), Ok(CacheSize::Bytes(1536)));
        assert_eq!("2 kb".parse(), Ok(CacheSize::Bytes(2000)));
        assert_eq!("10%".parse(), Ok(CacheSize::Percent(10.0)));
        assert_eq!("0.5%".parse(), Ok(CacheSize::Percent(0.5)));
        assert_eq!("unlimited".parse(), Ok(CacheSize::Unlimited));
    }

    #[test]
    fn rejects_nonsense_with_the_input_in_the_message() {
        for bad in [
            "", "0", "-5", "abc", "10%%", "0%", "12XB", "0B", "+5", "1e3%",
        ] {
            let err = bad.parse::<CacheSize>().unwrap_err();
            assert!(err.contains(&format!("'{bad}'")), "{bad}: {err}");
        }
    }

    /// Spellings that used to change meaning or round silently (`1e3` was 1000 bytes while
    /// `1000` is objects, `0.5` was 1 byte) are errors that say what to write instead.
    #[test]
    fn nothing_ambiguous_or_rounded_is_accepted() {
        for (bad, why) in [
            ("1e3", "exponents are not accepted"),
            ("1E3", "exponents are not accepted"),
            ("1e3B", "exponents are not accepted"),
            ("2e-1", "exponents are not accepted"),
            ("0.5", "must be whole; add a unit for bytes"),
            ("10.0", "must be whole"),
            ("0.5B", "not a whole number of bytes"),
            ("1.0000001KB", "not a whole number of bytes"),
            ("1.2.3MB", "expected objects like 1000"),
            ("99999999999999999999", "too large"),
            ("99999999999TiB", "too large"),
            ("5k", "unknown unit 'k'"),
            ("inf%", "not a plain decimal"),
        ] {
            let err = bad.parse::<CacheSize>().unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn byte_flags_take_plain_bytes_or_units_and_nothing_else() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("1.5KiB"), Ok(1536));
        assert_eq!(parse_bytes("0"), Ok(0));
        assert!(parse_bytes("1e6").unwrap_err().contains("exponents"));
        for bad in ["1e6", "0.5", "-1", "1.5B", "12 parsecs", ""] {
            let err = parse_bytes(bad).unwrap_err();
            assert!(err.starts_with(&format!("invalid size '{bad}'")), "{err}");
        }
    }
}
