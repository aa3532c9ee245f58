//! What one running server shares between its connections besides the data: the settings it
//! was started with, those that CONFIG SET can change while it runs, and its identity.

use crate::config::Config;
use crate::db::Db;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub struct Instance {
    pub db: Db,
    /// The policy engine's thread and its registry (`POLICY` commands).
    pub live: crate::live::LivePolicy,
    pub config: Config,
    /// The address actually bound (the port is chosen by the OS when asked for port 0).
    pub local_addr: SocketAddr,
    pub started: Instant,
    /// `proto-max-bulk-len`, changeable by CONFIG SET; new requests see the new value.
    pub proto_max_bulk_len: AtomicU64,
    /// This node's place in a cluster (`--cluster`); `None` for a node on its own.
    pub cluster: Option<std::sync::Arc<crate::cluster::ClusterNode>>,
    next_client_id: AtomicU64,
}

impl Instance {
    pub fn new(
        db: Db,
        live: crate::live::LivePolicy,
        config: Config,
        local_addr: SocketAddr,
    ) -> Instance {
        Instance {
            db,
            live,
            proto_max_bulk_len: AtomicU64::new(config.proto_max_bulk_len),
            config,
            local_addr,
            started: Instant::now(),
            cluster: None,
            next_client_id: AtomicU64::new(1),
        }
    }

    pub fn next_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn max_bulk_len(&self) -> u64 {
        self.proto_max_bulk_len.load(Ordering::Relaxed)
    }

    pub fn requires_auth(&self) -> bool {
        self.config.requirepass.is_some()
    }

    /// Compares in time independent of where the first difference is.
    pub fn password_matches(&self, candidate: &[u8]) -> bool {
        let Some(expected) = &self.config.requirepass else {
            return false;
        };
        let expected = expected.as_bytes();
        let mut diff = expected.len() ^ candidate.len();
        for (i, &b) in candidate.iter().enumerate() {
            diff |= usize::from(b ^ expected.get(i).copied().unwrap_or(0));
        }
        diff == 0
    }
}

/// Per-connection state that commands read and change.
#[derive(Debug)]
pub struct Session {
    pub id: u64,
    pub protocol: crate::frame::Protocol,
    pub authenticated: bool,
    pub name: Option<bytes::Bytes>,
    pub peer: Option<SocketAddr>,
    /// Set by QUIT: the connection closes after sending the reply.
    pub closing: bool,
    /// Replies queued acknowledge writes not yet committed to the store's log: commit first.
    pub uncommitted: bool,
}

impl Session {
    pub fn new(id: u64, requires_auth: bool, peer: Option<SocketAddr>) -> Session {
        Session {
            id,
            protocol: crate::frame::Protocol::Resp2,
            authenticated: !requires_auth,
            name: None,
            peer,
            closing: false,
            uncommitted: false,
        }
    }
}
