//! FCALL / FCALL_RO and EVAL / EVALSHA / EVAL_RO / EVALSHA_RO: `name|script numkeys key...
//! arg...`. The keys are declared by count, so a cluster node routes on them (all in one
//! slot, `-CROSSSLOT` otherwise; `MOVED` when not owned) before the call runs, and a function
//! may touch no other key (`functions::exec`). A call that wrote marks the session: its reply
//! waits for the one commit that makes the writes durable.

use super::{CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::functions::vm::Outcome;
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

/// The reply, with the session marked when the call wrote.
fn finish(outcome: Outcome, session: &mut Session) -> Frame {
    session.uncommitted |= outcome.wrote;
    outcome.reply
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

impl<const RO: bool> Fcall<RO> {
    async fn run(self, instance: &Instance, session: &mut Session) -> Frame {
        let Call { target, keys, args } = self.0;
        let name = String::from_utf8_lossy(&target);
        let outcome = instance
            .functions
            .fcall(&name, keys, args, RO, instance.output_limit)
            .await;
        finish(outcome, session)
    }
}

impl Declared<'_> for Fcall<false> {
    const SPEC: CommandSpec = spec("fcall");

    fn parse(parse: &mut Parse<'_>) -> Result<Self, ParseError> {
        parse_call(parse).map(Fcall)
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        self.run(instance, session).await
    }
}

impl Declared<'_> for Fcall<true> {
    const SPEC: CommandSpec = spec("fcall_ro");

    fn parse(parse: &mut Parse<'_>) -> Result<Self, ParseError> {
        parse_call(parse).map(Fcall)
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        self.run(instance, session).await
    }
}

/// EVAL (`SHA = false`: the target is the script) and EVALSHA (the target is its SHA-1),
/// each also read-only (`RO`).
pub struct Eval<const SHA: bool, const RO: bool>(Call);

impl<const SHA: bool, const RO: bool> Eval<SHA, RO> {
    async fn run(self, instance: &Instance, session: &mut Session) -> Frame {
        let Call { target, keys, args } = self.0;
        let (sha, code) = if SHA {
            (String::from_utf8_lossy(&target).to_ascii_lowercase(), None)
        } else {
            (crate::functions::script_sha(&target), Some(target))
        };
        let outcome = instance
            .functions
            .eval(sha, code, keys, args, RO, instance.output_limit)
            .await;
        finish(outcome, session)
    }
}

macro_rules! eval_command {
    ($sha:literal, $ro:literal, $name:literal) => {
        impl Declared<'_> for Eval<$sha, $ro> {
            const SPEC: CommandSpec = spec($name);

            fn parse(parse: &mut Parse<'_>) -> Result<Self, ParseError> {
                parse_call(parse).map(Eval)
            }

            async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
                self.run(instance, session).await
            }
        }
    };
}

eval_command!(false, false, "eval");
eval_command!(false, true, "eval_ro");
eval_command!(true, false, "evalsha");
eval_command!(true, true, "evalsha_ro");

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
