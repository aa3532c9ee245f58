//! FCALL / FCALL_RO and EVAL / EVALSHA / EVAL_RO / EVALSHA_RO: `name|script numkeys key...
//! arg...`. The keys are declared by count, so a cluster node routes on them (all in one
//! slot, `-CROSSSLOT` otherwise; `MOVED` when not owned) before the call runs, and a function
//! may touch no other key (`functions::exec`). The call runs inside a transaction over its
//! declared keys (`cmd::function_exec`): atomic against every other client, its writes
//! committed as one batch (none of them if a limit or FUNCTION KILL stopped it), and a call
//! that wrote marks the session so its reply waits until that batch is durable. Inside EXEC
//! it runs in EXEC's transaction.

use super::{function_exec, store_error, CommandSpec, Declared, Flags, Keys};
use crate::db::Transaction;
use crate::frame::Frame;
use crate::functions::exec::FunctionRun;
use crate::functions::exec::Outcome;
use crate::instance::{Instance, Session};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;

/// The declared keys of a `name numkeys key... arg...` request (`args[0]` is the command):
/// what a cluster node routes on. Empty when `numkeys` is malformed (the parser then refuses
/// the request).
pub fn declared_keys(args: &[Bytes]) -> &[Bytes] {
    let count = args
        .get(2)
        .and_then(|n| std::str::from_utf8(n).ok())
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0);
    args.get(3..3 + count).unwrap_or(&[])
}

/// What every command of this family reads: the target, then the keys and arguments.
struct Call {
    target: Bytes,
    keys: Vec<Bytes>,
    args: Vec<Bytes>,
}

fn parse_call(parse: &mut Parse<'_>) -> Result<Call, ParseError> {
    let target = parse.next_bytes()?;
    let count = parse
        .next_int()
        .map_err(|_| ParseError::Other("Bad number of keys provided".into()))?;
    if count < 0 {
        return Err(ParseError::Other("Number of keys can't be negative".into()));
    }
    let rest = parse.rest();
    if count as usize > rest.len() {
        return Err(ParseError::Other(
            "Number of keys can't be greater than number of args".into(),
        ));
    }
    let (keys, args) = rest.split_at(count as usize);
    Ok(Call {
        target,
        keys: keys.to_vec(),
        args: args.to_vec(),
    })
}

/// Which member of the family a request is, and so how it starts on the functions thread.
#[derive(Clone, Copy)]
enum Family {
    /// FCALL (`read_only: false`) or FCALL_RO.
    Function { read_only: bool },
    /// EVAL (`by_sha: false`: the target is the script) or EVALSHA (the target is its SHA-1),
    /// each also read-only.
    Script { by_sha: bool, read_only: bool },
}

impl Family {
    /// Hands the call to the functions thread (its keys must already be locked).
    fn start(self, call: &Call, instance: &Instance) -> Result<FunctionRun, Outcome> {
        let (keys, args) = (call.keys.clone(), call.args.clone());
        let functions = &instance.functions;
        match self {
            Family::Function { read_only } => {
                let name = String::from_utf8_lossy(&call.target);
                functions.fcall(&name, keys, args, read_only, instance.output_limit)
            }
            Family::Script { by_sha, read_only } => {
                let (sha, code) = if by_sha {
                    (
                        String::from_utf8_lossy(&call.target).to_ascii_lowercase(),
                        None,
                    )
                } else {
                    (
                        crate::functions::script_sha(&call.target),
                        Some(call.target.clone()),
                    )
                };
                functions.eval(sha, code, keys, args, read_only, instance.output_limit)
            }
        }
    }

    /// Runs the call inside `txn` (which holds its keys); the reply, with the session marked
    /// when it wrote.
    async fn run_in(
        self,
        call: &Call,
        txn: &mut Transaction<'_>,
        instance: &Instance,
        session: &mut Session,
    ) -> Frame {
        let outcome = match self.start(call, instance) {
            Ok(run) => function_exec::serve(run, txn, instance, &call.keys).await,
            Err(outcome) => outcome,
        };
        session.uncommitted |= outcome.wrote && !outcome.stopped;
        outcome.reply
    }

    /// Runs the call on a transaction of its own over its declared keys, and commits it.
    /// The engine first catches up with the registry, so no key is locked while it reads.
    async fn run(self, call: &Call, instance: &Instance, session: &mut Session) -> Frame {
        if let Err(e) = instance.functions.catch_up(false).await {
            return Frame::Error(e);
        }
        let mut txn = instance.db.transaction(&call.keys).await;
        let reply = self.run_in(call, &mut txn, instance, session).await;
        match txn.commit().await {
            Ok(()) => reply,
            Err(e) => store_error(e),
        }
    }
}

const fn spec(name: &'static str) -> CommandSpec {
    CommandSpec {
        name,
        arity: -3,
        // Not WRITE: whether a call writes is known when it ran (the session is marked then).
        flags: Flags::NOSCRIPT.with(Flags::STALE),
        // Declared by count (`declared_keys`): routed by `Command::parse_routed`.
        keys: Keys::NONE,
        reveals_data: true,
    }
}

/// FCALL (`RO = false`) and FCALL_RO.
pub struct Fcall<const RO: bool>(Call);

macro_rules! function_command {
    ($ty:ty, $name:literal, $family:expr) => {
        impl Declared<'_> for $ty {
            const SPEC: CommandSpec = spec($name);

            fn parse(parse: &mut Parse<'_>) -> Result<Self, ParseError> {
                parse_call(parse).map(Self)
            }

            async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
                $family.run(&self.0, instance, session).await
            }

            async fn apply_in(
                self,
                txn: &mut Transaction<'_>,
                instance: &Instance,
                session: &mut Session,
            ) -> Frame {
                $family.run_in(&self.0, txn, instance, session).await
            }
        }
    };
}

/// EVAL (`SHA = false`: the target is the script) and EVALSHA (the target is its SHA-1),
/// each also read-only (`RO`).
pub struct Eval<const SHA: bool, const RO: bool>(Call);

function_command!(Fcall<false>, "fcall", Family::Function { read_only: false });
function_command!(
    Fcall<true>,
    "fcall_ro",
    Family::Function { read_only: true }
);
function_command!(
    Eval<false, false>,
    "eval",
    Family::Script {
        by_sha: false,
        read_only: false
    }
);
function_command!(
    Eval<false, true>,
    "eval_ro",
    Family::Script {
        by_sha: false,
        read_only: true
    }
);
function_command!(
    Eval<true, false>,
    "evalsha",
    Family::Script {
        by_sha: true,
        read_only: false
    }
);
function_command!(
    Eval<true, true>,
    "evalsha_ro",
    Family::Script {
        by_sha: true,
        read_only: true
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_keys_follow_numkeys() {
        let args: Vec<Bytes> = ["fcall", "f", "2", "a", "b", "x"]
            .iter()
            .map(|s| Bytes::from(s.to_string()))
            .collect();
        assert_eq!(declared_keys(&args), &args[3..5]);
        let bad: Vec<Bytes> = ["fcall", "f", "9", "a"]
            .iter()
            .map(|s| Bytes::from(s.to_string()))
            .collect();
        assert!(declared_keys(&bad).is_empty());
    }
}
