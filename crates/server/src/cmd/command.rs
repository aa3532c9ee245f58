//! The command table (name, arity, flags, key positions) that dispatch checks arity against,
//! and the COMMAND command that reports it to clients such as redis-cli.

use crate::frame::Frame;
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

/// One row of the table, in the shape of Redis's `COMMAND INFO` reply.
#[derive(Debug)]
pub struct CommandSpec {
    pub name: &'static str,
    /// Which parser dispatch calls (a jump, not a comparison of names).
    pub kind: Kind,
    /// Redis convention: `n` exactly n arguments (name included), `-n` at least n.
    pub arity: i64,
    pub flags: &'static [&'static str],
    pub first_key: i64,
    pub last_key: i64,
    pub step: i64,
}

impl CommandSpec {
    /// Commands an unauthenticated client may send.
    pub fn no_auth(&self) -> bool {
        self.flags.contains(&"no_auth")
    }
}

/// The commands, one per row of [`COMMANDS`] (PTTL and TTL share a parser, not a kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// ASKING, READONLY, READWRITE: accepted for cluster clients, nothing to do.
    Accept,
    Auth,
    Cache,
    Client,
    Cluster,
    Command,
    Config,
    DbSize,
    Del,
    Echo,
    Exists,
    Get,
    Hello,
    Info,
    MGet,
    MSet,
    Ping,
    Policy,
    Pttl,
    Quit,
    Select,
    Set,
    Ttl,
}

const fn spec(
    name: &'static str,
    kind: Kind,
    arity: i64,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
) -> CommandSpec {
    CommandSpec {
        name,
        kind,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
    }
}

const NO_KEYS: (i64, i64, i64) = (0, 0, 0);

pub static COMMANDS: &[CommandSpec] = &[
    spec("asking", Kind::Accept, 1, &["fast"], NO_KEYS),
    spec(
        "auth",
        Kind::Auth,
        -2,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        NO_KEYS,
    ),
    spec("cache", Kind::Cache, -2, &["admin"], NO_KEYS),
    spec(
        "client",
        Kind::Client,
        -2,
        &["admin", "noscript", "loading", "stale"],
        NO_KEYS,
    ),
    spec("cluster", Kind::Cluster, -2, &["loading", "stale"], NO_KEYS),
    spec("command", Kind::Command, -1, &["loading", "stale"], NO_KEYS),
    spec(
        "config",
        Kind::Config,
        -2,
        &["admin", "noscript", "loading", "stale"],
        NO_KEYS,
    ),
    spec("dbsize", Kind::DbSize, 1, &["readonly", "fast"], NO_KEYS),
    spec("del", Kind::Del, -2, &["write"], (1, -1, 1)),
    spec("echo", Kind::Echo, 2, &["fast"], NO_KEYS),
    spec(
        "exists",
        Kind::Exists,
        -2,
        &["readonly", "fast"],
        (1, -1, 1),
    ),
    spec("get", Kind::Get, 2, &["readonly", "fast"], (1, 1, 1)),
    spec(
        "hello",
        Kind::Hello,
        -1,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        NO_KEYS,
    ),
    spec("info", Kind::Info, -1, &["loading", "stale"], NO_KEYS),
    spec("mget", Kind::MGet, -2, &["readonly", "fast"], (1, -1, 1)),
    spec("mset", Kind::MSet, -3, &["write", "denyoom"], (1, -1, 2)),
    spec("ping", Kind::Ping, -1, &["fast"], NO_KEYS),
    spec("policy", Kind::Policy, -2, &["admin", "noscript"], NO_KEYS),
    spec("pttl", Kind::Pttl, 2, &["readonly", "fast"], (1, 1, 1)),
    spec(
        "quit",
        Kind::Quit,
        -1,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        NO_KEYS,
    ),
    spec(
        "readonly",
        Kind::Accept,
        1,
        &["loading", "stale", "fast"],
        NO_KEYS,
    ),
    spec(
        "readwrite",
        Kind::Accept,
        1,
        &["loading", "stale", "fast"],
        NO_KEYS,
    ),
    spec(
        "select",
        Kind::Select,
        2,
        &["loading", "stale", "fast"],
        NO_KEYS,
    ),
    spec("set", Kind::Set, -3, &["write", "denyoom"], (1, 1, 1)),
    spec("ttl", Kind::Ttl, 2, &["readonly", "fast"], (1, 1, 1)),
];

/// Longest command name; every name fits in [`pack`]'s integer.
const MAX_NAME: usize = 15;

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

/// Finds a command by name, ignoring ASCII case, without allocating. Runs for every request,
/// so the name becomes one integer and a `match` on it picks the row: no byte-string
/// comparisons, whatever the table holds.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    if name.len() > MAX_NAME {
        return None;
    }
    const ASKING: u128 = pack(b"asking");
    const AUTH: u128 = pack(b"auth");
    const CACHE: u128 = pack(b"cache");
    const CLIENT: u128 = pack(b"client");
    const CLUSTER: u128 = pack(b"cluster");
    const COMMAND: u128 = pack(b"command");
    const CONFIG: u128 = pack(b"config");
    const DBSIZE: u128 = pack(b"dbsize");
    const DEL: u128 = pack(b"del");
    const ECHO: u128 = pack(b"echo");
    const EXISTS: u128 = pack(b"exists");
    const GET: u128 = pack(b"get");
    const HELLO: u128 = pack(b"hello");
    const INFO: u128 = pack(b"info");
    const MGET: u128 = pack(b"mget");
    const MSET: u128 = pack(b"mset");
    const PING: u128 = pack(b"ping");
    const POLICY: u128 = pack(b"policy");
    const PTTL: u128 = pack(b"pttl");
    const QUIT: u128 = pack(b"quit");
    const READONLY: u128 = pack(b"readonly");
    const READWRITE: u128 = pack(b"readwrite");
    const SELECT: u128 = pack(b"select");
    const SET: u128 = pack(b"set");
    const TTL: u128 = pack(b"ttl");
    let row = match pack(name) {
        ASKING => 0,
        AUTH => 1,
        CACHE => 2,
        CLIENT => 3,
        CLUSTER => 4,
        COMMAND => 5,
        CONFIG => 6,
        DBSIZE => 7,
        DEL => 8,
        ECHO => 9,
        EXISTS => 10,
        GET => 11,
        HELLO => 12,
        INFO => 13,
        MGET => 14,
        MSET => 15,
        PING => 16,
        POLICY => 17,
        PTTL => 18,
        QUIT => 19,
        READONLY => 20,
        READWRITE => 21,
        SELECT => 22,
        SET => 23,
        TTL => 24,
        _ => return None,
    };
    Some(&COMMANDS[row])
}

pub enum CommandCmd {
    All,
    Count,
    Info(Vec<Bytes>),
    Docs,
    List,
}

impl CommandCmd {
    pub fn parse(parse: &mut Parse<'_>) -> Result<CommandCmd, ParseError> {
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

    pub fn apply(self) -> Frame {
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
        Frame::Array(spec.flags.iter().map(|&f| Frame::simple(f)).collect()),
        Frame::Integer(spec.first_key),
        Frame::Integer(spec.last_key),
        Frame::Integer(spec.step),
        Frame::Array(Vec::new()),
        Frame::Array(Vec::new()),
        Frame::Array(Vec::new()),
        Frame::Array(Vec::new()),
    ])
}

#[cfg(test)]
mod tests {
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
        for spec in COMMANDS {
            assert_eq!(
                lookup(spec.name.to_uppercase().as_bytes()).unwrap().name,
                spec.name
            );
        }
        assert!(lookup(b"flushall").is_none());
        assert!(lookup(b"").is_none());
        assert!(lookup(&[b'g'; 100]).is_none());
        // Near misses: a prefix, an extension, a trailing NUL, NULs alone.
        for near in [&b"ge"[..], b"gett", b"get\0", b"GE\x14", b"\0\0\0", b"tt"] {
            assert!(lookup(near).is_none(), "{near:?}");
        }
    }

    #[test]
    fn command_info_reports_unknown_names_as_null() {
        let frame = CommandCmd::Info(vec![
            Bytes::from_static(b"get"),
            Bytes::from_static(b"nope"),
        ])
        .apply();
        let Frame::Array(items) = frame else { panic!() };
        assert!(matches!(&items[0], Frame::Array(fields) if fields.len() == 10));
        assert_eq!(items[1], Frame::Null);
    }
}
