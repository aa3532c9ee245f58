//! SLOWLOG GET [count] | LEN | RESET | HELP: the commands that took at least
//! `slowlog-log-slower-than` microseconds (CONFIG SET), newest first, at most
//! `slowlog-max-len` of them (see `crate::slowlog`).

use super::{CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};

pub enum SlowlogCmd {
    /// `None`: all entries.
    Get(Option<usize>),
    Len,
    Reset,
    Help,
}

const HELP: &[&str] = &[
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Prints this help.",
];

impl Declared<'_> for SlowlogCmd {
    const SPEC: CommandSpec = CommandSpec {
        name: "slowlog",
        arity: -2,
        flags: Flags::ADMIN.with(Flags::LOADING).with(Flags::STALE),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<SlowlogCmd, ParseError> {
        let sub = parse.next_bytes()?;
        let cmd = match sub.to_ascii_lowercase().as_slice() {
            b"get" => match parse.remaining() {
                0 => SlowlogCmd::Get(Some(10)),
                _ => match parse.next_int() {
                    Ok(-1) => SlowlogCmd::Get(None),
                    Ok(n) if n >= 0 => SlowlogCmd::Get(Some(n as usize)),
                    _ => {
                        return Err(ParseError::Other(
                            "count should be greater than or equal to -1".into(),
                        ))
                    }
                },
            },
            b"len" => SlowlogCmd::Len,
            b"reset" => SlowlogCmd::Reset,
            b"help" => SlowlogCmd::Help,
            _ => {
                return Err(ParseError::Other(format!(
                    "unknown subcommand '{}'. Try SLOWLOG HELP.",
                    super::printable(&sub, 64)
                )))
            }
        };
        parse.finish()?;
        Ok(cmd)
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        let log = &instance.slowlog;
        match self {
            SlowlogCmd::Get(n) => Frame::Array(
                log.newest(n)
                    .into_iter()
                    .map(|entry| {
                        Frame::Array(vec![
                            Frame::Integer(entry.id as i64),
                            Frame::Integer(entry.at as i64),
                            Frame::Integer(entry.duration_us as i64),
                            Frame::Array(entry.args.into_iter().map(Frame::Bulk).collect()),
                            Frame::bulk_str(&entry.peer),
                            Frame::bulk_str(&entry.name),
                        ])
                    })
                    .collect(),
            ),
            SlowlogCmd::Len => Frame::Integer(log.len() as i64),
            SlowlogCmd::Reset => {
                log.reset();
                Frame::ok()
            }
            SlowlogCmd::Help => super::help_reply(HELP),
        }
    }
}
