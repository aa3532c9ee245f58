//! Replies the link writes to the client's socket itself.
//!
//! Handing a unit's replies back to the client's task costs a wake-up of that task per
//! forwarded read, often on the other worker (a futex call and a context switch), only for
//! the task to copy the replies into its output and write them. When nothing else of the
//! client's is queued before a unit (its output empty, no answer held), the link may write
//! the replies to the client's socket instead, with a non-blocking `send`, and wake nobody:
//! the client's task is waiting for the client's next request meanwhile.
//!
//! A unit sent that way carries a [`Ticket`]; the client's task keeps the connection's
//! [`Direct`]. Whatever the link cannot write whole (a `-MOVED` or `-TRYAGAIN` among the
//! replies, an error, a socket that is full) it hands back with the ticket: the client's task
//! is woken and writes the rest as it always did. The client's task writes nothing while a
//! unit of its is at the link (everything answered after it is held), so the bytes never
//! interleave; and it closes its [`Direct`] before its socket is closed, so the link never
//! writes to a descriptor that was closed (and maybe reused).

use bytes::Bytes;
use std::future::poll_fn;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

/// One client connection's socket, as the link sees it, and the state of the one unit of its
/// the link may answer there.
pub struct Direct {
    inner: Mutex<Inner>,
}

struct Inner {
    /// The client's socket; `None` once the connection is closing.
    fd: Option<RawFd>,
    progress: Progress,
    /// The client's task waiting for a unit handed back.
    waker: Option<Waker>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Progress {
    /// No unit at the link.
    Idle,
    /// A unit's ticket is at the link.
    Pending,
    /// The link wrote every reply of the unit.
    Delivered,
    /// The link gave the ticket back: the client's task writes what the answer holds.
    HandedBack,
}

impl Direct {
    /// `fd` must stay open until [`Direct::close`] returns.
    pub fn new(fd: RawFd) -> Arc<Direct> {
        Arc::new(Direct {
            inner: Mutex::new(Inner {
                fd: Some(fd),
                progress: Progress::Idle,
                waker: None,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A ticket for the next unit; the previous one must be delivered or handed back.
    pub fn ticket(self: &Arc<Self>) -> Ticket {
        let mut inner = self.lock();
        debug_assert_ne!(inner.progress, Progress::Pending, "one unit at a time");
        inner.progress = Progress::Pending;
        inner.waker = None;
        Ticket {
            direct: Arc::clone(self),
            armed: true,
        }
    }

    /// Whether the link wrote the current unit's replies to the client.
    pub fn delivered(&self) -> bool {
        self.lock().progress == Progress::Delivered
    }

    /// Whether the link gave the current unit back (the client's task writes its replies).
    pub fn is_handed_back(&self) -> bool {
        self.lock().progress == Progress::HandedBack
    }

    /// Waits until the link hands the current unit back (never, once it was delivered).
    pub async fn handed_back(&self) {
        poll_fn(|cx| {
            let mut inner = self.lock();
            match inner.progress {
                Progress::HandedBack => Poll::Ready(()),
                Progress::Pending => {
                    match &mut inner.waker {
                        Some(waker) => waker.clone_from(cx.waker()),
                        none => *none = Some(cx.waker().clone()),
                    }
                    Poll::Pending
                }
                Progress::Idle | Progress::Delivered => Poll::Pending,
            }
        })
        .await
    }

    /// The connection is closing: the link writes nothing more to its socket. Waits for a
    /// write the link is doing now.
    pub fn close(&self) {
        self.lock().fd = None;
    }
}

/// The link's right to write one unit's replies to its client's socket. Dropped without
/// [`Ticket::deliver`] succeeding, it hands the unit back (waking the client's task).
pub struct Ticket {
    direct: Arc<Direct>,
    armed: bool,
}

impl Ticket {
    /// Writes `replies` to the client's socket without blocking. `Err` holds what is left to
    /// write (all of it when the connection is closing or the socket is full); the ticket is
    /// then handed back.
    pub fn deliver(mut self, replies: Bytes) -> Result<(), Bytes> {
        let mut inner = self.direct.lock();
        let Some(fd) = inner.fd else {
            return Err(replies);
        };
        let mut written = 0;
        while written < replies.len() {
            let rest = &replies[written..];
            // SAFETY: `fd` is open while `inner.fd` is `Some` and the lock is held
            // (`Direct::close`), and `rest` is valid for `rest.len()` bytes.
            let n = unsafe {
                libc::send(
                    fd,
                    rest.as_ptr().cast(),
                    rest.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
            if n > 0 {
                written += n as usize;
            } else if n < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
                continue;
            } else {
                // Full, reset or closed: the client's task writes the rest and sees why.
                drop(inner);
                return Err(replies.slice(written..));
            }
        }
        inner.progress = Progress::Delivered;
        self.armed = false;
        Ok(())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let waker = {
            let mut inner = self.direct.lock();
            inner.progress = Progress::HandedBack;
            inner.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}
