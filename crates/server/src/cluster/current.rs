//! The routing table in use, read by every request and swapped in whole by a rebuild.
//!
//! A request holds the table it was routed by (an `Arc`) until it has run, and a pause waits
//! until every replaced table's strong count is zero (`ClusterNode::pause`). Reading the
//! table through a lock and cloning its `Arc` wrote two cache lines shared by every worker
//! thread per request (the lock's state on taking and on leaving it). Instead each thread
//! remembers the table it last read as a `Weak` tagged with the table's generation; a request
//! whose thread remembers the current generation upgrades that `Weak`, which writes only the
//! table's strong count, and no lock is taken.
//!
//! Why a replaced table is never used once a pause has seen it unused: `Weak::upgrade` fails
//! once the strong count reached zero, and the count reaches zero only after every upgrade
//! that succeeded has been dropped (they are all writes to that one counter, in one order).
//! So a request either holds the table where the pause's wait counts it, or does not get it.
//! The generation, checked again after the upgrade, makes requests that start after a swap
//! use the new table instead of keeping an old one alive that others still hold.

use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};

/// Alone on its cache lines: read by every request, so nothing written per request may
/// share them.
#[repr(align(128))]
struct Alone<T>(T);

/// Generations are unique in the process, so a thread's remembered table can only match
/// the node (and the swap) it was read from.
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

fn next_generation() -> u64 {
    GENERATIONS.fetch_add(1, Ordering::Relaxed)
}

struct Remembered {
    generation: u64,
    table: Weak<dyn Any + Send + Sync>,
}

thread_local! {
    static LAST_READ: RefCell<Option<Remembered>> = const { RefCell::new(None) };
}

/// A table swapped in whole, read without a lock (see the module doc).
pub struct Current<T> {
    table: RwLock<Arc<T>>,
    generation: Alone<AtomicU64>,
}

impl<T: Send + Sync + 'static> Current<T> {
    pub fn new(table: Arc<T>) -> Current<T> {
        Current {
            table: RwLock::new(table),
            generation: Alone(AtomicU64::new(next_generation())),
        }
    }

    /// The table in use now.
    #[inline]
    pub fn load(&self) -> Arc<T> {
        let generation = self.generation.0.load(Ordering::Acquire);
        let remembered = LAST_READ
            .try_with(|last| match &*last.borrow() {
                Some(r) if r.generation == generation => r.table.upgrade(),
                _ => None,
            })
            .ok()
            .flatten();
        if let Some(table) = remembered {
            if self.generation.0.load(Ordering::Acquire) == generation {
                if let Ok(table) = table.downcast::<T>() {
                    return table;
                }
            }
        }
        self.load_and_remember()
    }

    /// The table, read under the lock, remembered for this thread's next requests.
    #[cold]
    fn load_and_remember(&self) -> Arc<T> {
        let (table, generation) = {
            let current = self.table.read().unwrap_or_else(|e| e.into_inner());
            (
                Arc::clone(&current),
                self.generation.0.load(Ordering::Acquire),
            )
        };
        let weak: Weak<dyn Any + Send + Sync> = Arc::downgrade(&table) as _;
        // A thread being torn down has no slot left: the table is then read unremembered.
        let _ = LAST_READ.try_with(|last| {
            *last.borrow_mut() = Some(Remembered {
                generation,
                table: weak,
            })
        });
        table
    }

    /// Puts `table` in use and returns the one it replaces.
    pub fn replace(&self, table: Arc<T>) -> Arc<T> {
        let mut current = self.table.write().unwrap_or_else(|e| e.into_inner());
        self.generation
            .0
            .store(next_generation(), Ordering::Release);
        std::mem::replace(&mut *current, table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread that read a table before a swap reads the new one after it, though it
    /// remembers the old one and the old one is still alive.
    #[test]
    fn a_swap_is_seen_by_the_thread_that_remembers_the_old_table() {
        let current = Current::new(Arc::new(1));
        let old = current.load();
        assert_eq!(*current.load(), 1);
        let replaced = current.replace(Arc::new(2));
        assert!(Arc::ptr_eq(&old, &replaced));
        assert_eq!(*current.load(), 2, "the remembered table was replaced");
        assert_eq!(*current.load(), 2);
        let elsewhere = std::thread::scope(|s| s.spawn(|| *current.load()).join().unwrap());
        assert_eq!(elsewhere, 2);
    }

    /// What a pause relies on: a table read through the remembered `Weak` counts in its
    /// strong count while held, and once the count of a replaced table reached zero nobody
    /// gets that table again.
    #[test]
    fn a_remembered_table_is_counted_while_held() {
        let current = Current::new(Arc::new("a"));
        drop(current.load()); // remembered
        let held = current.load();
        let old = current.replace(Arc::new("b"));
        let weak = Arc::downgrade(&old);
        drop(old);
        assert_eq!(weak.strong_count(), 1, "the held request counts");
        drop(held);
        assert_eq!(weak.strong_count(), 0);
        assert_eq!(*current.load(), "b");
        assert_eq!(weak.strong_count(), 0, "the replaced table stays unused");
    }

    /// Two tables read in turn on one thread (two nodes in one process) each give their own.
    #[test]
    fn tables_read_in_turn_on_one_thread_stay_apart() {
        let (a, b) = (Current::new(Arc::new(1u32)), Current::new(Arc::new(2u32)));
        for _ in 0..3 {
            assert_eq!(*a.load(), 1);
            assert_eq!(*b.load(), 2);
        }
        let strings = Current::new(Arc::new(String::from("s")));
        assert_eq!(*strings.load(), "s");
        assert_eq!(*a.load(), 1);
    }

    /// Swaps racing reads on other threads: every read gives a table that was in use at some
    /// point, and once the last swap is done every thread reads the last table.
    #[test]
    fn reads_racing_swaps_settle_on_the_last_table() {
        let current = Current::new(Arc::new(0u64));
        std::thread::scope(|s| {
            let readers: Vec<_> = (0..3)
                .map(|_| {
                    s.spawn(|| {
                        let mut last = 0;
                        for _ in 0..20_000 {
                            let seen = *current.load();
                            assert!(seen >= last, "went back from {last} to {seen}");
                            last = seen;
                        }
                    })
                })
                .collect();
            for n in 1..=200u64 {
                current.replace(Arc::new(n));
            }
            for r in readers {
                r.join().unwrap();
            }
        });
        let after = std::thread::scope(|s| s.spawn(|| *current.load()).join().unwrap());
        assert_eq!(after, 200);
        assert_eq!(*current.load(), 200);
    }
}
