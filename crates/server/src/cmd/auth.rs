//! AUTH [username] password, against `--requirepass` (the user is always `default`).
//!
//! Guessing is slowed per connection: each wrong password is answered after a delay that
//! grows with the connection's failures ([`FAILURE_DELAY`] times their number), and the
//! connection is closed at the [`MAX_FAILURES`]th. A connection runs one command at a time, so
//! one connection can try at most a handful of passwords per second, and all of them together
//! at most `--maxclients` times that.

use super::{CommandSpec, Declared, Flags, Keys};
use crate::decoder::Limits;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Delay before answering a wrong password, times the connection's failures so far.
pub const FAILURE_DELAY: Duration = Duration::from_millis(100);
/// Wrong passwords after which a connection is closed.
pub const MAX_FAILURES: u32 = 10;

pub struct Auth {
    username: Option<Bytes>,
    password: Bytes,
}

impl Declared<'_> for Auth {
    const SPEC: CommandSpec = CommandSpec {
        name: "auth",
        arity: -2,
        flags: Flags::NOSCRIPT
            .with(Flags::LOADING)
            .with(Flags::STALE)
            .with(Flags::FAST)
            .with(Flags::NO_AUTH),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Auth, ParseError> {
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

    // Boxed: its future is much larger than the common commands' (which share the enum's).
    fn apply(
        self,
        instance: &Instance,
        session: &mut Session,
    ) -> impl std::future::Future<Output = Frame> + Send {
        Box::pin(self.authenticate(instance, session))
    }
}

impl Auth {
    async fn authenticate(self, instance: &Instance, session: &mut Session) -> Frame {
        match attempt(instance, session, self.username.as_deref(), &self.password).await {
            Ok(()) => {
                session.authenticated = true;
                Frame::ok()
            }
            Err(reply) => reply,
        }
    }
}

/// Checks credentials as [`check`] does, and makes a wrong password cost time (and, after
/// [`MAX_FAILURES`], the connection). Changes nothing else in the session.
pub async fn attempt(
    instance: &Instance,
    session: &mut Session,
    username: Option<&[u8]>,
    password: &[u8],
) -> Result<(), Frame> {
    let Err(reply) = check(instance, username, password) else {
        return Ok(());
    };
    if !instance.requires_auth() {
        return Err(reply);
    }
    session.auth_failures += 1;
    instance
        .guards()
        .auth_failures
        .fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(FAILURE_DELAY * session.auth_failures.min(MAX_FAILURES)).await;
    if session.auth_failures >= MAX_FAILURES {
        instance
            .guards()
            .auth_disconnects
            .fetch_add(1, Ordering::Relaxed);
        store::log_line!(
            "mantle: closing client {} ({}): {MAX_FAILURES} wrong passwords",
            session.id,
            session.peer.map(|p| p.to_string()).unwrap_or_default()
        );
        session.closing = true;
        return Err(Frame::err(
            "too many failed authentication attempts; closing the connection",
        ));
    }
    Err(reply)
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
    let expected = instance.config.requirepass.as_deref().unwrap_or_default();
    if user_ok && password_matches(expected.as_bytes(), password) {
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

/// Whether `candidate` is the password, in time that depends only on the candidate's length
/// (which the client knows): every byte is compared, against the expected password repeated,
/// with `subtle`'s constant-time operations, so neither the position of the first wrong byte
/// nor the expected length shows in the reply's timing.
pub(crate) fn password_matches(expected: &[u8], candidate: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    if expected.is_empty() {
        return candidate.is_empty();
    }
    let mut equal = (expected.len() as u64).ct_eq(&(candidate.len() as u64));
    for (i, byte) in candidate.iter().enumerate() {
        equal &= byte.ct_eq(&expected[i % expected.len()]);
    }
    equal.into()
}

#[cfg(test)]
mod tests {
    use super::password_matches;

    #[test]
    fn only_the_exact_password_matches() {
        assert!(password_matches(b"s3cret", b"s3cret"));
        for wrong in [
            &b""[..],
            b"s",
            b"s3cre",
            b"s3cret!",
            b"s3cres",
            b"S3cret",
            b"s3crets3cret",
        ] {
            assert!(!password_matches(b"s3cret", wrong), "{wrong:?}");
        }
        assert!(password_matches(b"", b""));
        assert!(!password_matches(b"", b"x"));
    }
}
