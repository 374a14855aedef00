//! AF_XDP: an XDP program that redirects by `rx_queue_index` into an
//! XSKMAP, loaded with the `bpf()` system call and attached with a BPF link
//! (so it goes away when the process dies), and one AF_XDP socket per queue
//! whose UMEM is our frame region. The sockets and rings are our own
//! ([`super::xsk`]).
//!
//! The program (written out in `prog.rs`, about 120 instructions at most) takes
//! only IPv4 and IPv6 frames, of one protocol and one destination port, or
//! of the ports in a hash map that `bind` and `close` update while it runs
//! (`XdpProgram::take_port`); everything else (ARP, LLDP, ...) is passed to
//! the kernel, as is any frame for a queue without a socket.

pub(in crate::sys) mod prog;
mod tx;

use super::af_packet::{ifindex, FdWaiter};
use super::ring::Desc;
use super::umem::{Frame, FramePool, Umem};
use super::xsk::{Ring, XskSocket};
use crate::sync::lock;
use crate::{DeviceQueueStats, IrqLine, RxQueue};
pub(super) use prog::ctx;
pub use prog::{release_port, PortKey, XdpFilter, XdpMode, XdpProgram, PORT_MAP_ENTRIES};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;
pub use tx::{XdpTx, XskTx, XskTxCounters};

/// A frame region registered as an AF_XDP UMEM, with a socket (not yet
/// bound) owning its fill and completion rings.
pub(super) struct Xsk {
    pub(super) sock: XskSocket,
    pub(super) fill: Ring<u64>,
    pub(super) comp: Ring<u64>,
    pub(super) pool: FramePool,
    pub(super) umem: Arc<Umem>,
}

impl Xsk {
    pub(super) fn setup(frames: usize, fill_size: u32, complete_size: u32) -> io::Result<Xsk> {
        let pool = FramePool::new(frames, crate::DEFAULT_FRAME_SIZE)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let umem = pool.umem().clone();
        let (base, len) = umem.region();
        let sock = XskSocket::new().map_err(|e| ctx(e, "AF_XDP socket"))?;
        // The region is our page-aligned frame region, kept alive by `umem`
        // (an Arc the queue holds, dropped after the socket) for as long as
        // the kernel may use it; the kernel only touches frames we posted.
        sock.register_umem(base, len, crate::DEFAULT_FRAME_SIZE as u32)
            .map_err(|e| match e.raw_os_error() {
                // xdp_umem_account_pages: past RLIMIT_MEMLOCK.
                Some(libc::ENOBUFS) => io::Error::new(
                    e.kind(),
                    format!(
                        "registering the UMEM: {e} ({})",
                        rxpath_os::sched::memlock_hint(len)
                    ),
                ),
                _ => ctx(e, "registering the UMEM"),
            })?;
        let (fill, comp) = sock
            .fill_completion(fill_size, complete_size)
            .map_err(|e| ctx(e, "fill/completion rings"))?;
        Ok(Xsk {
            sock,
            fill,
            comp,
            pool,
            umem,
        })
    }

    /// Every frame of the region, free.
    pub(super) fn frames(&mut self) -> Vec<Frame> {
        std::iter::from_fn(|| self.pool.alloc()).collect()
    }
}

pub(super) fn ifindex_u32(iface: &str) -> io::Result<u32> {
    ifindex(iface).map(|i| i as u32)
}

/// The RX ring of a queue with `frames` frames: half of them, a power of
/// two, at least 2048 (what a 4096-frame queue has): the rest stay in the
/// fill ring and in the sockets' queues. A deeper ring holds a longer
/// burst while the program is away (the ring is where a queue's backlog
/// waits under interrupt suspension).
fn rx_ring_size(frames: usize) -> u32 {
    ((frames / 2).max(2048) as u32).next_power_of_two()
}

/// What binding one RX queue's socket needs.
struct Bind<'a> {
    iface: &'a str,
    index: u16,
    prog: Arc<XdpProgram>,
    interrupts: bool,
    zero_copy: bool,
    /// Frames of this queue's share kept for its TX ring (0: no TX ring).
    tx_frames: usize,
}

impl Bind<'_> {
    /// Give `sock` (its fill and completion rings made) an RX ring, bind it
    /// (on `shared`'s UMEM if given), put it in the XSKMAP and post `free`.
    fn finish(
        self,
        sock: XskSocket,
        fill: Ring<u64>,
        comp: Ring<u64>,
        umem: Arc<Umem>,
        mut free: Vec<Frame>,
        shared: Option<&XskSocket>,
    ) -> io::Result<XdpQueue> {
        let Bind {
            iface,
            index,
            prog,
            interrupts,
            zero_copy,
            tx_frames,
        } = self;
        let mode = if zero_copy {
            libc::XDP_ZEROCOPY
        } else {
            libc::XDP_COPY
        };
        let rx = sock
            .rx_ring(rx_ring_size(free.len()))
            .map_err(|e| ctx(e, "RX ring"))?;
        // The TX side's frames are the last `tx_frames` of this queue's
        // share.
        let tx_frames = tx_frames.min(free.len() / 2);
        // A socket on a shared UMEM takes no flags of its own (the kernel
        // refuses them): copy or zero-copy and need_wakeup come from the
        // UMEM's owner.
        let flags = if shared.is_some() {
            0
        } else {
            mode | libc::XDP_USE_NEED_WAKEUP
        };
        let ifindex = ifindex_u32(iface)?;
        // A queue whose last AF_XDP socket was just closed (a run that has
        // just ended) is freed by the kernel a moment later (the socket's
        // release is deferred): a bind in between is refused with EBUSY.
        // Try again for up to a second before saying so.
        let mut tries = 0;
        let bound = loop {
            match sock.bind(ifindex, index as u32, flags, shared) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 20 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                r => break r,
            }
        };
        bound.map_err(|e| {
            ctx(
                e,
                match (zero_copy, shared.is_some()) {
                    (true, false) => "binding in zero-copy mode",
                    (false, false) => "binding in copy mode",
                    (true, true) => "binding to a shared UMEM in zero-copy mode",
                    (false, true) => "binding to a shared UMEM in copy mode",
                },
            )
        })?;
        prog.set(index as u32, sock.as_raw_fd())?;
        let tx_home = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (comp, tx) = if tx_frames > 0 {
            let (fd, ring) = tx_socket(&sock, ifindex, index, tx_frames)?;
            let frames = free.split_off(free.len() - tx_frames);
            let tx = XskTx::new(fd, ring, comp, umem.clone(), frames, tx_home.clone());
            (None, Some(tx))
        } else {
            (Some(comp), None)
        };
        let irq = Arc::new(IrqLine::default());
        let level = if interrupts {
            let waiter = waiter_on(&sock)?;
            Some(crate::irq::LevelIrq::spawn(
                format!("rxpath-xdp-irq/{index}"),
                waiter,
                irq.clone(),
            )?)
        } else {
            None
        };
        let mut q = XdpQueue {
            sock,
            fill,
            _comp: comp,
            tx,
            tx_home,
            rx,
            index,
            in_kernel: (0..umem.frames()).map(|_| None).collect(),
            umem,
            shared: shared.is_some(),
            free,
            pending: Default::default(),
            irq,
            level,
            received: 0,
            zero_copy,
            busy_poll: false,
            _prog: prog,
        };
        q.post();
        Ok(q)
    }
}

/// The TX side's own socket: a TX ring bound to the same queue on `rx`'s
/// UMEM (its fill and completion rings are `rx`'s). Not a TX ring on the
/// RX socket itself: in copy mode every `poll` of a socket with a TX ring
/// runs that ring under the socket's mutex (`xsk_poll`, net/xdp/xsk.c, the
/// kernel setting `cached_need_wakeup` for every copy-mode pool), so the
/// interrupt thread's wait for packets spun on the mutex while a sender
/// held it through a batch (6.7 % of a QUIC download server's CPU, with
/// the switches after it); a socket without a TX ring is only looked at.
fn tx_socket(
    rx: &XskSocket,
    ifindex: u32,
    queue: u16,
    frames: usize,
) -> io::Result<(OwnedFd, Ring<libc::xdp_desc>)> {
    let sock = XskSocket::new().map_err(|e| ctx(e, "TX socket"))?;
    let ring = sock
        .tx_ring((frames as u32).next_power_of_two())
        .map_err(|e| ctx(e, "TX ring"))?;
    sock.bind(ifindex, queue as u32, 0, Some(rx))
        .map_err(|e| ctx(e, "binding the TX socket to the queue's UMEM"))?;
    Ok((sock.into(), ring))
}

/// One AF_XDP receive queue: its socket and rings, and the frames of the
/// UMEM it owns (the whole region, or its share of a shared one).
pub struct XdpQueue {
    // The socket and its rings go first (fields drop in order), the
    // region they point into after them.
    sock: XskSocket,
    fill: Ring<u64>,
    /// The completion ring, while no TX side has it.
    _comp: Option<Ring<u64>>,
    /// The TX side of this socket until [`Self::take_tx`].
    tx: Option<XskTx>,
    /// Where the TX side returns its frames when it finishes.
    tx_home: Arc<std::sync::Mutex<Vec<Frame>>>,
    rx: Ring<libc::xdp_desc>,
    index: u16,
    umem: Arc<Umem>,
    /// Bound to another queue's UMEM (`XDP_SHARED_UMEM`).
    shared: bool,
    /// Frames posted to the kernel, by index.
    in_kernel: Vec<Option<Frame>>,
    free: Vec<Frame>,
    pending: std::collections::VecDeque<libc::xdp_desc>,
    irq: Arc<IrqLine>,
    level: Option<crate::irq::LevelIrq>,
    received: u64,
    zero_copy: bool,
    busy_poll: bool,
    _prog: Arc<XdpProgram>,
}

impl std::fmt::Debug for XdpQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpQueue")
            .field("index", &self.index)
            .field("zero_copy", &self.zero_copy)
            .finish()
    }
}

impl XdpQueue {
    /// Open queue `index` of `iface` with `frames` frames, registering the
    /// socket in `prog`'s map. Tries zero-copy, then copy mode.
    pub fn open(
        iface: &str,
        index: u16,
        frames: usize,
        prog: Arc<XdpProgram>,
        interrupts: bool,
        tx_frames: usize,
    ) -> io::Result<XdpQueue> {
        let open = |zc| {
            Self::open_with(
                iface,
                index,
                frames,
                prog.clone(),
                interrupts,
                zc,
                tx_frames,
            )
        };
        match open(true) {
            Ok(q) => Ok(q),
            Err(_) => open(false).map_err(|e| {
                if index > 0 && e.to_string().contains("Invalid argument") {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("queue {index} is out of range for {iface} (see `ethtool -l {iface}`; use fewer --queues)"),
                    )
                } else {
                    e
                }
            }),
        }
    }

    fn open_with(
        iface: &str,
        index: u16,
        frames: usize,
        prog: Arc<XdpProgram>,
        interrupts: bool,
        zero_copy: bool,
        tx_frames: usize,
    ) -> io::Result<XdpQueue> {
        let comp = if tx_frames > 0 {
            (tx_frames as u32).next_power_of_two()
        } else {
            64
        };
        let mut x = Xsk::setup(frames, (frames as u32).next_power_of_two(), comp)?;
        let free = x.frames();
        let q = Bind {
            iface,
            index,
            prog,
            interrupts,
            zero_copy,
            tx_frames,
        };
        q.finish(x.sock, x.fill, x.comp, x.umem, free, None)
    }

    /// Open queues `0..queues` of `iface`: on one shared UMEM when there
    /// are several ([`Self::open_shared`]), else (or if the kernel refuses
    /// to share, said on stderr) each on its own. With `tx_frames`, queue
    /// 0's socket also gets a TX ring and that many of its frames for it
    /// ([`Self::take_tx`]).
    pub fn open_all(
        iface: &str,
        queues: u16,
        frames: usize,
        prog: Arc<XdpProgram>,
        interrupts: bool,
        tx_frames: usize,
    ) -> io::Result<Vec<XdpQueue>> {
        if queues > 1 {
            match Self::open_shared(iface, queues, frames, prog.clone(), interrupts, tx_frames) {
                Ok(qs) => return Ok(qs),
                Err(e) => {
                    log::warn!("shared UMEM on {iface}: {e}; one UMEM per queue instead");
                    // The kernel lets go of a queue the failed attempt bound
                    // in deferred work: give it a moment.
                    std::thread::sleep(Duration::from_millis(300));
                }
            }
        }
        (0..queues)
            .map(|q| {
                let tx = if q == 0 { tx_frames } else { 0 };
                Self::open(iface, q, frames, prog.clone(), interrupts, tx)
            })
            .collect()
    }

    /// Open queues `0..queues` of `iface` on one UMEM (`XDP_SHARED_UMEM`):
    /// one frame region of `queues * frames` frames, `frames` of them per
    /// queue, each queue with its own fill and completion ring (the first
    /// socket registers the region, the others bind to it). Tries
    /// zero-copy, then copy mode.
    pub fn open_shared(
        iface: &str,
        queues: u16,
        frames: usize,
        prog: Arc<XdpProgram>,
        interrupts: bool,
        tx_frames: usize,
    ) -> io::Result<Vec<XdpQueue>> {
        let open = |zc| {
            Self::open_shared_with(
                iface,
                queues,
                frames,
                prog.clone(),
                interrupts,
                zc,
                tx_frames,
            )
        };
        open(true).or_else(|_| open(false))
    }

    fn open_shared_with(
        iface: &str,
        queues: u16,
        frames: usize,
        prog: Arc<XdpProgram>,
        interrupts: bool,
        zero_copy: bool,
        tx_frames: usize,
    ) -> io::Result<Vec<XdpQueue>> {
        let fill_size = (frames as u32).next_power_of_two();
        let comp = if tx_frames > 0 {
            (tx_frames as u32).next_power_of_two()
        } else {
            64
        };
        let mut x = Xsk::setup(frames * queues as usize, fill_size, comp)?;
        let mut all = x.frames();
        let mut out: Vec<XdpQueue> = Vec::with_capacity(queues as usize);
        let Xsk {
            sock,
            fill,
            comp,
            umem,
            ..
        } = x;
        let mut first = Some((sock, fill, comp));
        for index in 0..queues {
            let mine = all.split_off(all.len() - frames);
            let q = Bind {
                iface,
                index,
                prog: prog.clone(),
                interrupts,
                zero_copy,
                tx_frames: if index == 0 { tx_frames } else { 0 },
            };
            let xq = match first.take() {
                Some((sock, fill, comp)) => q.finish(sock, fill, comp, umem.clone(), mine, None)?,
                None => {
                    let sock = XskSocket::new().map_err(|e| ctx(e, "AF_XDP socket"))?;
                    let (fill, comp) = sock
                        .fill_completion(fill_size, 64)
                        .map_err(|e| ctx(e, "fill/completion rings of a shared UMEM"))?;
                    q.finish(sock, fill, comp, umem.clone(), mine, Some(&out[0].sock))?
                }
            };
            out.push(xq);
        }
        Ok(out)
    }

    /// Ask the kernel to busy-poll this socket's device queue
    /// (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL` µs, `SO_BUSY_POLL_BUDGET`);
    /// `pull` then kicks the queue when the RX ring is empty, which runs the
    /// driver's NAPI in our context instead of waiting for its softirq.
    /// The TX side's socket (if it has not been taken yet) is set the
    /// same: a kick busy-polls too, as it did when it was the RX socket.
    pub fn set_busy_poll(&mut self, usecs: u32, budget: u32) -> io::Result<()> {
        let mut fds = vec![self.sock.as_raw_fd()];
        fds.extend(self.tx.as_ref().map(XskTx::raw_fd));
        for fd in fds {
            let set = |opt: libc::c_int, v: libc::c_int| -> io::Result<()> {
                // Points to a live c_int of the size passed.
                syscall!(setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    &v as *const libc::c_int as *const libc::c_void,
                    4
                ))
                .map(drop)
            };
            set(69, 1).map_err(|e| ctx(e, "SO_PREFER_BUSY_POLL"))?; // SO_PREFER_BUSY_POLL
            set(libc::SO_BUSY_POLL, usecs as libc::c_int).map_err(|e| ctx(e, "SO_BUSY_POLL"))?;
            set(70, budget as libc::c_int).map_err(|e| ctx(e, "SO_BUSY_POLL_BUDGET"))?;
            // SO_BUSY_POLL_BUDGET
        }
        self.busy_poll = usecs > 0;
        Ok(())
    }

    /// The TX side of this queue's socket (opened with `tx_frames`), to
    /// send from another thread; its frames come back to this queue when
    /// it [finishes](XskTx::finish).
    pub fn take_tx(&mut self) -> Option<XskTx> {
        self.tx.take()
    }

    /// True when this queue's socket is bound to another queue's UMEM.
    pub fn shares_umem(&self) -> bool {
        self.shared
    }

    /// True when the socket runs in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Post every free frame to the fill ring.
    fn post(&mut self) {
        if self.free.is_empty() {
            return;
        }
        let fs = self.umem.frame_size() as u64;
        let take = (self.fill.free() as usize).min(self.free.len());
        let start = self.free.len() - take;
        let put = self
            .fill
            .produce(self.free[start..].iter().map(|f| f.index() as u64 * fs))
            as usize;
        for f in self.free.drain(start..start + put) {
            let i = f.index() as usize;
            self.in_kernel[i] = Some(f);
        }
        if self.fill.needs_wakeup() {
            self.sock.kick_rx();
        }
    }

    /// Stop the interrupt thread and gather every frame back: the ones
    /// posted to the kernel come back once the socket is gone.
    pub fn into_pool(mut self) -> FramePool {
        // Dropping it stops its thread.
        self.level = None;
        let mut frames = std::mem::take(&mut self.free);
        frames.extend(self.in_kernel.iter_mut().filter_map(Option::take));
        if let Some(tx) = self.tx.take() {
            tx.finish(Duration::ZERO);
        }
        frames.append(&mut lock(&self.tx_home));
        FramePool::from_frames(self.umem.clone(), frames)
    }
}

/// A waiter on a duplicate of the RX socket's descriptor.
fn waiter_on(sock: &XskSocket) -> io::Result<FdWaiter> {
    let dup = syscall!(fcntl(sock.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0))?;
    // SAFETY: fcntl returned a new descriptor (a dup of the live RX socket)
    // that nothing else owns.
    Ok(FdWaiter::from_owned(unsafe { OwnedFd::from_raw_fd(dup) }))
}

impl XdpQueue {
    /// The queue raises interrupts (from its thread, or inline).
    fn has_irq(&self) -> bool {
        self.level.is_some()
    }
}

impl RxQueue for XdpQueue {
    fn umem(&self) -> &Arc<Umem> {
        &self.umem
    }
    fn queue_index(&self) -> u16 {
        self.index
    }
    fn pull(&mut self) -> Option<Desc> {
        if self.pending.is_empty() {
            if self.busy_poll && self.rx.available() == 0 {
                // A non-blocking recvfrom runs the kernel's busy poll for
                // this queue (xsk_recvmsg → napi_busy_loop).
                self.sock.kick_rx();
            }
            let pending = &mut self.pending;
            self.rx.consume(64, |d| pending.push_back(d));
        }
        let d = self.pending.pop_front()?;
        let fs = self.umem.frame_size() as u64;
        let (idx, off) = ((d.addr / fs) as usize, (d.addr % fs) as u16);
        let frame = self.in_kernel.get_mut(idx).and_then(Option::take)?;
        self.received += 1;
        Some(Desc {
            frame,
            off,
            len: d.len as u16,
            rxhash: 0,
            flags: 0,
        })
    }
    fn pull_done(&mut self) {}
    fn recycle(&mut self, frame: Frame) {
        self.free.push(frame);
    }
    fn recycle_bulk(&mut self, frames: &mut Vec<Frame>) {
        self.free.append(frames);
    }
    fn recycle_done(&mut self) {
        self.post();
    }
    fn irq(&self) -> Option<&IrqLine> {
        self.has_irq().then_some(&*self.irq)
    }
    fn irq_handle(&self) -> Option<Arc<IrqLine>> {
        self.has_irq().then(|| self.irq.clone())
    }
    fn irq_inline(&mut self) -> bool {
        self.level.as_mut().map(|l| l.make_inline()).is_some()
    }
    fn inline_irq(&self) -> Option<&dyn rxpath_frames::InlineIrq> {
        // The same wait the interrupt thread makes (xsk_poll also wakes the
        // driver when the fill ring asks for it), on this thread.
        self.level
            .as_ref()
            .filter(|l| l.is_inline())
            .map(|l| l as &dyn rxpath_frames::InlineIrq)
    }
    fn has_pending(&mut self) -> bool {
        !self.pending.is_empty() || self.rx.available() > 0
    }
    fn readiness_fd(&self) -> Option<io::Result<OwnedFd>> {
        self.level.as_ref().map(|l| l.readiness_fd())
    }
    fn device_stats(&self) -> DeviceQueueStats {
        // XDP_STATISTICS: rx_dropped includes the drops for an empty fill
        // ring (also counted in rx_fill_ring_empty_descs) and those of a
        // frame longer than a UMEM frame holds (`xsk_rcv_check`'s length
        // check: the XDP program passes those to the kernel, so only a
        // program of another's would let one through); rx_ring_full is
        // separate.
        let st = self.sock.statistics().unwrap_or_default();
        let no_buffer = st.rx_fill_ring_empty.min(st.rx_dropped);
        DeviceQueueStats {
            offered: self.received + st.rx_dropped + st.rx_ring_full,
            rx_ring: self.received,
            rx_missed: st.rx_ring_full,
            rx_no_buffer: no_buffer,
            rx_too_long: st.rx_dropped - no_buffer,
            wakeups: self.irq.wakeups(),
        }
    }
}
