//! TIME: the server's clock, as Redis answers it: Unix seconds and the microseconds within.

use super::{CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use std::time::{SystemTime, UNIX_EPOCH};

pub struct Time;

impl Declared<'_> for Time {
    const SPEC: CommandSpec = CommandSpec {
        name: "time",
        arity: 1,
        flags: Flags::LOADING.with(Flags::STALE).with(Flags::FAST),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(_: &mut Parse<'_>) -> Result<Time, ParseError> {
        Ok(Time)
    }

    async fn apply(self, _: &Instance, _: &mut Session) -> Frame {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Frame::Array(vec![
            Frame::bulk_str(&now.as_secs().to_string()),
            Frame::bulk_str(&now.subsec_micros().to_string()),
        ])
    }
}
