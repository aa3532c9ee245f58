//! Write batching: the plain `SET key value` requests of one pipeline, deferred and written
//! to the store as one batch.

use crate::connection::Connection;
use crate::frame::{Frame, Protocol};
use crate::instance::{Instance, Session};
use bytes::Bytes;

/// Most plain SETs one connection defers before writing them (and the most value bytes).
const RUN_MAX_WRITES: usize = 1024;
const RUN_MAX_BYTES: usize = 4 << 20;

/// The plain writes (see `cmd::Declared::into_plain_write`) of one pipeline, written as one
/// batch when the connection reaches anything else (another command, the end of what the
/// client sent, the run's size limit): a `-P 16` batch of SETs costs one store write and no
/// task wake-ups instead of sixteen group commits. Each SET still gets its own reply, in
/// order, and the replies still leave only after the handler has committed them (durability
/// is unchanged). A run of one SET takes the ordinary path, group commit with other clients.
#[derive(Default)]
pub(super) struct WriteRun {
    pairs: Vec<(Bytes, Bytes)>,
    bytes: usize,
    /// The reply each SET of the run last written gets, and how many there were.
    written: Option<(Frame, usize)>,
}

impl WriteRun {
    pub(super) fn is_full(&self) -> bool {
        self.pairs.len() >= RUN_MAX_WRITES || self.bytes >= RUN_MAX_BYTES
    }

    pub(super) fn push(&mut self, pair: (Bytes, Bytes)) {
        self.bytes += pair.0.len() + pair.1.len();
        self.pairs.push(pair);
    }

    /// Writes the deferred SETs (one batch for all, or the ordinary path for one); their
    /// replies wait in `written` for [`WriteRun::queue_written`]. Returns whether there were
    /// any.
    pub(super) async fn write(&mut self, instance: &Instance, session: &Session) -> bool {
        let n = self.pairs.len();
        if n == 0 {
            return false;
        }
        let started = crate::stamp::Stamp::now();
        let result = match &self.pairs[..] {
            [(key, value)] => instance
                .db
                .set(key, value, 0, store::Condition::Always, None)
                .await
                .map(|_| ()),
            pairs => instance.db.set_many(pairs).await,
        };
        instance.ran_writes(crate::cmd::SET_ROW, started, &self.pairs, session);
        let reply = match result {
            Ok(()) => Frame::ok(),
            Err(e) => crate::frame::store_error(e),
        };
        self.pairs.clear();
        self.bytes = 0;
        // Never left unqueued: every write is followed by `queue_written` before more requests.
        debug_assert!(self.written.is_none());
        self.written = Some((reply, n));
        true
    }

    pub(super) fn queue_written(&mut self, connection: &mut Connection, protocol: Protocol) {
        if let Some((reply, n)) = self.written.take() {
            for _ in 0..n {
                connection.queue(&reply, protocol);
            }
        }
    }
}
