//! The capacity the operator configured: `--max-keys`/`--maxmemory`, or the last `CONFIG SET`
//! of either. Policies change the cache's capacity as they run; this is what it returns to
//! when none manages it any more (a rollback to "no management"). A `CONFIG SET` is kept in
//! the registry — the node's own space, or etcd with `--cluster` (per node) — so it survives
//! a restart, for as long as the node is started with the same flags: starting with other
//! capacity flags says the operator wants those, and they win.

use super::registry::Shared;
use super::space::Space;
use cache::Capacity;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use store::StoreError;

/// Key of the record in the node's space.
const KEY: &[u8] = b"config/capacity";

/// The stored record: the value `CONFIG SET` gave, and the flags it was given under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    flags: Limits,
    set: Limits,
}

/// [`Capacity`] as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Limits {
    objects: Option<u64>,
    bytes: Option<u64>,
}

impl From<Capacity> for Limits {
    fn from(c: Capacity) -> Limits {
        Limits {
            objects: c.objects,
            bytes: c.bytes,
        }
    }
}

impl From<Limits> for Capacity {
    fn from(l: Limits) -> Capacity {
        Capacity {
            objects: l.objects,
            bytes: l.bytes,
        }
    }
}

/// Where the record is kept.
enum Place {
    Node(Space),
    Cluster(Arc<dyn Shared>),
}

impl Place {
    fn read(&self) -> Result<Option<Vec<u8>>, StoreError> {
        match self {
            Place::Node(space) => space.get(KEY),
            Place::Cluster(shared) => shared.node_capacity(),
        }
    }

    fn write(&self, raw: Vec<u8>) -> Result<(), StoreError> {
        match self {
            Place::Node(space) => space.write(&[(KEY.to_vec(), Some(raw))], true),
            Place::Cluster(shared) => shared.set_node_capacity(raw),
        }
    }
}

pub struct Baseline {
    flags: Capacity,
    current: Mutex<Capacity>,
    place: Place,
}

impl Baseline {
    /// The baseline of a node started with capacity flags `flags`: a `CONFIG SET` recorded
    /// under the same flags, else the flags. An unreadable record is reported and ignored.
    pub fn open(space: Space, shared: Option<Arc<dyn Shared>>, flags: Capacity) -> Baseline {
        let place = match shared {
            Some(shared) => Place::Cluster(shared),
            None => Place::Node(space),
        };
        let recorded = match place.read() {
            Ok(Some(raw)) => match serde_json::from_slice::<Record>(&raw) {
                Ok(record) => Some(record),
                Err(e) => {
                    store::log_line!("mantle: ignoring the recorded CONFIG SET capacity: {e}");
                    None
                }
            },
            Ok(None) => None,
            Err(e) => {
                store::log_line!("mantle: cannot read the recorded CONFIG SET capacity: {e}");
                None
            }
        };
        let current = match recorded {
            Some(record) if record.flags == Limits::from(flags) => record.set.into(),
            _ => flags,
        };
        Baseline {
            flags,
            current: Mutex::new(current),
            place,
        }
    }

    /// The capacity the cache has when no policy manages it.
    pub fn get(&self) -> Capacity {
        *self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `capacity` (`CONFIG SET`) durably, then makes it the baseline. Blocks on the
    /// store or etcd: call it off the runtime's workers.
    pub fn set(&self, capacity: Capacity) -> Result<(), StoreError> {
        let record = Record {
            flags: self.flags.into(),
            set: capacity.into(),
        };
        let raw = serde_json::to_vec(&record).map_err(|e| StoreError(e.to_string()))?;
        self.place.write(raw)?;
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = capacity;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: u64) -> Capacity {
        Capacity {
            objects: Some(n),
            bytes: None,
        }
    }

    #[test]
    fn a_config_set_outlives_a_restart_with_the_same_flags_only() {
        let space = Space::memory();
        let first = Baseline::open(space.clone(), None, keys(5000));
        assert_eq!(first.get(), keys(5000));
        first.set(keys(7000)).unwrap();
        assert_eq!(first.get(), keys(7000));
        // Restarted with the same flags: the CONFIG SET holds.
        assert_eq!(
            Baseline::open(space.clone(), None, keys(5000)).get(),
            keys(7000)
        );
        // Restarted with other flags: they win.
        assert_eq!(
            Baseline::open(space.clone(), None, keys(100)).get(),
            keys(100)
        );
    }

    #[test]
    fn an_unreadable_record_falls_back_to_the_flags() {
        let space = Space::memory();
        space
            .write(&[(KEY.to_vec(), Some(b"{not json".to_vec()))], true)
            .unwrap();
        assert_eq!(Baseline::open(space, None, keys(5)).get(), keys(5));
    }
}
