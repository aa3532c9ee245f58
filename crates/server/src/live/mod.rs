//! Live policies: the Lua policy engine (`crates/policy`) running inside the server on a
//! wall-clock tick, fed the server's measured metrics, acting on its cache, and managed by
//! `POLICY` commands through a durable, versioned registry with automatic rollback and a
//! central log (seed 003, Malacology).
//!
//! The engine lives on its own thread, [`runner`]: it ticks on the wall clock, or with
//! `--tick manual` once per `POLICY TICK` (so a replay can tick the server at the trace's tick
//! boundaries and get replay's decisions). A tick that spends its whole instruction
//! budget delays the next tick, never a client. Commands reach a second thread, [`control`],
//! as messages and await the reply, so they never block a worker thread either; that thread
//! never runs Lua, answers what needs no Lua state itself and supervises the engine's thread,
//! so a wedged policy cannot hold up `POLICY STATUS`, `LOG` or `ROLLBACK`. Cache actions take
//! the cache lock in short batches (see `Db::evict`).

pub mod actions;
mod activation;
pub mod baseline;
mod control;
pub mod journal;
mod link;
pub mod registry;
pub mod reply;
mod runner;
pub mod sample;
pub mod shadows;
pub mod space;
mod states;
mod ticker;
pub mod watchdog;

use crate::config::Config;
use crate::db::Db;
/// One event of the policy log: the type a cluster's central log, `POLICY LOG` and the
/// dashboard share.
pub use cluster::{Level, LogEntry as Event, LogKind};
pub use reply::Reply;
use space::Space;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long shutting down waits for the engine's thread to finish its tick. The thread is
/// interrupted first, so it normally exits at once; past this the server exits without it.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Times the engine's thread is rebuilt (after a panic, or abandoned wedged) before the
/// engine stays stopped.
const MAX_RESTARTS: u32 = 10;

/// Writes one line to stderr, the server's log, ignoring failures: a log reader that went
/// away (EPIPE) must not take down the thread that was logging (`eprintln!` panics then).
pub fn stderr_line(line: &str) {
    store::log::line(format_args!("{line}"));
}

/// What a `POLICY` command asks of the engine's thread.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Load {
        name: String,
        source: String,
        author: String,
    },
    Use {
        name: String,
        version: Option<u32>,
    },
    List,
    Show {
        name: String,
        version: Option<u32>,
    },
    Rollback,
    /// `POLICY TICK [now]`: one tick (manual ticks only).
    Tick {
        now: Option<f64>,
    },
    Status,
    Param {
        key: String,
        value: String,
    },
    Log {
        count: usize,
    },
    /// A cluster's shared registry changed (or etcd came back): adopt its activation stack
    /// and parameters.
    Sync,
    /// `POLICY SHADOW ADD name[@N] [k=v ...]` (see `shadow`): the latest version without N.
    ShadowAdd {
        name: String,
        version: Option<u32>,
        options: Vec<String>,
    },
    ShadowList,
    /// `POLICY SHADOW STATUS [name]`.
    ShadowStatus {
        name: Option<String>,
    },
    ShadowDrop {
        name: String,
    },
    /// `POLICY SWITCH LOAD [k=v ...] source`.
    SwitchLoad {
        source: String,
        options: Vec<String>,
    },
    SwitchOff,
    SwitchStatus,
    /// `POLICY UNREADABLE`: the registry records that cannot be read back (skipped).
    Unreadable,
    /// `POLICY UNREADABLE DROP key`: deletes one of them.
    DropUnreadable {
        key: String,
    },
}

enum Message {
    Request(Op, link::Replier),
    Stop,
}

/// The live policy's gauges live with every other metric.
pub use crate::metrics::PolicyGauges as Gauges;

/// The handle connections and the server hold on the policy threads.
pub struct LivePolicy {
    /// The configured capacity (`CONFIG SET` changes it; a rollback to no management
    /// restores it).
    pub baseline: Arc<baseline::Baseline>,
    /// Where the policy thread offers the running version's `lease` hook to the shared
    /// log's sequencers (`crate::log::lease`).
    pub lease: Arc<crate::log::lease::LeaseSource>,
    sender: Mutex<mpsc::Sender<Message>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Signalled when the control thread has finished.
    exited: Mutex<Option<mpsc::Receiver<()>>>,
}

impl LivePolicy {
    /// Opens the registry in the server's store, reactivates the version that was active
    /// (unless `--no-policy`, or it was quarantined), loads `--policy` if given, and starts
    /// ticking. Fails when `--policy` cannot be loaded. A panic on the engine's thread is
    /// logged and the engine rebuilt from the registry, quarantining a version whose tick
    /// panicked; so is an engine thread abandoned in a wedged tick.
    pub async fn start(db: Db, config: &Config, space: Space) -> anyhow::Result<LivePolicy> {
        LivePolicy::start_shared(db, config, space, None).await
    }

    /// [`LivePolicy::start`] with the registry and log of a cluster (`--cluster`). `space`
    /// is where the node's own records live (`Space::for_server`).
    pub async fn start_shared(
        db: Db,
        config: &Config,
        space: Space,
        shared: Option<Arc<dyn registry::Shared>>,
    ) -> anyhow::Result<LivePolicy> {
        let (sender, receiver) = mpsc::channel();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (exited_tx, exited_rx) = mpsc::channel();
        let gauges = db.metrics().policy.clone();
        db.series().set_limit(config.timeseries);
        let baseline = Arc::new(baseline::Baseline::open(
            space.clone(),
            shared.clone(),
            config.capacity(),
        ));
        if baseline.get() != db.cache_snapshot().capacity {
            db.set_capacity(baseline.get());
        }
        let lease = Arc::new(crate::log::lease::LeaseSource::default());
        let settings = runner::Settings {
            tick: config.tick,
            manual: config.manual_tick,
            limits: config.policy_limits,
            policy_file: config.policy.clone(),
            echo: config.policy_echo,
            no_policy: config.no_policy,
            shared,
            keep_versions: config.policy_keep_versions,
            baseline: baseline.clone(),
            lease: lease.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("mantle-policy-control".into())
            .spawn(move || {
                match control::Control::start(db, space, settings, gauges) {
                    Ok(mut control) => {
                        let _ = ready_tx.send(Ok(()));
                        control.run(&receiver);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
                let _ = exited_tx.send(());
            })?;
        match ready_rx.await {
            Ok(Ok(())) => Ok(LivePolicy {
                baseline,
                lease,
                sender: Mutex::new(sender),
                thread: Mutex::new(Some(thread)),
                exited: Mutex::new(Some(exited_rx)),
            }),
            Ok(Err(message)) => {
                let _ = thread.join();
                anyhow::bail!("{message}")
            }
            Err(_) => anyhow::bail!("the policy thread stopped while starting"),
        }
    }

    /// Runs `op` on the policy threads and returns the reply, or why it failed.
    pub async fn request(&self, op: Op) -> Result<Reply, String> {
        let (reply_tx, reply_rx) = tokio::sync::oneshot::channel();
        let sent = self
            .sender
            .lock()
            .map(|s| s.send(Message::Request(op, reply_tx)).is_ok())
            .unwrap_or(false);
        if !sent {
            return Err("the policy engine is stopped".into());
        }
        reply_rx
            .await
            .unwrap_or_else(|_| Err("the policy engine is stopped".into()))
    }

    /// Stops ticking and waits for the threads (states are persisted after every tick). A
    /// running callback is interrupted; if the engine's thread still has not finished after
    /// [`STOP_TIMEOUT`], it is left behind and the server exits without it.
    pub fn stop(&self) {
        if let Ok(sender) = self.sender.lock() {
            let _ = sender.send(Message::Stop);
        }
        let exited = self.exited.lock().ok().and_then(|mut e| e.take());
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let (Some(exited), Some(thread)) = (exited, thread) {
            // The control thread waits STOP_TIMEOUT for the engine's thread, then exits.
            match exited.recv_timeout(STOP_TIMEOUT + Duration::from_secs(1)) {
                Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let _ = thread.join();
                }
                Err(mpsc::RecvTimeoutError::Timeout) => stderr_line(
                    "mantle: the policy control thread did not stop; exiting without it",
                ),
            }
        }
    }
}

impl Drop for LivePolicy {
    fn drop(&mut self) {
        self.stop();
    }
}
