//! The keyspace a function's `redis.call` reaches (`functions::exec::Keyspace`, the execution
//! seam), over this server's instance and command table: parse with the `cmd` table, refuse
//! what a function may not do, apply. See `functions::exec` for why this is the one place
//! that changes when the atomic keyspace lands.

use super::Command;
use crate::frame::Frame;
use crate::functions::exec::{Keyspace, Scope, DENIED};
use crate::instance::{Instance, Session};
use bytes::Bytes;
use std::sync::Weak;

pub struct InstanceKeyspace {
    instance: Weak<Instance>,
    runtime: tokio::runtime::Handle,
}

impl InstanceKeyspace {
    pub fn new(instance: Weak<Instance>, runtime: tokio::runtime::Handle) -> InstanceKeyspace {
        InstanceKeyspace { instance, runtime }
    }
}

impl Keyspace for InstanceKeyspace {
    fn call(&self, scope: &mut Scope, args: &[Bytes]) -> Frame {
        let Some(instance) = self.instance.upgrade() else {
            return Frame::err("the server is stopping");
        };
        // Authenticated: the caller was, to run the function at all.
        let mut session = Session::new(0, false, None);
        let command = match Command::parse(args, &session) {
            Ok(command) => command,
            Err(reply) => return reply,
        };
        let spec = command.spec();
        if DENIED.contains(&spec.name) || spec.flags.contains(super::Flags::NOSCRIPT) {
            return Frame::err("This Redis command is not allowed from script");
        }
        if let Some(key) = spec.key_args(args).find(|key| !scope.keys.contains(key)) {
            return Frame::err(format!(
                "Script attempted to access key '{}' that was not declared in KEYS (every key \
                 a function touches must be passed as a key argument)",
                super::printable(key, 128)
            ));
        }
        if scope.read_only && command.writes() {
            return Frame::err("Write commands are not allowed from read-only scripts.");
        }
        // On the functions thread, never a runtime worker: blocking here holds up only the
        // function that called.
        let reply = self
            .runtime
            .block_on(command.apply(&instance, &mut session));
        scope.wrote |= session.uncommitted;
        reply
    }
}
