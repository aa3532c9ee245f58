//! Where libraries are kept, as `LIB@N` versions: the node's own store (the policy column
//! family, under `fn/lib/<name>`, written with a sync, so a loaded library survives a crash),
//! or with `--cluster` the cluster's etcd (`cluster::FunctionStore`), so every node runs the
//! same version. Either way one record per library holds its kept versions, newest active
//! (see [`LibraryHistory`]).

use super::library::LibraryHistory;
use crate::live::space::Space;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

const LOCAL_PREFIX: &[u8] = b"fn/lib/";

pub enum Registry {
    /// A node on its own. `revision` counts changes made since start (only this node
    /// writes, so its copy is always current); `writing` makes read-modify-writes of two
    /// connections one after the other.
    Local {
        space: Space,
        revision: AtomicI64,
        writing: Mutex<()>,
    },
    Cluster(Box<::cluster::FunctionStore>),
}

/// Every library with its versions, as of `revision`.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    pub libraries: Vec<LibraryHistory>,
    pub revision: i64,
}

fn unreachable(e: impl std::fmt::Display) -> String {
    format!(
        "CLUSTERDOWN the cluster's function registry is unreachable ({e}); function changes \
         and calls are refused until etcd answers"
    )
}

impl Registry {
    pub fn local(space: Space) -> Registry {
        Registry::Local {
            space,
            revision: AtomicI64::new(1),
            writing: Mutex::new(()),
        }
    }

    /// The revision of the latest change anywhere: in a cluster one linearizable read, so a
    /// node that answers with what it has installed at this revision or later never runs a
    /// version older than one already acknowledged.
    pub async fn revision(&self) -> Result<i64, String> {
        match self {
            Registry::Local { revision, .. } => Ok(revision.load(Ordering::Acquire)),
            Registry::Cluster(store) => store.revision().await.map_err(unreachable),
        }
    }

    /// Every library; an unreadable record is skipped with a log line (it never stops a
    /// start).
    pub async fn snapshot(&self) -> Result<Snapshot, String> {
        let (raw, revision) = match self {
            Registry::Local {
                space, revision, ..
            } => {
                let revision = revision.load(Ordering::Acquire);
                let raw = space
                    .scan(LOCAL_PREFIX)
                    .map_err(|e| format!("ERR reading the function registry: {e}"))?
                    .into_iter()
                    .map(|(key, value)| {
                        (
                            String::from_utf8_lossy(&key[LOCAL_PREFIX.len()..]).into_owned(),
                            value,
                        )
                    })
                    .collect::<Vec<_>>();
                (raw, revision)
            }
            Registry::Cluster(store) => {
                let snapshot = store.snapshot().await.map_err(unreachable)?;
                (snapshot.libraries, snapshot.revision)
            }
        };
        let mut libraries = Vec::new();
        for (name, value) in raw {
            match LibraryHistory::decode(&value) {
                Ok(history) => libraries.push(history),
                Err(e) => store::log_line!("mantle: functions: library '{name}': {e}"),
            }
        }
        Ok(Snapshot {
            libraries,
            revision,
        })
    }

    /// Changes library `name` with `change` (which may refuse, with the reply to send) and
    /// stores it durably before returning.
    pub async fn update<T>(
        &self,
        name: &str,
        mut change: impl FnMut(&mut LibraryHistory) -> Result<T, String>,
    ) -> Result<T, String> {
        let mut result = None;
        let mut apply = |current: Option<&[u8]>| -> Result<Vec<u8>, String> {
            let mut history = match current {
                Some(raw) => LibraryHistory::decode(raw).unwrap_or_else(|_| {
                    // An unreadable record is replaced, but its numbers are not reused.
                    let mut fresh = LibraryHistory::new(name);
                    fresh.next_version = 1 << 20;
                    fresh
                }),
                None => LibraryHistory::new(name),
            };
            result = Some(change(&mut history)?);
            Ok(history.encode())
        };
        match self {
            Registry::Local {
                space,
                revision,
                writing,
            } => {
                let _one_at_a_time = writing.lock().unwrap_or_else(|p| p.into_inner());
                let key = [LOCAL_PREFIX, name.as_bytes()].concat();
                let current = space
                    .get(&key)
                    .map_err(|e| format!("ERR reading the function registry: {e}"))?;
                let value = apply(current.as_deref())?;
                space
                    .write(&[(key, Some(value))], true)
                    .map_err(|e| format!("ERR storing the library: {e}"))?;
                revision.fetch_add(1, Ordering::AcqRel);
            }
            Registry::Cluster(store) => {
                store.update(name, apply).await.map_err(unreachable)??;
            }
        }
        Ok(result.expect("the change ran"))
    }
}
