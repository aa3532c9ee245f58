//! AUTH [username] password, against `--requirepass` (the user is always `default`).

use crate::decoder::Limits;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

pub struct Auth {
    username: Option<Bytes>,
    password: Bytes,
}

impl Auth {
    pub fn parse(parse: &mut Parse<'_>) -> Result<Auth, ParseError> {
        let first = parse.next_bytes()?;
        let auth = match parse.next_optional() {
            Some(password) => Auth {
                username: Some(first),
                password,
            },
            None => Auth {
                username: None,
                password: first,
            },
        };
        parse.finish()?;
        Ok(auth)
    }

    pub fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        match check(instance, self.username.as_deref(), &self.password) {
            Ok(()) => {
                session.authenticated = true;
                Frame::ok()
            }
            Err(reply) => reply,
        }
    }
}

/// Checks credentials; the error is the reply Redis gives.
pub fn check(instance: &Instance, username: Option<&[u8]>, password: &[u8]) -> Result<(), Frame> {
    if !instance.requires_auth() {
        return Err(Frame::err(
            "AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        ));
    }
    let user_ok = username.is_none_or(|u| u == b"default");
    if user_ok && instance.password_matches(password) {
        Ok(())
    } else {
        Err(Frame::Error(
            "WRONGPASS invalid username-password pair or user is disabled.".into(),
        ))
    }
}

/// The request limits for a session, which are tighter before it authenticates.
pub fn limits_for(instance: &Instance, session: &Session) -> Limits {
    if session.authenticated {
        Limits::new(instance.max_bulk_len())
    } else {
        Limits::unauthenticated()
    }
}
