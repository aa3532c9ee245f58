//! What a command declares about itself ([`CommandSpec`], through [`Declared`]), the
//! allocation-free name lookup built from those declarations, and the COMMAND command that
//! reports them to clients such as redis-cli.

use super::Declared;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

/// One command's declaration: what `COMMAND INFO` reports, and the effects the connection
/// handler acts on (durability gating, write batching, key routing, authentication).
#[derive(Clone, Copy, Debug)]
pub struct CommandSpec {
    /// Lowercase; at most [`MAX_NAME`] bytes.
    pub name: &'static str,
    /// Redis convention: `n` exactly n arguments (name included), `-n` at least n.
    pub arity: i64,
    pub flags: Flags,
    pub keys: Keys,
    /// The reply can show stored data (a value, a key's existence or expiry, the key count):
    /// it waits until every write it could have seen is durable. INFO does not: it is how an
    /// operator looks at a failed store.
    pub reveals_data: bool,
}

impl CommandSpec {
    /// Commands an unauthenticated client may send.
    pub fn no_auth(&self) -> bool {
        self.flags.contains(Flags::NO_AUTH)
    }

    /// The command changes stored data: its reply leaves only after the store committed it.
    pub fn writes(&self) -> bool {
        self.flags.contains(Flags::WRITE)
    }

    pub fn arity_ok(&self, args: usize) -> bool {
        if self.arity >= 0 {
            args == self.arity as usize
        } else {
            args >= self.arity.unsigned_abs() as usize
        }
    }

    /// The key arguments of `args` (`args[0]` is the name), by the declared positions.
    pub fn key_args<'k>(&self, args: &'k [Bytes]) -> impl Iterator<Item = &'k Bytes> {
        let Keys { first, last, step } = self.keys;
        let first = first.max(0) as usize;
        let last = if last < 0 {
            args.len() as i64 + last
        } else {
            last
        };
        let end = if first == 0 {
            0
        } else {
            (last.max(0) as usize + 1).min(args.len())
        };
        args.get(first..end.max(first))
            .unwrap_or(&[])
            .iter()
            .step_by(step.max(1) as usize)
    }
}

/// Where the keys are among the arguments, as Redis reports them: first, last (negative:
/// from the end) and step; all 0 for a command without keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys {
    pub first: i64,
    pub last: i64,
    pub step: i64,
}

impl Keys {
    pub const NONE: Keys = Keys::new(0, 0, 0);
    pub const ONE: Keys = Keys::new(1, 1, 1);
    /// Every argument after the name is a key.
    pub const ALL: Keys = Keys::new(1, -1, 1);

    pub const fn new(first: i64, last: i64, step: i64) -> Keys {
        Keys { first, last, step }
    }
}

/// Redis's command flags, as `COMMAND INFO` lists them. `WRITE` is also the effect the
/// handler gates replies on; `NO_AUTH` lets an unauthenticated client send the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flags(u16);

impl Flags {
    pub const NONE: Flags = Flags(0);
    pub const WRITE: Flags = Flags(1 << 0);
    pub const READONLY: Flags = Flags(1 << 1);
    pub const DENYOOM: Flags = Flags(1 << 2);
    pub const ADMIN: Flags = Flags(1 << 3);
    pub const NOSCRIPT: Flags = Flags(1 << 4);
    pub const LOADING: Flags = Flags(1 << 5);
    pub const STALE: Flags = Flags(1 << 6);
    pub const FAST: Flags = Flags(1 << 7);
    pub const NO_AUTH: Flags = Flags(1 << 8);

    /// Each flag's name, in the order COMMAND lists them.
    const NAMES: [(Flags, &'static str); 9] = [
        (Flags::WRITE, "write"),
        (Flags::READONLY, "readonly"),
        (Flags::DENYOOM, "denyoom"),
        (Flags::ADMIN, "admin"),
        (Flags::NOSCRIPT, "noscript"),
        (Flags::LOADING, "loading"),
        (Flags::STALE, "stale"),
        (Flags::FAST, "fast"),
        (Flags::NO_AUTH, "no_auth"),
    ];

    /// The union, usable in a `const` declaration.
    pub const fn with(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Flags::NAMES
            .into_iter()
            .filter(move |(flag, _)| self.contains(*flag))
            .map(|(_, name)| name)
    }
}

/// Longest command name; every name fits in [`pack`]'s integer.
pub const MAX_NAME: usize = 15;

/// A name of at most [`MAX_NAME`] bytes as one integer: the lowercased bytes little-endian,
/// the length in the top byte (so `get` and `get\0` differ).
const fn pack(name: &[u8]) -> u128 {
    let mut key = (name.len() as u128) << 120;
    let mut i = 0;
    while i < name.len() {
        key |= (name[i].to_ascii_lowercase() as u128) << (8 * i);
        i += 1;
    }
    key
}

/// Slots of [`NameIndex`]'s hash table: a power of two several times the number of
/// commands, so nearly every name is found at its first probe.
const SLOTS: usize = 512;
/// An empty slot.
const EMPTY: u8 = u8::MAX;

/// The commands' packed names in an open-addressing hash table, built at compile time:
/// looking a name up is one multiply and, nearly always, one comparison.
pub struct NameIndex<const N: usize> {
    /// The packed name of each row.
    keys: [u128; N],
    /// Rows by hash, linear probing; [`EMPTY`] ends a probe.
    slots: [u8; SLOTS],
}

/// Where a packed name's probe starts.
#[inline]
const fn slot_of(key: u128) -> usize {
    let folded = (key as u64) ^ ((key >> 64) as u64).rotate_left(29);
    (folded.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros())) as usize
}

/// The index of `table`'s names. Built at compile time: a name that is too long, not
/// lowercase or declared twice stops the build.
pub const fn name_index<const N: usize>(table: &[CommandSpec; N]) -> NameIndex<N> {
    assert!(
        N < EMPTY as usize,
        "more commands than the index's row type holds"
    );
    assert!(N * 4 <= SLOTS, "the name index needs more slots");
    let mut index = NameIndex {
        keys: [0u128; N],
        slots: [EMPTY; SLOTS],
    };
    let mut row = 0;
    while row < N {
        let name = table[row].name.as_bytes();
        assert!(
            name.len() <= MAX_NAME,
            "a command name is longer than MAX_NAME"
        );
        let mut i = 0;
        while i < name.len() {
            assert!(
                !name[i].is_ascii_uppercase(),
                "command names are declared lowercase"
            );
            i += 1;
        }
        let key = pack(name);
        index.keys[row] = key;
        let mut at = slot_of(key);
        while index.slots[at] != EMPTY {
            assert!(
                index.keys[index.slots[at] as usize] != key,
                "a command name is declared twice"
            );
            at = (at + 1) % SLOTS;
        }
        index.slots[at] = row as u8;
        row += 1;
    }
    index
}

/// ASCII uppercase letters of eight bytes made lowercase, other bytes untouched: the same as
/// `to_ascii_lowercase` on each byte, without a branch per byte.
#[inline]
const fn lowercase8(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let ascii = !x & (0x80 * ONES);
    let low = x & (0x7f * ONES);
    // Bit 7 of a byte of `from_a` is set when it is >= 'A', of `past_z` when it is > 'Z'.
    let from_a = low + (0x80 - b'A' as u64) * ONES;
    let past_z = low + (0x7f - b'Z' as u64) * ONES;
    x | (((from_a ^ past_z) & ascii) >> 2)
}

/// [`pack`] for a request's name (at most [`MAX_NAME`] bytes): one copy and two word-wide
/// lowercasings instead of a shift per byte.
#[inline]
fn pack_request(name: &[u8]) -> u128 {
    let mut bytes = [0u8; 16];
    bytes[..name.len()].copy_from_slice(name);
    bytes[15] = name.len() as u8;
    let (low, high) = bytes.split_at(8);
    let low = lowercase8(u64::from_le_bytes(low.try_into().expect("eight bytes")));
    let high = lowercase8(u64::from_le_bytes(high.try_into().expect("eight bytes")));
    (u128::from(high) << 64) | u128::from(low)
}

/// The row of the command called `name` (ASCII case ignored) in the table `index` was built
/// from. Runs for every request: the name becomes one integer, hashed into the table; no
/// allocation and no byte-string comparisons.
#[inline]
pub fn find<const N: usize>(index: &NameIndex<N>, name: &[u8]) -> Option<usize> {
    if name.len() > MAX_NAME {
        return None;
    }
    let key = pack_request(name);
    let mut at = slot_of(key);
    loop {
        let row = *index.slots.get(at)?;
        if row == EMPTY {
            return None;
        }
        let row = row as usize;
        if index.keys.get(row) == Some(&key) {
            return Some(row);
        }
        at = (at + 1) % SLOTS;
    }
}

/// COMMAND [COUNT | INFO name... | DOCS | LIST]
pub enum CommandCmd {
    All,
    Count,
    Info(Vec<Bytes>),
    Docs,
    List,
}

impl Declared<'_> for CommandCmd {
    const SPEC: CommandSpec = CommandSpec {
        name: "command",
        arity: -1,
        flags: Flags::LOADING.with(Flags::STALE),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<CommandCmd, ParseError> {
        let Some(sub) = parse.next_optional() else {
            return Ok(CommandCmd::All);
        };
        let cmd = match sub.to_ascii_lowercase().as_slice() {
            b"count" => CommandCmd::Count,
            b"info" => CommandCmd::Info(parse.rest().to_vec()),
            b"docs" => {
                parse.rest();
                CommandCmd::Docs
            }
            b"list" => CommandCmd::List,
            _ => {
                return Err(ParseError::Other(format!(
                    "unknown subcommand '{}'. Try COMMAND HELP.",
                    super::printable(&sub, 64)
                )))
            }
        };
        parse.finish()?;
        Ok(cmd)
    }

    async fn apply(self, _: &Instance, _: &mut Session) -> Frame {
        self.reply()
    }
}

impl CommandCmd {
    fn reply(self) -> Frame {
        use super::{lookup, COMMANDS};
        match self {
            CommandCmd::All => Frame::Array(COMMANDS.iter().map(describe).collect()),
            CommandCmd::Count => Frame::Integer(COMMANDS.len() as i64),
            CommandCmd::Info(names) => {
                let names = if names.is_empty() {
                    COMMANDS
                        .iter()
                        .map(|s| Bytes::from_static(s.name.as_bytes()))
                        .collect()
                } else {
                    names
                };
                Frame::Array(
                    names
                        .iter()
                        .map(|name| lookup(name).map_or(Frame::Null, describe))
                        .collect(),
                )
            }
            // No documentation is served: redis-cli then simply shows no hints.
            CommandCmd::Docs => Frame::Map(Vec::new()),
            CommandCmd::List => Frame::Array(
                COMMANDS
                    .iter()
                    .map(|s| Frame::static_bulk(s.name))
                    .collect(),
            ),
        }
    }
}

/// A `COMMAND INFO` entry: name, arity, flags, first key, last key, step, ACL categories,
/// tips, key specs, subcommands (the last four empty).
fn describe(spec: &CommandSpec) -> Frame {
    Frame::Array(vec![
        Frame::static_bulk(spec.name),
        Frame::Integer(spec.arity),
        Frame::Array(spec.flags.names().map(Frame::simple).collect()),
        Frame::Integer(spec.keys.first),
        Frame::Integer(spec.keys.last),
        Frame::Integer(spec.keys.step),
        Frame::Array(Vec::new()),
        Frame::Array(Vec::new()),
        Frame::Array(Vec::new()),
        Frame::Array(Vec::new()),
    ])
}

#[cfg(test)]
mod tests {
    use super::super::{lookup, COMMANDS};
    use super::*;

    #[test]
    fn the_table_is_sorted_unique_and_lowercase() {
        for pair in COMMANDS.windows(2) {
            assert!(
                pair[0].name < pair[1].name,
                "{} / {}",
                pair[0].name,
                pair[1].name
            );
        }
        assert!(COMMANDS.iter().all(|s| s.name == s.name.to_lowercase()));
        assert!(COMMANDS.iter().all(|s| s.name.len() <= MAX_NAME));
    }

    #[test]
    fn lookup_ignores_case() {
        assert_eq!(lookup(b"MSET").unwrap().arity, -3);
        assert_eq!(lookup(b"Get").unwrap().name, "get");
        for spec in COMMANDS.iter() {
            assert_eq!(
                lookup(spec.name.to_uppercase().as_bytes()).unwrap().name,
                spec.name
            );
        }
        assert!(lookup(b"flushx").is_none());
        assert!(lookup(b"").is_none());
        assert!(lookup(&[b'g'; 100]).is_none());
        // Near misses: a prefix, an extension, a trailing NUL, NULs alone.
        for near in [&b"ge"[..], b"gett", b"get\0", b"GE\x14", b"\0\0\0", b"tt"] {
            assert!(lookup(near).is_none(), "{near:?}");
        }
    }

    /// The word-wide lowercasing agrees with the byte-wise one for every byte in every
    /// position, so a request's name packs to the same integer as its declaration.
    #[test]
    fn request_names_pack_as_declared_names_do() {
        for byte in 0..=255u8 {
            for at in 0..MAX_NAME {
                let mut name = [b'x'; MAX_NAME];
                name[at] = byte;
                for len in [at + 1, MAX_NAME] {
                    assert_eq!(
                        pack_request(&name[..len]),
                        pack(&name[..len]),
                        "byte {byte:#x} at {at}, length {len}"
                    );
                }
            }
        }
        assert_eq!(pack_request(b""), pack(b""));
        assert_eq!(pack_request(b"ZLOG.NEXT"), pack(b"zlog.next"));
    }

    #[test]
    fn command_info_reports_unknown_names_as_null() {
        let frame = CommandCmd::Info(vec![
            Bytes::from_static(b"get"),
            Bytes::from_static(b"nope"),
        ])
        .reply();
        let Frame::Array(items) = frame else { panic!() };
        assert!(matches!(&items[0], Frame::Array(fields) if fields.len() == 10));
        assert_eq!(items[1], Frame::Null);
    }

    #[test]
    fn flags_are_listed_in_redis_order() {
        let flags = Flags::NOSCRIPT
            .with(Flags::NO_AUTH)
            .with(Flags::LOADING)
            .with(Flags::FAST)
            .with(Flags::STALE);
        assert_eq!(
            flags.names().collect::<Vec<_>>(),
            ["noscript", "loading", "stale", "fast", "no_auth"]
        );
        assert_eq!(Flags::NONE.names().count(), 0);
    }

    #[test]
    fn key_positions_pick_the_keys() {
        let args: Vec<Bytes> = ["mset", "a", "1", "b", "2"]
            .iter()
            .map(|w| Bytes::from(w.to_string()))
            .collect();
        let keys = |spec: &CommandSpec| spec.key_args(&args).cloned().collect::<Vec<_>>();
        assert_eq!(keys(lookup(b"mset").unwrap()), ["a", "b"]);
        assert_eq!(keys(lookup(b"del").unwrap()), ["a", "1", "b", "2"]);
        assert_eq!(keys(lookup(b"get").unwrap()), ["a"]);
        assert!(keys(lookup(b"ping").unwrap()).is_empty());
    }
}
