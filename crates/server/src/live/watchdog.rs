//! Notices a policy tick that runs far longer than a tick should, from outside the engine's
//! thread, and records the version in the registry while it runs. The engine stops every
//! callback at its time limit, so a tick this long means something below the sandbox held
//! it; if the server then dies (an operator's `kill -9`, an out-of-memory kill), the record
//! tells the next start not to reactivate that version (see `Runner::open`). A tick that
//! ends normally erases the record.

use super::registry::{Registry, VersionRef};
use super::space::Space;
use super::stderr_line;
use crate::db::now_ms;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a tick may run before its version is recorded as wedged.
pub const WEDGE_AFTER: Duration = Duration::from_secs(2);
/// How often the watchdog looks.
const POLL: Duration = Duration::from_millis(100);

/// What the engine's thread tells the watchdog about the tick in progress.
#[derive(Default)]
pub struct TickWatch {
    /// Start of the running tick, ms since the epoch; 0 between ticks.
    started_ms: AtomicU64,
    version: Mutex<Option<VersionRef>>,
    /// The running tick's version was recorded as wedged.
    marked: AtomicBool,
    stop: AtomicBool,
}

impl TickWatch {
    /// A tick of `version` starts.
    pub fn begin(&self, version: &VersionRef) {
        if let Ok(mut v) = self.version.lock() {
            *v = Some(version.clone());
        }
        self.started_ms.store(now_ms().max(1), Ordering::SeqCst);
    }

    /// The tick ended; true if the watchdog had recorded it (the caller erases the record).
    pub fn end(&self) -> bool {
        self.started_ms.store(0, Ordering::SeqCst);
        self.marked.swap(false, Ordering::SeqCst)
    }

    /// The version whose tick is running, if one is.
    pub fn running(&self) -> Option<VersionRef> {
        if self.started_ms.load(Ordering::SeqCst) == 0 {
            return None;
        }
        self.version.lock().ok().and_then(|v| v.clone())
    }

    pub fn shut_down(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Starts the watchdog thread over the registry in `space`.
pub fn spawn(watch: Arc<TickWatch>, space: Space) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("mantle-policy-watchdog".into())
        .spawn(move || {
            let registry = Registry::new(space);
            while !watch.stop.load(Ordering::SeqCst) {
                std::thread::sleep(POLL);
                let started = watch.started_ms.load(Ordering::SeqCst);
                if started == 0 || watch.marked.load(Ordering::SeqCst) {
                    continue;
                }
                let running_ms = now_ms().saturating_sub(started);
                if running_ms < WEDGE_AFTER.as_millis() as u64 {
                    continue;
                }
                let Some(version) = watch.running() else {
                    continue;
                };
                watch.marked.store(true, Ordering::SeqCst);
                let outcome = registry.set_wedged(Some(&version));
                stderr_line(&format!(
                    "mantle: policy {version}: a tick has run for {running_ms} ms; {}",
                    match outcome {
                        Ok(()) => "recorded as wedged: it will not be reactivated if the server stops before the tick ends".to_string(),
                        Err(e) => format!("recording it as wedged failed: {e}"),
                    }
                ));
            }
        })
}
