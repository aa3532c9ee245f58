//! CLIENT SETNAME / GETNAME / ID / INFO / SETINFO / LIST / HELP: the per-connection
//! subcommands clients send on connect (client libraries announce themselves with SETINFO),
//! and the list of connected clients (see `crate::client_list`).

use super::{CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub enum Client {
    SetName(Bytes),
    GetName,
    Id,
    Info,
    SetInfo,
    /// `CLIENT LIST [TYPE normal] [ID id ...]`: `None` lists everyone; TYPE other than
    /// normal matches no one (there are no replicas or pub/sub clients).
    List(Option<Vec<u64>>),
    Help,
}

const HELP: &[&str] = &[
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "LIST [TYPE <normal|master|replica|pubsub>] [ID <id> [<id> ...]]",
    "    Return information about client connections.",
    "SETINFO <option> <value>",
    "    Set client meta attr. Options are:",
    "    * LIB-NAME: the client lib name.",
    "    * LIB-VER: the client lib version.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "HELP",
    "    Prints this help.",
];

fn parse_list(parse: &mut Parse<'_>) -> Result<Client, ParseError> {
    let mut ids: Option<Vec<u64>> = None;
    while parse.remaining() > 0 {
        let option = parse.next_bytes()?.to_ascii_lowercase();
        match option.as_slice() {
            b"type" => {
                let kind = parse.next_bytes().map_err(|_| ParseError::Syntax)?;
                match kind.to_ascii_lowercase().as_slice() {
                    b"normal" => {}
                    b"master" | b"replica" | b"slave" | b"pubsub" => ids = Some(Vec::new()),
                    _ => {
                        return Err(ParseError::Other(format!(
                            "Unknown client type '{}'",
                            super::printable(&kind, 64)
                        )))
                    }
                }
            }
            b"id" => {
                let mut wanted = Vec::new();
                while parse.remaining() > 0 {
                    let id = parse
                        .next_int()
                        .map_err(|_| ParseError::Other("Invalid client ID".into()))?;
                    wanted.push(
                        u64::try_from(id)
                            .map_err(|_| ParseError::Other("Invalid client ID".into()))?,
                    );
                }
                if wanted.is_empty() {
                    return Err(ParseError::Syntax);
                }
                ids = Some(wanted);
            }
            _ => return Err(ParseError::Syntax),
        }
    }
    Ok(Client::List(ids))
}

/// Redis refuses names with spaces, newlines or other characters outside `!`..`~`.
pub fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

impl Declared<'_> for Client {
    const SPEC: CommandSpec = CommandSpec {
        name: "client",
        arity: -2,
        flags: Flags::ADMIN
            .with(Flags::NOSCRIPT)
            .with(Flags::LOADING)
            .with(Flags::STALE),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Client, ParseError> {
        let sub = parse.next_bytes()?;
        let cmd = match sub.to_ascii_lowercase().as_slice() {
            b"setname" => Client::SetName(parse.next_bytes()?),
            b"getname" => Client::GetName,
            b"id" => Client::Id,
            b"info" => Client::Info,
            b"list" => return parse_list(parse),
            b"help" => Client::Help,
            b"setinfo" => {
                parse.next_bytes()?;
                parse.next_bytes()?;
                Client::SetInfo
            }
            _ => {
                return Err(ParseError::Other(format!(
                    "unknown subcommand '{}'. Try CLIENT HELP.",
                    super::printable(&sub, 64)
                )))
            }
        };
        parse.finish()?;
        Ok(cmd)
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        match self {
            Client::List(ids) => {
                let mut text = String::new();
                for slot in instance.clients.slots() {
                    if ids.as_ref().is_some_and(|ids| !ids.contains(&slot.id)) {
                        continue;
                    }
                    text.push_str(&line(instance, &slot, session));
                    text.push('\n');
                }
                Frame::Verbatim(Bytes::from(text))
            }
            Client::Info => match &session.slot {
                Some(slot) => Frame::Verbatim(Bytes::from(line(instance, slot, session) + "\n")),
                None => Client::Info.run(session),
            },
            other => other.run(session),
        }
    }
}

/// One client's `CLIENT LIST` line. `session` is the asking connection's (its own protocol
/// is known here; other clients' lines say the protocol they last ran a command with).
fn line(instance: &Instance, slot: &crate::client_list::ClientSlot, session: &Session) -> String {
    let cmd = slot
        .last_row()
        .and_then(|row| super::COMMANDS.get(row))
        .map_or("NULL", |spec| spec.name);
    let resp = if Some(slot.id) == session.slot.as_ref().map(|s| s.id) {
        resp_of(session.protocol)
    } else {
        slot.resp()
    };
    slot.line(instance.local_addr, resp, cmd)
}

pub fn resp_of(protocol: crate::frame::Protocol) -> u8 {
    match protocol {
        crate::frame::Protocol::Resp2 => 2,
        crate::frame::Protocol::Resp3 => 3,
    }
}

impl Client {
    fn run(self, session: &mut Session) -> Frame {
        match self {
            Client::SetName(name) => {
                if !valid_name(&name) {
                    return Frame::err(
                        "Client names cannot contain spaces, newlines or special characters.",
                    );
                }
                session.set_name(name);
                Frame::ok()
            }
            Client::GetName => session.name.clone().map_or(Frame::Null, Frame::Bulk),
            Client::Id => Frame::Integer(session.id as i64),
            Client::Info => {
                let name = session
                    .name
                    .as_ref()
                    .map(|n| String::from_utf8_lossy(n).into_owned())
                    .unwrap_or_default();
                let addr = session.peer.map(|p| p.to_string()).unwrap_or_default();
                let resp = resp_of(session.protocol);
                Frame::Verbatim(Bytes::from(format!(
                    "id={} addr={addr} name={name} db=0 resp={resp}\n",
                    session.id
                )))
            }
            Client::SetInfo => Frame::ok(),
            Client::Help => super::help_reply(HELP),
            // Answered in `apply`, which has the instance.
            Client::List(_) => Frame::Array(Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_names_are_refused() {
        let mut session = Session::new(7, false, None);
        assert_eq!(Client::GetName.run(&mut session), Frame::Null);
        assert_eq!(
            Client::SetName(Bytes::from_static(b"worker-1")).run(&mut session),
            Frame::ok()
        );
        assert_eq!(
            Client::GetName.run(&mut session),
            Frame::static_bulk("worker-1")
        );
        assert!(matches!(
            Client::SetName(Bytes::from_static(b"a b")).run(&mut session),
            Frame::Error(_)
        ));
        assert_eq!(Client::Id.run(&mut session), Frame::Integer(7));
    }
}
