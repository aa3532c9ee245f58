//! A cluster node's policy registry and central log (`--cluster`): the registry's
//! [`Shared`] part on etcd (`cluster::PolicyStore`, `cluster::CentralLog`), and the task
//! that tells the engine's thread whenever another node changed it, so a `POLICY LOAD|USE|
//! ROLLBACK|PARAM` on any node runs on every node.
//!
//! The engine's thread calls in synchronously; each call runs on the server's runtime under
//! the control plane's timeout, so an unreachable etcd turns a push into a clear error
//! instead of a hang, and the node keeps running its current version.

use crate::cluster::{ClusterNode, CENTRAL_LOG_CAPACITY};
use crate::live::journal::Event;
use crate::live::registry::{Shared, VersionRecord, VersionRef, MAX_HISTORY};
use crate::store::StoreError;
use cluster::{CentralLog, ClusterError, LogQueue, PolicyStore, PolicyWatch};
use policy::{Params, Scalar};
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

/// How long `POLICY LOG` waits for this node's queued events to reach etcd.
const FLUSH_WAIT: Duration = Duration::from_secs(1);
/// Attempts at applying a push or rollback to an activation stack other nodes keep changing.
const STACK_ATTEMPTS: usize = 16;

pub struct EtcdRegistry {
    store: PolicyStore,
    log: CentralLog,
    queue: LogQueue,
    runtime: tokio::runtime::Handle,
    /// The activation stack as last read or written, and its etcd revision: what
    /// `set_history` compares against.
    seen: Mutex<(Vec<VersionRef>, i64)>,
    balance: crate::cluster::balance::Balance,
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
        let stack = match &active.value {
            Some(raw) => decode("the activation stack", raw)?,
            None => Vec::new(),
        };
        Ok((stack, active.revision))
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
        let encode = |version: u32| serde_json::to_vec(&record(version)).unwrap_or_default();
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
        let raw = match version {
            Some(v) => self.block(self.store.version(name, v)),
            None => self
                .block(self.store.latest(name))
                .map(|found| found.map(|(_, raw)| raw)),
        }
        .map_err(refused)?;
        raw.map(|raw| decode("a policy version", &raw)).transpose()
    }

    fn list(&self) -> Result<Vec<VersionRecord>, StoreError> {
        self.block(self.store.versions())
            .map_err(refused)?
            .iter()
            .map(|raw| decode("a policy version", raw))
            .collect()
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
            match self
                .block(self.store.swap_active(revision, value))
                .map_err(refused)?
            {
                Ok(written) => {
                    *self.seen() = (desired, written);
                    return Ok(());
                }
                Err(now) => {
                    let stack: Vec<VersionRef> = match &now.value {
                        Some(raw) => decode("the activation stack", raw)?,
                        None => Vec::new(),
                    };
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
        let mut params = Params::new();
        for (key, raw) in self.block(self.store.params()).map_err(refused)? {
            params.insert(key, decode::<Scalar>("a policy parameter", &raw)?);
        }
        Ok(params)
    }

    fn set_param(&self, key: &str, value: &Scalar) -> Result<(), StoreError> {
        let raw = serde_json::to_vec(value).unwrap_or_default();
        self.block(self.store.set_param(key, raw)).map_err(refused)
    }

    fn snapshot(&self) -> Result<(Vec<VersionRef>, Params), StoreError> {
        let (active, raw_params) = self.block(self.store.snapshot()).map_err(refused)?;
        let stack: Vec<VersionRef> = match &active.value {
            Some(raw) => decode("the activation stack", raw)?,
            None => Vec::new(),
        };
        *self.seen() = (stack.clone(), active.revision);
        let mut params = Params::new();
        for (key, raw) in raw_params {
            params.insert(key, decode::<Scalar>("a policy parameter", &raw)?);
        }
        Ok((stack, params))
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
