//! The commands, one module each. Every command parses itself from a request's arguments
//! (through [`Parse`]) and applies itself to the shared state, producing the reply frame.
//! This module looks the name up, checks arity and authentication the way Redis does, and
//! dispatches.

pub mod auth;
mod cache;
mod client;
mod cluster;
mod command;
mod config;
mod dbsize;
mod del;
mod echo;
mod exists;
mod get;
mod hello;
mod info;
mod mget;
mod mset;
mod ping;
pub mod policy;
mod select;
mod set;
mod ttl;

use crate::cluster::{Redirect, RouteGuard};
pub use crate::frame::store_error;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;
pub use command::{lookup, CommandSpec, Kind, COMMANDS};

/// A parsed request; it may borrow its arguments from the request's buffer (`'a`).
pub enum Command<'a> {
    Auth(auth::Auth),
    Cache(cache::CacheCmd),
    Accept,
    Client(client::Client),
    Cluster(cluster::ClusterCmd),
    Command(command::CommandCmd),
    Config(config::ConfigCmd),
    DbSize,
    Del(del::Del),
    Echo(echo::Echo),
    Exists(exists::Exists),
    Get(get::Get<'a>),
    Hello(hello::Hello),
    Info(info::Info),
    MGet(mget::MGet),
    MSet(mset::MSet),
    Ping(ping::Ping),
    Policy(policy::PolicyCmd),
    Quit,
    Select(select::Select),
    Set(set::Set),
    Ttl(ttl::Ttl),
}

impl<'a> Command<'a> {
    /// Parses `args` (`args[0]` is the name). An error is the reply to send instead.
    pub fn parse(args: &'a [Bytes], session: &Session) -> Result<Command<'a>, Frame> {
        let Some(name) = args.first() else {
            return Err(Frame::err("empty command"));
        };
        let Some(spec) = lookup(name) else {
            return Err(unknown_command(name, &args[1..]));
        };
        if !session.authenticated && !spec.no_auth() {
            return Err(Frame::Error("NOAUTH Authentication required.".into()));
        }
        let arity_ok = if spec.arity >= 0 {
            args.len() == spec.arity as usize
        } else {
            args.len() >= spec.arity.unsigned_abs() as usize
        };
        if !arity_ok {
            return Err(arity_error(spec.name));
        }
        let mut parse = Parse::new(args);
        let parsed = match spec.kind {
            Kind::Auth => auth::Auth::parse(&mut parse).map(Command::Auth),
            Kind::Cache => cache::CacheCmd::parse(&mut parse).map(Command::Cache),
            Kind::Accept => Ok(Command::Accept),
            Kind::Client => client::Client::parse(&mut parse).map(Command::Client),
            Kind::Cluster => cluster::ClusterCmd::parse(&mut parse).map(Command::Cluster),
            Kind::Command => command::CommandCmd::parse(&mut parse).map(Command::Command),
            Kind::Config => config::ConfigCmd::parse(&mut parse).map(Command::Config),
            Kind::DbSize => Ok(Command::DbSize),
            Kind::Del => del::Del::parse(&mut parse).map(Command::Del),
            Kind::Echo => echo::Echo::parse(&mut parse).map(Command::Echo),
            Kind::Exists => exists::Exists::parse(&mut parse).map(Command::Exists),
            Kind::Get => get::Get::parse(&mut parse).map(Command::Get),
            Kind::Hello => hello::Hello::parse(&mut parse).map(Command::Hello),
            Kind::Info => info::Info::parse(&mut parse).map(Command::Info),
            Kind::MGet => mget::MGet::parse(&mut parse).map(Command::MGet),
            Kind::MSet => mset::MSet::parse(&mut parse).map(Command::MSet),
            Kind::Ping => ping::Ping::parse(&mut parse).map(Command::Ping),
            Kind::Policy => policy::PolicyCmd::parse(&mut parse).map(Command::Policy),
            Kind::Quit => Ok(Command::Quit),
            Kind::Select => select::Select::parse(&mut parse).map(Command::Select),
            Kind::Set => set::Set::parse(&mut parse).map(Command::Set),
            Kind::Ttl => ttl::Ttl::parse(&mut parse, false).map(Command::Ttl),
            Kind::Pttl => ttl::Ttl::parse(&mut parse, true).map(Command::Ttl),
        };
        parsed.map_err(|e| match e {
            ParseError::Arity => arity_error(spec.name),
            other => Frame::err(other),
        })
    }

    /// Parses `args` and, on a cluster node, checks that this node serves the request's keys
    /// (the error is then the redirection); the guard is held while the command runs.
    pub fn parse_routed(
        args: &'a [Bytes],
        session: &Session,
        instance: &Instance,
    ) -> Result<(Command<'a>, Option<RouteGuard>), Redirect> {
        let command = Command::parse(args, session).map_err(Redirect::Reply)?;
        match &instance.cluster {
            None => Ok((command, None)),
            Some(node) => {
                let spec = lookup(&args[0]).expect("parsed, so known");
                Ok((
                    command,
                    node.route(key_args(spec, args), session.forwarded)?,
                ))
            }
        }
    }

    /// Runs the command and returns its reply, or an error instead of a reply larger than
    /// `--client-output-limit`.
    pub async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        let mut reply = match self {
            // Boxed: a wrong password's delay would otherwise enlarge every command's future.
            Command::Auth(cmd) => Box::pin(cmd.apply(instance, session)).await,
            Command::Cache(cmd) => cmd.apply(instance),
            Command::Accept => Frame::ok(),
            Command::Client(cmd) => cmd.apply(session),
            Command::Cluster(self::cluster::ClusterCmd::Forwarded) => {
                session.forwarded = true;
                Frame::ok()
            }
            Command::Cluster(cmd) => {
                session.uncommitted |= cmd.writes();
                Box::pin(cmd.apply(instance)).await
            }
            Command::Command(cmd) => cmd.apply(),
            Command::Config(cmd) => cmd.apply(instance),
            Command::DbSize => dbsize::apply(instance).await,
            Command::Del(cmd) => {
                session.uncommitted = true;
                cmd.apply(instance).await
            }
            Command::Echo(cmd) => cmd.apply(),
            Command::Exists(cmd) => cmd.apply(instance).await,
            Command::Get(cmd) => cmd.apply(instance).await,
            Command::Hello(cmd) => Box::pin(cmd.apply(instance, session)).await,
            Command::Info(cmd) => cmd.apply(instance).await,
            Command::MGet(cmd) => cmd.apply(instance).await,
            Command::MSet(cmd) => {
                session.uncommitted = true;
                cmd.apply(instance).await
            }
            Command::Ping(cmd) => cmd.apply(),
            Command::Policy(cmd) => cmd.apply(instance, session).await,
            Command::Quit => {
                session.closing = true;
                Frame::ok()
            }
            Command::Select(cmd) => cmd.apply(),
            Command::Set(cmd) => {
                session.uncommitted = true;
                cmd.apply(instance).await
            }
            Command::Ttl(cmd) => cmd.apply(instance).await,
        };
        if let Some(error) = instance.oversized(&reply, session.protocol) {
            reply = error;
        }
        reply
    }
}

/// The key arguments of a request, by the table's key positions.
fn key_args<'k>(spec: &CommandSpec, args: &'k [Bytes]) -> impl Iterator<Item = &'k Bytes> {
    let first = spec.first_key.max(0) as usize;
    let last = if spec.last_key < 0 {
        args.len() as i64 + spec.last_key
    } else {
        spec.last_key
    };
    let step = spec.step.max(1) as usize;
    let end = if first == 0 {
        0
    } else {
        (last.max(0) as usize + 1).min(args.len())
    };
    args.get(first..end.max(first))
        .unwrap_or(&[])
        .iter()
        .step_by(step)
}

pub fn arity_error(name: &str) -> Frame {
    Frame::err(format!("wrong number of arguments for '{name}' command"))
}

/// Redis's wording, quoting the first arguments so a user sees what was sent.
fn unknown_command(name: &[u8], args: &[Bytes]) -> Frame {
    let mut message = format!(
        "unknown command '{}', with args beginning with: ",
        printable(name, 128)
    );
    for arg in args.iter().take(8) {
        message.push_str(&format!("'{}' ", printable(arg, 128)));
    }
    Frame::err(message)
}

/// Client-supplied bytes made safe and short for an error line.
pub fn printable(bytes: &[u8], limit: usize) -> String {
    let text: String = String::from_utf8_lossy(&bytes[..bytes.len().min(limit)])
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::from(w.to_string())).collect()
    }

    fn error_of(words: &[&str], session: &Session) -> String {
        match Command::parse(&args(words), session) {
            Err(Frame::Error(message)) => message,
            Err(other) => panic!("unexpected frame {other:?}"),
            Ok(_) => panic!("{words:?} parsed"),
        }
    }

    #[test]
    fn errors_use_redis_wording() {
        let session = Session::new(1, false, None);
        assert_eq!(
            error_of(&["FLUSHALL", "x"], &session),
            "ERR unknown command 'FLUSHALL', with args beginning with: 'x' "
        );
        assert_eq!(
            error_of(&["get"], &session),
            "ERR wrong number of arguments for 'get' command"
        );
        assert_eq!(
            error_of(&["SET", "k", "v", "EX", "ten"], &session),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            error_of(&["SET", "k", "v", "NX", "XX"], &session),
            "ERR syntax error"
        );
    }

    #[test]
    fn unauthenticated_sessions_may_only_authenticate() {
        let session = Session::new(1, true, None);
        assert_eq!(
            error_of(&["GET", "k"], &session),
            "NOAUTH Authentication required."
        );
        assert!(Command::parse(&args(&["AUTH", "pw"]), &session).is_ok());
        assert!(Command::parse(&args(&["HELLO", "3", "AUTH", "default", "pw"]), &session).is_ok());
        assert!(Command::parse(&args(&["QUIT"]), &session).is_ok());
    }

    #[test]
    fn names_are_case_insensitive() {
        let session = Session::new(1, false, None);
        assert!(matches!(
            Command::parse(&args(&["gEt", "k"]), &session),
            Ok(Command::Get(_))
        ));
    }
}
