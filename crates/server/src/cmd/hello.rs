//! HELLO [protover [AUTH username password] [SETNAME name]]: switches between RESP2 and RESP3,
//! optionally authenticating, and describes the server. The reply names the server "redis"
//! with a 7.0 version, as other Redis-compatible servers do, so client libraries that check
//! versions enable the features Mantle implements.

use super::auth;
use super::client::valid_name;
use super::{CommandSpec, Declared, Flags, Keys};
use crate::frame::{Frame, Protocol};
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct Hello {
    protover: Option<i64>,
    auth: Option<(Bytes, Bytes)>,
    setname: Option<Bytes>,
}

impl Declared<'_> for Hello {
    const SPEC: CommandSpec = CommandSpec {
        name: "hello",
        arity: -1,
        flags: Flags::NOSCRIPT
            .with(Flags::LOADING)
            .with(Flags::STALE)
            .with(Flags::FAST)
            .with(Flags::NO_AUTH),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Hello, ParseError> {
        let mut hello = Hello {
            protover: None,
            auth: None,
            setname: None,
        };
        if parse.remaining() == 0 {
            return Ok(hello);
        }
        hello.protover = Some(parse.next_int().map_err(|_| {
            ParseError::Other("Protocol version is not an integer or out of range".into())
        })?);
        while let Some(option) = parse.next_optional() {
            match option.to_ascii_uppercase().as_slice() {
                b"AUTH" if parse.remaining() >= 2 => {
                    hello.auth = Some((parse.next_bytes()?, parse.next_bytes()?));
                }
                b"SETNAME" if parse.remaining() >= 1 => hello.setname = Some(parse.next_bytes()?),
                _ => {
                    return Err(ParseError::Other(format!(
                        "Syntax error in HELLO option '{}'",
                        super::printable(&option, 64)
                    )))
                }
            }
        }
        Ok(hello)
    }

    /// All or nothing: every option is checked before any is applied, so a HELLO that
    /// answers an error leaves the connection as it was (not authenticated, say).
    // Boxed: its future is much larger than the common commands' (which share the enum's).
    fn apply(
        self,
        instance: &Instance,
        session: &mut Session,
    ) -> impl std::future::Future<Output = Frame> + Send {
        Box::pin(self.greet(instance, session))
    }
}

impl Hello {
    async fn greet(self, instance: &Instance, session: &mut Session) -> Frame {
        let protocol = match self.protover {
            None => session.protocol,
            Some(2) => Protocol::Resp2,
            Some(3) => Protocol::Resp3,
            Some(_) => return Frame::Error("NOPROTO unsupported protocol version".into()),
        };
        if let Some(name) = &self.setname {
            if !valid_name(name) {
                return Frame::err(
                    "Client names cannot contain spaces, newlines or special characters.",
                );
            }
        }
        let authenticated = match &self.auth {
            Some((user, password)) => {
                if let Err(reply) = auth::attempt(instance, session, Some(user), password).await {
                    return reply;
                }
                true
            }
            None => session.authenticated,
        };
        if !authenticated {
            return Frame::Error(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise \
                 the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the \
                 client and select the RESP protocol version at the same time"
                    .into(),
            );
        }
        session.authenticated = true;
        if let Some(name) = self.setname {
            session.set_name(name);
        }
        session.protocol = protocol;
        let proto = match protocol {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        };
        Frame::Map(vec![
            (Frame::static_bulk("server"), Frame::static_bulk("redis")),
            (Frame::static_bulk("version"), Frame::static_bulk("7.0.0")),
            (Frame::static_bulk("proto"), Frame::Integer(proto)),
            (Frame::static_bulk("id"), Frame::Integer(session.id as i64)),
            (Frame::static_bulk("mode"), Frame::static_bulk("standalone")),
            (Frame::static_bulk("role"), Frame::static_bulk("master")),
            (Frame::static_bulk("modules"), Frame::Array(Vec::new())),
        ])
    }
}
