//! Live policies: the Lua policy engine (`crates/policy`) running inside the server on a
//! wall-clock tick, fed the server's measured metrics, acting on its cache, and managed by
//! `POLICY` commands through a durable, versioned registry with automatic rollback and a
//! central log (seed 003, Malacology).
//!
//! The engine lives on its own thread, [`runner`]: a tick that spends its whole instruction
//! budget delays the next tick, never a client. Commands reach that thread as messages and
//! await the reply, so they never block a worker thread either; cache actions take the cache
//! lock in short batches (see `Db::evict`).

pub mod journal;
pub mod registry;
mod runner;
pub mod sample;
pub mod space;

use crate::config::Config;
use crate::db::Db;
use crate::frame::Frame;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

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
    Status,
    Param {
        key: String,
        value: String,
    },
    Log {
        count: usize,
    },
}

enum Message {
    Request(Op, tokio::sync::oneshot::Sender<Frame>),
    Stop,
}

/// Numbers about the live policy that INFO and the metrics endpoint read without a round
/// trip to the engine's thread.
#[derive(Default)]
pub struct Gauges {
    pub ticks: AtomicU64,
    pub actions: AtomicU64,
    pub errors: AtomicU64,
    pub fallbacks: AtomicU64,
    /// Registry version of the active policy, 0 when none.
    pub active_version: AtomicU64,
    /// `name@N` of the active policy, empty when none.
    pub active: Mutex<String>,
}

impl Gauges {
    pub fn read(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    pub fn active(&self) -> String {
        self.active.lock().map(|a| a.clone()).unwrap_or_default()
    }
}

/// The handle connections and the server hold on the engine's thread.
pub struct LivePolicy {
    sender: Mutex<mpsc::Sender<Message>>,
    pub gauges: Arc<Gauges>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl LivePolicy {
    /// Opens the registry in the server's store, reactivates the version that was active,
    /// loads `--policy` if given, and starts ticking. Fails when `--policy` cannot be loaded.
    pub async fn start(db: Db, config: &Config) -> anyhow::Result<LivePolicy> {
        let (sender, receiver) = mpsc::channel();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let gauges = Arc::new(Gauges::default());
        let settings = runner::Settings {
            tick: config.tick,
            limits: config.policy_limits,
            policy_file: config.policy.clone(),
            echo: config.policy_echo,
        };
        let thread_gauges = gauges.clone();
        let thread = std::thread::Builder::new()
            .name("mantle-policy".into())
            .spawn(
                move || match runner::Runner::open(db, settings, thread_gauges) {
                    Ok(mut runner) => {
                        let _ = ready_tx.send(Ok(()));
                        runner.run(&receiver);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                },
            )?;
        match ready_rx.await {
            Ok(Ok(())) => Ok(LivePolicy {
                sender: Mutex::new(sender),
                gauges,
                thread: Mutex::new(Some(thread)),
            }),
            Ok(Err(message)) => {
                let _ = thread.join();
                anyhow::bail!("{message}")
            }
            Err(_) => anyhow::bail!("the policy thread stopped while starting"),
        }
    }

    /// Runs `op` on the engine's thread and returns the reply.
    pub async fn request(&self, op: Op) -> Frame {
        let (reply_tx, reply_rx) = tokio::sync::oneshot::channel();
        let sent = self
            .sender
            .lock()
            .map(|s| s.send(Message::Request(op, reply_tx)).is_ok())
            .unwrap_or(false);
        if !sent {
            return Frame::err("the policy engine is stopped");
        }
        reply_rx
            .await
            .unwrap_or_else(|_| Frame::err("the policy engine is stopped"))
    }

    /// Stops ticking and waits for the thread (states are persisted after every tick).
    pub fn stop(&self) {
        if let Ok(sender) = self.sender.lock() {
            let _ = sender.send(Message::Stop);
        }
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Drop for LivePolicy {
    fn drop(&mut self) {
        self.stop();
    }
}
