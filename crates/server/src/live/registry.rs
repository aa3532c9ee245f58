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
//! `v/<name>/<N, 10 digits>` a version; `active` the activation stack (last = active);
//! `param/<k>` a parameter; `state/<name>` a policy's state; `wedged` the version whose tick
//! was running too long (see `watchdog`).

use super::journal::Event;
use super::space::{Change, Space};
use crate::store::StoreError;
use policy::{Params, Scalar, StateValue};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Activations remembered for rollback; older ones are forgotten.
pub const MAX_HISTORY: usize = 32;
/// Longest policy name (names are `[A-Za-z0-9_.-]`).
pub const MAX_NAME_LEN: usize = 64;
/// Largest policy source accepted.
pub const MAX_SOURCE_BYTES: usize = 1 << 20;

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

fn version_prefix(name: &str) -> Vec<u8> {
    format!("v/{name}/").into_bytes()
}

fn version_key(name: &str, version: u32) -> Vec<u8> {
    format!("v/{name}/{version:010}").into_bytes()
}

fn decode<T: for<'de> Deserialize<'de>>(key: &[u8], raw: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(raw).map_err(|e| {
        StoreError(format!(
            "policy registry record '{}' is unreadable: {e}",
            String::from_utf8_lossy(key)
        ))
    })
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serialising plain data structures to JSON cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

impl Registry {
    pub fn new(space: Space) -> Registry {
        Registry {
            space,
            shared: None,
        }
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
            return shared.add_version(name, source, author, now_ms);
        }
        let version = self.latest(name)?.map_or(1, |r| r.version + 1);
        let record = VersionRecord {
            name: name.to_string(),
            version,
            source: source.to_string(),
            loaded_at_ms: now_ms,
            author: author.to_string(),
        };
        self.space
            .write(&[(version_key(name, version), Some(encode(&record)))], true)?;
        Ok(record)
    }

    pub fn latest(&self, name: &str) -> Result<Option<VersionRecord>, StoreError> {
        if let Some(shared) = &self.shared {
            return shared.version(name, None);
        }
        let versions = self.space.scan(&version_prefix(name))?;
        match versions.last() {
            Some((key, raw)) => Ok(Some(decode(key, raw)?)),
            None => Ok(None),
        }
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

    /// Every version of every policy, by name then version.
    pub fn list(&self) -> Result<Vec<VersionRecord>, StoreError> {
        if let Some(shared) = &self.shared {
            return shared.list();
        }
        self.space
            .scan(b"v/")?
            .iter()
            .map(|(key, raw)| decode(key, raw))
            .collect()
    }

    /// The activation stack: the last entry is the active version, the ones before it were
    /// active earlier (what rollback returns to).
    pub fn history(&self) -> Result<Vec<VersionRef>, StoreError> {
        if let Some(shared) = &self.shared {
            return shared.history();
        }
        match self.space.get(b"active")? {
            Some(raw) => decode(b"active", &raw),
            None => Ok(Vec::new()),
        }
    }

    pub fn set_history(&self, history: &[VersionRef]) -> Result<(), StoreError> {
        let keep = &history[history.len().saturating_sub(MAX_HISTORY)..];
        if let Some(shared) = &self.shared {
            return shared.set_history(keep);
        }
        self.space
            .write(&[(b"active".to_vec(), Some(encode(&keep)))], true)
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
        match self.space.get(b"wedged")? {
            Some(raw) => decode(b"wedged", &raw).map(Some),
            None => Ok(None),
        }
    }

    /// Records (or with `None` erases) the version wedged in a tick. Synced: the record
    /// matters exactly when the process is about to die.
    pub fn set_wedged(&self, version: Option<&VersionRef>) -> Result<(), StoreError> {
        let change = (b"wedged".to_vec(), version.map(encode));
        self.space.write(&[change], true)
    }

    pub fn params(&self) -> Result<Params, StoreError> {
        if let Some(shared) = &self.shared {
            return shared.params();
        }
        let mut params = Params::new();
        for (key, raw) in self.space.scan(b"param/")? {
            let name = String::from_utf8_lossy(&key[b"param/".len()..]).into_owned();
            params.insert(name, decode::<Scalar>(&key, &raw)?);
        }
        Ok(params)
    }

    pub fn set_param(&self, key: &str, value: &Scalar) -> Result<(), StoreError> {
        if let Some(shared) = &self.shared {
            return shared.set_param(key, value);
        }
        let change = (format!("param/{key}").into_bytes(), Some(encode(value)));
        self.space.write(&[change], true)
    }

    pub fn states(&self) -> Result<BTreeMap<String, StateValue>, StoreError> {
        let mut states = BTreeMap::new();
        for (key, raw) in self.space.scan(b"state/")? {
            let name = String::from_utf8_lossy(&key[b"state/".len()..]).into_owned();
            states.insert(name, decode::<StateValue>(&key, &raw)?);
        }
        Ok(states)
    }

    /// Persists changed states in one batch (reaches the OS: survives a killed process).
    pub fn save_states<'a>(
        &self,
        changed: impl Iterator<Item = (&'a String, &'a StateValue)>,
    ) -> Result<(), StoreError> {
        let changes: Vec<Change> = changed
            .map(|(name, value)| (format!("state/{name}").into_bytes(), Some(encode(value))))
            .collect();
        if changes.is_empty() {
            return Ok(());
        }
        self.space.write(&changes, false)
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
