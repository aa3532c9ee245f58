//! CLIENT SETNAME / GETNAME / ID / INFO / SETINFO: the per-connection subcommands clients
//! send on connect (client libraries announce themselves with SETINFO).

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

    async fn apply(self, _: &Instance, session: &mut Session) -> Frame {
        self.run(session)
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
                session.name = (!name.is_empty()).then_some(name);
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
                let resp = match session.protocol {
                    crate::frame::Protocol::Resp2 => 2,
                    crate::frame::Protocol::Resp3 => 3,
                };
                Frame::Verbatim(Bytes::from(format!(
                    "id={} addr={addr} name={name} db=0 resp={resp}\n",
                    session.id
                )))
            }
            Client::SetInfo => Frame::ok(),
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
