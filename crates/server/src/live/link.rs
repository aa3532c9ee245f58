//! The link between the control thread and the engine thread: the messages the control
//! thread hands over, the board where the engine publishes its status, and how an engine
//! thread ended. Both threads' modules use it; neither needs the other's internals.

use super::journal::Journal;
use super::registry;
use super::reply::{Reply, Status};
use super::watchdog::JobWatch;
use super::Op;
use policy::{Interrupt, Scalar};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{mpsc, Arc, Mutex};

/// The answer to one request.
pub type Replier = tokio::sync::oneshot::Sender<Result<Reply, String>>;

/// What the control thread hands the engine thread.
pub enum EngineMessage {
    Request(Op, Replier),
    /// `POLICY ROLLBACK` of the version the caller saw on top of the stack (`None`: none).
    Rollback {
        seen: Option<String>,
        reply: Replier,
    },
    /// `POLICY PARAM`, already stored and logged by the control thread.
    Param(String, Scalar),
    Stop,
}

/// What the engine thread last published: the `POLICY STATUS` the control thread answers.
/// The parameters are kept apart: `POLICY PARAM` sets them here at once, before the engine
/// thread (perhaps busy) adopts them.
#[derive(Default)]
pub struct Board {
    status: Mutex<Status>,
    params: Mutex<BTreeMap<String, String>>,
}

impl Board {
    /// The engine's status; its `params` are ignored (see [`Board::set_params`]).
    pub fn publish(&self, status: Status) {
        *self.status.lock().unwrap_or_else(|e| e.into_inner()) = status;
    }

    pub fn set_params(&self, params: &policy::Params) {
        *self.params.lock().unwrap_or_else(|e| e.into_inner()) = params
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect();
    }

    pub fn set_param(&self, key: &str, value: &policy::Scalar) {
        self.params
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), value.to_string());
    }

    pub fn status(&self) -> Status {
        let mut status = self
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        status.params = self
            .params
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        status
    }
}

/// Everything one engine thread shares with the control thread.
#[derive(Clone)]
pub struct Link {
    pub watch: Arc<JobWatch>,
    pub interrupt: Interrupt,
    /// The reply to the request being worked on, so an abandoned thread's caller is answered.
    pub in_flight: Arc<Mutex<Option<Replier>>>,
    pub board: Arc<Board>,
    pub journal: Arc<Journal>,
    /// The engine threads' one inbox: a new thread takes over what an abandoned one left.
    pub inbox: Arc<Mutex<mpsc::Receiver<EngineMessage>>>,
    /// `POLICY ROLLBACK`s queued for the engine thread and not yet taken.
    pub pending_rollbacks: Arc<AtomicUsize>,
}

/// How an engine thread ended.
pub enum Exit {
    Finished,
    /// Its runner could not be opened (the reason was logged).
    OpenFailed,
    /// It panicked, in a tick of this version if one was running.
    Panicked(Option<registry::VersionRef>),
}
