//! FUNCTION LOAD|LIST|DELETE|DUMP|RESTORE|FLUSH|KILL|STATS|ROLLBACK|VERSIONS|HELP: Redis 7's
//! library management, plus the registry's versions (`ROLLBACK`, `VERSIONS`; `LIST` shows
//! each library's version). The work is done by `functions`; this module reads arguments and
//! shapes replies as Redis does.

use super::{CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::functions::catalog::LibraryInfo;
use crate::functions::RestorePolicy;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub enum FunctionCmd {
    Load {
        replace: bool,
        code: Bytes,
    },
    List {
        pattern: Option<Bytes>,
        with_code: bool,
    },
    Delete(String),
    Dump,
    Restore {
        payload: Bytes,
        policy: RestorePolicy,
    },
    Flush,
    Kill,
    Stats,
    Rollback(String),
    Versions(String),
    Help,
}

const HELP: &[&str] = &[
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library (or its next version, with REPLACE) from the given code.",
    "DELETE <LIBRARY NAME>",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    The libraries with their functions and versions.",
    "ROLLBACK <LIBRARY NAME>",
    "    Make the library's previous version active again.",
    "VERSIONS <LIBRARY NAME>",
    "    The library's kept versions, oldest first; the last is active.",
    "DUMP",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "FLUSH [ASYNC|SYNC]",
    "KILL",
    "    Stop the running function if it has not written.",
    "STATS",
    "HELP",
];

fn library_name(parse: &mut Parse<'_>) -> Result<String, ParseError> {
    let name = parse.next_string()?;
    parse.finish()?;
    Ok(name)
}

impl Declared<'_> for FunctionCmd {
    const SPEC: CommandSpec = CommandSpec {
        name: "function",
        arity: -2,
        // Not WRITE: libraries are written to the registry (synced, or etcd) before the
        // reply, not to the keyspace.
        flags: Flags::NOSCRIPT,
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<FunctionCmd, ParseError> {
        let sub = parse.next_string()?.to_ascii_lowercase();
        let cmd = match sub.as_str() {
            "load" => {
                let first = parse.next_bytes()?;
                let (replace, code) = if first.eq_ignore_ascii_case(b"replace") {
                    (true, parse.next_bytes()?)
                } else {
                    (false, first)
                };
                FunctionCmd::Load { replace, code }
            }
            "list" => {
                let (mut pattern, mut with_code) = (None, false);
                while let Some(word) = parse.next_optional() {
                    if word.eq_ignore_ascii_case(b"withcode") && !with_code {
                        with_code = true;
                    } else if word.eq_ignore_ascii_case(b"libraryname") && pattern.is_none() {
                        pattern = Some(parse.next_bytes().map_err(|_| {
                            ParseError::Other("library name argument was not given".into())
                        })?);
                    } else {
                        return Err(ParseError::Other(format!(
                            "Unknown argument {}",
                            super::printable(&word, 64)
                        )));
                    }
                }
                FunctionCmd::List { pattern, with_code }
            }
            "delete" => FunctionCmd::Delete(library_name(parse)?),
            "rollback" => FunctionCmd::Rollback(library_name(parse)?),
            "versions" => FunctionCmd::Versions(library_name(parse)?),
            "dump" => FunctionCmd::Dump,
            "restore" => {
                let payload = parse.next_bytes()?;
                let policy = match parse.next_optional() {
                    None => RestorePolicy::Append,
                    Some(word) => match word.to_ascii_lowercase().as_slice() {
                        b"append" => RestorePolicy::Append,
                        b"replace" => RestorePolicy::Replace,
                        b"flush" => RestorePolicy::Flush,
                        _ => {
                            return Err(ParseError::Other(
                                "Wrong restore policy given, value should be either FLUSH, \
                                 APPEND or REPLACE."
                                    .into(),
                            ))
                        }
                    },
                };
                FunctionCmd::Restore { payload, policy }
            }
            "flush" => {
                if let Some(mode) = parse.next_optional() {
                    if !mode.eq_ignore_ascii_case(b"async") && !mode.eq_ignore_ascii_case(b"sync") {
                        return Err(ParseError::Other(
                            "FUNCTION FLUSH only supports SYNC|ASYNC option".into(),
                        ));
                    }
                }
                FunctionCmd::Flush
            }
            "kill" => FunctionCmd::Kill,
            "stats" => FunctionCmd::Stats,
            "help" => FunctionCmd::Help,
            _ => {
                return Err(ParseError::Other(format!(
                    "unknown subcommand '{}'. Try FUNCTION HELP.",
                    super::printable(sub.as_bytes(), 64)
                )))
            }
        };
        parse.finish()?;
        Ok(cmd)
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        let functions = &instance.functions;
        let reply = match self {
            FunctionCmd::Load { replace, code } => match String::from_utf8(code.to_vec()) {
                Ok(code) => functions
                    .load(code, replace)
                    .await
                    .map(|n| Frame::bulk_str(&n)),
                Err(_) => Err("ERR library code must be UTF-8 text".into()),
            },
            FunctionCmd::List { pattern, with_code } => Ok(Frame::Array(
                functions
                    .list(pattern.as_deref())
                    .iter()
                    .map(|l| library_frame(l, with_code))
                    .collect(),
            )),
            FunctionCmd::Delete(name) => functions.delete(&name).await.map(|()| Frame::ok()),
            FunctionCmd::Rollback(name) => functions
                .rollback(&name)
                .await
                .map(|v| Frame::Integer(i64::from(v))),
            FunctionCmd::Versions(name) => functions.versions(&name).await.map(|history| {
                let active = history.active().map(|a| a.version);
                Frame::Array(
                    history
                        .stack
                        .iter()
                        .map(|v| {
                            Frame::Map(vec![
                                (
                                    Frame::static_bulk("id"),
                                    Frame::bulk_str(&format!("{name}@{}", v.version)),
                                ),
                                (
                                    Frame::static_bulk("version"),
                                    Frame::Integer(i64::from(v.version)),
                                ),
                                (
                                    Frame::static_bulk("active"),
                                    Frame::Integer(i64::from(Some(v.version) == active)),
                                ),
                                (
                                    Frame::static_bulk("loaded_at_ms"),
                                    Frame::Integer(v.loaded_at_ms as i64),
                                ),
                                (
                                    Frame::static_bulk("bytes"),
                                    Frame::Integer(v.code.len() as i64),
                                ),
                            ])
                        })
                        .collect(),
                )
            }),
            FunctionCmd::Dump => Ok(Frame::Bulk(Bytes::from(functions.dump()))),
            FunctionCmd::Restore { payload, policy } => functions
                .restore(&payload, policy)
                .await
                .map(|()| Frame::ok()),
            FunctionCmd::Flush => functions.flush().await.map(|()| Frame::ok()),
            FunctionCmd::Kill => functions.kill().map(|()| Frame::ok()),
            FunctionCmd::Stats => Ok(stats(instance)),
            FunctionCmd::Help => Ok(Frame::Array(
                HELP.iter()
                    .map(|line| Frame::Simple(Bytes::from_static(line.as_bytes())))
                    .collect(),
            )),
        };
        reply.unwrap_or_else(Frame::Error)
    }
}

/// One library as `FUNCTION LIST` shows it: Redis's fields, then `version`.
fn library_frame(library: &LibraryInfo, with_code: bool) -> Frame {
    let functions = library
        .functions
        .iter()
        .map(|f| {
            Frame::Map(vec![
                (Frame::static_bulk("name"), Frame::bulk_str(&f.name)),
                (
                    Frame::static_bulk("description"),
                    f.description
                        .as_deref()
                        .map_or(Frame::Null, Frame::bulk_str),
                ),
                (
                    Frame::static_bulk("flags"),
                    Frame::Array(f.flags.iter().map(|flag| Frame::bulk_str(flag)).collect()),
                ),
            ])
        })
        .collect();
    let mut fields = vec![
        (
            Frame::static_bulk("library_name"),
            Frame::bulk_str(&library.name),
        ),
        (Frame::static_bulk("engine"), Frame::static_bulk("LUA")),
        (Frame::static_bulk("functions"), Frame::Array(functions)),
        (
            Frame::static_bulk("version"),
            Frame::Integer(i64::from(library.version)),
        ),
    ];
    if with_code {
        fields.push((
            Frame::static_bulk("library_code"),
            Frame::bulk_str(&library.code),
        ));
    }
    Frame::Map(fields)
}

/// `FUNCTION STATS`: the running function (or null) and the engine's counts, as Redis.
fn stats(instance: &Instance) -> Frame {
    let running = match instance.functions.running() {
        None => Frame::Null,
        Some((name, command, elapsed)) => Frame::Map(vec![
            (Frame::static_bulk("name"), Frame::bulk_str(&name)),
            (
                Frame::static_bulk("command"),
                Frame::Array(command.into_iter().map(Frame::Bulk).collect()),
            ),
            (
                Frame::static_bulk("duration_ms"),
                Frame::Integer(elapsed.as_millis() as i64),
            ),
        ]),
    };
    let (libraries, functions) = instance.functions.counts();
    Frame::Map(vec![
        (Frame::static_bulk("running_script"), running),
        (
            Frame::static_bulk("engines"),
            Frame::Map(vec![(
                Frame::static_bulk("LUA"),
                Frame::Map(vec![
                    (
                        Frame::static_bulk("libraries_count"),
                        Frame::Integer(libraries as i64),
                    ),
                    (
                        Frame::static_bulk("functions_count"),
                        Frame::Integer(functions as i64),
                    ),
                ]),
            )]),
        ),
    ])
}
