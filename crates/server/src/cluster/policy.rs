//! A cluster node's policy registry and central log (`--cluster`): the registry's
//! [`Shared`] part on etcd (`cluster::PolicyStore`, `cluster::CentralLog`), and the task
//! that tells the engine's thread whenever another node changed it, so a `POLICY LOAD|USE|
//! ROLLBACK|PARAM` on any node runs on every node.
//!
//! A shared record that cannot be read back (written by an older release, or damaged in
//! etcd by hand) never stops a node: every reader skips it, `POLICY UNREADABLE` lists it as
//! `cluster:<key>` and `POLICY UNREADABLE DROP cluster:<key>` deletes it. Versions are
//! pruned to the loading node's `--policy-keep-versions` per name, in a transaction that
//! fails if the activation stack changed meanwhile, and `POLICY LIST` reads the versions'
//! listings (`m/`), not their sources.
//!
//! The engine's thread calls in synchronously; each call runs on the server's runtime under
//! the control plane's timeout, so an unreachable etcd turns a push into a clear error
//! instead of a hang, and the node keeps running its current version.

use crate::cluster::{ClusterNode, CENTRAL_LOG_CAPACITY};
use crate::live::journal::Event;
use crate::live::registry::{Shared, VersionRecord, VersionRef, MAX_HISTORY};
use cluster::{CentralLog, ClusterError, LogQueue, PolicyStore, PolicyWatch, SwapRefused};
use policy::{Params, Scalar};
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;
use store::StoreError;

/// How long `POLICY LOG` waits for this node's queued events to reach etcd.
const FLUSH_WAIT: Duration = Duration::from_secs(1);
/// Attempts at applying a push or rollback to an activation stack other nodes keep changing.
const STACK_ATTEMPTS: usize = 16;
/// Attempts at pruning while other nodes keep changing the activation stack.
const PRUNE_ATTEMPTS: usize = 8;

pub struct EtcdRegistry {
    store: PolicyStore,
    log: CentralLog,
    queue: LogQueue,
    runtime: tokio::runtime::Handle,
    /// The activation stack as last read or written, and its etcd revision: what
    /// `set_history` compares against.
    seen: Mutex<(Vec<VersionRef>, i64)>,
    balance: crate::cluster::balance::Balance,
    /// This node's id: its own settings (`node_capacity`) are kept under it.
    node: String,
}

fn refused(e: ClusterError) -> StoreError {
    StoreError(format!(
        "cluster policy registry: {e}; policy changes are refused until etcd answers"
    ))
}

fn decode<T: for<'de> serde::Deserialize<'de>>(what: &str, raw: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(raw).map_err(|e| {
        StoreError(format!(
            "cluster policy registry: {what} is unreadable: {e}"
        ))
    })
}

// Kept apart from the imports above, which other branches edit.
use crate::live::registry::{
    check_record, Unreadable, VersionMeta, SHARED_KEY_PREFIX, UNREADABLE_AUTHOR,
};

/// `decode`, with an unreadable record skipped: [`Shared::unreadable`] reports it.
fn readable<T: for<'de> serde::Deserialize<'de>>(raw: &[u8]) -> Option<T> {
    serde_json::from_slice(raw).ok()
}

/// An activation stack as stored; an unreadable one reads as empty (no policy runs, and the
/// next push replaces it), as the node's own registry does.
fn stack_of(raw: Option<&Vec<u8>>) -> Vec<VersionRef> {
    raw.and_then(|raw| readable(raw)).unwrap_or_default()
}

/// The readable parameters among `raw`.
fn params_of(raw: Vec<(String, Vec<u8>)>) -> Params {
    raw.into_iter()
        .filter_map(|(key, raw)| Some((key, readable::<Scalar>(&raw)?)))
        .collect()
}

impl EtcdRegistry {
    /// The registry of `node`'s cluster, and a watch on it; must run on the server's runtime.
    pub async fn open(
        node: &std::sync::Arc<ClusterNode>,
    ) -> anyhow::Result<(EtcdRegistry, PolicyWatch)> {
        let plane = node.plane().clone();
        let store = PolicyStore::new(plane.clone());
        let watch = store.watch().await?;
        let log = CentralLog::new(plane, node.id.clone(), CENTRAL_LOG_CAPACITY);
        let registry = EtcdRegistry {
            store,
            queue: log.clone().queue(),
            log,
            runtime: tokio::runtime::Handle::current(),
            seen: Mutex::new((Vec::new(), 0)),
            balance: crate::cluster::balance::Balance::open(node),
            node: node.id.to_string(),
        };
        Ok((registry, watch))
    }

    /// Runs `call` to completion from the engine's thread (or, in tests, from inside the
    /// runtime).
    fn block<T>(&self, call: impl Future<Output = T>) -> T {
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::task::block_in_place(|| self.runtime.block_on(call))
        } else {
            self.runtime.block_on(call)
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, (Vec<VersionRef>, i64)> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read_stack(&self) -> Result<(Vec<VersionRef>, i64), StoreError> {
        let active = self.block(self.store.active()).map_err(refused)?;
        Ok((stack_of(active.value.as_ref()), active.revision))
    }

    /// The listing of a version stored without one (by an older release), written back so
    /// this is done once; an unreadable version is listed too, so its number shows.
    fn listing_of_unlisted(&self, name: &str, version: u32) -> Result<VersionMeta, StoreError> {
        let raw = self
            .block(self.store.version(name, version))
            .map_err(refused)?
            .unwrap_or_default();
        let Some(record) = readable::<VersionRecord>(&raw) else {
            return Ok(VersionMeta {
                name: name.to_string(),
                version,
                loaded_at_ms: 0,
                author: UNREADABLE_AUTHOR.into(),
                bytes: raw.len(),
            });
        };
        let meta = record.meta();
        let listing = serde_json::to_vec(&meta).unwrap_or_default();
        self.block(self.store.put_listing(name, version, listing))
            .map_err(refused)?;
        Ok(meta)
    }
}

/// What `desired` does to `base` (a push of one version, or a rollback of the top), redone
/// on `now`, the stack another node left; `None` when it is neither.
///
/// Both stacks are cut to their newest [`MAX_HISTORY`] entries, so a push onto a full stack
/// is `base` less its oldest entries plus one: a push is recognised by what it keeps of
/// `base` (its newest entries, all of them up to the cut), never by the lengths alone.
fn rebase(
    base: &[VersionRef],
    desired: &[VersionRef],
    now: &[VersionRef],
) -> Option<Vec<VersionRef>> {
    let is_push = desired.split_last().is_some_and(|(_, kept)| {
        kept.len() >= base.len().min(MAX_HISTORY - 1) && base.ends_with(kept)
    });
    if is_push {
        let mut next = now.to_vec();
        next.extend(desired.last().cloned());
        let skip = next.len().saturating_sub(MAX_HISTORY);
        return Some(next.split_off(skip));
    }
    if desired.len() + 1 == base.len() && base[..desired.len()] == *desired {
        // Only roll back what this node saw on top; if it is gone already, so is the point.
        return (now.last() == base.last()).then(|| now[..now.len().saturating_sub(1)].to_vec());
    }
    None
}

impl Shared for EtcdRegistry {
    fn add_version(
        &self,
        name: &str,
        source: &str,
        author: &str,
        now_ms: u64,
    ) -> Result<VersionRecord, StoreError> {
        let record = |version: u32| VersionRecord {
            name: name.to_string(),
            version,
            source: source.to_string(),
            loaded_at_ms: now_ms,
            author: author.to_string(),
        };
        let encode = |version: u32| {
            let record = record(version);
            (
                serde_json::to_vec(&record).unwrap_or_default(),
                serde_json::to_vec(&record.meta()).unwrap_or_default(),
            )
        };
        let version = self
            .block(self.store.add_version(name, encode))
            .map_err(refused)?;
        Ok(record(version))
    }

    fn version(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<VersionRecord>, StoreError> {
        if let Some(v) = version {
            let raw = self.block(self.store.version(name, v)).map_err(refused)?;
            return raw.map(|raw| decode("a policy version", &raw)).transpose();
        }
        // The newest readable one: an unreadable newest version is skipped, as on a node.
        let newest = self.block(self.store.latest(name)).map_err(refused)?;
        let Some((number, raw)) = newest else {
            return Ok(None);
        };
        if let Some(record) = readable(&raw) {
            return Ok(Some(record));
        }
        let older = self.block(self.store.numbers(name)).map_err(refused)?;
        for v in older.into_iter().rev().filter(|&v| v < number) {
            let raw = self.block(self.store.version(name, v)).map_err(refused)?;
            if let Some(record) = raw.as_deref().and_then(readable) {
                return Ok(Some(record));
            }
        }
        Ok(None)
    }

    fn list(&self) -> Result<Vec<VersionRecord>, StoreError> {
        Ok(self
            .block(self.store.versions())
            .map_err(refused)?
            .iter()
            .filter_map(|raw| readable(raw))
            .collect())
    }

    fn summaries(&self) -> Result<Vec<VersionMeta>, StoreError> {
        let mut listed = Vec::new();
        for (name, version, listing) in self.block(self.store.listings()).map_err(refused)? {
            match listing {
                // An unreadable listing is skipped (and reported by `unreadable`).
                Some(raw) => listed.extend(readable::<VersionMeta>(&raw)),
                None => listed.push(self.listing_of_unlisted(&name, version)?),
            }
        }
        Ok(listed)
    }

    fn prune(
        &self,
        name: &str,
        keep: usize,
        also_keep: Option<&VersionRef>,
    ) -> Result<(), StoreError> {
        for _ in 0..PRUNE_ATTEMPTS {
            let active = self.block(self.store.active()).map_err(refused)?;
            let stack: Vec<VersionRef> = match &active.value {
                Some(raw) => match readable(raw) {
                    Some(stack) => stack,
                    // Which versions it protects is unknown: delete none.
                    None => return Ok(()),
                },
                None => Vec::new(),
            };
            let numbers = self.block(self.store.numbers(name)).map_err(refused)?;
            let excess = numbers.len().saturating_sub(keep.max(1));
            let protected = |version: u32| {
                let id = VersionRef {
                    name: name.to_string(),
                    version,
                };
                stack.contains(&id) || also_keep == Some(&id)
            };
            let victims: Vec<u32> = numbers[..excess]
                .iter()
                .copied()
                .filter(|&v| !protected(v))
                .collect();
            if victims.is_empty() {
                return Ok(());
            }
            if self
                .block(self.store.prune(name, &victims, active.revision))
                .map_err(refused)?
            {
                return Ok(());
            }
        }
        Err(StoreError(
            "the cluster's active policy kept changing while pruning; the next load prunes".into(),
        ))
    }

    fn unreadable(&self) -> Result<Vec<Unreadable>, StoreError> {
        let mut found = Vec::new();
        let mut check = |key: &str, raw: &[u8]| {
            if let Some(Err(e)) = check_record(key.as_bytes(), raw) {
                // Named as `POLICY UNREADABLE DROP` takes it, not as the node's own record.
                let error = e.0.replacen(
                    &format!("'{key}'"),
                    &format!("'{SHARED_KEY_PREFIX}{key}'"),
                    1,
                );
                found.push(Unreadable {
                    key: key.to_string(),
                    error,
                });
            }
        };
        // Sources one at a time (each up to the source cap), the small records at once.
        for (name, version, _) in self.block(self.store.listings()).map_err(refused)? {
            if let Some(raw) = self
                .block(self.store.version(&name, version))
                .map_err(refused)?
            {
                check(&format!("v/{name}/{version:010}"), &raw);
            }
        }
        for prefix in ["m/", "active", "param/"] {
            for (key, raw) in self.block(self.store.records(prefix)).map_err(refused)? {
                check(&key, &raw);
            }
        }
        Ok(found)
    }

    fn drop_unreadable(&self, key: &str) -> Result<(), StoreError> {
        let shown = format!("{SHARED_KEY_PREFIX}{key}");
        let (raw, revision) = self
            .block(self.store.record(key))
            .map_err(refused)?
            .ok_or_else(|| StoreError(format!("no policy registry record '{shown}'")))?;
        match check_record(key.as_bytes(), &raw) {
            Some(Err(_)) => {
                // A dropped version leaves no listing behind.
                let also: Vec<String> = key
                    .strip_prefix("v/")
                    .map(|rest| format!("m/{rest}"))
                    .into_iter()
                    .collect();
                if self
                    .block(self.store.delete_if_unchanged(key, revision, &also))
                    .map_err(refused)?
                {
                    Ok(())
                } else {
                    Err(StoreError(format!(
                        "policy registry record '{shown}' changed meanwhile; look again"
                    )))
                }
            }
            Some(Ok(())) => Err(StoreError(format!(
                "policy registry record '{shown}' is readable; only unreadable records are dropped"
            ))),
            None => Err(StoreError(format!(
                "'{shown}' is not a policy registry record"
            ))),
        }
    }

    fn history(&self) -> Result<Vec<VersionRef>, StoreError> {
        let (stack, revision) = self.read_stack()?;
        *self.seen() = (stack.clone(), revision);
        Ok(stack)
    }

    fn set_history(&self, history: &[VersionRef]) -> Result<(), StoreError> {
        let (mut base, mut revision) = self.seen().clone();
        let mut desired = history.to_vec();
        for _ in 0..STACK_ATTEMPTS {
            let value = serde_json::to_vec(&desired).unwrap_or_default();
            // The version the stack makes active must still exist when it is written.
            let top = desired.last().map(|v| (v.name.as_str(), v.version));
            match self
                .block(self.store.swap_active(revision, value, top))
                .map_err(refused)?
            {
                Ok(written) => {
                    *self.seen() = (desired, written);
                    return Ok(());
                }
                Err(SwapRefused::Missing { name, version }) => {
                    return Err(StoreError(format!(
                        "policy {name}@{version} no longer exists (pruned or dropped on \
                         another node meanwhile); the active policy is unchanged"
                    )));
                }
                Err(SwapRefused::Changed(now)) => {
                    let stack = stack_of(now.value.as_ref());
                    desired = rebase(&base, &desired, &stack).ok_or_else(|| {
                        StoreError(format!(
                            "another node changed the cluster's active policy meanwhile (now {}); \
                             try again",
                            stack.last().map_or("none".to_string(), ToString::to_string)
                        ))
                    })?;
                    base = stack;
                    revision = now.revision;
                }
            }
        }
        Err(StoreError(
            "the cluster's active policy kept changing; try again".into(),
        ))
    }

    fn params(&self) -> Result<Params, StoreError> {
        Ok(params_of(self.block(self.store.params()).map_err(refused)?))
    }

    fn set_param(&self, key: &str, value: &Scalar) -> Result<(), StoreError> {
        let raw = serde_json::to_vec(value).unwrap_or_default();
        self.block(self.store.set_param(key, raw)).map_err(refused)
    }

    fn node_capacity(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.block(self.store.node_setting(&self.node, "capacity"))
            .map_err(refused)
    }

    fn set_node_capacity(&self, raw: Vec<u8>) -> Result<(), StoreError> {
        self.block(self.store.set_node_setting(&self.node, "capacity", raw))
            .map_err(refused)
    }

    fn snapshot(&self) -> Result<(Vec<VersionRef>, Params), StoreError> {
        let (active, raw_params) = self.block(self.store.snapshot()).map_err(refused)?;
        let stack = stack_of(active.value.as_ref());
        *self.seen() = (stack.clone(), active.revision);
        Ok((stack, params_of(raw_params)))
    }

    fn record(&self, event: &Event) {
        if !self.queue.push(event.clone()) {
            crate::live::stderr_line(
                "mantle: the central policy log queue is full (etcd unreachable?); event kept \
                 in this node's journal only",
            );
        }
    }

    fn cluster_env(
        &self,
        own: &policy::Metrics,
        now: f64,
    ) -> Option<(Vec<policy::Metrics>, usize)> {
        self.balance.env(own, now)
    }

    fn cluster_slots(&self) -> Vec<policy::SlotLoad> {
        self.balance.slots()
    }

    fn cluster_sequencers(&self) -> Vec<policy::SequencerLoad> {
        self.balance.sequencers()
    }

    fn after_cluster_tick(
        &self,
        tick: u64,
        own: &policy::Metrics,
        decision: &policy::Decision,
        policy: &str,
        failed: bool,
    ) {
        self.balance.after_tick(tick, own, decision, policy, failed);
    }

    fn tail(&self, n: usize) -> Result<Vec<Event>, StoreError> {
        self.block(self.queue.flush(FLUSH_WAIT));
        self.block(self.balance.flush(FLUSH_WAIT));
        self.block(self.log.tail(n))
            .map_err(|e| StoreError(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(name: &str, version: u32) -> VersionRef {
        VersionRef {
            name: name.into(),
            version,
        }
    }

    #[test]
    fn pushes_and_rollbacks_are_redone_on_the_newer_stack() {
        let base = vec![v("a", 1)];
        let now = vec![v("a", 1), v("b", 1)];
        // A push lands on top of what the other node pushed.
        assert_eq!(
            rebase(&base, &[v("a", 1), v("c", 1)], &now),
            Some(vec![v("a", 1), v("b", 1), v("c", 1)])
        );
        // A rollback of a@1 is moot once b@1 is on top: refused.
        assert_eq!(rebase(&base, &[], &now), None);
        // A rollback of what is still on top goes through.
        assert_eq!(
            rebase(&now, &[v("a", 1)], &[v("z", 1), v("a", 1), v("b", 1)]),
            Some(vec![v("z", 1), v("a", 1)])
        );
        // Anything else (a quarantine rewriting the middle) is refused.
        assert_eq!(rebase(&now, &[v("b", 1)], &now), None);
    }

    /// Issue 25 item 16: once the stack held MAX_HISTORY entries, a push (which drops the
    /// oldest) was not recognised and one of two concurrent pushes was refused.
    #[test]
    fn a_push_onto_a_full_stack_is_redone_on_the_newer_stack() {
        let full: Vec<VersionRef> = (1..=MAX_HISTORY as u32).map(|n| v("p", n)).collect();
        let mut pushed = full[1..].to_vec();
        pushed.push(v("mine", 1));
        let mut now = full[1..].to_vec();
        now.push(v("theirs", 1));
        let mut expected = now[1..].to_vec();
        expected.push(v("mine", 1));
        assert_eq!(rebase(&full, &pushed, &now), Some(expected));
        // A rollback of a full stack's top still goes through, and a rewrite is still refused.
        let rolled = full[..MAX_HISTORY - 1].to_vec();
        assert_eq!(
            rebase(&full, &rolled, &full),
            Some(full[..MAX_HISTORY - 1].to_vec())
        );
        let mut rewritten = full[2..].to_vec();
        rewritten.push(v("mine", 1));
        assert_eq!(rebase(&full, &rewritten, &now), None);
    }
}
