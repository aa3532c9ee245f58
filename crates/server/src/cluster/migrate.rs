//! Moving a slot range to another node, on the source (docs/cluster.md "Moving slots"). This
//! is Dragonfly's stream-then-flip, not Redis's MIGRATING/IMPORTING + ASK: the source owns
//! and serves the range, every key of it, until one etcd transaction gives it to the target,
//! so a crash of either side before that leaves the source with everything and the target's
//! partial copy invisible (and wiped on the next attempt), and clients only ever see MOVED.
//!
//! A migration is declared in the slot map (`mantle cluster move` begins it); the source
//! notices it in its watch and drives it, again after a restart:
//!
//! 1. `CLUSTER IMPORT BEGIN` on the target, which drops anything it held of the range;
//! 2. the store notes writes to the range from now on, then one iterator (one point in time)
//!    streams the range to the target in pipelined batches;
//! 3. keys written meanwhile are sent again, current value or deletion, in rounds until few
//!    are left;
//! 4. the range is paused (its requests wait), the last written keys are sent, and the slot
//!    map flips ownership in one compare-and-swap transaction;
//! 5. `CLUSTER IMPORT DONE` tells the target to serve at once, requests waiting here are
//!    answered `-MOVED` to the target, and the range is deleted here with `delete_range` and
//!    dropped from the cache.
//!
//! If the target leaves the cluster before the flip, the migration is aborted (the source
//! keeps the range); other failures are retried from step 1.

use super::{ClusterNode, Redirect};
use bytes::Bytes;
use cluster::{ClusterError, MapError, NodeId, SlotMap, Versioned};
use slots::SlotRange;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use store::upstream::wire::{Conn, Reply, Target};
use store::{Record, SlotData, Storage};

/// Bytes of records per pipelined batch sent to the target.
const BATCH_BYTES: usize = 256 * 1024;
/// Records per `CLUSTER IMPORT PUTS|DELS` command: one store write on the target, so the
/// copy keeps up with writers however busy the target is (one command per key did not).
const BATCH_KEYS: usize = 256;
/// Bytes of values per `CLUSTER IMPORT PUTS` command.
const COMMAND_BYTES: usize = 64 * 1024;
/// Written keys few enough to send while the range is paused.
const PAUSE_AT: usize = 512;
/// Rounds of re-sending before pausing anyway (writers faster than the copy).
const MAX_ROUNDS: usize = 20;
/// Time spent re-sending written keys before pausing anyway: with writers as fast as the
/// copy the rounds would not shrink, so the migration's length must not depend on them.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(5);
/// Attempts at the pause (each after one more round of re-sending) before the whole
/// migration is retried.
const PAUSE_TRIES: usize = 5;
/// Bound on each exchange with the target.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(20);
const RETRY_AFTER: Duration = Duration::from_millis(500);
/// Longest wait for the requests routed before a pause to finish.
const PAUSE_LIMIT: Duration = Duration::from_secs(2);

/// Ranges this node is moving away now.
#[derive(Default)]
pub struct Running(Mutex<HashSet<SlotRange>>);

impl ClusterNode {
    /// Starts driving every migration away from this node that is not running yet (called
    /// on every change of the view, so also after a restart).
    pub(crate) fn follow_migrations(self: &Arc<Self>) {
        self.cleanup_imports();
        let Some(map) = self.current_map() else {
            return;
        };
        for m in &map.value.migrations {
            if m.from != self.id {
                continue;
            }
            if !super::lock(&self.migrations.0).insert(m.range) {
                continue;
            }
            let node = Arc::clone(self);
            let (range, to) = (m.range, m.to.clone());
            tokio::spawn(async move {
                node.drive(range, to).await;
                super::lock(&node.migrations.0).remove(&range);
            });
        }
    }

    async fn drive(self: &Arc<Self>, range: SlotRange, to: NodeId) {
        loop {
            let declared = self.current_map().is_some_and(|m| {
                m.value
                    .migrations
                    .iter()
                    .any(|x| x.range == range && x.from == self.id && x.to == to)
            });
            if !declared {
                return;
            }
            let Some(addr) = self.watch.view().members.get(&to).map(|m| m.addr.clone()) else {
                store::log_line!(
                    "mantle: cluster: {to} left the cluster: migration of slots {range} aborted, they stay here"
                );
                match self.plane.update(|map| map.abort_migration(range)).await {
                    Ok(map) => {
                        self.adopt(map);
                        return;
                    }
                    Err(e) => {
                        store::log_line!("mantle: cluster: aborting migration {range}: {e}");
                        tokio::time::sleep(RETRY_AFTER).await;
                        continue;
                    }
                }
            };
            let started = Instant::now();
            match self.migrate_once(range, &to, &addr).await {
                Ok(keys) => {
                    store::log_line!(
                        "mantle: cluster: slots {range} moved to {to} ({keys} keys) in {:.3}s",
                        started.elapsed().as_secs_f64()
                    );
                    return;
                }
                Err(e) => {
                    store::log_line!(
                        "mantle: cluster: moving slots {range} to {to}: {e}; retrying"
                    );
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }
    }

    /// One attempt; returns the number of keys copied.
    async fn migrate_once(&self, range: SlotRange, to: &NodeId, addr: &str) -> Result<u64, String> {
        let mut link = Link::open(addr, self.password.as_deref()).await?;
        let (start, end) = (range.start.to_string(), range.end.to_string());
        link.call_ok(&[
            b"CLUSTER",
            b"IMPORT",
            b"BEGIN",
            start.as_bytes(),
            end.as_bytes(),
            self.id.as_str().as_bytes(),
        ])
        .await?;
        // A pure cache tier (no slot data): the data is upstream, only ownership moves.
        let rocks = self.db.store().slot_data();
        let mut copied = 0u64;
        let _untrack = Untrack(rocks, range);
        let mut pending = Vec::new();
        if let Some(rocks) = rocks {
            rocks.track(range);
            let mut stream = rocks.stream_range(range, BATCH_BYTES);
            while let Some(batch) = stream.recv().await {
                let batch = batch.map_err(|e| e.to_string())?;
                copied += batch.len() as u64;
                link.put_all(batch.iter().map(|(k, r)| (k, Some(r))))
                    .await?;
            }
            pending = rocks.take_dirty(range);
            let catching_up = Instant::now();
            for _ in 0..MAX_ROUNDS {
                if pending.len() <= PAUSE_AT || catching_up.elapsed() > CATCH_UP_LIMIT {
                    break;
                }
                self.send_current(&mut link, &pending).await?;
                pending = rocks.take_dirty(range);
            }
        }
        // Still declared? An operator may have aborted it meanwhile.
        if !self
            .current_map()
            .is_some_and(|m| m.value.migrations.iter().any(|x| x.range == range))
        {
            return Err("the migration was aborted".into());
        }
        store::log_line!(
            "mantle: cluster: slots {range}: {copied} keys copied to {to}, {} written meanwhile; pausing",
            pending.len()
        );
        // A pause that cannot drain the requests in flight in time lets them go; the keys
        // they wrote are sent and the pause tried again, not the whole copy.
        let mut tries = 1;
        while let Err(e) = self.pause(range, PAUSE_LIMIT).await {
            if tries >= PAUSE_TRIES {
                return Err(format!("pausing slots {range}: {e}"));
            }
            tries += 1;
            store::log_line!(
                "mantle: cluster: pausing slots {range}: {e}; sending the latest writes and pausing again"
            );
            if let Some(rocks) = rocks {
                pending.extend(rocks.take_dirty(range));
                self.send_current(&mut link, &pending).await?;
                pending = rocks.take_dirty(range);
            }
        }
        let resume = Resume(self, range);
        if let Some(rocks) = rocks {
            pending.extend(rocks.take_dirty(range));
            pending.sort_unstable();
            pending.dedup();
            self.send_current(&mut link, &pending).await?;
        }
        let map = self.flip(range, to).await?;
        let epoch = map.value.epoch.to_string();
        // The target serves from now on; telling it saves clients a round of redirections
        // while its watch catches up (it would get there alone).
        if let Err(e) = link
            .call_ok(&[
                b"CLUSTER",
                b"IMPORT",
                b"DONE",
                start.as_bytes(),
                end.as_bytes(),
                epoch.as_bytes(),
            ])
            .await
        {
            store::log_line!("mantle: cluster: telling {to} it owns slots {range}: {e}");
        }
        self.adopt(map);
        drop(resume);
        drop(_untrack);
        self.wipe(range);
        Ok(copied)
    }

    /// Sends each key's current record, or its deletion.
    async fn send_current(&self, link: &mut Link, keys: &[Bytes]) -> Result<(), String> {
        let Some(rocks) = self.db.store().slot_data() else {
            return Ok(());
        };
        for chunk in keys.chunks(BATCH_KEYS) {
            let mut records = Vec::with_capacity(chunk.len());
            for key in chunk {
                records.push((key, rocks.stored(key).map_err(|e| e.to_string())?));
            }
            link.put_all(records.iter().map(|(k, r)| (*k, r.as_ref())))
                .await?;
        }
        Ok(())
    }

    /// Gives the range to `to` in one transaction on the slot map. Until it is known to have
    /// happened or not (etcd unreachable), the range stays paused.
    async fn flip(&self, range: SlotRange, to: &NodeId) -> Result<Versioned<SlotMap>, String> {
        loop {
            match self.plane.update(|map| map.finish_migration(range)).await {
                Ok(map) => return Ok(map),
                Err(ClusterError::Map(MapError::NoSuchMigration { .. })) => {
                    // Done by an attempt whose reply was lost, or aborted by an operator.
                    let map = self
                        .plane
                        .slot_map()
                        .await
                        .map_err(|e| e.to_string())?
                        .ok_or("the slot map disappeared")?;
                    return if map.value.owner(range.start) == Some(to) {
                        Ok(map)
                    } else {
                        Err("the migration was aborted".into())
                    };
                }
                Err(e) => {
                    store::log_line!(
                        "mantle: cluster: flipping slots {range} to {to}: {e}; retrying (the range waits)"
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// Deletes this node's copy of a range it does not serve, from the store and the cache.
    pub(crate) fn wipe(&self, range: SlotRange) {
        match self.db.store().slot_data() {
            Some(rocks) => match rocks.delete_range(range) {
                Ok(keys) => self.db.forget_deleted(&keys),
                Err(e) => store::log_line!("mantle: cluster: deleting slots {range}: {e}"),
            },
            // The data is upstream; only what this node cached of the range goes.
            None => {
                self.db
                    .forget_cached_where(|key| range.contains(slots::key_slot(key)));
            }
        }
    }
}

/// Unpauses the range when the attempt ends, however it ends.
struct Resume<'a>(&'a ClusterNode, SlotRange);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.resume(self.1);
    }
}

struct Untrack<'a>(Option<&'a dyn SlotData>, SlotRange);

impl Drop for Untrack<'_> {
    fn drop(&mut self) {
        if let Some(rocks) = self.0 {
            rocks.untrack(self.1);
        }
    }
}

/// A connection to the target for the import commands, pipelined per batch.
struct Link {
    conn: Conn,
}

impl Link {
    async fn open(addr: &str, password: Option<&str>) -> Result<Link, String> {
        let target = target_of(addr, password)?;
        let conn = tokio::time::timeout(
            EXCHANGE_TIMEOUT,
            Conn::open(&target, Duration::from_secs(5), u64::MAX),
        )
        .await
        .map_err(|_| format!("no connection to {addr}"))?
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
        Ok(Link { conn })
    }

    async fn call_ok(&mut self, args: &[&[u8]]) -> Result<(), String> {
        self.conn.push(args);
        self.replies(1).await
    }

    /// Sends puts (`Some`) and deletions (`None`), many per command, then waits for every
    /// reply. Each key appears once, so the order of puts and deletions does not matter.
    async fn put_all<'r>(
        &mut self,
        records: impl Iterator<Item = (&'r Bytes, Option<&'r Record>)>,
    ) -> Result<(), String> {
        let mut commands = 0;
        let mut puts: Vec<(&Bytes, &Record)> = Vec::with_capacity(BATCH_KEYS);
        let mut put_bytes = 0;
        let mut dels: Vec<&Bytes> = Vec::with_capacity(BATCH_KEYS);
        for (key, record) in records {
            match record {
                Some(r) => {
                    put_bytes += key.len() + r.value.len();
                    puts.push((key, r));
                    if puts.len() >= BATCH_KEYS || put_bytes >= COMMAND_BYTES {
                        self.push_puts(&puts);
                        commands += 1;
                        puts.clear();
                        put_bytes = 0;
                    }
                }
                None => {
                    dels.push(key);
                    if dels.len() >= BATCH_KEYS {
                        self.push_dels(&dels);
                        commands += 1;
                        dels.clear();
                    }
                }
            }
        }
        if !puts.is_empty() {
            self.push_puts(&puts);
            commands += 1;
        }
        if !dels.is_empty() {
            self.push_dels(&dels);
            commands += 1;
        }
        self.replies(commands).await
    }

    /// `CLUSTER IMPORT PUTS key expires_at_ms value [key expires_at_ms value ...]`.
    fn push_puts(&mut self, puts: &[(&Bytes, &Record)]) {
        let expiries: Vec<String> = puts
            .iter()
            .map(|(_, r)| r.expires_at_ms.to_string())
            .collect();
        let mut args: Vec<&[u8]> = Vec::with_capacity(3 + 3 * puts.len());
        args.extend_from_slice(&[b"CLUSTER", b"IMPORT", b"PUTS"]);
        for ((key, record), expires) in puts.iter().zip(&expiries) {
            args.push(key);
            args.push(expires.as_bytes());
            args.push(&record.value);
        }
        self.conn.push(&args);
    }

    /// `CLUSTER IMPORT DELS key [key ...]`.
    fn push_dels(&mut self, keys: &[&Bytes]) {
        let mut args: Vec<&[u8]> = Vec::with_capacity(3 + keys.len());
        args.extend_from_slice(&[b"CLUSTER", b"IMPORT", b"DELS"]);
        args.extend(keys.iter().map(|k| k.as_ref()));
        self.conn.push(&args);
    }

    async fn replies(&mut self, n: usize) -> Result<(), String> {
        let conn = &mut self.conn;
        tokio::time::timeout(EXCHANGE_TIMEOUT, async move {
            conn.flush().await.map_err(|e| e.to_string())?;
            let mut first_error = None;
            for _ in 0..n {
                if let Reply::Error(e) = conn.read_reply().await.map_err(|e| e.to_string())? {
                    first_error.get_or_insert(e);
                }
            }
            match first_error {
                Some(e) => Err(format!("the target refused: {e}")),
                None => Ok(()),
            }
        })
        .await
        .map_err(|_| "the target did not answer in time".to_string())?
    }
}

pub(crate) fn target_of(addr: &str, password: Option<&str>) -> Result<Target, String> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("bad node address {addr}"))?;
    Ok(Target {
        host: host.to_string(),
        port: port
            .parse()
            .map_err(|_| format!("bad node address {addr}"))?,
        username: None,
        password: password.map(str::to_string),
        db: 0,
    })
}

/// How long a request waits for a paused range before it is told to retry.
pub const PAUSE_WAIT: Duration = Duration::from_secs(5);

/// Waits while the request's slot is paused; the final answer.
pub async fn settle<T>(mut route: impl FnMut() -> Result<T, Redirect>) -> Result<T, Redirect> {
    let deadline = Instant::now() + PAUSE_WAIT;
    loop {
        match route() {
            Err(Redirect::Wait) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            other => return other,
        }
    }
}
