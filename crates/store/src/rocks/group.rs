//! Group commit of single-key writes: the writes of concurrent clients (and of a pipeline's
//! requests on several connections) go to RocksDB as one write batch, so they share one pass
//! through RocksDB's write path and one write-ahead-log record instead of paying each.
//!
//! Leader/follower: a writer adds its put to the open batch. The first to arrive when nobody
//! leads becomes the leader; it yields once (on a current-thread or busy runtime that is what
//! lets the other ready connections add their writes), then takes the batch, writes it and
//! wakes everybody in it with the one result: a failed batch fails every writer in it. Writers
//! that arrived while a batch was being written form the next one, and one of them leads it.
//! A put returns once its batch is in RocksDB (memtable and log buffer), exactly as a direct
//! `put` did, so what callers may assume and when they must commit (see `Store::commit`) is
//! unchanged.

use super::batch::Batch;
use super::StoreError;
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::Notify;

/// The batch being filled and who, if anyone, is writing.
pub(super) struct GroupCommit {
    state: Mutex<Open>,
}

struct Open {
    batch: Batch,
    outcome: Arc<Outcome>,
    /// A leader has claimed the open batch (or is writing the previous one): arrivals follow.
    leading: bool,
}

/// What happened to one batch: set once by its leader.
struct Outcome {
    result: OnceLock<Result<(), StoreError>>,
    done: Notify,
}

impl Outcome {
    fn new() -> Arc<Outcome> {
        Arc::new(Outcome {
            result: OnceLock::new(),
            done: Notify::new(),
        })
    }
}

impl Default for GroupCommit {
    fn default() -> GroupCommit {
        GroupCommit {
            state: Mutex::new(Open {
                batch: Batch::default(),
                outcome: Outcome::new(),
                leading: false,
            }),
        }
    }
}

/// Releases leadership if a leader's future is dropped before it wrote its batch, so the
/// writers behind it are not left waiting for nobody.
struct Claim<'a> {
    group: &'a GroupCommit,
    armed: bool,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if self.armed {
            let outcome = {
                let mut open = self.group.lock();
                open.leading = false;
                open.outcome.clone()
            };
            outcome.done.notify_waiters();
        }
    }
}

impl GroupCommit {
    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds a write (`add` appends to the batch) and returns once the batch holding it has been
    /// written by `write`, with that batch's result.
    pub(super) async fn submit(
        &self,
        add: impl FnOnce(&mut Batch),
        write: &(dyn Fn(Batch) -> Result<(), StoreError> + Sync),
    ) -> Result<(), StoreError> {
        let (outcome, lead) = {
            let mut open = self.lock();
            add(&mut open.batch);
            let lead = !open.leading;
            open.leading = true;
            (open.outcome.clone(), lead)
        };
        if lead {
            self.lead(write).await;
        }
        loop {
            let notified = outcome.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(result) = outcome.result.get() {
                return result.clone();
            }
            // The leader before us finished and left our batch without one: take it.
            let take = {
                let mut open = self.lock();
                let ours = Arc::ptr_eq(&open.outcome, &outcome);
                let take = ours && !open.leading;
                if take {
                    open.leading = true;
                }
                take
            };
            if take {
                self.lead(write).await;
                continue;
            }
            notified.await;
        }
    }

    /// Called with `leading` claimed: lets the other ready writers join, writes the open batch
    /// and publishes its result, then wakes the next batch's writers so one of them leads it.
    async fn lead(&self, write: &(dyn Fn(Batch) -> Result<(), StoreError> + Sync)) {
        let mut claim = Claim {
            group: self,
            armed: true,
        };
        tokio::task::yield_now().await;
        let (batch, outcome) = {
            let mut open = self.lock();
            let batch = std::mem::take(&mut open.batch);
            let outcome = std::mem::replace(&mut open.outcome, Outcome::new());
            (batch, outcome)
        };
        // From here the batch is ours to finish even if this future is dropped: nothing awaits.
        let result = write(batch);
        let _ = outcome.result.set(result);
        let next = {
            let mut open = self.lock();
            open.leading = false;
            claim.armed = false;
            (!open.batch.is_empty()).then(|| open.outcome.clone())
        };
        outcome.done.notify_waiters();
        if let Some(next) = next {
            next.done.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Many writers on one thread: every write is acknowledged, each exactly once in some
    /// batch, and they were grouped (fewer batches than writes).
    #[tokio::test(flavor = "current_thread")]
    async fn concurrent_writers_are_all_written_in_shared_batches() {
        let group = Arc::new(GroupCommit::default());
        let batches = Arc::new(AtomicUsize::new(0));
        let written = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..200u32 {
            let (group, batches, written) = (group.clone(), batches.clone(), written.clone());
            tasks.push(tokio::spawn(async move {
                let write = move |batch: Batch| {
                    batches.fetch_add(1, Ordering::Relaxed);
                    written.lock().unwrap().push(batch.len());
                    Ok(())
                };
                group.submit(|b| b.put(i.to_be_bytes(), b"v"), &write).await
            }));
        }
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        let sizes = written.lock().unwrap().clone();
        assert_eq!(
            sizes.iter().sum::<usize>(),
            200,
            "every write in exactly one batch"
        );
        assert!(
            batches.load(Ordering::Relaxed) < 200,
            "writers were grouped: {sizes:?}"
        );
    }

    /// A failed batch fails every writer in it, not only its leader; later batches succeed.
    #[tokio::test(flavor = "current_thread")]
    async fn a_failed_batch_fails_every_writer_in_it() {
        let group = Arc::new(GroupCommit::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..50u32 {
            let (group, calls) = (group.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                let write = move |_batch: Batch| {
                    if calls.fetch_add(1, Ordering::Relaxed) == 0 {
                        Err(StoreError("disk full".into()))
                    } else {
                        Ok(())
                    }
                };
                group.submit(|b| b.put(i.to_be_bytes(), b"v"), &write).await
            }));
        }
        let mut failed = 0;
        for task in tasks {
            if let Err(e) = task.await.unwrap() {
                assert_eq!(e.0, "disk full");
                failed += 1;
            }
        }
        // All 50 joined the first batch before its leader resumed from its yield.
        assert_eq!(failed, 50, "the whole first batch failed");
        let ok = group.submit(|b| b.put(b"later", b"v"), &|_| Ok(())).await;
        assert!(ok.is_ok());
    }

    /// Writers on several threads hammering the group: nobody is lost or left waiting.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn writers_on_many_threads_all_finish() {
        let group = Arc::new(GroupCommit::default());
        let total = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for t in 0..16u32 {
            let (group, total) = (group.clone(), total.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0..200u32 {
                    let total = total.clone();
                    let write = move |batch: Batch| {
                        total.fetch_add(batch.len(), Ordering::Relaxed);
                        Ok(())
                    };
                    group
                        .submit(|b| b.put((t << 16 | i).to_be_bytes(), b"v"), &write)
                        .await
                        .unwrap();
                }
            }));
        }
        let all = async {
            for task in tasks {
                task.await.unwrap();
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(60), all)
            .await
            .expect("no writer is left waiting");
        assert_eq!(total.load(Ordering::Relaxed), 16 * 200);
    }
}
