//! The XDP program (assembled here, 16 instructions at most), its XSKMAP,
//! and their loading and attaching with the `bpf()` system call.

use super::super::af_packet::ifindex;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const XDP_PASS: i32 = 2;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;

#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

/// What the XDP program takes into the AF_XDP sockets; everything else goes
/// to the kernel (`XDP_PASS`): ARP, LLDP, and whatever the filter excludes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpFilter {
    /// Take IPv4.
    pub ipv4: bool,
    /// Take IPv6.
    pub ipv6: bool,
    /// Take only this IP protocol (17 = UDP, 6 = TCP); IPv6 extension
    /// headers are not walked, so an IPv6 packet must carry it directly.
    pub protocol: Option<u8>,
    /// With `protocol` UDP or TCP: take only this destination port (IPv4
    /// without options, IPv6 without extension headers; the rest goes to
    /// the kernel).
    pub dst_port: Option<u16>,
    /// Take every frame, whatever it is (ARP, VLAN-tagged, truncated):
    /// the kernel sees nothing on this interface. For tests that compare
    /// rxpath's input counters with the kernel's.
    pub all: bool,
}

impl Default for XdpFilter {
    fn default() -> Self {
        XdpFilter {
            ipv4: true,
            ipv6: true,
            protocol: None,
            dst_port: None,
            all: false,
        }
    }
}

/// The program for `filter`: redirect what it takes to the XSK of the
/// receiving queue (`bpf_redirect_map(&xsks, rx_queue_index, XDP_PASS)`),
/// pass the rest. `map_fd` goes into the 64-bit immediate load.
/// Jump labels, patched once the code is placed.
#[derive(Clone, Copy, PartialEq)]
enum L {
    V4,
    V6,
    Redirect,
    Pass,
}

fn program(map_fd: i32, filter: XdpFilter) -> Vec<Insn> {
    let mut p: Vec<Insn> = Vec::new();
    let mut fix: Vec<(usize, L)> = Vec::new();
    let mut at: Vec<(L, usize)> = Vec::new();
    let jump = |p: &mut Vec<Insn>, fix: &mut Vec<(usize, L)>, i: Insn, l: L| {
        fix.push((p.len(), l));
        p.push(i);
    };
    if filter.all {
        // No pass block: the verifier refuses unreachable code.
        return finish(p, fix, at, map_fd, false);
    }
    p.push(insn(0x61, 2, 1, 0, 0)); // r2 = ctx->data
    p.push(insn(0x61, 3, 1, 4, 0)); // r3 = ctx->data_end
    p.push(insn(0xbf, 4, 2, 0, 0)); // r4 = r2
    p.push(insn(0x07, 4, 0, 0, 34)); // r4 += 34: Ethernet + 20 bytes of IP
    jump(&mut p, &mut fix, insn(0x2d, 4, 3, 0, 0), L::Pass); // if r4 > r3 goto pass
    p.push(insn(0x69, 5, 2, 12, 0)); // r5 = ethertype (as loaded, little endian)
    if filter.ipv4 {
        jump(&mut p, &mut fix, insn(0x15, 5, 0, 0, 0x0008), L::V4);
    }
    if filter.ipv6 {
        jump(&mut p, &mut fix, insn(0x15, 5, 0, 0, 0xdd86), L::V6);
    }
    jump(&mut p, &mut fix, insn(0x05, 0, 0, 0, 0), L::Pass);
    // Only the blocks that can be reached: the verifier refuses dead code.
    let blocks = [(L::V4, 23i16, filter.ipv4), (L::V6, 20, filter.ipv6)];
    for (label, proto_off, _) in blocks.into_iter().filter(|b| b.2) {
        at.push((label, p.len()));
        if let Some(proto) = filter.protocol {
            p.push(insn(0x71, 5, 2, proto_off, 0)); // r5 = IP protocol / next header
            jump(&mut p, &mut fix, insn(0x55, 5, 0, 0, proto as i32), L::Pass); // if r5 != proto goto pass
            if let (Some(port), 6 | 17) = (filter.dst_port, proto) {
                let l4 = if label == L::V4 {
                    p.push(insn(0x71, 5, 2, 14, 0)); // r5 = version / IHL
                    jump(&mut p, &mut fix, insn(0x55, 5, 0, 0, 0x45), L::Pass); // options: pass
                    14 + 20
                } else {
                    14 + 40
                };
                p.push(insn(0xbf, 4, 2, 0, 0)); // r4 = r2
                p.push(insn(0x07, 4, 0, 0, l4 as i32 + 4)); // r4 += L4 offset + ports
                jump(&mut p, &mut fix, insn(0x2d, 4, 3, 0, 0), L::Pass); // if r4 > r3 goto pass
                p.push(insn(0x69, 5, 2, l4 + 2, 0)); // r5 = destination port (as loaded)
                let want = port.swap_bytes() as i32; // network order, loaded little endian
                jump(&mut p, &mut fix, insn(0x55, 5, 0, 0, want), L::Pass); // if r5 != port goto pass
            }
        }
        jump(&mut p, &mut fix, insn(0x05, 0, 0, 0, 0), L::Redirect);
    }
    at.push((L::Redirect, p.len()));
    finish(p, fix, at, map_fd, true)
}

/// The redirect and pass tails of the program, and the jump fix-ups.
fn finish(
    mut p: Vec<Insn>,
    fix: Vec<(usize, L)>,
    mut at: Vec<(L, usize)>,
    map_fd: i32,
    pass: bool,
) -> Vec<Insn> {
    p.push(insn(0x61, 2, 1, 16, 0)); // r2 = ctx->rx_queue_index
    p.push(insn(0x18, 1, 1, 0, map_fd)); // r1 = map (BPF_PSEUDO_MAP_FD), low half
    p.push(insn(0x00, 0, 0, 0, 0)); //   high half
    p.push(insn(0xb7, 3, 0, 0, XDP_PASS)); // r3 = XDP_PASS when the queue has no socket
    p.push(insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP)); // call bpf_redirect_map
    p.push(insn(0x95, 0, 0, 0, 0)); // exit
    if pass {
        at.push((L::Pass, p.len()));
        p.push(insn(0xb7, 0, 0, 0, XDP_PASS)); // r0 = XDP_PASS
        p.push(insn(0x95, 0, 0, 0, 0)); // exit
    }
    for (i, l) in fix {
        let target = at
            .iter()
            .find(|(x, _)| *x == l)
            .map_or(p.len() - 2, |x| x.1);
        p[i].off = (target as isize - i as isize - 1) as i16;
    }
    p
}

fn bpf_raw(cmd: libc::c_long, attr: &mut [u64; 16]) -> io::Result<libc::c_long> {
    // The attribute block is a live, zero-padded 128-byte buffer, larger
    // than every bpf_attr variant used here.
    syscall!(syscall(
        libc::SYS_bpf,
        cmd,
        attr.as_mut_ptr() as *mut libc::c_void,
        128usize
    ))
}

/// A `bpf()` command that returns a new descriptor.
fn bpf(cmd: libc::c_long, attr: &mut [u64; 16]) -> io::Result<OwnedFd> {
    let fd = bpf_raw(cmd, attr)?;
    // SAFETY: these commands return a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn put32(attr: &mut [u64; 16], byte_off: usize, v: u32) {
    let w = &mut attr[byte_off / 8];
    let shift = (byte_off % 8) * 8;
    *w = (*w & !(0xffff_ffffu64 << shift)) | (v as u64) << shift;
}

/// How the XDP program ended up attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver (native XDP).
    Native,
    /// In the generic, skb-based hook (slower; any device).
    Generic,
}

/// The XDP program, its XSKMAP and the BPF link that attaches it. Dropping
/// it (or the process dying) detaches the program.
#[derive(Debug)]
pub struct XdpProgram {
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    /// Where it is attached.
    pub mode: XdpMode,
}

impl XdpProgram {
    /// Load the program for `queues` queues and attach it to `iface`,
    /// natively if the driver can, else generically.
    pub fn attach(iface: &str, queues: u32, filter: XdpFilter) -> io::Result<XdpProgram> {
        let ifidx = ifindex(iface)?;
        let mut a = [0u64; 16];
        put32(&mut a, 0, BPF_MAP_TYPE_XSKMAP);
        put32(&mut a, 4, 4);
        put32(&mut a, 8, 4);
        put32(&mut a, 12, queues.max(1));
        let map = bpf(BPF_MAP_CREATE, &mut a).map_err(|e| ctx(e, "creating the XSKMAP"))?;
        let prog = program(map.as_raw_fd(), filter);
        Self::load_and_link(ifidx, &prog, map)
    }

    /// Load `insns` as an XDP program and attach it to `ifidx` with a BPF
    /// link, natively if the driver can, else generically.
    fn load_and_link(ifidx: i32, insns: &[Insn], map: OwnedFd) -> io::Result<XdpProgram> {
        let license = b"GPL\0";
        let mut a = [0u64; 16];
        put32(&mut a, 0, BPF_PROG_TYPE_XDP);
        put32(&mut a, 4, insns.len() as u32);
        a[1] = insns.as_ptr() as u64;
        a[2] = license.as_ptr() as u64;
        put32(&mut a, 68, BPF_XDP);
        let prog_fd = bpf(BPF_PROG_LOAD, &mut a).map_err(|e| ctx(e, "loading the XDP program"))?;
        let link = |flags: u32| {
            let mut a = [0u64; 16];
            put32(&mut a, 0, prog_fd.as_raw_fd() as u32);
            put32(&mut a, 4, ifidx as u32);
            put32(&mut a, 8, BPF_XDP);
            put32(&mut a, 12, flags);
            bpf(BPF_LINK_CREATE, &mut a)
        };
        let (link, mode) = match link(XDP_FLAGS_DRV_MODE) {
            Ok(l) => (l, XdpMode::Native),
            Err(_) => (
                link(XDP_FLAGS_SKB_MODE)
                    .map_err(|e| ctx(e, "attaching XDP (native and generic)"))?,
                XdpMode::Generic,
            ),
        };
        Ok(XdpProgram {
            map,
            _prog: prog_fd,
            _link: link,
            mode,
        })
    }

    /// The kernel's own ceiling: attach a program that drops every frame
    /// (`XDP_DROP`), natively if possible.
    pub fn attach_drop(iface: &str) -> io::Result<XdpProgram> {
        let ifidx = ifindex(iface)?;
        let mut a = [0u64; 16];
        put32(&mut a, 0, 2); // BPF_MAP_TYPE_ARRAY: the map only keeps the struct shape
        put32(&mut a, 4, 4);
        put32(&mut a, 8, 4);
        put32(&mut a, 12, 1);
        let map = bpf(BPF_MAP_CREATE, &mut a).map_err(|e| ctx(e, "creating a map"))?;
        let prog = [insn(0xb7, 0, 0, 0, 1), insn(0x95, 0, 0, 0, 0)]; // r0 = XDP_DROP; exit
        Self::load_and_link(ifidx, &prog, map)
    }

    /// Point queue `queue`'s map slot at the socket `fd`.
    pub(super) fn set(&self, queue: u32, fd: i32) -> io::Result<()> {
        let (key, value) = (queue, fd as u32);
        let mut a = [0u64; 16];
        put32(&mut a, 0, self.map.as_raw_fd() as u32);
        a[1] = &key as *const u32 as u64;
        a[2] = &value as *const u32 as u64;
        bpf_raw(BPF_MAP_UPDATE_ELEM, &mut a)
            .map(drop)
            .map_err(|e| ctx(e, "adding the socket to the XSKMAP"))
    }
}

pub(in crate::sys) fn ctx(e: io::Error, what: &str) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) => " (needs root or CAP_BPF + CAP_NET_ADMIN)",
        Some(libc::EBUSY) | Some(libc::EEXIST) => {
            " (the interface or queue is held by another XDP program or AF_XDP socket, \
             perhaps another rxpath: `ip link show IF` names the program; a BPF link goes \
             with its process, `ip link set dev IF xdp off` removes a plain attachment)"
        }
        Some(libc::ENOBUFS) | Some(libc::ENOMEM) => {
            " (RLIMIT_MEMLOCK too low to pin the frame region: raise it with `ulimit -l`, \
             LimitMEMLOCK= in a systemd unit, or grant CAP_IPC_LOCK)"
        }
        Some(libc::EOPNOTSUPP) => " (XDP not supported on this device)",
        _ => "",
    };
    io::Error::new(e.kind(), format!("{what}: {e}{hint}"))
}
