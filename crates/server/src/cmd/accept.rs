//! ASKING, READONLY, READWRITE: what cluster clients send around redirections and replica
//! reads. Accepted with OK: a Mantle node serves every slot it owns read-write, and answers
//! ASK redirections without needing the ASKING handshake.

use super::{CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};

macro_rules! accepted {
    ($($ty:ident: $name:literal, $flags:expr;)+) => {$(
        pub struct $ty;

        impl Declared<'_> for $ty {
            const SPEC: CommandSpec = CommandSpec {
                name: $name,
                arity: 1,
                flags: $flags,
                keys: Keys::NONE,
                reveals_data: false,
            };

            fn parse(_: &mut Parse<'_>) -> Result<$ty, ParseError> {
                Ok($ty)
            }

            async fn apply(self, _: &Instance, _: &mut Session) -> Frame {
                Frame::ok()
            }
        }
    )+};
}

accepted! {
    Asking: "asking", Flags::FAST;
    ReadOnly: "readonly", Flags::LOADING.with(Flags::STALE).with(Flags::FAST);
    ReadWrite: "readwrite", Flags::LOADING.with(Flags::STALE).with(Flags::FAST);
}
