//! The kernel's UDP socket read the way applications move to after
//! `recvmmsg`: io_uring with one multishot receive (`IORING_OP_RECV` with
//! `IORING_RECV_MULTISHOT`, Linux 6.0+) into a ring of provided buffers
//! (`IORING_REGISTER_PBUF_RING`, 5.19+). One submission keeps receiving;
//! each datagram is a completion naming the buffer it landed in, which goes
//! back to the buffer ring as soon as it is counted. A peer for `rxpath
//! bench rx-iface`, not part of rxpath's path.
//!
//! ```text
//!  buffer ring (ours to produce: addr, len, bid; tail at byte 14)
//!      └─▶ the kernel picks one per datagram ─▶ CQE (result = length, bid in flags)
//! ```

use io_uring::{cqueue, opcode, types, IoUring};
use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Instant;

const BGID: u16 = 0;
const RECV: u64 = 1;

/// The buffer ring's memory: `entries` × 16-byte `io_uring_buf`,
/// page-aligned (an anonymous mapping).
struct Mapping {
    at: *mut u8,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping of this length, unmapped once.
        unsafe { libc::munmap(self.at as *mut libc::c_void, self.len) };
    }
}

/// A multishot UDP receiver on io_uring.
pub struct UringRecv {
    // The ring first: fields drop in order, and the kernel must let go of
    // the buffer ring before its memory is unmapped.
    ring: IoUring,
    br: Mapping,
    entries: u16,
    tail: u16,
    bufs: Vec<u8>,
    size: usize,
    fd: i32,
    /// Times the multishot receive ended and was armed again (a full
    /// buffer ring, an overflowing completion queue).
    pub rearmed: u64,
}

impl std::fmt::Debug for UringRecv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringRecv")
            .field("entries", &self.entries)
            .finish()
    }
}

impl UringRecv {
    /// A receiver for `sock` with `entries` buffers (a power of two, at
    /// most 32768) of `size` bytes. The socket must outlive the receiver.
    pub fn new(sock: &UdpSocket, entries: u16, size: usize) -> io::Result<UringRecv> {
        if !entries.is_power_of_two() || entries > 1 << 15 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "buffer ring entries: a power of two up to 32768",
            ));
        }
        let ring = IoUring::builder()
            .setup_cqsize(4 * entries as u32)
            .build(64)
            .map_err(|e| io::Error::new(e.kind(), format!("io_uring_setup: {e}")))?;
        let br_len = entries as usize * 16;
        // SAFETY: a new private anonymous mapping; nothing refers to it yet.
        let br = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                br_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if br == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut r = UringRecv {
            ring,
            br: Mapping {
                at: br as *mut u8,
                len: br_len,
            },
            entries,
            tail: 0,
            bufs: vec![0u8; entries as usize * size],
            size,
            fd: sock.as_raw_fd(),
            rearmed: 0,
        };
        // SAFETY: the mapping is page-aligned and `entries * 16` bytes, as
        // the kernel expects; it stays mapped until `r` drops, after the
        // ring (the field dropped first) no longer uses it.
        unsafe {
            r.ring
                .submitter()
                .register_buf_ring_with_flags(r.br.at as u64, entries, BGID, 0)
        }
        .map_err(|e| io::Error::new(e.kind(), format!("IORING_REGISTER_PBUF_RING: {e}")))?;
        for bid in 0..entries {
            r.put(bid);
        }
        r.publish();
        Ok(r)
    }

    /// Write buffer `bid` into the next free slot (published later).
    fn put(&mut self, bid: u16) {
        let slot = (self.tail & (self.entries - 1)) as usize;
        let addr = self.bufs.as_ptr() as u64 + bid as u64 * self.size as u64;
        // SAFETY: slot < entries, so the 14 bytes written (addr, len, bid;
        // not `resv`, which in slot 0 is the ring's tail) lie inside the
        // mapping; the kernel reads a slot only once the tail passes it.
        unsafe {
            let e = self.br.at.add(slot * 16);
            (e as *mut u64).write_unaligned(addr);
            (e.add(8) as *mut u32).write_unaligned(self.size as u32);
            (e.add(12) as *mut u16).write_unaligned(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Hand the slots written so far to the kernel.
    fn publish(&self) {
        // SAFETY: byte 14 of the mapping is the ring's u16 tail, 2-aligned.
        let tail = unsafe { &*(self.br.at.add(14) as *const AtomicU16) };
        tail.store(self.tail, Ordering::Release);
    }

    fn arm(&mut self) -> io::Result<()> {
        let e = opcode::RecvMulti::new(types::Fd(self.fd), BGID)
            .build()
            .user_data(RECV);
        // SAFETY: the entry names our socket and our registered buffer
        // group, both alive for as long as the ring.
        unsafe { self.ring.submission().push(&e) }
            .map_err(|_| io::Error::other("io_uring submission queue full"))
    }

    /// Cancel the multishot receive and wait for its last completion, so
    /// that the socket is free (its port can be bound again) once the
    /// caller drops it.
    fn cancel(&mut self) {
        let e = opcode::AsyncCancel::new(RECV).build().user_data(0);
        // SAFETY: a cancel names a request by user data; it borrows nothing.
        if unsafe { self.ring.submission().push(&e) }.is_err() {
            return;
        }
        let end = Instant::now() + std::time::Duration::from_millis(500);
        let ts = types::Timespec::new().nsec(10_000_000);
        while Instant::now() < end {
            let args = types::SubmitArgs::new().timespec(&ts);
            let _ = self.ring.submitter().submit_with_args(1, &args);
            let done = self
                .ring
                .completion()
                .any(|c| c.user_data() == RECV && !cqueue::more(c.flags()));
            if done {
                return;
            }
        }
    }

    /// Receive until `deadline`; returns (datagrams, bytes).
    pub fn run_until(&mut self, deadline: Instant) -> io::Result<(u64, u64)> {
        let r = self.receive_until(deadline);
        self.cancel();
        r
    }

    fn receive_until(&mut self, deadline: Instant) -> io::Result<(u64, u64)> {
        let (mut pkts, mut bytes) = (0u64, 0u64);
        self.arm()?;
        let ts = types::Timespec::new().nsec(20_000_000);
        while Instant::now() < deadline {
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                Err(e) => return Err(e),
            }
            let mut rearm = false;
            let mut got = Vec::new();
            for cqe in self.ring.completion() {
                let (res, flags) = (cqe.result(), cqe.flags());
                if res >= 0 {
                    if let Some(bid) = cqueue::buffer_select(flags) {
                        pkts += 1;
                        bytes += res as u64;
                        got.push(bid);
                    }
                } else if res != -libc::ENOBUFS {
                    return Err(io::Error::from_raw_os_error(-res));
                }
                rearm |= !cqueue::more(flags);
            }
            for bid in got {
                self.put(bid);
            }
            self.publish();
            if rearm {
                self.rearmed += 1;
                self.arm()?;
            }
        }
        Ok((pkts, bytes))
    }
}
