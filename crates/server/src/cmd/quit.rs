//! QUIT: OK, then the connection closes once the replies before it are sent.

use super::{CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};

pub struct Quit;

impl Declared<'_> for Quit {
    const SPEC: CommandSpec = CommandSpec {
        name: "quit",
        arity: -1,
        flags: Flags::NOSCRIPT
            .with(Flags::LOADING)
            .with(Flags::STALE)
            .with(Flags::FAST)
            .with(Flags::NO_AUTH),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(_: &mut Parse<'_>) -> Result<Quit, ParseError> {
        Ok(Quit)
    }

    async fn apply(self, _: &Instance, session: &mut Session) -> Frame {
        session.closing = true;
        Frame::ok()
    }
}
