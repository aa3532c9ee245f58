//! The cluster's policy registry in etcd (seed 003: versions kept by the consensus service,
//! so every node runs the same one). Under `/mantle/<cluster>/policy/`:
//!
//! - `v/<name>/<N, 10 digits>`: version N of a policy, created once and never changed
//!   (a transaction that requires the key to be absent, so two nodes pushing at once get
//!   different numbers and neither version is lost), until pruned;
//! - `m/<name>/<N>`: its listing (everything but the source), written in the same
//!   transaction, so listing the registry never reads a source;
//! - `active`: the activation stack, changed only by transactions comparing its revision;
//! - `param/<key>`: a policy parameter.
//!
//! Values are opaque bytes here: the server decides what a version record looks like, and
//! which records it cannot read (see [`PolicyStore::records`] and
//! [`PolicyStore::delete_if_unchanged`], the repair path).

use crate::control::{ClusterError, ControlPlane, Versioned};
use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    WatchOptions,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Why [`PolicyStore::swap_active`] did not write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwapRefused {
    /// Another node changed the stack since; this is it now.
    Changed(Versioned<Option<Vec<u8>>>),
    /// The version the new stack would activate no longer exists (pruned or dropped).
    Missing { name: String, version: u32 },
}

/// Attempts at taking the next version number while other nodes take them too.
const VERSION_ATTEMPTS: usize = 64;

/// Versions deleted per pruning transaction (two deletes each; etcd's default cap is 128
/// operations per transaction).
const PRUNED_PER_TXN: usize = 50;

/// Version records kept in memory; they never change once written, so a copy is never
/// stale, and the watch fills it so a node activating a pushed version need not read it.
const CACHED_VERSIONS: usize = 256;

/// `N` of a key whose text from `at` on is `<N, 10 digits>`.
fn number_after(key: &[u8], at: usize) -> Option<u32> {
    std::str::from_utf8(key.get(at..)?).ok()?.parse().ok()
}

/// `(name, N)` of a `<name>/<N>` key tail.
fn name_and_number(tail: &[u8]) -> Option<(String, u32)> {
    let tail = std::str::from_utf8(tail).ok()?;
    let (name, number) = tail.rsplit_once('/')?;
    Some((name.to_string(), number.parse().ok()?))
}

fn forget(cache: &Mutex<HashMap<String, Vec<u8>>>, key: &str) {
    cache.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
}

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

    fn listing_key(&self, name: &str, version: u32) -> String {
        self.plane.key(&format!("policy/m/{name}/{version:010}"))
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

    /// The numbers of `name`'s stored versions, oldest first (keys only: no source is read).
    pub async fn numbers(&self, name: &str) -> Result<Vec<u32>, ClusterError> {
        let prefix = self.version_prefix(name);
        let options = GetOptions::new()
            .with_prefix()
            .with_keys_only()
            .with_sort(SortTarget::Key, SortOrder::Ascend);
        let resp = self
            .plane
            .bounded(self.plane.client().get(prefix.clone(), Some(options)))
            .await?;
        Ok(resp
            .kvs()
            .iter()
            .filter_map(|kv| number_after(kv.key(), prefix.len()))
            .collect())
    }

    /// The number the next version of `name` gets (keys only: no source is read).
    async fn next_number(&self, name: &str) -> Result<u32, ClusterError> {
        let options = GetOptions::new()
            .with_prefix()
            .with_keys_only()
            .with_sort(SortTarget::Key, SortOrder::Descend)
            .with_limit(1);
        let prefix = self.version_prefix(name);
        let resp = self
            .plane
            .bounded(self.plane.client().get(prefix.clone(), Some(options)))
            .await?;
        Ok(resp
            .kvs()
            .first()
            .and_then(|kv| number_after(kv.key(), prefix.len()))
            .map_or(1, |n| n.saturating_add(1)))
    }

    /// Stores the next version of `name`, whose record and listing `encode` builds from its
    /// number, and returns that number. Each number is created once: a node that lost the
    /// race for it takes the next one.
    pub async fn add_version(
        &self,
        name: &str,
        encode: impl Fn(u32) -> (Vec<u8>, Vec<u8>),
    ) -> Result<u32, ClusterError> {
        let mut next = self.next_number(name).await?;
        for _ in 0..VERSION_ATTEMPTS {
            let key = self.version_key(name, next);
            let (value, listing) = encode(next);
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([
                    TxnOp::put(key.clone(), value.clone(), None),
                    TxnOp::put(self.listing_key(name, next), listing, None),
                ]);
            if self
                .plane
                .bounded(self.plane.client().txn(txn))
                .await?
                .succeeded()
            {
                remember(&self.cache, key, value);
                return Ok(next);
            }
            next = self.next_number(name).await?;
        }
        Err(ClusterError::Conflict(VERSION_ATTEMPTS))
    }

    /// Every version's listing by name then number, without reading a source: `(name,
    /// number, listing)`, the listing `None` for a version stored by a release that wrote
    /// none (the caller reads that one version and may [`PolicyStore::put_listing`] it).
    pub async fn listings(&self) -> Result<Vec<(String, u32, Option<Vec<u8>>)>, ClusterError> {
        let versions = self.plane.key("policy/v/");
        let listings = self.plane.key("policy/m/");
        let txn = Txn::new().and_then([
            TxnOp::get(
                versions.clone(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            ),
            TxnOp::get(listings.clone(), Some(GetOptions::new().with_prefix())),
        ]);
        let resp = self.plane.bounded(self.plane.client().txn(txn)).await?;
        let mut found: BTreeMap<(String, u32), Option<Vec<u8>>> = BTreeMap::new();
        for (i, op) in resp.op_responses().into_iter().enumerate() {
            let TxnOpResponse::Get(get) = op else {
                continue;
            };
            let prefix = if i == 0 { &versions } else { &listings };
            for kv in get.kvs() {
                let Some(id) = name_and_number(&kv.key()[prefix.len()..]) else {
                    continue;
                };
                if i == 0 {
                    found.entry(id).or_insert(None);
                } else if let Some(slot) = found.get_mut(&id) {
                    // A listing whose version is gone (dropped by hand) is not listed.
                    *slot = Some(kv.value().to_vec());
                }
            }
        }
        Ok(found
            .into_iter()
            .map(|((name, number), listing)| (name, number, listing))
            .collect())
    }

    /// Writes the listing of version `number` of `name` if that version still exists.
    pub async fn put_listing(
        &self,
        name: &str,
        number: u32,
        listing: Vec<u8>,
    ) -> Result<(), ClusterError> {
        let txn = Txn::new()
            .when([Compare::create_revision(
                self.version_key(name, number),
                CompareOp::Greater,
                0,
            )])
            .and_then([TxnOp::put(self.listing_key(name, number), listing, None)]);
        self.plane
            .bounded(self.plane.client().txn(txn))
            .await
            .map(drop)
    }

    /// Deletes versions `numbers` of `name` (records and listings) if the activation stack
    /// is still at `active_revision` (0: never set), in one transaction: the caller chose
    /// them knowing which versions the stack holds, and a stack another node changed
    /// meanwhile may hold one of them. `false`: the stack changed; read it and choose again.
    pub async fn prune(
        &self,
        name: &str,
        numbers: &[u32],
        active_revision: i64,
    ) -> Result<bool, ClusterError> {
        for chunk in numbers.chunks(PRUNED_PER_TXN) {
            let key = self.active_key();
            let unchanged = if active_revision == 0 {
                Compare::create_revision(key, CompareOp::Equal, 0)
            } else {
                Compare::mod_revision(key, CompareOp::Equal, active_revision)
            };
            let deletes: Vec<TxnOp> = chunk
                .iter()
                .flat_map(|&n| {
                    [
                        TxnOp::delete(self.version_key(name, n), None),
                        TxnOp::delete(self.listing_key(name, n), None),
                    ]
                })
                .collect();
            let txn = Txn::new().when([unchanged]).and_then(deletes);
            if !self
                .plane
                .bounded(self.plane.client().txn(txn))
                .await?
                .succeeded()
            {
                return Ok(false);
            }
            for &n in chunk {
                forget(&self.cache, &self.version_key(name, n));
            }
        }
        Ok(true)
    }

    /// The raw records under `policy/<prefix>`, keyed relative to `policy/` (as the node's
    /// own registry names them: `param/x`, `m/p/0000000001`, `active`). Meant for small
    /// records; version sources are read one at a time with [`PolicyStore::record`].
    pub async fn records(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, ClusterError> {
        let base = self.prefix();
        let resp = self
            .plane
            .bounded(self.plane.client().get(
                format!("{base}{prefix}"),
                Some(GetOptions::new().with_prefix()),
            ))
            .await?;
        Ok(resp
            .kvs()
            .iter()
            .map(|kv| {
                let key = String::from_utf8_lossy(&kv.key()[base.len()..]).into_owned();
                (key, kv.value().to_vec())
            })
            .collect())
    }

    /// The record under `policy/<key>` and its revision (what
    /// [`PolicyStore::delete_if_unchanged`] compares).
    pub async fn record(&self, key: &str) -> Result<Option<(Vec<u8>, i64)>, ClusterError> {
        let resp = self
            .plane
            .bounded(
                self.plane
                    .client()
                    .get(self.plane.key(&format!("policy/{key}")), None),
            )
            .await?;
        Ok(resp
            .kvs()
            .first()
            .map(|kv| (kv.value().to_vec(), kv.mod_revision())))
    }

    /// Deletes `policy/<key>` (and `also`, keys relative to `policy/`) if `key` is still at
    /// `revision`: a record another node rewrote meanwhile is not deleted. `false`: it was.
    pub async fn delete_if_unchanged(
        &self,
        key: &str,
        revision: i64,
        also: &[String],
    ) -> Result<bool, ClusterError> {
        let full = self.plane.key(&format!("policy/{key}"));
        let mut deletes = vec![TxnOp::delete(full.clone(), None)];
        deletes.extend(
            also.iter()
                .map(|k| TxnOp::delete(self.plane.key(&format!("policy/{k}")), None)),
        );
        let txn = Txn::new()
            .when([Compare::mod_revision(
                full.clone(),
                CompareOp::Equal,
                revision,
            )])
            .and_then(deletes);
        let deleted = self
            .plane
            .bounded(self.plane.client().txn(txn))
            .await?
            .succeeded();
        if deleted {
            forget(&self.cache, &full);
        }
        Ok(deleted)
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

    /// Every version of every policy, by name then number (reads every source: listing the
    /// registry uses [`PolicyStore::listings`]).
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

    /// Writes the activation stack if its revision is still `expected` (0: never set) and
    /// version `top` (the one the new stack makes active, if any) still exists: a prune on
    /// another node may delete a version between this node reading it and activating it,
    /// and a stack must never point at a missing version (pruning compares the stack the
    /// same way, so of a prune and a swap racing on one version, one fails).
    pub async fn swap_active(
        &self,
        expected: i64,
        value: Vec<u8>,
        top: Option<(&str, u32)>,
    ) -> Result<Result<i64, SwapRefused>, ClusterError> {
        let key = self.active_key();
        let mut compares = vec![if expected == 0 {
            Compare::create_revision(key.clone(), CompareOp::Equal, 0)
        } else {
            Compare::mod_revision(key.clone(), CompareOp::Equal, expected)
        }];
        let mut on_refusal = vec![TxnOp::get(key.clone(), None)];
        if let Some((name, version)) = top {
            let version_key = self.version_key(name, version);
            compares.push(Compare::create_revision(
                version_key.clone(),
                CompareOp::NotEqual,
                0,
            ));
            on_refusal.push(TxnOp::get(
                version_key,
                Some(GetOptions::new().with_keys_only()),
            ));
        }
        let txn = Txn::new()
            .when(compares)
            .and_then([TxnOp::put(key, value, None)])
            .or_else(on_refusal);
        let resp = self.plane.bounded(self.plane.client().txn(txn)).await?;
        if resp.succeeded() {
            return Ok(Ok(resp.header().map_or(0, |h| h.revision())));
        }
        let mut gets = resp.op_responses().into_iter().map(|op| match op {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        });
        let active = gets.next().flatten();
        if let Some((name, version)) = top {
            let present = gets
                .next()
                .flatten()
                .is_some_and(|get| !get.kvs().is_empty());
            if !present {
                forget(&self.cache, &self.version_key(name, version));
                return Ok(Err(SwapRefused::Missing {
                    name: name.to_string(),
                    version,
                }));
            }
        }
        let now = match active {
            Some(get) => match get.kvs().first() {
                Some(kv) => Versioned {
                    value: Some(kv.value().to_vec()),
                    revision: kv.mod_revision(),
                },
                None => Versioned {
                    value: None,
                    revision: 0,
                },
            },
            None => self.active().await?,
        };
        Ok(Err(SwapRefused::Changed(now)))
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

    /// A node's own setting `name` (outside the watched `policy/` prefix: no other node
    /// reacts to it).
    pub async fn node_setting(
        &self,
        node: &str,
        name: &str,
    ) -> Result<Option<Vec<u8>>, ClusterError> {
        let key = self.plane.key(&format!("config/{node}/{name}"));
        let resp = self
            .plane
            .bounded(self.plane.client().get(key, None))
            .await?;
        Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
    }

    pub async fn set_node_setting(
        &self,
        node: &str,
        name: &str,
        value: Vec<u8>,
    ) -> Result<(), ClusterError> {
        let key = self.plane.key(&format!("config/{node}/{name}"));
        self.plane
            .bounded(self.plane.client().put(key, value, None))
            .await
            .map(|_| ())
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
                if kv.key().starts_with(versions.as_bytes()) {
                    let key = String::from_utf8_lossy(kv.key()).into_owned();
                    match event.event_type() {
                        EventType::Put => remember(&cache, key, kv.value().to_vec()),
                        // Pruned or dropped on another node: never served from here again.
                        EventType::Delete => forget(&cache, &key),
                    }
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
