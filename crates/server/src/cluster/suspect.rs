//! Noticing a dead member before etcd does (docs/shared-log.md, "Sequencer takeover"). etcd
//! deletes a dead node's record only when its revoke loop (every 500 ms) finds the lease
//! ran out, and the sequencer takeover waits for that deletion. Something closer to the
//! failure sees it first: a client that cannot connect to a log's sequencer asks the other
//! nodes (the zlog client's chase), and in proxy mode a forward to the owner fails. The node
//! that gets such a sign tries the member's port itself; if nothing accepts, it asks etcd
//! after the member's lease until it is proven to have run out, and revokes it
//! (`cluster::expiry`), so every node sees the member go at once. A member that accepts the
//! connection, or whose lease is still renewed, is left alone.
//!
//! A connection that is refused is only a sign: a partition looks the same. The lease
//! decides, and the member has stopped serving before its lease can run out
//! (`cluster::lease`).

use cluster::expiry::{confirm_gone, Outcome};
use cluster::{ControlPlane, NodeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the member's port may take to accept a connection before it counts as
/// unreachable.
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);

/// A member that was checked is not checked again for this long (a client with a stale map
/// may send many requests its way).
const RECHECK_AFTER: Duration = Duration::from_millis(250);

/// Members this node is checking, or checked lately. Bounded by the members of the
/// cluster: one entry each.
#[derive(Default)]
pub struct Suspicions {
    checks: Mutex<HashMap<NodeId, Check>>,
}

#[derive(Clone, Copy)]
enum Check {
    Running,
    Done(Instant),
}

impl Suspicions {
    /// Member `id` at `addr` may be dead: checks it in the background, unless a check runs
    /// or ran lately. `within` bounds how long its lease is watched.
    pub fn suspect(
        self: &Arc<Self>,
        plane: &ControlPlane,
        id: &NodeId,
        addr: &str,
        within: Duration,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !self.start(id, Instant::now()) {
            return;
        }
        let (me, plane, id, addr) = (
            Arc::clone(self),
            plane.clone(),
            id.clone(),
            addr.to_string(),
        );
        runtime.spawn(async move {
            if !reachable(&addr).await {
                match confirm_gone(&plane, &id, within).await {
                    Ok(Outcome::Revoked) => store::log_line!(
                        "mantle: cluster: {id} ({addr}) does not answer and its lease ran out: revoked it"
                    ),
                    Ok(Outcome::Gone | Outcome::Alive) => {}
                    Err(e) => store::log_line!(
                        "mantle: cluster: checking whether {id} ({addr}) is gone: {e}"
                    ),
                }
            }
            me.finish(&id, Instant::now());
        });
    }

    /// Whether a check of `id` should start at `now` (and marks it running).
    fn start(&self, id: &NodeId, now: Instant) -> bool {
        let mut checks = self.checks.lock().unwrap_or_else(|p| p.into_inner());
        match checks.get(id) {
            Some(Check::Running) => false,
            Some(Check::Done(at)) if now.saturating_duration_since(*at) < RECHECK_AFTER => false,
            _ => {
                checks.insert(id.clone(), Check::Running);
                true
            }
        }
    }

    fn finish(&self, id: &NodeId, now: Instant) {
        let mut checks = self.checks.lock().unwrap_or_else(|p| p.into_inner());
        checks.insert(id.clone(), Check::Done(now));
    }
}

/// Whether something accepts connections at `addr` within [`PROBE_TIMEOUT`].
async fn reachable(addr: &str) -> bool {
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_check_at_a_time_and_none_again_right_after() {
        let suspicions = Suspicions::default();
        let (a, b) = (NodeId::new("a").unwrap(), NodeId::new("b").unwrap());
        let t0 = Instant::now();
        assert!(suspicions.start(&a, t0));
        assert!(
            !suspicions.start(&a, t0 + Duration::from_secs(5)),
            "still running"
        );
        assert!(suspicions.start(&b, t0), "another member is checked apart");
        suspicions.finish(&a, t0 + Duration::from_secs(1));
        assert!(!suspicions.start(&a, t0 + Duration::from_millis(1_100)));
        assert!(suspicions.start(&a, t0 + Duration::from_millis(1_300)));
    }

    #[tokio::test]
    async fn a_closed_port_is_unreachable_and_a_listening_one_is_not() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        assert!(reachable(&addr).await);
        drop(listener);
        assert!(!reachable(&addr).await);
    }
}
