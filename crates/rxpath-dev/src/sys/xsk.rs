//! AF_XDP sockets, UMEM registration and the four rings, written from the
//! kernel's `include/uapi/linux/if_xdp.h` and
//! `Documentation/networking/af_xdp.rst` (no AF_XDP library in between).
//!
//! ```text
//!   socket(AF_XDP) ─ setsockopt XDP_UMEM_REG (our frame region)
//!                  ─ setsockopt XDP_UMEM_FILL_RING / _COMPLETION_RING / XDP_RX_RING / XDP_TX_RING
//!                  ─ getsockopt XDP_MMAP_OFFSETS, mmap each ring at its page offset
//!                  ─ bind(ifindex, queue, flags [, XDP_SHARED_UMEM + the first socket's fd])
//! ```
//!
//! A ring is a power-of-two array with a free-running producer and consumer
//! index in shared memory: the producer writes entries and then publishes
//! them with a release store of its index; the consumer reads the
//! producer's index with an acquire load, reads the entries, and hands the
//! slots back with a release store of its own index (the barriers of the
//! kernel's `xsk_queue.h`). Fill and TX are ours to produce, RX and
//! completion ours to consume.
//!
//! Shared UMEM (`XDP_SHARED_UMEM`): further sockets bind to the first
//! one's UMEM; each brings its own fill and completion rings when it binds
//! another queue (Linux 5.10+), so every queue of an interface can draw
//! frames from one region.

use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// An AF_XDP socket.
#[derive(Debug)]
pub struct XskSocket {
    fd: OwnedFd,
}

/// `XDP_STATISTICS`.
#[derive(Debug, Default, Clone, Copy)]
pub struct XskStats {
    /// Frames dropped for any reason other than a full RX ring (an empty
    /// fill ring among them).
    pub rx_dropped: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when a frame arrived.
    pub rx_fill_ring_empty: u64,
    /// Invalid descriptors on RX and TX.
    pub invalid_descs: u64,
}

impl XskSocket {
    /// A new AF_XDP socket.
    pub fn new() -> io::Result<XskSocket> {
        let fd = syscall!(socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0))?;
        // SAFETY: socket() returned a new descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(XskSocket { fd })
    }

    fn set<T>(&self, opt: libc::c_int, v: &T) -> io::Result<()> {
        // `v` is a live value of the size passed.
        syscall!(setsockopt(
            self.fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t
        ))
        .map(drop)
    }

    /// Register `len` bytes at `addr` as this socket's UMEM, in chunks of
    /// `chunk` bytes.
    ///
    /// The region must stay mapped for as long as the socket (and any
    /// socket sharing its UMEM) lives: the kernel pins its pages.
    pub fn register_umem(&self, addr: *mut u8, len: usize, chunk: u32) -> io::Result<()> {
        // The v2 layout (with flags, without tx_metadata_len): accepted by
        // every kernel with need_wakeup.
        #[repr(C)]
        struct UmemReg {
            addr: u64,
            len: u64,
            chunk_size: u32,
            headroom: u32,
            flags: u32,
            _pad: u32,
        }
        self.set(
            libc::XDP_UMEM_REG,
            &UmemReg {
                addr: addr as u64,
                len: len as u64,
                chunk_size: chunk,
                headroom: 0,
                flags: 0,
                _pad: 0,
            },
        )
    }

    fn offsets(&self) -> io::Result<libc::xdp_mmap_offsets> {
        // SAFETY: a plain-old-data struct of integers; all zeroes is valid.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
        // `off` and `len` are live and `len` is off's size.
        syscall!(getsockopt(
            self.fd.as_raw_fd(),
            libc::SOL_XDP,
            libc::XDP_MMAP_OFFSETS,
            &mut off as *mut _ as *mut libc::c_void,
            &mut len
        ))?;
        if len as usize != std::mem::size_of::<libc::xdp_mmap_offsets>() {
            return Err(io::Error::other(
                "XDP_MMAP_OFFSETS: a kernel without ring flags (need_wakeup, Linux 5.4+)",
            ));
        }
        Ok(off)
    }

    /// Create and map the fill and completion rings of this socket's UMEM.
    pub fn fill_completion(&self, fill: u32, comp: u32) -> io::Result<(Ring<u64>, Ring<u64>)> {
        self.set(libc::XDP_UMEM_FILL_RING, &fill)?;
        self.set(libc::XDP_UMEM_COMPLETION_RING, &comp)?;
        let off = self.offsets()?;
        Ok((
            Ring::map(self, off.fr, fill, libc::XDP_UMEM_PGOFF_FILL_RING as i64)?,
            Ring::map(
                self,
                off.cr,
                comp,
                libc::XDP_UMEM_PGOFF_COMPLETION_RING as i64,
            )?,
        ))
    }

    /// Create and map the RX ring.
    pub fn rx_ring(&self, n: u32) -> io::Result<Ring<libc::xdp_desc>> {
        self.set(libc::XDP_RX_RING, &n)?;
        let off = self.offsets()?;
        Ring::map(self, off.rx, n, libc::XDP_PGOFF_RX_RING)
    }

    /// Create and map the TX ring.
    pub fn tx_ring(&self, n: u32) -> io::Result<Ring<libc::xdp_desc>> {
        self.set(libc::XDP_TX_RING, &n)?;
        let off = self.offsets()?;
        Ring::map(self, off.tx, n, libc::XDP_PGOFF_TX_RING)
    }

    /// Bind to queue `queue` of interface `ifindex` with `flags`
    /// (`XDP_COPY`, `XDP_ZEROCOPY`, `XDP_USE_NEED_WAKEUP`); with `shared`,
    /// on the UMEM of that socket (`XDP_SHARED_UMEM`; then `flags` must be
    /// 0: the mode is the UMEM owner's).
    pub fn bind(
        &self,
        ifindex: u32,
        queue: u32,
        flags: u16,
        shared: Option<&XskSocket>,
    ) -> io::Result<()> {
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flags | shared.map_or(0, |_| libc::XDP_SHARED_UMEM),
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: shared.map_or(0, |s| s.fd.as_raw_fd() as u32),
        };
        // `sa` is a live sockaddr_xdp of the size passed.
        syscall!(bind(
            self.fd.as_raw_fd(),
            &sa as *const libc::sockaddr_xdp as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t
        ))
        .map(drop)
    }

    /// The socket's counters.
    pub fn statistics(&self) -> io::Result<XskStats> {
        // SAFETY: a plain-old-data struct of integers; all zeroes is valid.
        let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
        // `st` and `len` are live and `len` is st's size.
        syscall!(getsockopt(
            self.fd.as_raw_fd(),
            libc::SOL_XDP,
            libc::XDP_STATISTICS,
            &mut st as *mut _ as *mut libc::c_void,
            &mut len
        ))?;
        Ok(XskStats {
            rx_dropped: st.rx_dropped,
            rx_ring_full: st.rx_ring_full,
            rx_fill_ring_empty: st.rx_fill_ring_empty_descs,
            invalid_descs: st.rx_invalid_descs + st.tx_invalid_descs,
        })
    }

    /// Wake the kernel's RX side (a fill ring that needs a wakeup, or a
    /// busy poll of the queue): a non-blocking `recvfrom` without a buffer.
    pub fn kick_rx(&self) {
        // No buffer is passed; the call only drives the queue.
        let _ = syscall!(recvfrom(
            self.fd.as_raw_fd(),
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut()
        ));
    }

    /// Make the kernel send what the TX ring holds: a non-blocking
    /// `sendto` without a buffer.
    pub fn kick_tx(&self) {
        // No buffer is passed; the call only drives the TX ring.
        let _ = syscall!(sendto(
            self.fd.as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0
        ));
    }
}

impl From<XskSocket> for OwnedFd {
    fn from(s: XskSocket) -> OwnedFd {
        s.fd
    }
}

impl AsRawFd for XskSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// One mapped ring of entries `T` (`u64` frame addresses for fill and
/// completion, `xdp_desc` for RX and TX).
#[derive(Debug)]
pub struct Ring<T> {
    map: *mut u8,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    entries: *mut T,
    mask: u32,
    /// Our copy of the index we own (producer or consumer).
    local: u32,
    _t: PhantomData<T>,
}

// SAFETY: the ring is a private mapping of shared memory used only through
// `&mut self` by the thread that owns it; the indices are atomics.
unsafe impl<T: Send> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    fn map(sock: &XskSocket, off: libc::xdp_ring_offset, n: u32, pgoff: i64) -> io::Result<Self> {
        if !n.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("AF_XDP ring of {n} entries: not a power of two"),
            ));
        }
        let map_len = off.desc as usize + n as usize * std::mem::size_of::<T>();
        // SAFETY: a new shared read-write mapping of the ring the socket
        // created at `pgoff`; the kernel checks the length against the
        // ring's size. Nothing else refers to the address range yet.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                sock.fd.as_raw_fd(),
                pgoff,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let map = map as *mut u8;
        // SAFETY: the offsets come from XDP_MMAP_OFFSETS for this ring and
        // lie inside the mapping just made; the kernel aligns them.
        let (producer, consumer, flags, entries) = unsafe {
            (
                map.add(off.producer as usize) as *const AtomicU32,
                map.add(off.consumer as usize) as *const AtomicU32,
                map.add(off.flags as usize) as *const AtomicU32,
                map.add(off.desc as usize) as *mut T,
            )
        };
        // Both indices start at 0 on a new ring.
        Ok(Ring {
            map,
            map_len,
            producer,
            consumer,
            flags,
            entries,
            mask: n - 1,
            local: 0,
            _t: PhantomData,
        })
    }

    fn prod(&self) -> &AtomicU32 {
        // SAFETY: points into our live mapping (see map()).
        unsafe { &*self.producer }
    }

    fn cons(&self) -> &AtomicU32 {
        // SAFETY: points into our live mapping (see map()).
        unsafe { &*self.consumer }
    }

    /// Entries in the ring.
    pub fn size(&self) -> u32 {
        self.mask + 1
    }

    /// Whether the kernel asked to be woken (`XDP_RING_NEED_WAKEUP`).
    pub fn needs_wakeup(&self) -> bool {
        // SAFETY: points into our live mapping (see map()).
        unsafe { &*self.flags }.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    // ---- producer side (fill, TX) ----

    /// Entries produced that the kernel has not consumed yet.
    pub fn unconsumed(&self) -> u32 {
        self.size() - self.free()
    }

    /// Slots free to produce into now.
    pub fn free(&self) -> u32 {
        let cons = self.cons().load(Ordering::Acquire);
        self.size() - self.local.wrapping_sub(cons)
    }

    /// Write up to [`Self::free`] entries from `items`, then publish them;
    /// returns how many were produced.
    pub fn produce(&mut self, items: impl IntoIterator<Item = T>) -> u32 {
        let room = self.free();
        let mut n = 0;
        for it in items.into_iter().take(room as usize) {
            let i = (self.local.wrapping_add(n) & self.mask) as usize;
            // SAFETY: i <= mask, inside the entries array; the slot is
            // ours (between the consumer's index and ours plus room).
            unsafe { self.entries.add(i).write(it) };
            n += 1;
        }
        if n > 0 {
            self.local = self.local.wrapping_add(n);
            self.prod().store(self.local, Ordering::Release);
        }
        n
    }

    // ---- consumer side (RX, completion) ----

    /// Entries ready to consume.
    pub fn available(&self) -> u32 {
        self.prod().load(Ordering::Acquire).wrapping_sub(self.local)
    }

    /// Consume up to `max` entries: each is given to `take`, then the slots
    /// go back to the kernel. Returns how many.
    pub fn consume(&mut self, max: u32, mut take: impl FnMut(T)) -> u32 {
        let n = self.available().min(max);
        for k in 0..n {
            let i = (self.local.wrapping_add(k) & self.mask) as usize;
            // SAFETY: i <= mask, inside the entries array; the producer
            // published it (acquire load in available()).
            take(unsafe { self.entries.add(i).read() });
        }
        if n > 0 {
            self.local = self.local.wrapping_add(n);
            self.cons().store(self.local, Ordering::Release);
        }
        n
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: our own mapping of this length, unmapped once.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}
