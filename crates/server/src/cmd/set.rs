//! SET key value [NX | XX] [EX seconds | PX milliseconds | EXAT unix-seconds |
//! PXAT unix-milliseconds] [HINT class]: written through to the store, then cached.
//! `HINT class` names the cache class the client says the value belongs to (seed 004's
//! cache hints); the server records it with the cached entry.

use super::store_error;
use super::{CommandSpec, Declared, Flags, Keys};
use crate::db::now_ms;
use crate::db::{Transaction, TxnError};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;
use store::Condition;

#[derive(Debug)]
pub struct Set {
    key: Bytes,
    value: Bytes,
    condition: Condition,
    /// Absolute expiry in ms since the epoch; 0: none.
    expires_at_ms: u64,
    class: Option<Bytes>,
}

/// Redis's message for a zero, negative or overflowing expiry.
const INVALID_EXPIRE: &str = "invalid expire time in 'set' command";

impl Declared<'_> for Set {
    const SPEC: CommandSpec = CommandSpec {
        name: "set",
        arity: -3,
        flags: Flags::WRITE.with(Flags::DENYOOM),
        keys: Keys::ONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Set, ParseError> {
        let key = parse.next_bytes()?;
        let value = parse.next_bytes()?;
        let mut set = Set {
            key,
            value,
            condition: Condition::Always,
            expires_at_ms: 0,
            class: None,
        };
        let mut has_expiry = false;
        while let Some(option) = parse.next_optional() {
            match option.to_ascii_uppercase().as_slice() {
                b"NX" if set.condition == Condition::Always => set.condition = Condition::IfAbsent,
                b"XX" if set.condition == Condition::Always => set.condition = Condition::IfPresent,
                unit @ (b"EX" | b"PX" | b"EXAT" | b"PXAT") if !has_expiry => {
                    has_expiry = true;
                    let amount = parse.next_int().map_err(|e| match e {
                        ParseError::Arity => ParseError::Syntax,
                        other => other,
                    })?;
                    set.expires_at_ms = expiry(unit, amount, now_ms())?;
                }
                b"HINT" if set.class.is_none() => {
                    let class = parse.next_bytes().map_err(|_| ParseError::Syntax)?;
                    if class.is_empty() || class.len() > 64 {
                        return Err(ParseError::Other(
                            "HINT class names are 1 to 64 bytes".into(),
                        ));
                    }
                    set.class = Some(class);
                }
                b"KEEPTTL" | b"GET" => {
                    return Err(ParseError::Other(format!(
                        "SET option '{}' is not supported by Mantle",
                        String::from_utf8_lossy(&option)
                    )))
                }
                _ => return Err(ParseError::Syntax),
            }
        }
        Ok(set)
    }

    /// The key and value of a plain `SET key value` (no condition, expiry or hint): the kind
    /// the connection may write together with its neighbours in the pipeline (see
    /// `server::WriteRun`); any other SET comes back unchanged.
    fn into_plain_write(self) -> Result<(Bytes, Bytes), Set> {
        if self.condition == Condition::Always && self.expires_at_ms == 0 && self.class.is_none() {
            Ok((self.key, self.value))
        } else {
            Err(self)
        }
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        let result = instance
            .db
            .set(
                &self.key,
                &self.value,
                self.expires_at_ms,
                self.condition,
                self.class.as_deref(),
            )
            .await;
        match result {
            Ok(true) => Frame::ok(),
            Ok(false) => Frame::Null,
            Err(e) => store_error(e),
        }
    }

    async fn apply_in(self, txn: &mut Transaction<'_>, _: &Instance, _: &mut Session) -> Frame {
        self.run_in(txn).await.unwrap_or_else(super::txn_error)
    }
}

impl Set {
    /// Inside a transaction (the `HINT` class is not recorded there).
    async fn run_in(self, txn: &mut Transaction<'_>) -> Result<Frame, TxnError> {
        let allowed = match self.condition {
            Condition::Always => true,
            Condition::IfAbsent => !txn.exists(&self.key).await?,
            Condition::IfPresent => txn.exists(&self.key).await?,
        };
        if !allowed {
            return Ok(Frame::Null);
        }
        txn.set(&self.key, self.value, self.expires_at_ms)?;
        Ok(Frame::ok())
    }
}

/// The absolute expiry for an EX/PX/EXAT/PXAT amount.
fn expiry(unit: &[u8], amount: i64, now_ms: u64) -> Result<u64, ParseError> {
    let invalid = || ParseError::Other(INVALID_EXPIRE.into());
    if amount <= 0 {
        return Err(invalid());
    }
    let amount = amount as u64;
    let at = match unit {
        b"EX" => amount
            .checked_mul(1000)
            .and_then(|ms| ms.checked_add(now_ms)),
        b"PX" => amount.checked_add(now_ms),
        b"EXAT" => amount.checked_mul(1000),
        _ => Some(amount),
    };
    // Keep within what an i64 PTTL reply can express.
    at.filter(|&at| at < i64::MAX as u64).ok_or_else(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Result<Set, ParseError> {
        let args: Vec<Bytes> = std::iter::once("SET")
            .chain(words.iter().copied())
            .map(|w| Bytes::from(w.to_string()))
            .collect();
        Set::parse(&mut Parse::new(&args))
    }

    #[test]
    fn options_combine_as_in_redis() {
        let set = parse(&["k", "v", "nx", "PX", "1500", "HINT", "hot"]).unwrap();
        assert_eq!(set.condition, Condition::IfAbsent);
        assert!(set.expires_at_ms > now_ms() && set.expires_at_ms <= now_ms() + 1500);
        assert_eq!(set.class.as_deref(), Some(&b"hot"[..]));
        let set = parse(&["k", "v", "EXAT", "2000000000"]).unwrap();
        assert_eq!(set.expires_at_ms, 2_000_000_000_000);
    }

    #[test]
    fn only_option_free_sets_are_plain() {
        let (key, value) = parse(&["k", "v"]).unwrap().into_plain_write().unwrap();
        assert_eq!((&key[..], &value[..]), (&b"k"[..], &b"v"[..]));
        for options in [&["NX"][..], &["XX"], &["EX", "5"], &["HINT", "hot"]] {
            let words: Vec<&str> = ["k", "v"].iter().chain(options).copied().collect();
            assert!(
                parse(&words).unwrap().into_plain_write().is_err(),
                "{options:?}"
            );
        }
    }

    #[test]
    fn conflicting_or_bad_options_are_rejected() {
        assert_eq!(
            parse(&["k", "v", "NX", "XX"]).unwrap_err(),
            ParseError::Syntax
        );
        assert_eq!(
            parse(&["k", "v", "EX", "1", "PX", "1"]).unwrap_err(),
            ParseError::Syntax
        );
        assert_eq!(parse(&["k", "v", "EX"]).unwrap_err(), ParseError::Syntax);
        assert_eq!(parse(&["k", "v", "HINT"]).unwrap_err(), ParseError::Syntax);
        assert_eq!(parse(&["k", "v", "BOGUS"]).unwrap_err(), ParseError::Syntax);
        assert_eq!(
            parse(&["k", "v", "EX", "0"]).unwrap_err(),
            ParseError::Other(INVALID_EXPIRE.into())
        );
        assert_eq!(
            parse(&["k", "v", "EX", "9223372036854775807"]).unwrap_err(),
            ParseError::Other(INVALID_EXPIRE.into())
        );
        assert!(matches!(
            parse(&["k", "v", "GET"]),
            Err(ParseError::Other(_))
        ));
    }
}
