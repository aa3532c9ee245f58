//! The execution seam: how `redis.call` inside a function runs a native command. Everything a
//! function does to data goes through [`Keyspace::call`], and nothing else in `functions`
//! touches the keyspace.
//!
//! Today a call is parsed with the server's `cmd` table and applied to the instance, on the
//! functions thread (`vm`), which runs one function at a time: functions are atomic with
//! respect to each other, and their writes mark the calling session so the `FCALL` reply
//! leaves only after the one commit that makes all of them durable. Plain commands of other
//! clients may still interleave with a function's calls. When the server's atomic keyspace
//! (a `Db` transaction over declared keys with an overlay and one WAL batch) lands, this is
//! the one function that switches to it: the context opens the transaction over the
//! function's declared keys, each call runs inside it, and the function's end commits it.

use crate::frame::Frame;
use bytes::Bytes;

/// How a function reaches the keyspace: implemented once, over the server's instance, by
/// `cmd::function_exec` (this module cannot name the command table without an import loop).
pub trait Keyspace: Send + Sync {
    /// Runs one native command (`args[0]` is its name) for the function running in `scope`;
    /// its reply, an error reply when the command is refused.
    fn call(&self, scope: &mut Scope, args: &[Bytes]) -> Frame;
}

/// What one running function may touch, and what it did.
#[derive(Debug, Default)]
pub struct Scope {
    /// The keys the caller declared (`KEYS`): the only ones a call may name.
    pub keys: Vec<Bytes>,
    /// `FCALL_RO`, `EVAL_RO` or a `no-writes` function: writes are refused.
    pub read_only: bool,
    /// Set once a call wrote: the caller's reply must wait for the commit.
    pub wrote: bool,
}

/// Commands a function may not call: they run functions or scripts themselves, change the
/// connection rather than data, or manage the server.
pub const DENIED: &[&str] = &[
    "asking",
    "auth",
    "client",
    "cluster",
    "config",
    "discard",
    "eval",
    "eval_ro",
    "evalsha",
    "evalsha_ro",
    "exec",
    "fcall",
    "fcall_ro",
    "function",
    "hello",
    "multi",
    "policy",
    "quit",
    "readonly",
    "readwrite",
    "script",
    "select",
    "unwatch",
    "watch",
];
