//! The shared log's commands (docs/shared-log.md). Each names its key first, so any
//! cluster-aware client routes it to the node that owns it:
//! - the storage contract on one object (`crate::log::storage`): `ZLOG.WRITE obj epoch pos
//!   data`, `ZLOG.READ obj epoch pos`, `ZLOG.FILL`, `ZLOG.TRIM`, `ZLOG.TRIMTO obj epoch pos`,
//!   `ZLOG.SEAL obj epoch`;
//! - the sequencer of one log (`crate::log::sequencer`), on the node owning the log name's
//!   slot: `ZLOG.NEXT log [count]`, `ZLOG.LEASE log [want]` (positions as the log's lease
//!   policy grants them, `crate::log::lease`), `ZLOG.RETURN log epoch from end` (a lease's
//!   unused positions given back), `ZLOG.TAIL log`, `ZLOG.INIT log epoch tail`,
//!   `ZLOG.OPEN log`.

use super::{committed, txn_error, CommandSpec, Declared, Flags, Keys};
use crate::db::TxnError;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::log::sequencer::{InstallError, MAX_BATCH};
use crate::log::storage::{bad_object, entry_key, Object, Refusal, Slot, MAX_TRIM_SPAN};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;
use policy::Lease;

const fn spec(name: &'static str, arity: i64, flags: Flags) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        keys: Keys::ONE,
        reveals_data: true,
    }
}

const STORE_WRITE: Flags = Flags::WRITE.with(Flags::DENYOOM).with(Flags::FAST);
const STORE_READ: Flags = Flags::READONLY.with(Flags::FAST);
/// Sequencer commands touch no stored data: only the node's memory.
const SEQUENCER: Flags = Flags::FAST;

fn position(parse: &mut Parse<'_>) -> Result<u64, ParseError> {
    u64::try_from(parse.next_int()?).map_err(|_| ParseError::NotInteger)
}

fn refused(refusal: Refusal) -> Frame {
    Frame::Error(refusal.to_string())
}

/// An object, an epoch and a position: what every per-position storage request names.
pub struct At {
    obj: Bytes,
    epoch: u64,
    pos: u64,
}

impl At {
    fn parse(parse: &mut Parse<'_>) -> Result<At, ParseError> {
        Ok(At {
            obj: parse.next_bytes()?,
            epoch: position(parse)?,
            pos: position(parse)?,
        })
    }
}

/// Which per-position operation to run.
enum Op {
    Write(Bytes),
    Read,
    Fill,
    Trim,
}

/// Runs `op` at `at` in one transaction over the object's header and the entry.
async fn on_entry(instance: &Instance, at: At, op: Op) -> Frame {
    let Some(entry) = entry_key(&at.obj, at.pos) else {
        return refused(bad_object());
    };
    let keys = [at.obj.clone(), entry.clone()];
    let mut txn = instance.db.transaction(&keys).await;
    let mut object = Object::new(&mut txn, &at.obj);
    let outcome: Result<Result<Frame, Refusal>, TxnError> = match op {
        Op::Write(data) => object
            .write(at.epoch, at.pos, &entry, &data)
            .await
            .map(|r| r.map(|()| Frame::ok())),
        Op::Fill => object
            .fill(at.epoch, at.pos, &entry)
            .await
            .map(|r| r.map(|()| Frame::ok())),
        Op::Trim => object
            .trim(at.epoch, at.pos, &entry)
            .await
            .map(|r| r.map(|()| Frame::ok())),
        Op::Read => object.read(at.epoch, at.pos, &entry).await.map(|r| {
            r.and_then(|slot| match slot {
                Slot::Data(data) => Ok(Frame::Bulk(data)),
                Slot::Empty => Ok(Frame::Null),
                Slot::Filled => Err(Refusal::Filled),
                Slot::Trimmed => Err(Refusal::Trimmed),
            })
        }),
    };
    let reply = match outcome {
        Ok(Ok(reply)) => reply,
        Ok(Err(refusal)) => refused(refusal),
        Err(e) => txn_error(e),
    };
    committed(txn, reply).await
}

macro_rules! entry_command {
    ($ty:ident, $name:literal, $arity:literal, $flags:expr, |$at:ident, $parse:ident| $op:expr) => {
        pub struct $ty(At, Op);

        impl Declared<'_> for $ty {
            const SPEC: CommandSpec = spec($name, $arity, $flags);

            fn parse($parse: &mut Parse<'_>) -> Result<$ty, ParseError> {
                let $at = At::parse($parse)?;
                let op = $op;
                $parse.finish()?;
                Ok($ty($at, op))
            }

            async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
                on_entry(instance, self.0, self.1).await
            }
        }
    };
}

entry_command!(Write, "zlog.write", 5, STORE_WRITE, |at, parse| Op::Write(
    parse.next_bytes()?
));
entry_command!(Read, "zlog.read", 4, STORE_READ, |at, parse| Op::Read);
entry_command!(Fill, "zlog.fill", 4, STORE_WRITE, |at, parse| Op::Fill);
entry_command!(Trim, "zlog.trim", 4, STORE_WRITE, |at, parse| Op::Trim);

/// ZLOG.TRIMTO obj epoch pos: every position of the object below `pos` trimmed, their
/// entries deleted (at most [`MAX_TRIM_SPAN`] positions past the current horizon per call).
pub struct TrimTo(At);

impl Declared<'_> for TrimTo {
    const SPEC: CommandSpec = spec("zlog.trimto", 4, STORE_WRITE);

    fn parse(parse: &mut Parse<'_>) -> Result<TrimTo, ParseError> {
        At::parse(parse).map(TrimTo)
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        let at = self.0;
        if entry_key(&at.obj, 0).is_none() {
            return refused(bad_object());
        }
        let from = {
            let keys = [at.obj.clone()];
            let mut txn = instance.db.transaction(&keys).await;
            match Object::new(&mut txn, &at.obj).peek().await {
                Ok(header) => header.trimmed,
                Err(e) => return txn_error(e),
            }
        };
        if at.pos.saturating_sub(from) > MAX_TRIM_SPAN {
            return Frame::err(format!(
                "ZLOG.TRIMTO passes at most {MAX_TRIM_SPAN} positions per call (the horizon \
                 is {from}): trim in steps"
            ));
        }
        let mut keys = vec![at.obj.clone()];
        keys.extend((from..at.pos).filter_map(|pos| entry_key(&at.obj, pos)));
        let mut txn = instance.db.transaction(&keys).await;
        let outcome = Object::new(&mut txn, &at.obj)
            .trim_to(at.epoch, at.pos, &keys[1..])
            .await;
        let reply = match outcome {
            Ok(Ok(())) => Frame::ok(),
            Ok(Err(refusal)) => refused(refusal),
            // A concurrent TRIMTO lowered nothing, but it may have moved the horizon so that
            // this span misses keys: the store's error or the undeclared key says so.
            Err(e) => txn_error(e),
        };
        committed(txn, reply).await
    }
}

/// ZLOG.SEAL obj epoch: installs `epoch` if newer; the highest position touched (-1: none).
pub struct Seal {
    obj: Bytes,
    epoch: u64,
}

impl Declared<'_> for Seal {
    const SPEC: CommandSpec = spec("zlog.seal", 3, STORE_WRITE);

    fn parse(parse: &mut Parse<'_>) -> Result<Seal, ParseError> {
        Ok(Seal {
            obj: parse.next_bytes()?,
            epoch: position(parse)?,
        })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        let keys = [self.obj.clone()];
        let mut txn = instance.db.transaction(&keys).await;
        let reply = match Object::new(&mut txn, &self.obj).seal(self.epoch).await {
            Ok(Ok(max)) => Frame::Integer(max),
            Ok(Err(refusal)) => refused(refusal),
            Err(e) => txn_error(e),
        };
        committed(txn, reply).await
    }
}

/// Whether `spec` is a sequencer command: routed by `ClusterNode::route_sequencer`, which
/// lets a dead owner's successor answer at once (docs/shared-log.md, "Sequencer takeover").
pub fn is_sequencer(spec: &CommandSpec) -> bool {
    matches!(
        spec.name,
        "zlog.next" | "zlog.lease" | "zlog.return" | "zlog.tail" | "zlog.init" | "zlog.open"
    )
}

fn no_sequencer() -> Frame {
    Frame::Error(
        "NOSEQ this node runs no sequencer for the log: seal its storage at a newer epoch, \
         then ZLOG.INIT (the zlog client does this)"
            .into(),
    )
}

fn epoch_and(epoch: u64, position: u64) -> Frame {
    Frame::Pair(epoch as i64, position as i64)
}

/// ZLOG.NEXT log [count]: reserves `count` (default 1) positions; `[epoch, first]`.
pub struct Next<'a> {
    log: &'a [u8],
    count: u64,
}

impl<'a> Declared<'a> for Next<'a> {
    const SPEC: CommandSpec = spec("zlog.next", -2, SEQUENCER);

    fn parse(parse: &mut Parse<'a>) -> Result<Next<'a>, ParseError> {
        let log = parse.next_slice()?;
        let count = match parse.remaining() {
            0 => 1,
            _ => position(parse)?,
        };
        parse.finish()?;
        if count == 0 || count > MAX_BATCH {
            return Err(ParseError::Other(format!(
                "ZLOG.NEXT count must be 1..={MAX_BATCH}"
            )));
        }
        Ok(Next { log, count })
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        let (cached, client) = (&mut session.sequencer, session.id);
        match instance
            .sequencers
            .next_for(cached, self.log, self.count, client)
        {
            Some((epoch, first)) => epoch_and(epoch, first),
            None => no_sequencer(),
        }
    }
}

/// ZLOG.LEASE log [want]: positions as the log's lease policy grants them,
/// `[epoch, first, count, ms]`: use `first .. first+count-1`, within `ms` milliseconds when
/// `ms` is not 0. `want` (default 1, at most 65,536) is what the client expects to use within
/// a delay lease; round trips grant 1 and a quota its `n` whatever it says.
pub struct LeaseNext {
    log: Bytes,
    want: u64,
}

impl Declared<'_> for LeaseNext {
    const SPEC: CommandSpec = spec("zlog.lease", -2, SEQUENCER);

    fn parse(parse: &mut Parse<'_>) -> Result<LeaseNext, ParseError> {
        let log = parse.next_bytes()?;
        let want = match parse.remaining() {
            0 => 1,
            _ => position(parse)?,
        };
        parse.finish()?;
        if want == 0 || want > policy::MAX_LEASE_POSITIONS {
            return Err(ParseError::Other(format!(
                "ZLOG.LEASE want must be 1..={}",
                policy::MAX_LEASE_POSITIONS
            )));
        }
        Ok(LeaseNext { log, want })
    }

    async fn apply(self, instance: &Instance, session: &mut Session) -> Frame {
        let (cached, client) = (&mut session.sequencer, session.id);
        match instance
            .sequencers
            .lease_for(cached, &self.log, self.want, client)
        {
            Some(grant) => Frame::Array(vec![
                Frame::Integer(grant.epoch as i64),
                Frame::Integer(grant.first as i64),
                Frame::Integer(grant.count as i64),
                Frame::Integer(grant.ms as i64),
            ]),
            None => no_sequencer(),
        }
    }
}

/// ZLOG.RETURN log epoch from end: gives back the unused positions `from .. end-1` of a
/// lease granted at `epoch`; 1 if the sequencer took them back (they are handed out again),
/// 0 if it could not (someone reserved positions after them, or the epoch moved on: the
/// client fills them).
pub struct Return {
    log: Bytes,
    epoch: u64,
    from: u64,
    end: u64,
}

impl Declared<'_> for Return {
    const SPEC: CommandSpec = spec("zlog.return", 5, SEQUENCER);

    fn parse(parse: &mut Parse<'_>) -> Result<Return, ParseError> {
        let log = parse.next_bytes()?;
        let (epoch, from, end) = (position(parse)?, position(parse)?, position(parse)?);
        parse.finish()?;
        Ok(Return {
            log,
            epoch,
            from,
            end,
        })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        match instance
            .sequencers
            .give_back(&self.log, self.epoch, self.from, self.end)
        {
            Some(taken) => Frame::Integer(i64::from(taken)),
            None => no_sequencer(),
        }
    }
}

/// ZLOG.TAIL log: `[epoch, position the next append gets]`, reserving nothing.
pub struct Tail {
    log: Bytes,
}

impl Declared<'_> for Tail {
    const SPEC: CommandSpec = spec("zlog.tail", 2, SEQUENCER);

    fn parse(parse: &mut Parse<'_>) -> Result<Tail, ParseError> {
        Ok(Tail {
            log: parse.next_bytes()?,
        })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        match instance.sequencers.tail(&self.log) {
            Some((epoch, tail)) => epoch_and(epoch, tail),
            None => no_sequencer(),
        }
    }
}

/// ZLOG.INIT log epoch tail: starts the log's sequencer, once its storage is sealed at
/// `epoch` and `tail` is past every position the seal reported.
pub struct Init {
    log: Bytes,
    epoch: u64,
    tail: u64,
}

impl Declared<'_> for Init {
    const SPEC: CommandSpec = spec("zlog.init", 4, SEQUENCER);

    fn parse(parse: &mut Parse<'_>) -> Result<Init, ParseError> {
        Ok(Init {
            log: parse.next_bytes()?,
            epoch: position(parse)?,
            tail: position(parse)?,
        })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        match instance
            .sequencers
            .install(&self.log, self.epoch, self.tail)
        {
            Ok(()) => Frame::ok(),
            Err(InstallError::Stale(running)) => refused(Refusal::Stale(running)),
            Err(InstallError::Full) => Frame::err(format!(
                "this node already sequences {} logs",
                crate::log::sequencer::MAX_LOGS
            )),
        }
    }
}

/// ZLOG.OPEN log: the layout a client needs (`replicas`, `stripes`) and the log's sequencer
/// here (`epoch` 0 and `tail` -1 when there is none yet).
pub struct Open {
    log: Bytes,
}

impl Declared<'_> for Open {
    const SPEC: CommandSpec = spec("zlog.open", 2, SEQUENCER);

    fn parse(parse: &mut Parse<'_>) -> Result<Open, ParseError> {
        Ok(Open {
            log: parse.next_bytes()?,
        })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        let (epoch, tail) = match instance.sequencers.tail(&self.log) {
            Some((epoch, tail)) => (epoch as i64, tail as i64),
            None => (0, -1),
        };
        let field = |name: &'static str, value: i64| (Frame::simple(name), Frame::Integer(value));
        let text = |name: &'static str, value: String| {
            (Frame::simple(name), Frame::Bulk(Bytes::from(value)))
        };
        let (mode, value) = match instance.sequencers.lease(&self.log) {
            Some(Lease::Delay { ms }) => ("delay", ms),
            Some(Lease::Quota { n }) => ("quota", n),
            Some(Lease::RoundTrip) | None => ("roundtrip", 0),
        };
        let status = instance.sequencers.lease_status();
        Frame::Map(vec![
            field("replicas", i64::from(instance.config.log_replicas)),
            field("stripes", i64::from(crate::log::STRIPES)),
            field("epoch", epoch),
            field("tail", tail),
            text("lease", mode.to_string()),
            field("lease_value", value as i64),
            text("lease_policy", status.policy),
            field("lease_failures", status.failures as i64),
            text("lease_error", status.last_error),
        ])
    }
}
