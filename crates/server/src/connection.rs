//! One client's byte stream: a growable input buffer the decoder reads requests from, and an
//! output buffer replies are encoded into. Replies to pipelined requests are batched: the
//! output is written when no complete request is left in the input (or it grew large), so
//! `-P 16` costs one write, not sixteen; a proxy link's connection also writes them as it
//! goes through a large read (`handler::Handler::write_early`). Both buffers are reused for
//! the connection's life. Their capacity is counted in the server-wide client memory
//! (`client_memory`): before a read may grow the input, and after a reply is queued.

use crate::client_memory::{Account, ClientMemory, Exceeded};
use crate::decoder::{Decoder, Limits, ProtocolError};
use crate::frame::{Frame, Protocol};
use bytes::{Bytes, BytesMut};
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Initial size of each buffer, and the least free space offered to each read.
const CHUNK: usize = 16 * 1024;
/// What each connection may hold whatever all clients hold together, so an ordinary client
/// is never the one turned away for what others hold (and can be told why when it is): its
/// two first buffers and the doubled input a read is counted at before it happens (once a
/// request has been consumed from the input, its free space is under `CHUNK`).
const GRANTED: u64 = 4 * CHUNK as u64;
/// Pending output beyond which replies are written before more requests are run, so a client
/// that pipelines without reading cannot make the server buffer without bound.
pub const FLUSH_AT: usize = 64 * 1024;
/// Most input buffered for one unfinished request (Redis's client-query-buffer-limit).
pub const QUERY_BUFFER_LIMIT: u64 = 1024 * 1024 * 1024;

pub struct Connection {
    stream: TcpStream,
    input: BytesMut,
    output: BytesMut,
    decoder: Decoder,
    /// Replies in `output` after the first `cleared` bytes: a failed commit replaces each
    /// with the error (see `handler::send`).
    queued: usize,
    /// Bytes at the front of `output` already written, and those due to the client whatever
    /// happens next (replies written early, in part: see [`Connection::write_early`]).
    written: usize,
    cleared: usize,
    /// This connection's share of the server-wide client memory.
    account: Account,
}

/// How long a connection closed for the client memory limit tries to deliver its error: the
/// client may not be reading at all.
const FAREWELL_TIMEOUT: Duration = Duration::from_secs(1);

impl Connection {
    pub fn new(stream: TcpStream, limits: Limits, memory: Arc<ClientMemory>) -> Connection {
        let mut connection = Connection {
            stream,
            input: BytesMut::with_capacity(CHUNK),
            output: BytesMut::with_capacity(CHUNK),
            decoder: Decoder::new(limits),
            queued: 0,
            written: 0,
            cleared: 0,
            account: Account::with_floor(memory, GRANTED),
        };
        connection
            .count_buffers()
            .expect("a connection's first buffers are within its floor");
        connection
    }

    fn footprint(&self) -> u64 {
        (self.input.capacity() + self.output.capacity()) as u64
    }

    /// Counts what the buffers hold now in the server-wide client memory; an error when that
    /// grew past its bound (the caller closes the connection).
    #[inline]
    pub fn count_buffers(&mut self) -> Result<(), Exceeded> {
        self.account.hold(self.footprint())
    }

    /// Counts, before [`Connection::read_more`], what its read may grow the input to (a full
    /// buffer doubles), so no client's growth passes the server-wide bound.
    pub fn count_next_read(&mut self) -> Result<(), Exceeded> {
        let (len, capacity) = (self.input.len(), self.input.capacity());
        let input = if capacity - len < CHUNK {
            (2 * capacity).max(len + CHUNK)
        } else {
            capacity
        };
        self.account.hold((input + self.output.capacity()) as u64)
    }

    /// Drops what is queued, sends `error` as the last reply (giving up after a second: the
    /// client may not be reading) and gives back the buffers.
    pub async fn close_with(&mut self, error: &Frame, protocol: Protocol) {
        self.discard_queued();
        self.input = BytesMut::new();
        self.queue(error, protocol);
        let _ = tokio::time::timeout(FAREWELL_TIMEOUT, self.flush()).await;
    }

    pub fn set_limits(&mut self, limits: Limits) {
        self.decoder.set_limits(limits);
    }

    /// Decodes the next complete request already buffered, if any, into `args` (its
    /// arguments, name first); `Ok(false)` when none is. The caller owns `args` (and reuses it),
    /// so a request's arguments can outlive the next call on the connection.
    pub fn next_request(&mut self, args: &mut Vec<Bytes>) -> Result<bool, ProtocolError> {
        self.decoder.decode(&mut self.input, args)
    }

    /// The client's socket, for a proxy link to write relayed replies to while this
    /// connection's task reads on (`cluster::proxy::Direct`).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.stream)
    }

    /// The keys of the complete requests buffered, up to `keys.len()` (see
    /// [`crate::decoder::peek_keys`]); nothing is consumed.
    pub fn peek_keys<'c>(&'c self, keys: &mut [&'c [u8]]) -> usize {
        crate::decoder::peek_keys(&self.input, keys)
    }

    /// Bytes buffered towards a request not yet complete.
    pub fn buffered(&self) -> usize {
        self.input.len()
    }

    /// Reads more input; `Ok(false)` when the client closed its side.
    pub async fn read_more(&mut self) -> io::Result<bool> {
        if self.input.capacity() - self.input.len() < CHUNK {
            self.input.reserve(CHUNK);
        }
        Ok(self.stream.read_buf(&mut self.input).await? > 0)
    }

    pub fn queue(&mut self, frame: &Frame, protocol: Protocol) {
        frame.encode(protocol, &mut self.output);
        self.queued += 1;
    }

    /// Queues a reply already encoded (relayed from another node in proxy mode).
    pub fn queue_raw(&mut self, reply: &[u8]) {
        self.output.extend_from_slice(reply);
        self.queued += 1;
    }

    /// Queues `count` replies already encoded, back to back (a unit's, relayed in proxy mode).
    pub fn queue_relayed(&mut self, replies: &[u8], count: usize) {
        self.output.extend_from_slice(replies);
        self.queued += count;
    }

    /// Drops the replies not yet written (but not the rest of those partly written); returns
    /// how many there were.
    pub fn discard_queued(&mut self) -> usize {
        self.output.truncate(self.cleared);
        std::mem::take(&mut self.queued)
    }

    /// Replies queued since the last write.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Writes what the socket takes now of the queued replies, without waiting. The caller
    /// vouches that they may be sent (nothing they acknowledge or show is uncommitted): what
    /// the socket does not take goes first in the next [`Connection::flush`], whatever
    /// happens to the replies queued after them.
    pub fn write_early(&mut self) {
        self.queued = 0;
        self.cleared = self.output.len();
        while self.written < self.output.len() {
            match self.stream.try_write(&self.output[self.written..]) {
                Ok(n) if n > 0 => self.written += n,
                _ => break,
            }
        }
        if self.written == self.output.len() {
            self.output.clear();
            self.written = 0;
            self.cleared = 0;
        }
    }

    pub fn pending_output(&self) -> usize {
        self.output.len()
    }

    pub async fn flush(&mut self) -> io::Result<()> {
        if !self.output.is_empty() {
            self.stream.write_all(&self.output[self.written..]).await?;
            self.output.clear();
            self.queued = 0;
            self.written = 0;
            self.cleared = 0;
            // Do not keep a huge reply's buffer for the rest of the connection.
            if self.output.capacity() > 4 * FLUSH_AT {
                self.output = BytesMut::with_capacity(CHUNK);
                let _ = self.count_buffers();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// A connection served here and its client's blocking socket.
    async fn pair() -> (Connection, std::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(addr).unwrap();
        let (socket, _) = listener.accept().await.unwrap();
        let connection = Connection::new(socket, Limits::new(1 << 20), ClientMemory::new(0));
        (connection, client)
    }

    #[tokio::test]
    async fn replies_written_early_reach_the_client_without_a_flush() {
        let (mut connection, mut client) = pair().await;
        connection.queue(&Frame::ok(), Protocol::Resp2);
        connection.queue(&Frame::bulk_str("one"), Protocol::Resp2);
        connection.write_early();
        assert_eq!(connection.queued(), 0);
        assert_eq!(
            connection.pending_output(),
            0,
            "a fresh socket takes them all"
        );
        let mut got = vec![0; b"+OK\r\n$3\r\none\r\n".len()];
        client.read_exact(&mut got).unwrap();
        assert_eq!(got, b"+OK\r\n$3\r\none\r\n");
    }

    /// A reply the socket took only in part when written early is still sent whole when a
    /// failed commit then replaces the replies queued after it (`handler::send`): the client
    /// gets it, then one error per later request, never a cut reply.
    #[tokio::test]
    async fn a_reply_written_in_part_is_finished_before_the_replies_discarded_after_it() {
        let (mut connection, mut client) = pair().await;
        // Far more than the loopback socket buffers hold while the client does not read.
        let big = Bytes::from(vec![b'x'; 32 << 20]);
        connection.queue(&Frame::Bulk(big.clone()), Protocol::Resp2);
        connection.write_early();
        assert!(connection.pending_output() > 0, "the socket took it all");
        connection.queue(&Frame::ok(), Protocol::Resp2);
        connection.queue(&Frame::ok(), Protocol::Resp2);
        assert_eq!(connection.discard_queued(), 2);
        for _ in 0..2 {
            connection.queue(&Frame::Error("MISCONF failed".into()), Protocol::Resp2);
        }
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            client.read_to_end(&mut all).unwrap();
            all
        });
        connection.flush().await.unwrap();
        drop(connection);
        let all = reader.join().unwrap();
        let mut expected = format!("${}\r\n", big.len()).into_bytes();
        expected.extend_from_slice(&big);
        expected.extend_from_slice(b"\r\n-MISCONF failed\r\n-MISCONF failed\r\n");
        assert!(
            all == expected,
            "{} bytes, expected {}",
            all.len(),
            expected.len()
        );
    }
}
