//! The waiting half of rxpath's UDP sockets: what blocks, sleeps, spins
//! and wakes. The socket's state and every call that never waits are
//! `rxpath_core::sock` (sans-I/O); this module adds the clock, the threads
//! and the wakeups.
//!
//! ```text
//!  NAPI poll ──► SockStack ──► Socket's queue ── DataReady ──► SockWait
//!     ▲           (core)         (core)                        │ wakes: a thread in recv,
//!     │                                                        │ a task's waker, an epoll set
//!     └──── busy::busy_loop: own the NAPI, poll(8) ◄─── recv() on an empty queue, busy_poll µs
//! ```
//!
//! * [`UdpSocket`] is the application's handle: everything a core
//!   [`Socket`] offers (it derefs to one) plus the reads that wait:
//!   `recv`, `recv_from`, `recv_batch`, `recv_with` (`wait.rs`),
//!   `poll_recv_batch` for async tasks (`poll.rs`) and `recv_batch_busy`.
//! * [`Epoll`] waits on many sockets, with busy polling (`ep_busy_loop`).
//! * [`BacklogServer`]: a reader about to sleep runs the steering worker
//!   on its CPU itself (RFS's single wakeup).

mod busy;
mod epoll;
mod poll;
mod serve;
mod tcp;
mod wait;

pub use busy::{busy_loop, suspend_irqs, SESSION_NAPIS};
pub use epoll::Epoll;
pub(crate) use tcp::TcpHost;
pub use tcp::{ListenShare, Opening, TcpListener, TcpStream, TcpWaits};

/// Who watches a socket's readiness from outside its reads: an [`Epoll`]
/// set, or a preloaded program's `poll`/`epoll` (told on the edge from
/// empty to readable, and when the socket closes; it looks at the queue
/// itself).
pub trait Watch: Send + Sync + std::fmt::Debug {
    /// The socket became readable (or closed).
    fn ready(&self);
}
pub use rxpath_core::sock::{RecvMeta, SockCounters, SockError};
pub use serve::BacklogServer;

use rxpath_core::sock::{BindOptions, DataReady, Socket, Sockets};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::task::Waker;

/// A UDP socket on an rxpath host, made by [`crate::Host::udp_bind`].
///
/// `recv*` may be called from several threads at once; each datagram goes
/// to exactly one of them. Dropping the last handle closes the socket.
#[derive(Debug, Clone)]
pub struct UdpSocket {
    sock: Socket,
    wait: Arc<SockWait>,
    server: Option<Arc<dyn BacklogServer>>,
}

impl std::ops::Deref for UdpSocket {
    type Target = Socket;
    fn deref(&self) -> &Socket {
        &self.sock
    }
}

impl UdpSocket {
    /// `bind()` on `host`'s socket layer: a socket on `addr` (address or
    /// wildcard; port 0 picks an ephemeral port). Readers that would sleep
    /// may run `server`'s backlog first.
    pub fn bind(
        host: &Arc<Sockets>,
        addr: SocketAddr,
        server: Option<Arc<dyn BacklogServer>>,
    ) -> Result<UdpSocket, SockError> {
        Self::bind_with(host, addr, BindOptions::default(), server)
    }

    /// [`Self::bind`] with the options set before it (`SO_REUSEPORT`).
    pub fn bind_with(
        host: &Arc<Sockets>,
        addr: SocketAddr,
        opts: BindOptions,
        server: Option<Arc<dyn BacklogServer>>,
    ) -> Result<UdpSocket, SockError> {
        let sock = Socket::bind_with(host, addr, opts)?;
        let wait = Arc::new(SockWait::default());
        sock.set_data_ready(wait.clone());
        Ok(UdpSocket { sock, wait, server })
    }

    /// The core socket (state and non-blocking calls).
    pub fn socket(&self) -> &Socket {
        &self.sock
    }

    /// Tell `w` when the socket becomes readable or closes (one watcher at
    /// a time: this replaces an [`Epoll`] set's).
    pub fn set_watch(&self, w: Weak<dyn Watch>) {
        *lock(&self.wait.watch) = Some(w);
    }

    /// A read found datagrams: count them for RFS on this thread's CPU
    /// (`sock_rps_record_flow`).
    fn after_read(&self) {
        if !self.sock.has_flow() {
            return;
        }
        if let Some(cpu) = rxpath_os::sched::current_cpu() {
            self.sock.record_flow(cpu as u32);
        }
    }
}

/// Who waits on one socket, told by the core through [`DataReady`] when a
/// datagram is queued or the socket closes.
///
/// Each kind of waiter has a flag read without a lock on every enqueue;
/// a waiter raises its flag and then looks at the queue (under the
/// queue's lock), so either it sees the datagram or the enqueuer sees it.
#[derive(Debug, Default)]
pub(crate) struct SockWait {
    /// Threads asleep on `cv` (blocking `recv`).
    sleepers: AtomicU32,
    /// A thread in `recv` running its worker's backlog between naps
    /// ([`BacklogServer`]): unparked by the next datagram.
    parked: Mutex<Option<std::thread::Thread>>,
    has_parked: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
    /// The task waiting in [`UdpSocket::poll_recv_batch`].
    waker: Mutex<Option<Waker>>,
    has_waker: AtomicBool,
    /// The epoll set (or other [`Watch`]) watching this socket.
    watch: Mutex<Option<Weak<dyn Watch>>>,
}

impl SockWait {
    fn wake_all(&self, edge: bool) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            drop(lock(&self.lock));
            self.cv.notify_all();
        }
        if self.has_parked.load(Ordering::SeqCst) {
            if let Some(t) = lock(&self.parked).as_ref() {
                t.unpark();
            }
        }
        if self.has_waker.load(Ordering::SeqCst) {
            let w = lock(&self.waker).take();
            self.has_waker.store(false, Ordering::SeqCst);
            if let Some(w) = w {
                w.wake();
            }
        }
        if edge {
            if let Some(w) = lock(&self.watch).as_ref().and_then(Weak::upgrade) {
                w.ready();
            }
        }
    }
}

impl DataReady for SockWait {
    #[inline]
    fn readable(&self, was_empty: bool) {
        self.wake_all(was_empty);
    }

    fn closed(&self) {
        self.wake_all(true);
    }
}

/// Lock a mutex; a panic elsewhere does not make the data unusable (every
/// critical section here leaves it consistent).
pub(crate) use rxpath_dev::sync::lock;

/// A waker that unparks `t` (for the core's [`rxpath_core::sock::FrameReturn`]).
pub(crate) fn unpark_waker(t: std::thread::Thread) -> Waker {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    Waker::from(Arc::new(Unpark(t)))
}
