//! How accepted connections are served: by default one Tokio task per connection; with
//! `--connection-groups N`, in N groups, one task per group.
//!
//! Why groups: Tokio's multi-thread scheduler wakes a parked worker (a futex wake, then a
//! context switch and a cross-CPU wake-up) whenever a poll of the I/O driver leaves more than
//! one task ready. With a task per connection, four round-trip clients cost about 0.25 futex
//! calls and 3 microseconds of kernel CPU per request more than one worker serving them all
//! (issue 27: the ZLOG.NEXT round trip against redis-server INCR). The connections of one
//! group that turn ready together are one task, so another worker is woken only when two
//! groups have work. Groups are ordinary tasks, so an idle worker still steals a waiting group.
//!
//! The cost, and why it is not the default: a group serves its connections on one core at a
//! time, so many busy clients in one group get one core's worth of service, and a command that
//! holds its thread (a long synchronous call) delays the other connections of its group, as
//! one Redis thread delays all of its clients.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use tokio::task::JoinSet;

/// One connection's whole life (its handler).
pub type Served = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Connections a group polls before it lets the worker run other tasks (it is rescheduled at
/// once): one busy group cannot starve the others or the runtime's own tasks.
const POLLS_PER_TURN: usize = 128;

/// The groups of a server's connections.
pub struct ConnectionGroups {
    groups: Vec<Arc<Shared>>,
    /// The groups' tasks, or (no groups) one task per connection.
    tasks: JoinSet<()>,
    /// No groups: each connection is a task of its own (the default).
    per_task: bool,
    draining: bool,
}

/// What a group's task shares with the accept loop and with its connections' wakers.
struct Shared {
    state: Mutex<State>,
    /// Connections the group serves now: a new one goes to the group with the fewest.
    live: AtomicUsize,
}

#[derive(Default)]
struct State {
    /// Connections woken since the group last looked (indices into its slots).
    ready: Vec<usize>,
    arrivals: Vec<Served>,
    /// The group task's waker, from its last poll.
    waker: Option<Waker>,
    /// The group is polling its connections now and looks at `ready` again before it
    /// sleeps. A connection woken meanwhile (by the I/O driver on another worker) is only
    /// queued: waking the running task would make Tokio treat it as a yield and wake
    /// another worker for it, the very cost the groups exist to save.
    polling: bool,
    /// No more arrivals: the group ends once its last connection has.
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing runs under the lock that can panic; a poisoned lock still holds sound state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    fn wake_group(&self) {
        if !self.polling {
            if let Some(waker) = &self.waker {
                waker.wake_by_ref();
            }
        }
    }
}

impl ConnectionGroups {
    /// Starts `count` groups (at least one) on the current runtime.
    pub fn start(count: usize) -> ConnectionGroups {
        let mut tasks = JoinSet::new();
        let groups = (0..count.max(1))
            .map(|_| {
                let shared = Arc::new(Shared {
                    state: Mutex::new(State::default()),
                    live: AtomicUsize::new(0),
                });
                tasks.spawn(Group::new(shared.clone()));
                shared
            })
            .collect();
        ConnectionGroups {
            groups,
            tasks,
            per_task: false,
            draining: false,
        }
    }

    /// No groups: each connection runs as a task of its own, which any idle worker can take.
    pub fn per_task() -> ConnectionGroups {
        ConnectionGroups {
            groups: Vec::new(),
            tasks: JoinSet::new(),
            per_task: true,
            draining: false,
        }
    }

    /// `requested` groups (`--connection-groups`), at most one per worker of the current
    /// runtime (a group runs on one worker at a time); 0: no groups, a task per connection.
    /// Why groups are not the default: one group serves its clients on one core at a time.
    /// With few round-trip clients that saves the wake-up of a second worker per request
    /// (bench/RESULTS.md, h-next2), but with many busy clients it gives up the second core:
    /// on 2 cores, 50 clients pipelining 16 GETs got 0.66-0.74x of Redis in one group against
    /// 0.81-0.90x with a task per connection (lead's quiet re-run, 2026-11-28).
    pub fn for_runtime(requested: usize) -> ConnectionGroups {
        if requested == 0 {
            return ConnectionGroups::per_task();
        }
        let workers = tokio::runtime::Handle::current().metrics().num_workers();
        ConnectionGroups::start(group_count(requested, workers))
    }

    pub fn count(&self) -> usize {
        self.groups.len()
    }

    /// Connections served now, over all groups.
    pub fn live(&self) -> usize {
        if self.per_task {
            return self.tasks.len();
        }
        self.groups
            .iter()
            .map(|g| g.live.load(Ordering::Relaxed))
            .sum()
    }

    /// Serves `connection` in the group serving the fewest.
    pub fn serve(&mut self, connection: Served) {
        if self.per_task {
            if !self.draining {
                self.tasks.spawn(connection);
            }
            return;
        }
        let Some(group) = self
            .groups
            .iter()
            .min_by_key(|g| g.live.load(Ordering::Relaxed))
        else {
            return; // Draining or aborted: the connection is dropped, i.e. closed.
        };
        group.live.fetch_add(1, Ordering::Relaxed);
        let mut state = group.lock();
        state.arrivals.push(connection);
        state.wake_group();
    }

    /// Whether [`ConnectionGroups::reap`] has an ended or running connection task to wait for.
    pub fn has_tasks(&self) -> bool {
        self.per_task && !self.tasks.is_empty()
    }

    /// Waits for one connection task to end and frees what the set keeps of it (a task per
    /// connection only; the accept loop calls it whenever [`ConnectionGroups::has_tasks`]).
    pub async fn reap(&mut self) {
        let _ = self.tasks.join_next().await;
    }

    /// Takes no more connections and waits until every one served has ended.
    pub async fn drain(&mut self) {
        self.draining = true;
        for group in self.groups.drain(..) {
            let mut state = group.lock();
            state.closed = true;
            state.wake_group();
        }
        while self.tasks.join_next().await.is_some() {}
    }

    /// Ends every connection now (after a drain that took too long).
    pub fn abort(&mut self) {
        self.groups.clear();
        self.tasks.abort_all();
    }
}

fn group_count(requested: usize, workers: usize) -> usize {
    requested.min(workers).max(1)
}

/// A group's task: polls the connections that were woken, and takes new ones.
struct Group {
    shared: Arc<Shared>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// The woken connections being polled (kept to reuse its allocation).
    batch: Vec<usize>,
    arrivals: Vec<Served>,
}

struct Slot {
    served: Option<Isolated>,
    queued: Arc<ConnectionWaker>,
    /// `queued` as a waker, made once: Tokio's I/O keeps the waker it last saw when it
    /// `will_wake` the same.
    waker: Waker,
}

/// Queues its connection on its group's ready list and wakes the group (unless it is polling).
struct ConnectionWaker {
    index: usize,
    /// Already on the ready list: a second wake before the poll adds nothing.
    queued: AtomicBool,
    group: Arc<Shared>,
}

impl Wake for ConnectionWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut state = self.group.lock();
        state.ready.push(self.index);
        state.wake_group();
    }
}

impl Group {
    fn new(shared: Arc<Shared>) -> Group {
        Group {
            shared,
            slots: Vec::new(),
            free: Vec::new(),
            batch: Vec::new(),
            arrivals: Vec::new(),
        }
    }

    /// Gives each arrival a slot, and queues it for its first poll.
    fn admit(&mut self) {
        for served in self.arrivals.drain(..) {
            let index = self.free.pop().unwrap_or(self.slots.len());
            // A fresh waker per connection: one left behind by the slot's last connection
            // can at most make the new one be polled once for nothing.
            let waker = Arc::new(ConnectionWaker {
                index,
                queued: AtomicBool::new(true),
                group: self.shared.clone(),
            });
            let slot = Slot {
                served: Some(Isolated(served)),
                waker: Waker::from(waker.clone()),
                queued: waker,
            };
            if index == self.slots.len() {
                self.slots.push(slot);
            } else {
                self.slots[index] = slot;
            }
            self.batch.push(index);
        }
    }

    /// Polls the connections in `batch`; returns how many it polled.
    fn poll_batch(&mut self) -> usize {
        let polled = self.batch.len();
        for index in self.batch.drain(..) {
            let Some(slot) = self.slots.get_mut(index) else {
                continue;
            };
            let Some(served) = slot.served.as_mut() else {
                continue;
            };
            // Cleared first: a wake during this poll queues it again.
            slot.queued.queued.store(false, Ordering::Release);
            if Pin::new(served)
                .poll(&mut Context::from_waker(&slot.waker))
                .is_ready()
            {
                slot.served = None;
                self.free.push(index);
                self.shared.live.fetch_sub(1, Ordering::Relaxed);
            }
        }
        polled
    }
}

impl Future for Group {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let group = &mut *self;
        let mut polled = 0;
        loop {
            {
                let mut state = group.shared.lock();
                if !state
                    .waker
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
                {
                    state.waker = Some(cx.waker().clone());
                }
                std::mem::swap(&mut group.batch, &mut state.ready);
                std::mem::swap(&mut group.arrivals, &mut state.arrivals);
                if group.batch.is_empty() && group.arrivals.is_empty() {
                    state.polling = false;
                    let ended = state.closed && group.shared.live.load(Ordering::Relaxed) == 0;
                    return if ended {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    };
                }
                if polled >= POLLS_PER_TURN {
                    // The woken stay queued for the next turn.
                    std::mem::swap(&mut group.batch, &mut state.ready);
                    std::mem::swap(&mut group.arrivals, &mut state.arrivals);
                    state.polling = false;
                    drop(state);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                state.polling = true;
            }
            group.admit();
            polled += group.poll_batch();
        }
    }
}

/// A connection whose panic ends only that connection (as it would in a task of its own; the
/// panic hook has already reported it), not its whole group.
struct Isolated(Served);

impl Future for Isolated {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let served = &mut self.0;
        std::panic::catch_unwind(AssertUnwindSafe(|| served.as_mut().poll(cx)))
            .unwrap_or(Poll::Ready(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::sync::oneshot;

    #[test]
    fn group_counts_follow_the_workers() {
        assert_eq!(group_count(1, 2), 1);
        assert_eq!(group_count(3, 8), 3);
        assert_eq!(group_count(16, 8), 8, "no more groups than workers");
    }

    #[tokio::test]
    async fn new_connections_go_to_the_group_serving_fewest() {
        let mut groups = ConnectionGroups::start(3);
        let mut releases = Vec::new();
        for _ in 0..6 {
            let (release, wait) = oneshot::channel::<()>();
            releases.push(release);
            groups.serve(Box::pin(async move {
                let _ = wait.await;
            }));
        }
        let per_group: Vec<usize> = groups
            .groups
            .iter()
            .map(|g| g.live.load(Ordering::Relaxed))
            .collect();
        assert_eq!(per_group, vec![2, 2, 2]);
        drop(releases);
        tokio::time::timeout(Duration::from_secs(5), groups.drain())
            .await
            .expect("drained once every connection ended");
        assert_eq!(groups.count(), 0);
    }

    #[tokio::test]
    async fn a_panicking_connection_ends_alone() {
        let mut groups = ConnectionGroups::start(1);
        let (release, wait) = oneshot::channel::<()>();
        let (done, finished) = oneshot::channel::<()>();
        groups.serve(Box::pin(async move {
            let _ = wait.await;
            let _ = done.send(());
        }));
        groups.serve(Box::pin(async {
            tokio::task::yield_now().await;
            panic!("a handler bug");
        }));
        // The panicking one has ended and is no longer counted; the other is still served.
        for _ in 0..100 {
            if groups.live() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(groups.live(), 1);
        release.send(()).unwrap();
        finished.await.expect("the other connection ran to its end");
        groups.drain().await;
    }

    #[tokio::test]
    async fn abort_ends_connections_that_would_not_end() {
        let mut groups = ConnectionGroups::start(2);
        let (_never, wait) = oneshot::channel::<()>();
        let (dropped_tx, dropped) = oneshot::channel::<()>();
        struct OnDrop(Option<oneshot::Sender<()>>);
        impl Drop for OnDrop {
            fn drop(&mut self) {
                let _ = self.0.take().unwrap().send(());
            }
        }
        let guard = OnDrop(Some(dropped_tx));
        groups.serve(Box::pin(async move {
            let _guard = guard;
            let _ = wait.await;
        }));
        let drained = tokio::time::timeout(Duration::from_millis(50), groups.drain()).await;
        assert!(
            drained.is_err(),
            "a connection still open keeps the drain waiting"
        );
        groups.abort();
        tokio::time::timeout(Duration::from_secs(5), dropped)
            .await
            .expect("abort drops the connection")
            .unwrap();
    }
}
