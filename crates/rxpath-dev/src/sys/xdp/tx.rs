//! AF_XDP transmit: [`XskTx`], the TX and completion rings of a socket
//! with a share of its UMEM (an RX queue's own socket, for replies), and
//! [`XdpTx`], the same on a socket of its own (`rxpath gen`).

use super::{ctx, ifindex_u32, Xsk};
use crate::sync::lock;
use crate::sys::umem::{Frame, FramePool, Umem};
use crate::sys::xsk::Ring;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One AF_XDP transmit queue with its own UMEM (our frame region), for
/// `rxpath gen`: an [`XskTx`] on a socket of its own.
pub struct XdpTx {
    tx: XskTx,
    _fill: Ring<u64>,
    home: Arc<std::sync::Mutex<Vec<Frame>>>,
    /// Frames handed to the kernel so far.
    pub sent: u64,
    /// Completions reaped so far.
    pub completed: u64,
}

impl std::fmt::Debug for XdpTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpTx")
            .field("sent", &self.sent)
            .field("completed", &self.completed)
            .finish()
    }
}

impl XdpTx {
    /// Open TX queue `queue` of `iface` with `frames` frames.
    pub fn open(iface: &str, queue: u32, frames: usize) -> io::Result<XdpTx> {
        let mut x = Xsk::setup(frames, 64, (frames as u32).next_power_of_two())?;
        let tx = x
            .sock
            .tx_ring((frames as u32).next_power_of_two().min(4096))
            .map_err(|e| ctx(e, "TX ring"))?;
        x.sock
            .bind(ifindex_u32(iface)?, queue, libc::XDP_USE_NEED_WAKEUP, None)
            .map_err(|e| ctx(e, "binding for TX"))?;
        let free = x.frames();
        let Xsk {
            sock,
            fill,
            comp,
            umem,
            ..
        } = x;
        let home = Arc::new(std::sync::Mutex::new(Vec::new()));
        Ok(XdpTx {
            tx: XskTx::new(sock.into(), tx, comp, umem, free, home.clone()),
            _fill: fill,
            home,
            sent: 0,
            completed: 0,
        })
    }

    /// Write up to `n` packets with `write` (which fills a frame and returns
    /// the packet length, or None to stop) and post them. Returns how many
    /// were posted.
    pub fn send_batch(&mut self, n: usize, write: impl FnMut(&mut [u8]) -> Option<usize>) -> usize {
        let put = self.tx.send_with(n, write);
        self.sent = self.tx.counters.sent;
        self.completed = self.tx.counters.completed;
        put
    }

    /// Wait for outstanding completions (up to `timeout`) and return the
    /// pool. Frames still in flight after that are taken back too: the
    /// socket closes right after, so the kernel no longer reads them.
    pub fn finish(self, timeout: Duration) -> (FramePool, u64) {
        let umem = self.tx.umem.clone();
        let c = self.tx.finish(timeout);
        let frames = std::mem::take(&mut *lock(&self.home));
        (FramePool::from_frames(umem, frames), c.completed)
    }
}

/// The TX side of an RX queue (a TX-only AF_XDP socket on the queue's
/// UMEM, the RX socket's completion ring and a share of its frames):
/// replies leave on the queue the requests came in on, one `sendto` kick
/// per 32 frames of a batch
/// (what the kernel's own `sendmsg` costs), no AF_PACKET socket and no
/// trip through the kernel's stack. Used from any thread, one at a time
/// (the host's TX lock, as the kernel's TX queue lock).
pub struct XskTx {
    // The socket (the queue's TX socket) and rings first, the region last.
    fd: OwnedFd,
    tx: Ring<libc::xdp_desc>,
    comp: Ring<u64>,
    umem: Arc<Umem>,
    free: Vec<Frame>,
    in_flight: Vec<Option<Frame>>,
    home: Arc<std::sync::Mutex<Vec<Frame>>>,
    descs: Vec<libc::xdp_desc>,
    /// Fault injection: completions are not taken back while set (as if
    /// the device stopped completing); sends then find no free frame.
    pub stop_completing: Arc<AtomicBool>,
    /// Frames handed to the kernel, completions taken back, and frames a
    /// send could not have (no free frame, or the TX ring full).
    pub counters: XskTxCounters,
}

/// What an [`XskTx`] did.
#[derive(Debug, Clone, Copy, Default)]
pub struct XskTxCounters {
    /// Frames posted to the TX ring.
    pub sent: u64,
    /// Completions taken back.
    pub completed: u64,
    /// Frames a send could not post (no free frame: completions have not
    /// come back; or the ring was full). A caller may offer a refused
    /// frame again, so one datagram can be refused more than once.
    pub busy: u64,
    /// `sendto` kicks.
    pub kicks: u64,
}

impl std::fmt::Debug for XskTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XskTx")
            .field("counters", &self.counters)
            .finish()
    }
}

impl XskTx {
    pub(super) fn new(
        fd: OwnedFd,
        tx: Ring<libc::xdp_desc>,
        comp: Ring<u64>,
        umem: Arc<Umem>,
        free: Vec<Frame>,
        home: Arc<std::sync::Mutex<Vec<Frame>>>,
    ) -> XskTx {
        XskTx {
            fd,
            tx,
            comp,
            in_flight: (0..umem.frames()).map(|_| None).collect(),
            umem,
            free,
            home,
            descs: Vec::with_capacity(64),
            stop_completing: Arc::default(),
            counters: XskTxCounters::default(),
        }
    }

    /// The TX socket's descriptor (its socket options).
    pub(super) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    /// Kick the kernel if the TX ring holds frames it has not taken: a
    /// kick that found the device queue stopped (`EAGAIN` with no
    /// progress) left them there, and nothing else drives a copy-mode
    /// ring. For a thread that polls the device when nothing is sent.
    pub fn flush(&mut self) {
        if self.tx.unconsumed() > 0 && self.tx.needs_wakeup() {
            self.kick();
        }
    }

    /// Frames this side holds (free or in flight).
    pub fn frames(&self) -> usize {
        self.free.len() + self.in_flight.iter().filter(|f| f.is_some()).count()
    }

    /// Take back completed frames (unless completions are stopped).
    fn reap(&mut self) {
        if self.stop_completing.load(Ordering::Relaxed) {
            return;
        }
        let fs = self.umem.frame_size() as u64;
        let (in_flight, free, c) = (&mut self.in_flight, &mut self.free, &mut self.counters);
        self.comp.consume(u32::MAX, |addr| {
            if let Some(f) = in_flight
                .get_mut((addr / fs) as usize)
                .and_then(Option::take)
            {
                free.push(f);
                c.completed += 1;
            }
        });
    }

    /// Make the kernel send what the TX ring holds. In copy mode one
    /// `sendto` sends at most `TX_BATCH_SIZE` (32) frames and says `EAGAIN`
    /// when more wait (net/xdp/xsk.c, `__xsk_generic_xmit`): kick again
    /// while that is so and the kernel takes some, so nothing posted waits
    /// for a later send.
    fn kick(&mut self) {
        for _ in 0..=self.tx.size() / 32 {
            self.counters.kicks += 1;
            let before = self.tx.unconsumed();
            // No buffer is passed; the call only drives the TX ring.
            let r = syscall!(sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0
            ));
            let again = matches!(&r, Err(e) if e.raw_os_error() == Some(libc::EAGAIN));
            let left = self.tx.unconsumed();
            if !again || left == 0 || left == before {
                break;
            }
        }
    }

    /// Copy whole Ethernet frames into TX frames and post them; returns
    /// how many were posted (fewer when frames or ring slots ran out, each
    /// one counted as `busy`).
    pub fn send(&mut self, frames: &[&[u8]]) -> usize {
        let mut next = frames.iter();
        let put = self.send_with(frames.len(), |buf| {
            let data = next.next()?;
            let len = data.len().min(buf.len());
            buf[..len].copy_from_slice(&data[..len]);
            Some(len)
        });
        self.counters.busy += (frames.len() - put) as u64;
        put
    }

    /// Write up to `n` packets in place with `write` (which fills a frame
    /// and returns the packet length, or `None` to stop) and post them,
    /// as many as there are free frames and ring slots; returns how many.
    pub fn send_with(
        &mut self,
        n: usize,
        mut write: impl FnMut(&mut [u8]) -> Option<usize>,
    ) -> usize {
        self.reap();
        let fs = self.umem.frame_size() as u64;
        self.descs.clear();
        let room = (self.tx.free() as usize).min(self.free.len()).min(n);
        while self.descs.len() < room {
            let Some(mut f) = self.free.pop() else { break };
            match write(self.umem.data_mut(&mut f)) {
                Some(len) => {
                    self.descs.push(libc::xdp_desc {
                        addr: f.index() as u64 * fs,
                        len: len as u32,
                        options: 0,
                    });
                    let i = f.index() as usize;
                    self.in_flight[i] = Some(f);
                }
                None => {
                    self.free.push(f);
                    break;
                }
            }
        }
        let put = self.tx.produce(self.descs.iter().copied()) as usize;
        // `room` bounded the batch by the ring's free slots: all went in.
        debug_assert_eq!(put, self.descs.len());
        self.counters.sent += put as u64;
        // Copy mode sends only from `sendto` (the kernel keeps the TX
        // ring's need_wakeup flag set); zero-copy asks when it needs one.
        // Frames an earlier kick left in the ring (the device queue was
        // stopped) go with these, or alone when none could be posted: the
        // ring is on a socket of its own, which no `poll` drives.
        if self.tx.unconsumed() > 0 && self.tx.needs_wakeup() {
            self.kick();
        }
        put
    }

    /// Wait up to `timeout` for outstanding completions, then return every
    /// frame to the RX queue it came from (the socket closes with the
    /// queue, so the kernel no longer reads them).
    pub fn finish(mut self, timeout: Duration) -> XskTxCounters {
        self.stop_completing.store(false, Ordering::Relaxed);
        let end = std::time::Instant::now() + timeout;
        loop {
            self.reap();
            if self.in_flight.iter().all(Option::is_none) || std::time::Instant::now() >= end {
                break;
            }
            self.kick();
            std::thread::sleep(Duration::from_micros(100));
        }
        let mut frames = std::mem::take(&mut self.free);
        frames.extend(self.in_flight.iter_mut().filter_map(Option::take));
        lock(&self.home).append(&mut frames);
        self.counters
    }
}
