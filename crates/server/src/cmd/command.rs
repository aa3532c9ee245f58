//! The command table (name, arity, flags, key positions) that dispatch checks arity against,
//! and the COMMAND command that reports it to clients such as redis-cli.

use crate::frame::Frame;
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

/// One row of the table, in the shape of Redis's `COMMAND INFO` reply.
#[derive(Debug)]
pub struct CommandSpec {
    pub name: &'static str,
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

const fn spec(
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
    }
}

const NO_KEYS: (i64, i64, i64) = (0, 0, 0);

pub static COMMANDS: &[CommandSpec] = &[
    spec(
        "auth",
        -2,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        NO_KEYS,
    ),
    spec("cache", -2, &["admin"], NO_KEYS),
    spec(
        "client",
        -2,
        &["admin", "noscript", "loading", "stale"],
        NO_KEYS,
    ),
    spec("command", -1, &["loading", "stale"], NO_KEYS),
    spec(
        "config",
        -2,
        &["admin", "noscript", "loading", "stale"],
        NO_KEYS,
    ),
    spec("dbsize", 1, &["readonly", "fast"], NO_KEYS),
    spec("del", -2, &["write"], (1, -1, 1)),
    spec("echo", 2, &["fast"], NO_KEYS),
    spec("exists", -2, &["readonly", "fast"], (1, -1, 1)),
    spec("get", 2, &["readonly", "fast"], (1, 1, 1)),
    spec(
        "hello",
        -1,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        NO_KEYS,
    ),
    spec("info", -1, &["loading", "stale"], NO_KEYS),
    spec("mget", -2, &["readonly", "fast"], (1, -1, 1)),
    spec("mset", -3, &["write", "denyoom"], (1, -1, 2)),
    spec("ping", -1, &["fast"], NO_KEYS),
    spec("policy", -2, &["admin", "noscript"], NO_KEYS),
    spec("pttl", 2, &["readonly", "fast"], (1, 1, 1)),
    spec(
        "quit",
        -1,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        NO_KEYS,
    ),
    spec("select", 2, &["loading", "stale", "fast"], NO_KEYS),
    spec("set", -3, &["write", "denyoom"], (1, 1, 1)),
    spec("ttl", 2, &["readonly", "fast"], (1, 1, 1)),
];

/// Finds a command by name, ignoring ASCII case, without allocating: the name is lowercased
/// on the stack and binary-searched in the (sorted) table; this runs for every request.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    let mut lower = [0u8; 16];
    let lower = lower.get_mut(..name.len())?;
    for (to, from) in lower.iter_mut().zip(name) {
        *to = from.to_ascii_lowercase();
    }
    COMMANDS
        .binary_search_by(|spec| spec.name.as_bytes().cmp(lower))
        .ok()
        .map(|i| &COMMANDS[i])
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
