//! Applies a live policy's decision to the cache, in batches so clients wait for at most one
//! batch of evictions at a time (`Db::evict`).

use crate::db::{Db, EVICT_BATCH};
use cache::Capacity;
use policy::Action;

/// What applying an action did, for the journal and `POLICY STATUS`.
pub struct Applied {
    /// `POLICY STATUS`'s `last_decision`.
    pub decision: String,
    /// A capacity change worth a journal line, when the capacity changed.
    pub capacity_change: Option<String>,
}

pub fn apply(db: &Db, action: Action) -> Applied {
    let (decision, capacity_change) = match action {
        Action::None => ("none".to_string(), None),
        Action::Evict(n) => {
            let evicted = db.evict(n);
            (format!("evict {n} (evicted {evicted})"), None)
        }
        Action::SetCapacity(n) => {
            let before = db.cache_snapshot().capacity.objects;
            let change = (before != Some(n)).then(|| {
                let evicted = set_object_capacity(db, Some(n));
                format!(
                    "capacity {} -> {n} objects (evicted {evicted})",
                    before.map_or("unlimited".to_string(), |b| b.to_string())
                )
            });
            (format!("capacity {n}"), change)
        }
    };
    Applied {
        decision,
        capacity_change,
    }
}

/// Sets the object capacity (keeping the byte limit), evicting down to it in batches first;
/// returns objects evicted.
pub fn set_object_capacity(db: &Db, objects: Option<u64>) -> u64 {
    let mut evicted = 0;
    if let Some(target) = objects {
        loop {
            let excess = db.cache_snapshot().objects.saturating_sub(target);
            if excess == 0 {
                break;
            }
            let done = db.evict(excess.min(EVICT_BATCH));
            evicted += done;
            if done == 0 {
                break;
            }
        }
    }
    let bytes = db.cache_snapshot().capacity.bytes;
    evicted + db.set_capacity(Capacity { bytes, objects })
}
