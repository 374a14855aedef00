//! The TPACKET receive ring of an AF_PACKET socket: TPACKET_V3 blocks
//! (bulk receive) or TPACKET_V2 frames (one handed over at a time), in a
//! PACKET_FANOUT hash group per interface, with the kernel's checksum
//! and VLAN status per frame ([`PacketRing`]; the sockets themselves are
//! [`super::af_packet`]'s).

use super::af_packet::{ifindex, FdWaiter, RawSocket, ETH_P_ALL_BE};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

const PACKET_VERSION: libc::c_int = 10;
const TPACKET_V2: libc::c_int = 1;
const TPACKET_V3: libc::c_int = 2;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_FANOUT_HASH: u32 = 0;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
/// `CHECKSUM_PARTIAL`: a local sender's checksum, not filled in.
const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
/// `skb_csum_unnecessary()`: the checksum was verified.
const TP_STATUS_CSUM_VALID: u32 = 1 << 7;

#[repr(C)]
struct TpacketReq3 {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
    tp_retire_blk_tov: u32,
    tp_sizeof_priv: u32,
    tp_feature_req_word: u32,
}

/// `struct tpacket_req` (TPACKET_V2).
#[repr(C)]
struct TpacketReq {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
}

// Offsets in `struct tpacket2_hdr`.
const P2_STATUS: usize = 0;
const P2_LEN: usize = 4;
const P2_SNAPLEN: usize = 8;
const P2_MAC: usize = 12;
const P2_VLAN_TCI: usize = 24;

#[repr(C)]
#[derive(Default)]
struct TpacketStatsV3 {
    tp_packets: u32,
    tp_drops: u32,
    tp_freeze_q_cnt: u32,
}

// Offsets in `struct tpacket_block_desc` (version, offset_to_priv, then the
// v1 block header) and `struct tpacket3_hdr`, from <linux/if_packet.h>.
const BD_STATUS: usize = 8;
const BD_NUM_PKTS: usize = 12;
const BD_FIRST_PKT: usize = 16;
const PH_NEXT: usize = 0;
const PH_SNAPLEN: usize = 12;
const PH_LEN: usize = 16;
const PH_STATUS: usize = 20;
const PH_MAC: usize = 24;
const PH_RXHASH: usize = 28;
const PH_VLAN_TCI: usize = 32;

/// Geometry of a TPACKET_V3 ring.
#[derive(Debug, Clone, Copy)]
pub struct RingConfig {
    /// Bytes per block (a multiple of the page size).
    pub block_size: usize,
    /// Blocks.
    pub block_nr: usize,
    /// Frame size hint (TPACKET_V3 packs packets into blocks).
    pub frame_size: usize,
    /// A block is handed to user space at the latest after this many ms.
    pub retire_ms: u32,
    /// Join this PACKET_FANOUT group (hash mode): several rings on one
    /// interface then split its traffic by flow, like RSS queues.
    pub fanout_group: Option<u16>,
    /// Hand each frame over as soon as the kernel wrote it (TPACKET_V2,
    /// a status word per frame) instead of a block at a time (TPACKET_V3,
    /// handed over when full or after `retire_ms`): what a socket that
    /// waits for one request needs; blocks are better for bulk receive.
    pub per_frame: bool,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            block_size: 1 << 20,
            block_nr: 16,
            frame_size: 2048,
            retire_ms: 1,
            fanout_group: None,
            per_frame: false,
        }
    }
}

/// One received packet in the ring.
#[derive(Debug)]
pub struct RxSlot<'a> {
    /// The bytes captured (from the MAC header).
    pub data: &'a [u8],
    /// Length on the wire (may exceed `data`).
    pub wire_len: u32,
    /// The kernel's `skb->hash` for the packet.
    pub rxhash: u32,
    /// VLAN tag the kernel took out of the frame, if any.
    pub vlan_tci: Option<u16>,
    /// The checksum state the kernel reported (`skb->ip_summed`), as
    /// [`crate::sys::ring::desc_flags`].
    pub csum_flags: u32,
}

/// A TPACKET_V3 ring (the kernel fills blocks of packets, user space reads a
/// block and hands it back) or, with [`RingConfig::per_frame`], a
/// TPACKET_V2 ring (one status word per frame, each handed back after use).
#[derive(Debug)]
pub struct PacketRing {
    sock: RawSocket,
    map: *mut u8,
    map_len: usize,
    cfg: RingConfig,
    block: usize,
    /// Packets left in the current block, and the offset of the next one.
    left: u32,
    next: usize,
    in_block: bool,
    /// TPACKET_V2: frames in the ring, the frame to read next, and whether
    /// the previous call's frame is still ours (handed back on the next).
    frame_nr: usize,
    frame: usize,
    held: bool,
}

// SAFETY: the mapping is owned by this value and only touched through
// `&mut self`; the kernel side synchronises through block_status.
unsafe impl Send for PacketRing {}

impl PacketRing {
    /// Open a TPACKET_V3 ring on `iface`.
    pub fn open(iface: &str, cfg: RingConfig) -> io::Result<PacketRing> {
        let page = 4096;
        if cfg.block_size == 0
            || !cfg.block_size.is_multiple_of(page)
            || cfg.block_nr == 0
            || cfg.frame_size < 128
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bad TPACKET_V3 ring geometry",
            ));
        }
        let ifindex = ifindex(iface)?;
        let fd = syscall!(socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            ETH_P_ALL_BE as i32
        ))?;
        // SAFETY: `socket` returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();
        let v: libc::c_int = if cfg.per_frame {
            TPACKET_V2
        } else {
            TPACKET_V3
        };
        // Points to a live c_int.
        syscall!(setsockopt(
            raw,
            libc::SOL_PACKET,
            PACKET_VERSION,
            &v as *const _ as *const libc::c_void,
            4
        ))?;
        let frame_nr = cfg.block_size / cfg.frame_size * cfg.block_nr;
        if cfg.per_frame {
            let req = TpacketReq {
                tp_block_size: cfg.block_size as u32,
                tp_block_nr: cfg.block_nr as u32,
                tp_frame_size: cfg.frame_size as u32,
                tp_frame_nr: frame_nr as u32,
            };
            // Points to a live TpacketReq of the size passed.
            syscall!(setsockopt(
                raw,
                libc::SOL_PACKET,
                PACKET_RX_RING,
                &req as *const _ as *const libc::c_void,
                std::mem::size_of::<TpacketReq>() as libc::socklen_t
            ))?;
        } else {
            let req = TpacketReq3 {
                tp_block_size: cfg.block_size as u32,
                tp_block_nr: cfg.block_nr as u32,
                tp_frame_size: cfg.frame_size as u32,
                tp_frame_nr: frame_nr as u32,
                tp_retire_blk_tov: cfg.retire_ms,
                tp_sizeof_priv: 0,
                tp_feature_req_word: 0,
            };
            // Points to a live TpacketReq3 of the size passed.
            syscall!(setsockopt(
                raw,
                libc::SOL_PACKET,
                PACKET_RX_RING,
                &req as *const _ as *const libc::c_void,
                std::mem::size_of::<TpacketReq3>() as libc::socklen_t
            ))?;
        }
        let map_len = cfg.block_size * cfg.block_nr;
        // SAFETY: mapping the ring the kernel just set up on this socket,
        // with the length it was configured with.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                raw,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EAGAIN) {
                // MAP_LOCKED past RLIMIT_MEMLOCK.
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "locking the packet ring in memory: {e} ({})",
                        rxpath_os::sched::memlock_hint(map_len)
                    ),
                ));
            }
            return Err(e);
        }
        // SAFETY: all-zero is a valid sockaddr_ll.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL_BE;
        sll.sll_ifindex = ifindex;
        let ring = PacketRing {
            sock: RawSocket { fd, ifindex },
            map: map as *mut u8,
            map_len,
            cfg,
            block: 0,
            left: 0,
            next: 0,
            in_block: false,
            frame_nr,
            frame: 0,
            held: false,
        };
        // Points to a live sockaddr_ll of the size passed.
        syscall!(bind(
            raw,
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t
        ))?;
        if let Some(g) = cfg.fanout_group {
            let arg: u32 = g as u32 | (PACKET_FANOUT_HASH << 16);
            // Points to a live u32.
            syscall!(setsockopt(
                raw,
                libc::SOL_PACKET,
                PACKET_FANOUT,
                &arg as *const _ as *const libc::c_void,
                4
            ))?;
        }
        Ok(ring)
    }

    /// The socket (for `poll`).
    pub fn socket(&self) -> &RawSocket {
        &self.sock
    }

    fn block_ptr(&self, b: usize) -> *mut u8 {
        // SAFETY: b < block_nr, so the offset is inside the mapping.
        unsafe { self.map.add(b * self.cfg.block_size) }
    }

    fn status(&self, b: usize) -> &std::sync::atomic::AtomicU32 {
        // SAFETY: block_status is a 4-byte aligned u32 inside the mapping,
        // shared with the kernel; reading and writing it atomically is how
        // the kernel's TPACKET_V3 protocol hands blocks over.
        unsafe { &*(self.block_ptr(b).add(BD_STATUS) as *const std::sync::atomic::AtomicU32) }
    }

    fn read_u32(&self, p: *const u8, off: usize) -> u32 {
        // SAFETY: callers pass pointers inside a block the kernel handed to
        // us (status USER), with offsets inside its headers.
        unsafe { std::ptr::read_unaligned(p.add(off) as *const u32) }
    }

    /// TPACKET_V2: the header of frame `i` (frames never straddle blocks).
    fn frame_ptr(&self, i: usize) -> *mut u8 {
        let per_block = self.cfg.block_size / self.cfg.frame_size;
        // SAFETY: i < frame_nr, so the block and the frame's offset in it
        // are inside the mapping.
        unsafe {
            self.block_ptr(i / per_block)
                .add((i % per_block) * self.cfg.frame_size)
        }
    }

    fn frame_status(&self, i: usize) -> &std::sync::atomic::AtomicU32 {
        // SAFETY: tp_status is the 4-byte aligned first word of the frame
        // header, shared with the kernel; the TPACKET_V2 protocol hands
        // frames over through it.
        unsafe { &*(self.frame_ptr(i).add(P2_STATUS) as *const std::sync::atomic::AtomicU32) }
    }

    /// True when a packet is waiting.
    pub fn has_pending(&self) -> bool {
        if self.cfg.per_frame {
            let i = if self.held {
                (self.frame + 1) % self.frame_nr
            } else {
                self.frame
            };
            return self
                .frame_status(i)
                .load(std::sync::atomic::Ordering::Acquire)
                & TP_STATUS_USER
                != 0;
        }
        (self.in_block && self.left > 0)
            || self
                .status(self.block)
                .load(std::sync::atomic::Ordering::Acquire)
                & TP_STATUS_USER
                != 0
    }

    /// The next packet, if any. Blocks are handed back to the kernel once
    /// every packet in them has been returned.
    pub fn next_packet(&mut self) -> Option<RxSlot<'_>> {
        use std::sync::atomic::Ordering;
        if self.cfg.per_frame {
            return self.next_frame();
        }
        if self.in_block && self.left == 0 {
            // Pairs with the kernel's read of block_status before it fills
            // the block again: everything we read happened before this.
            self.status(self.block)
                .store(TP_STATUS_KERNEL, Ordering::Release);
            self.in_block = false;
            self.block = (self.block + 1) % self.cfg.block_nr;
        }
        if !self.in_block {
            // Acquire pairs with the kernel's smp_wmb + status write: the
            // packets are visible once USER is.
            if self.status(self.block).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                return None;
            }
            let bp = self.block_ptr(self.block);
            self.left = self.read_u32(bp, BD_NUM_PKTS);
            self.next = self.read_u32(bp, BD_FIRST_PKT) as usize;
            self.in_block = true;
            if self.left == 0 {
                return self.next_packet();
            }
        }
        let bp = self.block_ptr(self.block);
        if self.next >= self.cfg.block_size {
            self.left = 0;
            return None;
        }
        // SAFETY: `next` is an offset the kernel wrote inside this block.
        let ph = unsafe { bp.add(self.next) };
        let snaplen = self.read_u32(ph, PH_SNAPLEN) as usize;
        let wire_len = self.read_u32(ph, PH_LEN);
        let status = self.read_u32(ph, PH_STATUS);
        // SAFETY: tp_mac is a u16 offset from the packet header.
        let mac = unsafe { std::ptr::read_unaligned(ph.add(PH_MAC) as *const u16) } as usize;
        let rxhash = self.read_u32(ph, PH_RXHASH);
        let tci = self.read_u32(ph, PH_VLAN_TCI) as u16;
        let next_off = self.read_u32(ph, PH_NEXT) as usize;
        self.left -= 1;
        self.next = if next_off == 0 {
            self.cfg.block_size
        } else {
            self.next + next_off
        };
        let start = (ph as usize - bp as usize) + mac;
        let len = snaplen.min(self.cfg.block_size.saturating_sub(start));
        // SAFETY: [start, start+len) lies inside the block (clamped above),
        // which stays ours until we hand it back on a later call, and `&mut
        // self` is borrowed for the slice's life.
        let data = unsafe { std::slice::from_raw_parts(bp.add(start), len) };
        Some(RxSlot {
            data,
            wire_len,
            rxhash,
            vlan_tci: (status & TP_STATUS_VLAN_VALID != 0).then_some(tci & 0x0fff),
            csum_flags: csum_flags(status),
        })
    }

    /// TPACKET_V2: the next frame, the previous one handed back first.
    fn next_frame(&mut self) -> Option<RxSlot<'_>> {
        use std::sync::atomic::Ordering;
        if self.held {
            // Everything read from the frame happened before this store,
            // which gives it back to the kernel.
            self.frame_status(self.frame)
                .store(TP_STATUS_KERNEL, Ordering::Release);
            self.held = false;
            self.frame = (self.frame + 1) % self.frame_nr;
        }
        // Acquire pairs with the kernel's smp_wmb + status write.
        let status = self.frame_status(self.frame).load(Ordering::Acquire);
        if status & TP_STATUS_USER == 0 {
            return None;
        }
        self.held = true;
        let fp = self.frame_ptr(self.frame);
        let snaplen = self.read_u32(fp, P2_SNAPLEN) as usize;
        let wire_len = self.read_u32(fp, P2_LEN);
        // SAFETY: tp_mac and tp_vlan_tci are u16 fields of the header.
        let (mac, tci) = unsafe {
            (
                std::ptr::read_unaligned(fp.add(P2_MAC) as *const u16) as usize,
                std::ptr::read_unaligned(fp.add(P2_VLAN_TCI) as *const u16),
            )
        };
        let len = snaplen.min(self.cfg.frame_size.saturating_sub(mac));
        // SAFETY: [mac, mac+len) lies inside this frame (clamped above),
        // which stays ours until the next call, and `&mut self` is
        // borrowed for the slice's life.
        let data = unsafe { std::slice::from_raw_parts(fp.add(mac), len) };
        Some(RxSlot {
            data,
            wire_len,
            rxhash: 0,
            vlan_tci: (status & TP_STATUS_VLAN_VALID != 0).then_some(tci & 0x0fff),
            csum_flags: csum_flags(status),
        })
    }

    /// The kernel's counters since the last call: (packets, drops).
    pub fn kernel_stats(&self) -> io::Result<(u32, u32)> {
        let mut st = TpacketStatsV3::default();
        let mut len = std::mem::size_of::<TpacketStatsV3>() as libc::socklen_t;
        // Points to a live TpacketStatsV3 and its length.
        syscall!(getsockopt(
            self.sock.fd.as_raw_fd(),
            libc::SOL_PACKET,
            PACKET_STATISTICS,
            &mut st as *mut _ as *mut libc::c_void,
            &mut len as *mut libc::socklen_t
        ))?;
        Ok((st.tp_packets, st.tp_drops))
    }

    /// Wait up to `timeout` for the socket to become readable.
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.sock.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // Points to one live pollfd.
        Ok(syscall!(poll(&mut pfd as *mut libc::pollfd, 1, ms))? > 0)
    }
}

/// The checksum state a packet's status word reports, as
/// [`crate::sys::ring::desc_flags`].
fn csum_flags(status: u32) -> u32 {
    if status & TP_STATUS_CSUMNOTREADY != 0 {
        crate::sys::ring::desc_flags::CSUM_PARTIAL
    } else if status & TP_STATUS_CSUM_VALID != 0 {
        crate::sys::ring::desc_flags::CSUM_OK
    } else {
        0
    }
}

impl Drop for PacketRing {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `open` mapped; no slice into it
        // outlives `&mut self` borrows.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

impl PacketRing {
    /// A waiter on this ring's socket.
    pub fn waiter(&self) -> io::Result<FdWaiter> {
        Ok(FdWaiter(self.sock.fd.try_clone()?))
    }
}
