//! The execution seam: how `redis.call` inside a function reaches the keyspace. The functions
//! thread (`vm`) runs the Lua; the keyspace is reached by the connection task that asked for
//! the call, which holds the function's transaction (`cmd::function_exec`): every
//! `redis.call` travels to that task as a [`CallRequest`], runs there inside the transaction,
//! and its reply travels back. So a function is atomic against every other client (its
//! declared keys are locked from before it starts until its writes are committed as one
//! batch), and nothing in `functions` names the command table or the store.

use crate::frame::Frame;
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

/// A finished call: its reply, whether it wrote (the reply then waits for the commit), and
/// whether it was stopped (budget, memory, time, FUNCTION KILL) rather than ending on its
/// own: its writes are then discarded.
pub struct Outcome {
    pub reply: Frame,
    pub wrote: bool,
    pub stopped: bool,
}

/// One `redis.call` / `redis.pcall` of the running function.
pub struct CallRequest {
    /// The command and its arguments (`args[0]` is its name).
    pub args: Vec<Bytes>,
    /// `FCALL_RO`, `EVAL_RO` or a `no-writes` function: writes are refused.
    pub read_only: bool,
    /// The command's reply, and whether the function has written so far.
    pub reply: oneshot::Sender<Called>,
}

/// The answer to a [`CallRequest`].
pub struct Called {
    pub reply: Frame,
    pub wrote: bool,
}

/// A function or script handed to the functions thread: the caller serves its calls
/// ([`FunctionRun::next_call`]) until it ends, then takes its outcome.
pub struct FunctionRun {
    pub(super) calls: mpsc::Receiver<CallRequest>,
    pub(super) outcome: oneshot::Receiver<Outcome>,
}

impl FunctionRun {
    /// The function's next `redis.call`; `None` once it has ended (the functions thread
    /// drops its end of the channel before it sends the outcome).
    pub async fn next_call(&mut self) -> Option<CallRequest> {
        self.calls.recv().await
    }

    /// How the function ended.
    pub async fn outcome(self) -> Outcome {
        self.outcome
            .await
            .unwrap_or_else(|_| super::failed(super::stopped()))
    }
}

/// Commands a function may not call: they run functions or scripts themselves, change the
/// connection rather than data, manage the server, or act on every key (a function holds
/// only its declared keys).
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
    "flushall",
    "flushdb",
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
