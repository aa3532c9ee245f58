//! SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP: the script cache `EVALSHA` reads (kept in memory on the
//! node, as Redis keeps it; libraries are what is durable and propagated).

use super::{CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub enum ScriptCmd {
    Load(Bytes),
    Exists(Vec<Bytes>),
    Flush,
    Kill,
    Help,
}

impl Declared<'_> for ScriptCmd {
    const SPEC: CommandSpec = CommandSpec {
        name: "script",
        arity: -2,
        flags: Flags::NOSCRIPT,
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<ScriptCmd, ParseError> {
        let sub = parse.next_string()?.to_ascii_lowercase();
        let cmd = match sub.as_str() {
            "load" => ScriptCmd::Load(parse.next_bytes()?),
            "exists" => {
                let shas = parse.rest().to_vec();
                if shas.is_empty() {
                    return Err(ParseError::Arity);
                }
                ScriptCmd::Exists(shas)
            }
            "flush" => {
                if let Some(mode) = parse.next_optional() {
                    if !mode.eq_ignore_ascii_case(b"async") && !mode.eq_ignore_ascii_case(b"sync") {
                        return Err(ParseError::Other(
                            "SCRIPT FLUSH only support SYNC|ASYNC option".into(),
                        ));
                    }
                }
                ScriptCmd::Flush
            }
            "kill" => ScriptCmd::Kill,
            "help" => ScriptCmd::Help,
            _ => {
                return Err(ParseError::Other(format!(
                    "unknown subcommand '{}'. Try SCRIPT HELP.",
                    super::printable(sub.as_bytes(), 64)
                )))
            }
        };
        parse.finish()?;
        Ok(cmd)
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        let functions = &instance.functions;
        match self {
            ScriptCmd::Load(code) => match functions.load_script(code).await {
                Ok(sha) => Frame::bulk_str(&sha),
                Err(e) => Frame::Error(e),
            },
            ScriptCmd::Exists(shas) => Frame::Array(
                shas.iter()
                    .map(|sha| Frame::Integer(i64::from(functions.script_exists(sha))))
                    .collect(),
            ),
            ScriptCmd::Flush => {
                functions.flush_scripts();
                Frame::ok()
            }
            ScriptCmd::Kill => match functions.kill() {
                Ok(()) => Frame::ok(),
                Err(e) => Frame::Error(e),
            },
            ScriptCmd::Help => Frame::Array(
                [
                    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "EXISTS <sha1> [<sha1> ...]",
                    "FLUSH [ASYNC|SYNC]",
                    "KILL",
                    "LOAD <script>",
                    "HELP",
                ]
                .iter()
                .map(|line| Frame::Simple(Bytes::from_static(line.as_bytes())))
                .collect(),
            ),
        }
    }
}
