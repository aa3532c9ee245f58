//! The durable, versioned policy registry (seed 003, Malacology): every loaded policy is an
//! immutable version `name@N` with its source, load time and author, stored in the server's
//! own store; which version is active — and the ones active before it, for rollback — is
//! recorded there too, as are the policies' `WRstate` values and `POLICY PARAM` settings, so a
//! restarted server manages its cache exactly as before.
//!
//! With `--cluster` the versions, the activation stack and the parameters live in the
//! cluster's etcd instead, behind [`Shared`] (`crate::cluster::policy`), so a push on any node
//! is the push of every node; states and the wedge record stay with the node.
//!
//! Layout (keys in the policy column family, values JSON):
//! `v/<name>/<N, 10 digits>` a version; `m/<name>/<N>` its listing without the source (what
//! `POLICY LIST` and numbering read, so neither reads every source; written with the version,
//! and once for older registries, marked by `meta-complete`); `active` the activation stack
//! (last = active);
//! `param/<k>` a parameter; `state/<name>` a policy's state; `wedged` the version whose tick
//! was running too long (see `watchdog`).
//!
//! Every record is checked to read back before it is written ([`encode`]), and a record that
//! cannot be read back anyway (written by an older release, or damaged) never stops a start:
//! the readers skip it, [`Registry::unreadable`] lists it (the runner logs each at start, and
//! `POLICY UNREADABLE` shows them) and [`Registry::drop_unreadable`] removes one.

use super::space::{Change, Space};
use super::Event;
use policy::{Params, Scalar, StateValue};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use store::StoreError;

/// Activations remembered for rollback; older ones are forgotten.
pub const MAX_HISTORY: usize = 32;
/// Longest policy name (names are `[A-Za-z0-9_.-]`).
pub const MAX_NAME_LEN: usize = 64;
/// Largest policy source accepted.
pub const MAX_SOURCE_BYTES: usize = policy::Limits::MAX_SOURCE_BYTES;
pub use crate::config::DEFAULT_KEEP_VERSIONS;
/// How `POLICY UNREADABLE` names a record of the cluster's shared registry (in etcd, under
/// `/mantle/<cluster>/policy/`), so it is never confused with the node's own record of the
/// same name.
pub const SHARED_KEY_PREFIX: &str = "cluster:";
/// Marks a registry whose every version has its `m/` listing.
const META_COMPLETE: &[u8] = b"meta-complete";
/// The author a listing shows for a version record that cannot be read back.
pub(crate) const UNREADABLE_AUTHOR: &str = "(unreadable record)";

/// A reference to one version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRef {
    pub name: String,
    pub version: u32,
}

impl fmt::Display for VersionRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

/// One immutable stored version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRecord {
    pub name: String,
    pub version: u32,
    pub source: String,
    /// Milliseconds since the Unix epoch.
    pub loaded_at_ms: u64,
    pub author: String,
}

impl VersionRecord {
    pub fn id(&self) -> VersionRef {
        VersionRef {
            name: self.name.clone(),
            version: self.version,
        }
    }

    pub fn meta(&self) -> VersionMeta {
        VersionMeta {
            name: self.name.clone(),
            version: self.version,
            loaded_at_ms: self.loaded_at_ms,
            author: self.author.clone(),
            bytes: self.source.len(),
        }
    }
}

/// A version's listing: everything but its source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionMeta {
    pub name: String,
    pub version: u32,
    pub loaded_at_ms: u64,
    pub author: String,
    /// Bytes of the source.
    pub bytes: usize,
}

impl VersionMeta {
    pub fn id(&self) -> VersionRef {
        VersionRef {
            name: self.name.clone(),
            version: self.version,
        }
    }
}

/// The part of the registry, and the log, that a cluster's nodes share. Calls block (the
/// engine's thread makes them); a failure is a [`StoreError`] whose message says etcd is
/// unreachable, so pushes are refused while it is.
pub trait Shared: Send + Sync {
    /// Stores `source` as the next version of `name`; a number is never given out twice,
    /// even to pushes racing on other nodes.
    fn add_version(
        &self,
        name: &str,
        source: &str,
        author: &str,
        now_ms: u64,
    ) -> Result<VersionRecord, StoreError>;
    /// Version `version` of `name`, or its latest with `None`.
    fn version(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<VersionRecord>, StoreError>;
    fn list(&self) -> Result<Vec<VersionRecord>, StoreError>;
    /// Every version's listing, by name then version, without reading every source.
    fn summaries(&self) -> Result<Vec<VersionMeta>, StoreError> {
        Ok(self.list()?.iter().map(VersionRecord::meta).collect())
    }
    /// Deletes the oldest versions of `name` beyond the newest `keep`, never one on the
    /// activation stack (as it is when they are deleted, whatever other nodes do) nor
    /// `also_keep` (the node's wedged version).
    fn prune(
        &self,
        _name: &str,
        _keep: usize,
        _also_keep: Option<&VersionRef>,
    ) -> Result<(), StoreError> {
        Ok(())
    }
    /// The shared records that cannot be read back (every reader skips them), keyed
    /// relative to the registry and without [`SHARED_KEY_PREFIX`].
    fn unreadable(&self) -> Result<Vec<Unreadable>, StoreError> {
        Ok(Vec::new())
    }
    /// Deletes the shared record under `key` (as [`Shared::unreadable`] names it) if it is
    /// unreadable.
    fn drop_unreadable(&self, key: &str) -> Result<(), StoreError> {
        Err(StoreError(format!("no policy registry record '{key}'")))
    }
    fn history(&self) -> Result<Vec<VersionRef>, StoreError>;
    /// Replaces the activation stack read by the last [`Shared::history`]; if another node
    /// changed it since, a push or a rollback is applied to the stack as it is now, and
    /// anything else is refused.
    fn set_history(&self, history: &[VersionRef]) -> Result<(), StoreError>;
    fn params(&self) -> Result<Params, StoreError>;
    fn set_param(&self, key: &str, value: &Scalar) -> Result<(), StoreError>;
    /// The activation stack and the parameters, read together (one round trip where that
    /// matters: every node does this after every push).
    fn snapshot(&self) -> Result<(Vec<VersionRef>, Params), StoreError> {
        Ok((self.history()?, self.params()?))
    }
    /// This node's recorded `CONFIG SET` capacity (`live::baseline`), kept per node.
    fn node_capacity(&self) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(None)
    }
    fn set_node_capacity(&self, _raw: Vec<u8>) -> Result<(), StoreError> {
        Err(StoreError(
            "this registry cannot record the capacity".into(),
        ))
    }
    /// Adds an event to the central log without waiting for it to be written.
    fn record(&self, event: &Event);
    /// The central log's last `n` events (this node's recorded ones included), oldest first.
    fn tail(&self, n: usize) -> Result<Vec<Event>, StoreError>;
    /// In a cluster, every node's metrics for the tick about to run (this node's are `own`)
    /// and this node's index: what `servers[i]` and `whoami` show. `None` alone.
    fn cluster_env(
        &self,
        _own: &policy::Metrics,
        _now: f64,
    ) -> Option<(Vec<policy::Metrics>, usize)> {
        None
    }
    /// In a cluster, what `slots()` shows at the tick [`Shared::cluster_env`] prepared.
    fn cluster_slots(&self) -> Vec<policy::SlotLoad> {
        Vec::new()
    }
    /// In a cluster, what `sequencers()` shows at the tick [`Shared::cluster_env`] prepared.
    fn cluster_sequencers(&self) -> Vec<policy::SequencerLoad> {
        Vec::new()
    }
    /// In a cluster, after a tick: publishes this node's metrics and moves slots as the
    /// decision's targets ask (`cluster::balance`).
    fn after_cluster_tick(
        &self,
        _tick: u64,
        _own: &policy::Metrics,
        _decision: &policy::Decision,
        _policy: &str,
        _failed: bool,
    ) {
    }
}

pub struct Registry {
    space: Space,
    shared: Option<Arc<dyn Shared>>,
    /// Versions kept per name (in a cluster, the pruning node's count applies).
    keep: usize,
}

/// Checks a policy name: it becomes part of keys and log lines.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!(
            "policy name must be 1 to {MAX_NAME_LEN} characters"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
    {
        return Err(format!(
            "invalid policy name '{name}' (letters, digits, '_', '-' and '.' only)"
        ));
    }
    Ok(())
}

fn version_key(name: &str, version: u32) -> Vec<u8> {
    format!("v/{name}/{version:010}").into_bytes()
}

fn meta_prefix(name: &str) -> Vec<u8> {
    format!("m/{name}/").into_bytes()
}

fn meta_key(name: &str, version: u32) -> Vec<u8> {
    format!("m/{name}/{version:010}").into_bytes()
}

/// `N` of a `v/<name>/<N>` or `m/<name>/<N>` key.
fn version_of_key(key: &[u8]) -> Option<u32> {
    let tail = key.rsplit(|&b| b == b'/').next()?;
    std::str::from_utf8(tail).ok()?.parse().ok()
}

fn decode<T: for<'de> Deserialize<'de>>(key: &[u8], raw: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(raw).map_err(|e| {
        StoreError(format!(
            "policy registry record '{}' is unreadable: {e}",
            String::from_utf8_lossy(key)
        ))
    })
}

/// `decode`, with an unreadable record skipped: [`Registry::unreadable`] reports it.
fn decode_or_skip<T: for<'de> Deserialize<'de>>(key: &[u8], raw: &[u8]) -> Option<T> {
    decode(key, raw).ok()
}

/// Serialises a record and checks that it reads back: JSON has no NaN or infinity (they
/// become `null`), so a value that slipped past validation would otherwise be stored and
/// stop every later start.
fn encode<T: Serialize + for<'de> Deserialize<'de>>(
    key: &[u8],
    value: &T,
) -> Result<Vec<u8>, StoreError> {
    let raw = serde_json::to_vec(value).map_err(|e| refused(key, &e.to_string()))?;
    decode::<T>(key, &raw).map_err(|e| refused(key, &e.0))?;
    Ok(raw)
}

fn refused(key: &[u8], why: &str) -> StoreError {
    StoreError(format!(
        "refusing to store policy registry record '{}': it would not read back ({why})",
        String::from_utf8_lossy(key)
    ))
}

/// A stored record that cannot be read back, skipped by every reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The record's key, as `POLICY UNREADABLE DROP` takes it.
    pub key: String,
    pub error: String,
}

/// Whether the raw record under `key` reads back as what its key says it is; `None` for keys
/// that are not registry records (the journal's `log/` entries).
pub(crate) fn check_record(key: &[u8], raw: &[u8]) -> Option<Result<(), StoreError>> {
    let kind = |prefix: &[u8]| key.starts_with(prefix);
    Some(if kind(b"v/") {
        decode::<VersionRecord>(key, raw).map(drop)
    } else if kind(b"m/") {
        decode::<VersionMeta>(key, raw).map(drop)
    } else if key == b"active" {
        decode::<Vec<VersionRef>>(key, raw).map(drop)
    } else if key == b"wedged" {
        decode::<VersionRef>(key, raw).map(drop)
    } else if kind(b"param/") {
        decode::<Scalar>(key, raw).map(drop)
    } else if kind(b"state/") {
        decode::<StateValue>(key, raw).map(drop)
    } else {
        return None;
    })
}

impl Registry {
    pub fn new(space: Space) -> Registry {
        Registry {
            space,
            shared: None,
            keep: DEFAULT_KEEP_VERSIONS,
        }
    }

    /// Keeps the newest `keep` versions of each name (at least 1), besides those on the
    /// activation stack or recorded as wedged.
    pub fn with_keep(mut self, keep: usize) -> Registry {
        self.keep = keep.max(1);
        self
    }

    /// Keeps versions, the activation stack and parameters in `shared` (a cluster's etcd)
    /// instead of the node's own space.
    pub fn with_shared(mut self, shared: Option<Arc<dyn Shared>>) -> Registry {
        self.shared = shared;
        self
    }

    pub fn is_durable(&self) -> bool {
        self.shared.is_some() || self.space.is_durable()
    }

    /// Stores `source` as the next version of `name`.
    pub fn add_version(
        &self,
        name: &str,
        source: &str,
        author: &str,
        now_ms: u64,
    ) -> Result<VersionRecord, StoreError> {
        if let Some(shared) = &self.shared {
            let record = shared.add_version(name, source, author, now_ms)?;
            // The version is stored and numbered whatever happens next: a pruning that
            // fails (etcd went away) is retried by the next load, not reported as a failed
            // load.
            if let Err(e) = shared.prune(name, self.keep, self.wedged()?.as_ref()) {
                super::stderr_line(&format!(
                    "mantle: old versions of '{name}' were not pruned: {e}"
                ));
            }
            return Ok(record);
        }
        let version = self.next_version(name)?;
        let record = VersionRecord {
            name: name.to_string(),
            version,
            source: source.to_string(),
            loaded_at_ms: now_ms,
            author: author.to_string(),
        };
        let key = version_key(name, version);
        let raw = encode(&key, &record)?;
        let meta_key = meta_key(name, version);
        let meta = encode(&meta_key, &record.meta())?;
        self.space
            .write(&[(key, Some(raw)), (meta_key, Some(meta))], true)?;
        self.prune(name)?;
        Ok(record)
    }

    /// The number the next version of `name` gets, from the listings alone.
    pub fn next_version(&self, name: &str) -> Result<u32, StoreError> {
        if self.shared.is_some() {
            return Ok(self.latest(name)?.map_or(1, |r| r.version + 1));
        }
        self.ensure_meta()?;
        let last = self.space.scan(&meta_prefix(name))?;
        Ok(last
            .last()
            .and_then(|(key, _)| version_of_key(key))
            .map_or(1, |v| v.saturating_add(1)))
    }

    /// Gives every version stored by a release without listings its `m/` record, once: the
    /// only time every source is read.
    fn ensure_meta(&self) -> Result<(), StoreError> {
        if self.space.get(META_COMPLETE)?.is_some() {
            return Ok(());
        }
        let mut changes: Vec<Change> = Vec::new();
        for (key, raw) in self.space.scan(b"v/")? {
            let meta = match decode::<VersionRecord>(&key, &raw) {
                Ok(record) => record.meta(),
                // Listed, so its number is never given out again and LIST shows it.
                Err(_) => VersionMeta {
                    name: String::from_utf8_lossy(&key[2..])
                        .rsplit_once('/')
                        .map_or(String::new(), |(name, _)| name.to_string()),
                    version: version_of_key(&key).unwrap_or(0),
                    loaded_at_ms: 0,
                    author: UNREADABLE_AUTHOR.into(),
                    bytes: raw.len(),
                },
            };
            let meta_key = meta_key(&meta.name, meta.version);
            let raw_meta = encode(&meta_key, &meta)?;
            changes.push((meta_key, Some(raw_meta)));
        }
        changes.push((META_COMPLETE.to_vec(), Some(b"1".to_vec())));
        self.space.write(&changes, true)
    }

    /// Deletes the oldest versions of `name` beyond the newest `keep`, never one on the
    /// activation stack or recorded as wedged.
    fn prune(&self, name: &str) -> Result<(), StoreError> {
        let listed = self.space.scan(&meta_prefix(name))?;
        let Some(excess) = listed.len().checked_sub(self.keep).filter(|&n| n > 0) else {
            return Ok(());
        };
        let mut protected = self.history()?;
        protected.extend(self.wedged()?);
        let mut changes: Vec<Change> = Vec::new();
        let older = listed[..excess]
            .iter()
            .filter_map(|(key, _)| version_of_key(key));
        for version in older {
            let id = VersionRef {
                name: name.to_string(),
                version,
            };
            if !protected.contains(&id) {
                changes.push((version_key(name, version), None));
                changes.push((meta_key(name, version), None));
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        self.space.write(&changes, true)
    }

    /// The newest readable version of `name` (reads one source).
    pub fn latest(&self, name: &str) -> Result<Option<VersionRecord>, StoreError> {
        if let Some(shared) = &self.shared {
            return shared.version(name, None);
        }
        self.ensure_meta()?;
        let listed = self.space.scan(&meta_prefix(name))?;
        for version in listed
            .iter()
            .rev()
            .filter_map(|(key, _)| version_of_key(key))
        {
            let key = version_key(name, version);
            if let Some(raw) = self.space.get(&key)? {
                if let Some(record) = decode_or_skip(&key, &raw) {
                    return Ok(Some(record));
                }
            }
        }
        Ok(None)
    }

    /// Every version's listing, by name then version, without reading a source.
    pub fn summaries(&self) -> Result<Vec<VersionMeta>, StoreError> {
        if let Some(shared) = &self.shared {
            return shared.summaries();
        }
        self.ensure_meta()?;
        Ok(self
            .space
            .scan(b"m/")?
            .iter()
            .filter_map(|(key, raw)| decode_or_skip(key, raw))
            .collect())
    }

    /// Version `version` of `name`, or its latest with `None`.
    pub fn version(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<VersionRecord>, StoreError> {
        if let Some(shared) = &self.shared {
            return shared.version(name, version);
        }
        let Some(version) = version else {
            return self.latest(name);
        };
        let key = version_key(name, version);
        match self.space.get(&key)? {
            Some(raw) => Ok(Some(decode(&key, &raw)?)),
            None => Ok(None),
        }
    }

    /// Every readable version of every policy, by name then version.
    pub fn list(&self) -> Result<Vec<VersionRecord>, StoreError> {
        if let Some(shared) = &self.shared {
            return shared.list();
        }
        Ok(self
            .space
            .scan(b"v/")?
            .iter()
            .filter_map(|(key, raw)| decode_or_skip(key, raw))
            .collect())
    }

    /// The activation stack: the last entry is the active version, the ones before it were
    /// active earlier (what rollback returns to).
    pub fn history(&self) -> Result<Vec<VersionRef>, StoreError> {
        if let Some(shared) = &self.shared {
            return shared.history();
        }
        // An unreadable stack starts the server with no policy active (reported).
        Ok(match self.space.get(b"active")? {
            Some(raw) => decode_or_skip(b"active", &raw).unwrap_or_default(),
            None => Vec::new(),
        })
    }

    pub fn set_history(&self, history: &[VersionRef]) -> Result<(), StoreError> {
        let keep = &history[history.len().saturating_sub(MAX_HISTORY)..];
        if let Some(shared) = &self.shared {
            return shared.set_history(keep);
        }
        let raw = encode(b"active", &keep.to_vec())?;
        self.space.write(&[(b"active".to_vec(), Some(raw))], true)
    }

    /// The activation stack and the parameters as they are now.
    pub fn snapshot(&self) -> Result<(Vec<VersionRef>, Params), StoreError> {
        match &self.shared {
            Some(shared) => shared.snapshot(),
            None => Ok((self.history()?, self.params()?)),
        }
    }

    /// The version recorded as wedged in a tick, if any.
    pub fn wedged(&self) -> Result<Option<VersionRef>, StoreError> {
        Ok(match self.space.get(b"wedged")? {
            Some(raw) => decode_or_skip(b"wedged", &raw),
            None => None,
        })
    }

    /// Records (or with `None` erases) the version wedged in a tick. Synced: the record
    /// matters exactly when the process is about to die.
    pub fn set_wedged(&self, version: Option<&VersionRef>) -> Result<(), StoreError> {
        let raw = match version {
            Some(version) => Some(encode(b"wedged", version)?),
            None => None,
        };
        self.space.write(&[(b"wedged".to_vec(), raw)], true)
    }

    pub fn params(&self) -> Result<Params, StoreError> {
        if let Some(shared) = &self.shared {
            return shared.params();
        }
        let mut params = Params::new();
        for (key, raw) in self.space.scan(b"param/")? {
            let name = String::from_utf8_lossy(&key[b"param/".len()..]).into_owned();
            if let Some(value) = decode_or_skip::<Scalar>(&key, &raw) {
                params.insert(name, value);
            }
        }
        Ok(params)
    }

    pub fn set_param(&self, key: &str, value: &Scalar) -> Result<(), StoreError> {
        if let Some(shared) = &self.shared {
            return shared.set_param(key, value);
        }
        let key = format!("param/{key}").into_bytes();
        let raw = encode(&key, value)?;
        self.space.write(&[(key, Some(raw))], true)
    }

    pub fn states(&self) -> Result<BTreeMap<String, StateValue>, StoreError> {
        let mut states = BTreeMap::new();
        for (key, raw) in self.space.scan(b"state/")? {
            let name = String::from_utf8_lossy(&key[b"state/".len()..]).into_owned();
            if let Some(value) = decode_or_skip::<StateValue>(&key, &raw) {
                states.insert(name, value);
            }
        }
        Ok(states)
    }

    /// Persists changed states in one batch (reaches the OS: survives a killed process).
    pub fn save_states<'a>(
        &self,
        changed: impl Iterator<Item = (&'a String, &'a StateValue)>,
    ) -> Result<(), StoreError> {
        let changes = changed
            .map(|(name, value)| {
                let key = format!("state/{name}").into_bytes();
                let raw = encode(&key, value)?;
                Ok((key, Some(raw)))
            })
            .collect::<Result<Vec<Change>, StoreError>>()?;
        if changes.is_empty() {
            return Ok(());
        }
        self.space.write(&changes, false)
    }

    /// The records that cannot be read back (every reader skips them): the node's, then the
    /// cluster's shared ones (named with [`SHARED_KEY_PREFIX`]).
    pub fn unreadable(&self) -> Result<Vec<Unreadable>, StoreError> {
        let mut found = Vec::new();
        for prefix in [
            &b"v/"[..],
            b"m/",
            b"active",
            b"wedged",
            b"param/",
            b"state/",
        ] {
            for (key, raw) in self.space.scan(prefix)? {
                if let Some(Err(e)) = check_record(&key, &raw) {
                    found.push(Unreadable {
                        key: String::from_utf8_lossy(&key).into_owned(),
                        error: e.0,
                    });
                }
            }
        }
        if let Some(shared) = &self.shared {
            found.extend(shared.unreadable()?.into_iter().map(|u| Unreadable {
                key: format!("{SHARED_KEY_PREFIX}{}", u.key),
                error: u.error,
            }));
        }
        Ok(found)
    }

    /// Deletes the record under `key` if it is unreadable; a readable record is refused
    /// (this is a repair, not a way to edit the registry).
    pub fn drop_unreadable(&self, key: &str) -> Result<(), StoreError> {
        if let (Some(shared), Some(shared_key)) =
            (&self.shared, key.strip_prefix(SHARED_KEY_PREFIX))
        {
            return shared.drop_unreadable(shared_key);
        }
        let raw = self
            .space
            .get(key.as_bytes())?
            .ok_or_else(|| StoreError(format!("no policy registry record '{key}'")))?;
        match check_record(key.as_bytes(), &raw) {
            Some(Err(_)) => {
                let mut changes: Vec<Change> = vec![(key.as_bytes().to_vec(), None)];
                // A dropped version leaves no listing behind.
                if let Some(rest) = key.strip_prefix("v/") {
                    changes.push((format!("m/{rest}").into_bytes(), None));
                }
                self.space.write(&changes, true)
            }
            Some(Ok(())) => Err(StoreError(format!(
                "policy registry record '{key}' is readable; only unreadable records are dropped"
            ))),
            None => Err(StoreError(format!(
                "'{key}' is not a policy registry record"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_numbered_per_name_and_immutable() {
        let registry = Registry::new(Space::memory());
        let a1 = registry.add_version("a", "x", "me", 1).unwrap();
        let a2 = registry.add_version("a", "y", "you", 2).unwrap();
        let b1 = registry.add_version("b", "z", "me", 3).unwrap();
        assert_eq!((a1.version, a2.version, b1.version), (1, 2, 1));
        assert_eq!(registry.version("a", Some(1)).unwrap().unwrap().source, "x");
        assert_eq!(registry.version("a", None).unwrap().unwrap().source, "y");
        assert!(registry.version("a", Some(9)).unwrap().is_none());
        let names: Vec<String> = registry
            .list()
            .unwrap()
            .iter()
            .map(|r| r.id().to_string())
            .collect();
        assert_eq!(names, ["a@1", "a@2", "b@1"]);
    }

    #[test]
    fn ten_versions_sort_numerically() {
        let registry = Registry::new(Space::memory());
        for i in 0..11 {
            registry.add_version("p", &i.to_string(), "", 0).unwrap();
        }
        assert_eq!(registry.latest("p").unwrap().unwrap().version, 11);
    }

    #[test]
    fn history_is_bounded() {
        let registry = Registry::new(Space::memory());
        let refs: Vec<VersionRef> = (1..=40)
            .map(|v| VersionRef {
                name: "p".into(),
                version: v,
            })
            .collect();
        registry.set_history(&refs).unwrap();
        let kept = registry.history().unwrap();
        assert_eq!(kept.len(), MAX_HISTORY);
        assert_eq!(kept.last().unwrap().version, 40);
    }

    /// A cluster's registry in memory: what `Registry` must route to when it has one.
    #[derive(Default)]
    struct FakeShared {
        versions: std::sync::Mutex<Vec<VersionRecord>>,
        stack: std::sync::Mutex<Vec<VersionRef>>,
        params: std::sync::Mutex<Params>,
    }

    impl Shared for FakeShared {
        fn add_version(
            &self,
            name: &str,
            source: &str,
            author: &str,
            now_ms: u64,
        ) -> Result<VersionRecord, StoreError> {
            let mut versions = self.versions.lock().unwrap();
            let version = versions.iter().filter(|r| r.name == name).count() as u32 + 1;
            let record = VersionRecord {
                name: name.into(),
                version,
                source: source.into(),
                loaded_at_ms: now_ms,
                author: author.into(),
            };
            versions.push(record.clone());
            Ok(record)
        }
        fn version(
            &self,
            name: &str,
            version: Option<u32>,
        ) -> Result<Option<VersionRecord>, StoreError> {
            let versions = self.versions.lock().unwrap();
            let mut of = versions.iter().filter(|r| r.name == name);
            Ok(match version {
                Some(v) => of.find(|r| r.version == v).cloned(),
                None => of.next_back().cloned(),
            })
        }
        fn list(&self) -> Result<Vec<VersionRecord>, StoreError> {
            Ok(self.versions.lock().unwrap().clone())
        }
        fn history(&self) -> Result<Vec<VersionRef>, StoreError> {
            Ok(self.stack.lock().unwrap().clone())
        }
        fn set_history(&self, history: &[VersionRef]) -> Result<(), StoreError> {
            *self.stack.lock().unwrap() = history.to_vec();
            Ok(())
        }
        fn params(&self) -> Result<Params, StoreError> {
            Ok(self.params.lock().unwrap().clone())
        }
        fn set_param(&self, key: &str, value: &Scalar) -> Result<(), StoreError> {
            self.params
                .lock()
                .unwrap()
                .insert(key.into(), value.clone());
            Ok(())
        }
        fn record(&self, _event: &Event) {}
        fn tail(&self, _n: usize) -> Result<Vec<Event>, StoreError> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn a_shared_registry_holds_versions_stack_and_params_and_the_node_keeps_its_states() {
        let space = Space::memory();
        let shared = Arc::new(FakeShared::default());
        let registry =
            Registry::new(space.clone()).with_shared(Some(shared.clone() as Arc<dyn Shared>));
        let record = registry.add_version("p", "x", "me", 1).unwrap();
        registry.set_history(&[record.id()]).unwrap();
        registry.set_param("n", &Scalar::Number(7.0)).unwrap();
        let mut states = BTreeMap::new();
        states.insert("p".to_string(), StateValue::Scalar(Scalar::Number(3.0)));
        registry.save_states(states.iter()).unwrap();
        // Versions, stack and params went to the shared store, none to the node's space...
        assert_eq!(shared.list().unwrap().len(), 1);
        assert_eq!(shared.history().unwrap(), vec![record.id()]);
        assert_eq!(registry.latest("p").unwrap().unwrap().source, "x");
        let (stack, params) = registry.snapshot().unwrap();
        assert_eq!((stack.len(), params.len()), (1, 1));
        let local = Registry::new(space);
        assert!(local.list().unwrap().is_empty());
        assert!(local.history().unwrap().is_empty());
        assert!(local.params().unwrap().is_empty());
        // ...while the policies' states stay the node's own.
        assert_eq!(local.states().unwrap(), states);
    }

    #[test]
    fn unreadable_records_are_skipped_listed_and_dropped() {
        let space = Space::memory();
        let registry = Registry::new(space.clone());
        let good = registry.add_version("p", "x", "me", 1).unwrap();
        registry.set_history(&[good.id()]).unwrap();
        registry.set_param("ok", &Scalar::Number(1.0)).unwrap();
        // What an older release wrote for `POLICY PARAM x nan` and `WRstate(0/0)`.
        let bad: Vec<Change> = vec![
            (b"param/x".to_vec(), Some(b"null".to_vec())),
            (
                b"state/p".to_vec(),
                Some(br#"{"kind":"scalar","value":null}"#.to_vec()),
            ),
            (b"v/p/0000000002".to_vec(), Some(b"{".to_vec())),
            (b"wedged".to_vec(), Some(b"7".to_vec())),
        ];
        space.write(&bad, true).unwrap();
        assert_eq!(registry.params().unwrap().len(), 1);
        assert!(registry.states().unwrap().is_empty());
        assert_eq!(registry.list().unwrap(), vec![good.clone()]);
        assert_eq!(registry.latest("p").unwrap(), Some(good.clone()));
        assert_eq!(registry.wedged().unwrap(), None);
        assert_eq!(registry.history().unwrap(), vec![good.id()]);
        let keys: Vec<String> = registry
            .unreadable()
            .unwrap()
            .into_iter()
            .map(|u| u.key)
            .collect();
        assert_eq!(keys, ["v/p/0000000002", "wedged", "param/x", "state/p"]);
        let refused = registry.drop_unreadable("param/ok").unwrap_err().0;
        assert!(refused.contains("is readable"), "{refused}");
        assert!(registry.drop_unreadable("log/1").is_err());
        for key in keys {
            registry.drop_unreadable(&key).unwrap();
        }
        assert!(registry.unreadable().unwrap().is_empty());
        assert_eq!(registry.params().unwrap().len(), 1);
    }

    #[test]
    fn a_value_that_would_not_read_back_is_never_stored() {
        let registry = Registry::new(Space::memory());
        let msg = registry
            .set_param("x", &Scalar::Number(f64::NAN))
            .unwrap_err()
            .0;
        assert!(
            msg.contains("'param/x'") && msg.contains("would not read back"),
            "{msg}"
        );
        let mut states = BTreeMap::new();
        states.insert(
            "p".to_string(),
            StateValue::Scalar(Scalar::Number(f64::INFINITY)),
        );
        assert!(registry.save_states(states.iter()).is_err());
        assert!(registry.params().unwrap().is_empty());
        assert!(registry.unreadable().unwrap().is_empty());
    }

    #[test]
    fn old_versions_are_pruned_but_never_one_on_the_stack() {
        let registry = Registry::new(Space::memory()).with_keep(3);
        let first = registry.add_version("p", "v1", "", 0).unwrap();
        registry.set_history(&[first.id()]).unwrap();
        for i in 2..=10 {
            registry.add_version("p", &format!("v{i}"), "", 0).unwrap();
        }
        registry.add_version("q", "other", "", 0).unwrap();
        let kept: Vec<String> = registry
            .summaries()
            .unwrap()
            .iter()
            .map(|m| m.id().to_string())
            .collect();
        assert_eq!(kept, ["p@1", "p@8", "p@9", "p@10", "q@1"]);
        assert_eq!(registry.list().unwrap().len(), 5, "sources pruned too");
        assert!(registry.version("p", Some(2)).unwrap().is_none());
        assert_eq!(
            registry.version("p", Some(1)).unwrap().unwrap().source,
            "v1"
        );
        // Numbers keep counting up: none is given out twice.
        assert_eq!(registry.add_version("p", "v11", "", 0).unwrap().version, 11);
    }

    #[test]
    fn a_registry_without_listings_gets_them_once() {
        let space = Space::memory();
        let old = VersionRecord {
            name: "p".into(),
            version: 1,
            source: "x".into(),
            loaded_at_ms: 5,
            author: "me".into(),
        };
        // What a release before listings wrote: sources only, one of them damaged.
        space
            .write(
                &[
                    (version_key("p", 1), Some(serde_json::to_vec(&old).unwrap())),
                    (version_key("p", 2), Some(b"{".to_vec())),
                ],
                true,
            )
            .unwrap();
        let registry = Registry::new(space);
        let listed = registry.summaries().unwrap();
        assert_eq!(listed[0], old.meta());
        assert_eq!(
            (listed[1].version, listed[1].author.as_str()),
            (2, UNREADABLE_AUTHOR)
        );
        assert_eq!(registry.latest("p").unwrap(), Some(old));
        assert_eq!(registry.add_version("p", "y", "", 0).unwrap().version, 3);
        registry.drop_unreadable("v/p/0000000002").unwrap();
        assert_eq!(registry.summaries().unwrap().len(), 2);
    }

    #[test]
    fn names_are_checked() {
        assert!(validate_name("fixed-size_2.lua").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("a/b").is_err());
        assert!(validate_name(&"x".repeat(65)).is_err());
    }

    #[test]
    fn params_and_states_round_trip() {
        let registry = Registry::new(Space::memory());
        registry.set_param("target", &Scalar::Number(5.0)).unwrap();
        assert_eq!(registry.params().unwrap()["target"], Scalar::Number(5.0));
        let mut states = BTreeMap::new();
        states.insert("p".to_string(), StateValue::Scalar(Scalar::Number(3.0)));
        registry.save_states(states.iter()).unwrap();
        assert_eq!(registry.states().unwrap(), states);
    }
}
