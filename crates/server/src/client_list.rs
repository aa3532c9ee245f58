//! The connected clients, for `CLIENT LIST` and `CLIENT INFO`: one [`ClientSlot`] per
//! connection, registered when it is accepted and removed when it ends. A request updates
//! its own slot with two relaxed stores (its command's row and when it ran); the list's
//! lock is taken only on connect, disconnect and `CLIENT LIST`.

use crate::stamp::Stamp;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What `CLIENT LIST` shows of one connection.
#[derive(Debug)]
pub struct ClientSlot {
    pub id: u64,
    pub peer: Option<SocketAddr>,
    connected: Instant,
    /// `connected` on the requests' clock.
    connected_stamp: Stamp,
    name: Mutex<Option<Bytes>>,
    /// The row of the last command run (`usize::MAX`: none yet).
    last_row: AtomicUsize,
    /// When it ran, in milliseconds since `connected`.
    last_ms: AtomicU64,
    /// The protocol (2 or 3) it ran with.
    resp: AtomicU8,
}

impl ClientSlot {
    #[inline]
    pub fn ran(&self, row: usize, at: Stamp, resp: u8) {
        self.last_row.store(row, Ordering::Relaxed);
        self.resp.store(resp, Ordering::Relaxed);
        let ms = at.nanos_since(self.connected_stamp) / 1_000_000;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    pub fn set_name(&self, name: Option<Bytes>) {
        *self.name.lock().unwrap_or_else(|p| p.into_inner()) = name;
    }

    /// The protocol of the last command this client ran (2 before any).
    pub fn resp(&self) -> u8 {
        self.resp.load(Ordering::Relaxed)
    }

    /// The row of the command table this client ran last.
    pub fn last_row(&self) -> Option<usize> {
        Some(self.last_row.load(Ordering::Relaxed)).filter(|&row| row != usize::MAX)
    }

    /// Redis's `CLIENT LIST` line (without the newline) for a connection on `local` whose
    /// last command was `cmd`.
    pub fn line(&self, local: SocketAddr, resp: u8, cmd: &str) -> String {
        let now = Instant::now();
        let age = now.saturating_duration_since(self.connected);
        let last_ms = self.last_ms.load(Ordering::Relaxed);
        let idle = age.as_secs().saturating_sub(last_ms / 1000);
        let name = self
            .name
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        let mut line = String::with_capacity(160);
        let _ = write!(
            line,
            "id={} addr={} laddr={local} name={name} age={} idle={idle} flags=N db=0 cmd={cmd} \
             user=default resp={resp}",
            self.id,
            self.peer.map(|p| p.to_string()).unwrap_or_default(),
            age.as_secs(),
        );
        line
    }
}

/// Every connected client, by id.
#[derive(Default)]
pub struct ClientList {
    clients: Mutex<BTreeMap<u64, Arc<ClientSlot>>>,
}

/// Removes its client from the list when the connection ends, however it ends.
pub struct Registration<'a> {
    list: &'a ClientList,
    id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.list.lock().remove(&self.id);
    }
}

impl ClientList {
    /// Adds a connection; it stays listed while the returned registration lives.
    pub fn register(
        &self,
        id: u64,
        peer: Option<SocketAddr>,
    ) -> (Arc<ClientSlot>, Registration<'_>) {
        let slot = Arc::new(ClientSlot {
            id,
            peer,
            connected: Instant::now(),
            connected_stamp: Stamp::now(),
            name: Mutex::new(None),
            last_row: AtomicUsize::new(usize::MAX),
            last_ms: AtomicU64::new(0),
            resp: AtomicU8::new(2),
        });
        self.lock().insert(id, slot.clone());
        (slot, Registration { list: self, id })
    }

    /// The slots listed now, by id.
    pub fn slots(&self) -> Vec<Arc<ClientSlot>> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<ClientSlot>>> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_listed_while_registered_with_their_name_and_last_command() {
        let list = ClientList::default();
        let local: SocketAddr = "127.0.0.1:6380".parse().unwrap();
        let (slot, registration) = list.register(7, Some("127.0.0.1:5000".parse().unwrap()));
        let (_, other) = list.register(8, None);
        assert_eq!(list.slots().len(), 2);
        slot.set_name(Some(Bytes::from_static(b"worker")));
        assert_eq!(slot.last_row(), None);
        slot.ran(11, Stamp::now(), 2);
        assert_eq!(slot.last_row(), Some(11));
        let line = slot.line(local, 2, "get");
        assert!(
            line.starts_with(
                "id=7 addr=127.0.0.1:5000 laddr=127.0.0.1:6380 name=worker age=0 idle=0"
            ),
            "{line}"
        );
        assert!(line.contains(" cmd=get "), "{line}");
        drop(registration);
        let ids: Vec<u64> = list.slots().iter().map(|s| s.id).collect();
        assert_eq!(ids, [8]);
        drop(other);
        assert!(list.slots().is_empty());
    }
}
