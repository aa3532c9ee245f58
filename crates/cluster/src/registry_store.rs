//! The cluster's policy registry in etcd (seed 003: versions kept by the consensus service,
//! so every node runs the same one). Under `/mantle/<cluster>/policy/`:
//!
//! - `v/<name>/<N, 10 digits>`: version N of a policy, created once and never changed
//!   (a transaction that requires the key to be absent, so two nodes pushing at once get
//!   different numbers and neither version is lost);
//! - `active`: the activation stack, changed only by transactions comparing its revision;
//! - `param/<key>`: a policy parameter.
//!
//! Values are opaque bytes here: the server decides what a version record looks like.

use crate::control::{ClusterError, ControlPlane, Versioned};
use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    WatchOptions,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Attempts at taking the next version number while other nodes take them too.
const VERSION_ATTEMPTS: usize = 64;

/// Version records kept in memory; they never change once written, so a copy is never
/// stale, and the watch fills it so a node activating a pushed version need not read it.
const CACHED_VERSIONS: usize = 256;

#[derive(Clone)]
pub struct PolicyStore {
    plane: ControlPlane,
    /// Version records by key.
    cache: Arc<Mutex<HashMap<String, Vec<u8>>>>,
}

fn remember(cache: &Mutex<HashMap<String, Vec<u8>>>, key: String, value: Vec<u8>) {
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    if cache.len() >= CACHED_VERSIONS {
        cache.clear();
    }
    cache.insert(key, value);
}

/// What a [`PolicyWatch`] reports: the etcd revision of the last change seen under the
/// registry's prefix, and whether etcd is reachable now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegistryState {
    pub revision: i64,
    pub connected: bool,
}

impl PolicyStore {
    pub fn new(plane: ControlPlane) -> PolicyStore {
        PolicyStore {
            plane,
            cache: Arc::default(),
        }
    }

    fn prefix(&self) -> String {
        self.plane.key("policy/")
    }

    fn version_prefix(&self, name: &str) -> String {
        self.plane.key(&format!("policy/v/{name}/"))
    }

    fn version_key(&self, name: &str, version: u32) -> String {
        self.plane.key(&format!("policy/v/{name}/{version:010}"))
    }

    fn active_key(&self) -> String {
        self.plane.key("policy/active")
    }

    /// The newest version of `name` and its record.
    pub async fn latest(&self, name: &str) -> Result<Option<(u32, Vec<u8>)>, ClusterError> {
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Key, SortOrder::Descend)
            .with_limit(1);
        let resp = self
            .plane
            .bounded(
                self.plane
                    .client()
                    .get(self.version_prefix(name), Some(options)),
            )
            .await?;
        let prefix_len = self.version_prefix(name).len();
        resp.kvs()
            .first()
            .map(|kv| {
                let number = std::str::from_utf8(&kv.key()[prefix_len..])
                    .ok()
                    .and_then(|n| n.parse::<u32>().ok())
                    .ok_or_else(|| {
                        ClusterError::Corrupt(format!(
                            "policy version key {:?}",
                            String::from_utf8_lossy(kv.key())
                        ))
                    })?;
                Ok((number, kv.value().to_vec()))
            })
            .transpose()
    }

    /// Stores the next version of `name`, whose record `encode` builds from its number, and
    /// returns that number. Each number is created once: a node that lost the race for it
    /// takes the next one.
    pub async fn add_version(
        &self,
        name: &str,
        encode: impl Fn(u32) -> Vec<u8>,
    ) -> Result<u32, ClusterError> {
        let mut next = self.latest(name).await?.map_or(1, |(n, _)| n + 1);
        for _ in 0..VERSION_ATTEMPTS {
            let key = self.version_key(name, next);
            let value = encode(next);
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key.clone(), value.clone(), None)]);
            if self
                .plane
                .bounded(self.plane.client().txn(txn))
                .await?
                .succeeded()
            {
                remember(&self.cache, key, value);
                return Ok(next);
            }
            next = self.latest(name).await?.map_or(1, |(n, _)| n + 1);
        }
        Err(ClusterError::Conflict(VERSION_ATTEMPTS))
    }

    pub async fn version(&self, name: &str, version: u32) -> Result<Option<Vec<u8>>, ClusterError> {
        let key = self.version_key(name, version);
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        if cached.is_some() {
            return Ok(cached);
        }
        let resp = self
            .plane
            .bounded(self.plane.client().get(key.clone(), None))
            .await?;
        let found = resp.kvs().first().map(|kv| kv.value().to_vec());
        if let Some(value) = &found {
            remember(&self.cache, key, value.clone());
        }
        Ok(found)
    }

    /// Every version of every policy, by name then number.
    pub async fn versions(&self) -> Result<Vec<Vec<u8>>, ClusterError> {
        let resp = self
            .plane
            .bounded(self.plane.client().get(
                self.plane.key("policy/v/"),
                Some(GetOptions::new().with_prefix()),
            ))
            .await?;
        Ok(resp.kvs().iter().map(|kv| kv.value().to_vec()).collect())
    }

    /// The activation stack with its revision (0 and `None`: never set).
    pub async fn active(&self) -> Result<Versioned<Option<Vec<u8>>>, ClusterError> {
        let resp = self
            .plane
            .bounded(self.plane.client().get(self.active_key(), None))
            .await?;
        Ok(match resp.kvs().first() {
            Some(kv) => Versioned {
                value: Some(kv.value().to_vec()),
                revision: kv.mod_revision(),
            },
            None => Versioned {
                value: None,
                revision: 0,
            },
        })
    }

    /// Writes the activation stack if its revision is still `expected` (0: never set);
    /// otherwise returns it as it is now.
    pub async fn swap_active(
        &self,
        expected: i64,
        value: Vec<u8>,
    ) -> Result<Result<i64, Versioned<Option<Vec<u8>>>>, ClusterError> {
        let key = self.active_key();
        let compare = if expected == 0 {
            Compare::create_revision(key.clone(), CompareOp::Equal, 0)
        } else {
            Compare::mod_revision(key.clone(), CompareOp::Equal, expected)
        };
        let txn = Txn::new()
            .when([compare])
            .and_then([TxnOp::put(key, value, None)]);
        let resp = self.plane.bounded(self.plane.client().txn(txn)).await?;
        if resp.succeeded() {
            return Ok(Ok(resp.header().map_or(0, |h| h.revision())));
        }
        Ok(Err(self.active().await?))
    }

    /// The activation stack and every parameter, read at one revision in one round trip
    /// (what a node adopts when the registry changed).
    pub async fn snapshot(
        &self,
    ) -> Result<(Versioned<Option<Vec<u8>>>, Vec<(String, Vec<u8>)>), ClusterError> {
        let prefix = self.plane.key("policy/param/");
        let txn = Txn::new().and_then([
            TxnOp::get(self.active_key(), None),
            TxnOp::get(prefix.clone(), Some(GetOptions::new().with_prefix())),
        ]);
        let resp = self.plane.bounded(self.plane.client().txn(txn)).await?;
        let mut active = Versioned {
            value: None,
            revision: 0,
        };
        let mut params = Vec::new();
        for (i, op) in resp.op_responses().into_iter().enumerate() {
            let TxnOpResponse::Get(get) = op else {
                continue;
            };
            for kv in get.kvs() {
                if i == 0 {
                    active = Versioned {
                        value: Some(kv.value().to_vec()),
                        revision: kv.mod_revision(),
                    };
                } else {
                    let name = String::from_utf8_lossy(&kv.key()[prefix.len()..]).into_owned();
                    params.push((name, kv.value().to_vec()));
                }
            }
        }
        Ok((active, params))
    }

    /// Every parameter, by name.
    pub async fn params(&self) -> Result<Vec<(String, Vec<u8>)>, ClusterError> {
        let prefix = self.plane.key("policy/param/");
        let resp = self
            .plane
            .bounded(
                self.plane
                    .client()
                    .get(prefix.clone(), Some(GetOptions::new().with_prefix())),
            )
            .await?;
        Ok(resp
            .kvs()
            .iter()
            .map(|kv| {
                let name = String::from_utf8_lossy(&kv.key()[prefix.len()..]).into_owned();
                (name, kv.value().to_vec())
            })
            .collect())
    }

    pub async fn set_param(&self, key: &str, value: Vec<u8>) -> Result<(), ClusterError> {
        let key = self.plane.key(&format!("policy/param/{key}"));
        self.plane
            .bounded(self.plane.client().put(key, value, None))
            .await
            .map(|_| ())
    }

    /// Starts following the registry: the state changes on every write under its prefix
    /// and whenever etcd goes away or comes back (after which a reader should read it all
    /// again: changes made meanwhile are not replayed one by one).
    pub async fn watch(&self) -> Result<PolicyWatch, ClusterError> {
        let first = self
            .plane
            .bounded(self.plane.client().get(self.active_key(), None))
            .await?
            .header()
            .map_or(0, |h| h.revision());
        let (tx, rx) = watch::channel(RegistryState {
            revision: first,
            connected: true,
        });
        let task = tokio::spawn(follow(
            self.plane.clone(),
            self.prefix(),
            Arc::clone(&self.cache),
            tx,
        ));
        Ok(PolicyWatch { state: rx, task })
    }
}

async fn follow(
    plane: ControlPlane,
    prefix: String,
    cache: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    tx: watch::Sender<RegistryState>,
) {
    let versions = format!("{prefix}v/");
    let mut backoff = Duration::from_millis(100);
    loop {
        let start = tx.borrow().revision + 1;
        let mut client = plane.client();
        let options = WatchOptions::new().with_prefix().with_start_revision(start);
        let Ok(mut stream) = plane
            .bounded(client.watch(prefix.clone(), Some(options)))
            .await
        else {
            tx.send_if_modified(|s| std::mem::replace(&mut s.connected, false));
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
            continue;
        };
        backoff = Duration::from_millis(100);
        if !tx.borrow().connected {
            // Back after an outage: whatever changed meanwhile arrives as events from
            // `start` on (or the watch is cancelled as compacted and we read afresh below).
            tx.send_modify(|s| s.connected = true);
        }
        loop {
            let message = match stream.message().await {
                Ok(Some(message)) => message,
                Ok(None) | Err(_) => break,
            };
            if message.canceled() {
                // Compacted past `start`: report a change so readers read everything.
                let now = message.header().map_or(0, |h| h.revision());
                tx.send_modify(|s| s.revision = s.revision.max(now));
                break;
            }
            let mut revision = None;
            for event in message.events() {
                let Some(kv) = event.kv() else { continue };
                revision = revision.max(Some(kv.mod_revision()));
                if event.event_type() == EventType::Put && kv.key().starts_with(versions.as_bytes())
                {
                    let key = String::from_utf8_lossy(kv.key()).into_owned();
                    remember(&cache, key, kv.value().to_vec());
                }
            }
            if let Some(revision) = revision {
                tx.send_modify(|s| {
                    s.revision = s.revision.max(revision);
                    s.connected = true;
                });
            }
        }
        tx.send_if_modified(|s| std::mem::replace(&mut s.connected, false));
    }
}

/// A live view of the registry's revision, kept current by a background task.
pub struct PolicyWatch {
    state: watch::Receiver<RegistryState>,
    task: JoinHandle<()>,
}

impl PolicyWatch {
    pub fn state(&self) -> RegistryState {
        *self.state.borrow()
    }

    /// A receiver to await changes on.
    pub fn subscribe(&self) -> watch::Receiver<RegistryState> {
        self.state.clone()
    }
}

impl Drop for PolicyWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
