//! The XDP program (assembled here; with ports, IPv4 fragments go to the
//! kernel and IPv6 extension headers are walked), its XSKMAP,
//! the map of ports it takes, and their loading and attaching with the
//! `bpf()` system call.

use super::super::af_packet::ifindex;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_FUNC_MAP_LOOKUP_ELEM: i32 = 1;
/// Ports the port map holds at most.
pub const PORT_MAP_ENTRIES: u32 = 1024;
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
    /// Take only this IP protocol (17 = UDP, 6 = TCP); without a port to
    /// match, IPv6 extension headers are not walked, so an IPv6 packet
    /// must carry it directly.
    pub protocol: Option<u8>,
    /// With `protocol` UDP or TCP: take only this destination port (IPv4
    /// without options and not a fragment; IPv6 after up to four
    /// hop-by-hop, routing or destination-options headers, walked as
    /// `ipv6_rcv` does; the rest goes to the kernel, which reassembles
    /// fragments).
    pub dst_port: Option<u16>,
    /// Take every frame, whatever it is (ARP, VLAN-tagged, truncated):
    /// the kernel sees nothing on this interface. For tests that compare
    /// rxpath's input counters with the kernel's.
    pub all: bool,
    /// With `protocol` UDP or TCP: take only the destination ports in the
    /// program's port map ([`XdpProgram::take_port`]), which starts empty
    /// and changes while the program runs (a socket bound or closed);
    /// `dst_port` is then not used.
    pub port_map: bool,
}

impl Default for XdpFilter {
    fn default() -> Self {
        XdpFilter {
            ipv4: true,
            ipv6: true,
            protocol: None,
            dst_port: None,
            all: false,
            port_map: false,
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
    /// The IPv6 walk found the transport header (its offset in r7).
    V6Transport,
    Redirect,
    Pass,
}

fn program(map_fd: i32, ports_fd: Option<i32>, filter: XdpFilter) -> Vec<Insn> {
    let mut p: Vec<Insn> = Vec::new();
    let mut fix: Vec<(usize, L)> = Vec::new();
    let mut at: Vec<(L, usize)> = Vec::new();
    let jump = |p: &mut Vec<Insn>, fix: &mut Vec<(usize, L)>, i: Insn, l: L| {
        fix.push((p.len(), l));
        p.push(i);
    };
    p.push(insn(0xbf, 6, 1, 0, 0)); // r6 = ctx (kept across calls)
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
        let by_port = filter.dst_port.is_some() || ports_fd.is_some();
        if let (L::V6, Some(proto @ (6 | 17)), true) = (label, filter.protocol, by_port) {
            v6_walk(&mut p, &mut fix, &mut at, proto);
            p.push(insn(0x69, 5, 4, 2, 0)); // r5 = destination port (as loaded)
            port_check(&mut p, &mut fix, ports_fd, filter.dst_port, proto);
            jump(&mut p, &mut fix, insn(0x05, 0, 0, 0, 0), L::Redirect);
            continue;
        }
        if let Some(proto) = filter.protocol {
            p.push(insn(0x71, 5, 2, proto_off, 0)); // r5 = IP protocol / next header
            jump(&mut p, &mut fix, insn(0x55, 5, 0, 0, proto as i32), L::Pass); // if r5 != proto goto pass
            if let (true, 6 | 17) = (by_port, proto) {
                let l4 = if label == L::V4 {
                    p.push(insn(0x71, 5, 2, 14, 0)); // r5 = version / IHL
                    jump(&mut p, &mut fix, insn(0x55, 5, 0, 0, 0x45), L::Pass); // options: pass
                                                                                // A fragment: its port is not where a port is (or not
                                                                                // there at all), and the kernel reassembles it.
                    p.push(insn(0x69, 5, 2, 20, 0)); // r5 = flags, fragment offset (as loaded)
                    p.push(insn(0x57, 5, 0, 0, 0xff3f)); // r5 &= MF | offset
                    jump(&mut p, &mut fix, insn(0x55, 5, 0, 0, 0), L::Pass); // a fragment: pass
                    14 + 20
                } else {
                    14 + 40
                };
                p.push(insn(0xbf, 4, 2, 0, 0)); // r4 = r2
                p.push(insn(0x07, 4, 0, 0, l4 as i32 + 4)); // r4 += L4 offset + ports
                jump(&mut p, &mut fix, insn(0x2d, 4, 3, 0, 0), L::Pass); // if r4 > r3 goto pass
                p.push(insn(0x69, 5, 2, l4 + 2, 0)); // r5 = destination port (as loaded)
                port_check(&mut p, &mut fix, ports_fd, filter.dst_port, proto);
            }
        }
        jump(&mut p, &mut fix, insn(0x05, 0, 0, 0, 0), L::Redirect);
    }
    at.push((L::Redirect, p.len()));
    finish(p, fix, at, map_fd, true)
}

/// Load the program described by `attr` again with the verifier's log on,
/// for the error: what the verifier said (its last lines), or nothing.
fn verifier_log(mut attr: [u64; 16]) -> String {
    let mut log = vec![0u8; 1 << 16];
    put32(&mut attr, 24, 1); // log_level
    put32(&mut attr, 28, log.len() as u32); // log_size
    attr[4] = log.as_mut_ptr() as u64; // log_buf
    if let Ok(fd) = bpf(BPF_PROG_LOAD, &mut attr) {
        drop(fd);
        return String::new();
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let text = String::from_utf8_lossy(&log[..end]);
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(12)..].join("\n  ");
    if tail.is_empty() {
        String::new()
    } else {
        format!("; the verifier says:\n  {tail}")
    }
}

/// Headers an IPv6 walk steps over (`ipv6_rcv`'s hop-by-hop, routing and
/// destination options); the walk gives up after this many, and leaves a
/// fragment header (44), AH, ESP and the rest to the kernel.
const V6_EXT_MAX: usize = 4;

/// Walk the IPv6 extension headers from the next-header byte of the fixed
/// header, as `ipv6_rcv` and `ip6_protocol_deliver_rcu` do: up to
/// [`V6_EXT_MAX`] hop-by-hop (0), routing (43) or destination-options (60)
/// headers, each `(hdr_ext_len + 1) * 8` bytes. Ends at [`L::V6Transport`] with
/// r4 at the transport header (4 bytes of it in the frame) when the chain
/// reaches `proto`; anything else passes to the kernel.
fn v6_walk(p: &mut Vec<Insn>, fix: &mut Vec<(usize, L)>, at: &mut Vec<(L, usize)>, proto: u8) {
    let mut jump = |p: &mut Vec<Insn>, i: Insn, l: L| {
        fix.push((p.len(), l));
        p.push(i);
    };
    p.push(insn(0xb7, 7, 0, 0, 14 + 40)); // r7 = offset of the header after IPv6's
    p.push(insn(0x71, 5, 2, 20, 0)); // r5 = next header
    for _ in 0..V6_EXT_MAX {
        jump(p, insn(0x15, 5, 0, 0, proto as i32), L::V6Transport); // if r5 == proto goto l4
        p.push(insn(0x15, 5, 0, 3, 0)); // if r5 == hop-by-hop goto ext
        p.push(insn(0x15, 5, 0, 2, 43)); // if r5 == routing goto ext
        p.push(insn(0x15, 5, 0, 1, 60)); // if r5 == destination options goto ext
        jump(p, insn(0x05, 0, 0, 0, 0), L::Pass); // another header: the kernel's
        p.push(insn(0xbf, 4, 2, 0, 0)); // ext: r4 = data
        p.push(insn(0x0f, 4, 7, 0, 0)); // r4 += r7
        p.push(insn(0xbf, 8, 4, 0, 0)); // r8 = r4
        p.push(insn(0x07, 8, 0, 0, 2)); // r8 += 2
        jump(p, insn(0x2d, 8, 3, 0, 0), L::Pass); // if r8 > data_end goto pass
        p.push(insn(0x71, 5, 4, 0, 0)); // r5 = its next header
        p.push(insn(0x71, 8, 4, 1, 0)); // r8 = its length in 8 bytes, less one
        p.push(insn(0x07, 8, 0, 0, 1)); // r8 += 1
        p.push(insn(0x67, 8, 0, 0, 3)); // r8 <<= 3
        p.push(insn(0x0f, 7, 8, 0, 0)); // r7 += r8
    }
    jump(p, insn(0x55, 5, 0, 0, proto as i32), L::Pass); // if r5 != proto goto pass
    at.push((L::V6Transport, p.len()));
    p.push(insn(0xbf, 4, 2, 0, 0)); // l4: r4 = data
    p.push(insn(0x0f, 4, 7, 0, 0)); // r4 += r7
    p.push(insn(0xbf, 8, 4, 0, 0)); // r8 = r4
    p.push(insn(0x07, 8, 0, 0, 4)); // r8 += 4: the ports
    jump(p, insn(0x2d, 8, 3, 0, 0), L::Pass); // if r8 > data_end goto pass
}

/// The port test on r5 (the destination port as loaded): the port map's
/// lookup, or one port; pass the frame to the kernel if it is not taken.
fn port_check(
    p: &mut Vec<Insn>,
    fix: &mut Vec<(usize, L)>,
    ports_fd: Option<i32>,
    dst_port: Option<u16>,
    proto: u8,
) {
    match (ports_fd, dst_port) {
        (Some(fd), _) => port_lookup(p, fix, fd, proto),
        (None, Some(port)) => {
            let want = port.swap_bytes() as i32; // network order, loaded little endian
            fix.push((p.len(), L::Pass));
            p.push(insn(0x55, 5, 0, 0, want)); // if r5 != port goto pass
        }
        (None, None) => {}
    }
}

/// Look the destination port in r5 up in the port map (key: the port as
/// loaded, shifted up a byte, or the protocol: [`port_key`]); pass the
/// frame to the kernel if it is not there.
fn port_lookup(p: &mut Vec<Insn>, fix: &mut Vec<(usize, L)>, ports_fd: i32, proto: u8) {
    p.push(insn(0x67, 5, 0, 0, 8)); // r5 <<= 8
    p.push(insn(0x47, 5, 0, 0, proto as i32)); // r5 |= protocol
    p.push(insn(0x63, 10, 5, -4, 0)); // *(u32 *)(r10 - 4) = r5: the key
    p.push(insn(0xbf, 2, 10, 0, 0)); // r2 = r10
    p.push(insn(0x07, 2, 0, 0, -4)); // r2 -= 4: &key
    p.push(insn(0x18, 1, 1, 0, ports_fd)); // r1 = port map (BPF_PSEUDO_MAP_FD), low half
    p.push(insn(0x00, 0, 0, 0, 0)); //   high half
    p.push(insn(0x85, 0, 0, 0, BPF_FUNC_MAP_LOOKUP_ELEM)); // r0 = lookup(map, &key)
    fix.push((p.len(), L::Pass));
    p.push(insn(0x15, 0, 0, 0, 0)); // if r0 == 0 goto pass
}

/// The port map's key for `proto` and `port`, as the program builds it: the
/// port's two bytes in network order read as a little-endian u16, shifted
/// up a byte, or the protocol, stored as a u32 in memory order.
fn port_key(proto: u8, port: u16) -> [u8; 4] {
    let loaded = u16::from_le_bytes(port.to_be_bytes()) as u32;
    ((loaded << 8) | proto as u32).to_le_bytes()
}

/// The redirect and pass tails of the program, and the jump fix-ups.
fn finish(
    mut p: Vec<Insn>,
    fix: Vec<(usize, L)>,
    mut at: Vec<(L, usize)>,
    map_fd: i32,
    pass: bool,
) -> Vec<Insn> {
    p.push(insn(0x61, 2, 6, 16, 0)); // r2 = ctx->rx_queue_index
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
    /// The port map, when the filter asks for one.
    ports: Option<OwnedFd>,
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
        let ports = match (filter.port_map, filter.protocol) {
            (true, Some(6 | 17)) => {
                let mut a = [0u64; 16];
                put32(&mut a, 0, BPF_MAP_TYPE_HASH);
                put32(&mut a, 4, 4);
                put32(&mut a, 8, 1);
                put32(&mut a, 12, PORT_MAP_ENTRIES);
                Some(bpf(BPF_MAP_CREATE, &mut a).map_err(|e| ctx(e, "creating the port map"))?)
            }
            (true, _) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a port map needs the protocol UDP or TCP",
                ))
            }
            _ => None,
        };
        let prog = program(
            map.as_raw_fd(),
            ports.as_ref().map(|f| f.as_raw_fd()),
            filter,
        );
        let mut p = Self::load_and_link(ifidx, &prog, map)?;
        p.ports = ports;
        Ok(p)
    }

    /// Take (`on`) or give back to the kernel the frames for destination
    /// port `port` of protocol `proto`. An error if the program has no
    /// port map, or the map is full ([`PORT_MAP_ENTRIES`]).
    pub fn take_port(&self, proto: u8, port: u16, on: bool) -> io::Result<()> {
        let Some(ports) = &self.ports else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this XDP program takes no port map",
            ));
        };
        let key = port_key(proto, port);
        let value = 1u8;
        let mut a = [0u64; 16];
        put32(&mut a, 0, ports.as_raw_fd() as u32);
        a[1] = key.as_ptr() as u64;
        if on {
            a[2] = &value as *const u8 as u64;
            bpf_raw(BPF_MAP_UPDATE_ELEM, &mut a).map_err(|e| ctx(e, "adding a port"))?;
        } else {
            match bpf_raw(BPF_MAP_DELETE_ELEM, &mut a) {
                Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
                    return Err(ctx(e, "removing a port"))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The program takes ports by its port map.
    pub fn has_port_map(&self) -> bool {
        self.ports.is_some()
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
        let prog_fd = match bpf(BPF_PROG_LOAD, &mut a) {
            Ok(fd) => fd,
            Err(e) => {
                return Err(ctx(
                    e,
                    &format!("loading the XDP program{}", verifier_log(a)),
                ))
            }
        };
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
            ports: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_key_is_what_the_program_builds() {
        // Port 53 arrives as bytes 00 35; loaded little endian, 0x3500;
        // shifted a byte and or'ed with UDP: 0x350011, stored as a u32.
        assert_eq!(port_key(17, 53), [0x11, 0x00, 0x35, 0x00]);
        assert_ne!(port_key(17, 53), port_key(6, 53));
        assert_ne!(port_key(17, 53), port_key(17, 13568));
    }

    #[test]
    fn the_port_map_program_looks_up_both_families_and_stays_short() {
        let f = XdpFilter {
            protocol: Some(17),
            port_map: true,
            ..XdpFilter::default()
        };
        let p = program(3, Some(4), f);
        let lookups = p
            .iter()
            .filter(|i| i.code == 0x85 && i.imm == BPF_FUNC_MAP_LOOKUP_ELEM)
            .count();
        assert_eq!(lookups, 2, "one lookup per family");
        // IPv4 fragments go to the kernel: MF and the offset are tested.
        assert!(p.iter().any(|i| i.code == 0x57 && i.imm == 0xff3f));
        assert!(p.len() <= 128, "{} instructions", p.len());
        // IPv6 walks its extension headers: the three kinds it steps over.
        for kind in [43, 60] {
            assert!(p.iter().any(|i| i.code == 0x15 && i.imm == kind), "{kind}");
        }
        // Every jump lands inside the program.
        for (i, insn) in p.iter().enumerate() {
            if insn.code & 0x07 == 0x05 && insn.code != 0x85 && insn.code != 0x95 {
                let t = i as isize + 1 + insn.off as isize;
                assert!((0..p.len() as isize).contains(&t), "jump at {i} to {t}");
            }
        }
    }
}
