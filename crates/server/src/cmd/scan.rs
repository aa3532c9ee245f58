//! SCAN cursor [MATCH pattern] [COUNT n] [TYPE type] and KEYS pattern: the store's keys (all
//! of them, not just the cached ones), walked in the store's key order (slot, then key).
//!
//! SCAN examines at most `COUNT` keys per call (default 10), and never more than
//! [`SCAN_MAX_COUNT`], whatever COUNT says: its work per call is bounded. Its cursor stays
//! valid across writes, and a key stored for the whole walk is returned exactly once (see
//! `scan_cursors`). KEYS walks everything at once, so it is refused — before any work when
//! the store says it holds more, or as soon as it has examined more — past [`KEYS_LIMIT`]
//! keys; SCAN is the way through a larger key space. Expired keys not yet purged are
//! skipped. On a cluster node both see this node's keys only.

use super::{store_error, CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use crate::scan_cursors::Resume;
use bytes::Bytes;
use cache::glob::glob_match;

/// Most keys one SCAN call examines, whatever its COUNT.
pub const SCAN_MAX_COUNT: usize = 10_000;
/// Most keys KEYS examines; past it KEYS answers an error.
pub const KEYS_LIMIT: u64 = 100_000;

pub struct Scan {
    cursor: u64,
    pattern: Option<Bytes>,
    count: usize,
    /// TYPE: every key is a string, so any other type matches nothing.
    strings: bool,
}

pub struct KeysCmd {
    pattern: Bytes,
}

impl Declared<'_> for Scan {
    const SPEC: CommandSpec = CommandSpec {
        name: "scan",
        arity: -2,
        flags: Flags::READONLY,
        keys: Keys::NONE,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Scan, ParseError> {
        let cursor = parse.next_bytes()?;
        let cursor = std::str::from_utf8(&cursor)
            .ok()
            .and_then(|text| text.parse::<u64>().ok())
            .ok_or_else(|| ParseError::Other("invalid cursor".into()))?;
        let mut scan = Scan {
            cursor,
            pattern: None,
            count: 10,
            strings: true,
        };
        while parse.remaining() > 0 {
            let option = parse.next_bytes()?.to_ascii_lowercase();
            match option.as_slice() {
                b"match" => {
                    scan.pattern = Some(parse.next_bytes().map_err(|_| ParseError::Syntax)?)
                }
                b"count" => {
                    let n = parse.next_int()?;
                    if n < 1 {
                        return Err(ParseError::Syntax);
                    }
                    scan.count = (n as u64).min(SCAN_MAX_COUNT as u64) as usize;
                }
                b"type" => {
                    let kind = parse.next_bytes().map_err(|_| ParseError::Syntax)?;
                    scan.strings = kind.eq_ignore_ascii_case(b"string");
                }
                _ => return Err(ParseError::Syntax),
            }
        }
        Ok(scan)
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        let cursors = &instance.scan_cursors;
        let after = match cursors.resume(self.cursor) {
            Resume::Start => None,
            Resume::After(position) => Some(position),
            Resume::Unknown => {
                return Frame::err(format!(
                    "invalid cursor {}: not one this server handed out, or its walk was \
                     forgotten (the newest {} walks are kept); start again from 0",
                    self.cursor,
                    crate::scan_cursors::MAX_WALKS
                ))
            }
        };
        let page = match instance.db.key_page(after.as_deref(), self.count) {
            Ok(page) => page,
            Err(e) => return store_error(e),
        };
        let now = crate::db::now_ms();
        let keys = page
            .keys
            .into_iter()
            .filter(|(key, expires)| {
                self.strings
                    && (*expires == 0 || *expires > now)
                    && self.pattern.as_ref().is_none_or(|p| glob_match(p, key))
            })
            .map(|(key, _)| Frame::Bulk(key))
            .collect();
        let next = match page.resume_after {
            Some(position) => cursors.advance(self.cursor, position),
            None => {
                cursors.finish(self.cursor);
                0
            }
        };
        Frame::Array(vec![Frame::bulk_str(&next.to_string()), Frame::Array(keys)])
    }
}

impl Declared<'_> for KeysCmd {
    const SPEC: CommandSpec = CommandSpec {
        name: "keys",
        arity: 2,
        flags: Flags::READONLY,
        keys: Keys::NONE,
        reveals_data: true,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<KeysCmd, ParseError> {
        Ok(KeysCmd {
            pattern: parse.next_bytes()?,
        })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        let too_many = |stored: u64| {
            Frame::err(format!(
                "KEYS examines at most {KEYS_LIMIT} keys and this node stores {stored}; use \
                 SCAN with MATCH instead"
            ))
        };
        match instance.db.dbsize().await {
            Ok(stored) if stored > KEYS_LIMIT => return too_many(stored),
            Ok(_) => {}
            Err(e) => return store_error(e),
        }
        let now = crate::db::now_ms();
        let mut found = Vec::new();
        let mut examined = 0u64;
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = match instance.db.key_page(after.as_deref(), SCAN_MAX_COUNT) {
                Ok(page) => page,
                Err(e) => return store_error(e),
            };
            examined += page.keys.len() as u64;
            if examined > KEYS_LIMIT {
                return too_many(examined);
            }
            for (key, expires) in page.keys {
                if (expires == 0 || expires > now) && glob_match(&self.pattern, &key) {
                    found.push(Frame::Bulk(key));
                }
            }
            match page.resume_after {
                Some(position) => after = Some(position),
                None => return Frame::Array(found),
            }
        }
    }
}
