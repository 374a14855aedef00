//! The XDP program (C source in `rxpath_xdp.bpf.c`, its object checked in
//! and linked here: the maps' descriptors and its configuration put where
//! its relocations say), its XSKMAP, the map of ports it takes, and their
//! loading and attaching with the `bpf()` system call.

use super::super::af_packet::ifindex;
pub(in crate::sys) use crate::sys::bpf::with_hint as ctx;
use crate::sys::bpf::{self, bpf, insn, put32, Insn, Object, BPF_LINK_CREATE, BPF_MAP_TYPE_HASH};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Ports the port map holds at most.
pub const PORT_MAP_ENTRIES: u32 = 1024;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

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
    /// not a fragment, with or without options; IPv6 after its
    /// hop-by-hop, routing and destination-options headers, however
    /// many, walked as `ipv6_rcv` does; untagged or behind up to two VLAN
    /// priority tags; the rest goes to the kernel, which reassembles
    /// fragments unless `fragments` is set).
    pub dst_port: Option<u16>,
    /// Take every frame, whatever it is (ARP, VLAN-tagged, truncated):
    /// the kernel sees nothing on this interface. For tests that compare
    /// rxpath's input counters with the kernel's.
    pub all: bool,
    /// With `protocol` UDP or TCP (or none: UDP and TCP both, each by its
    /// own keys): take only the destinations in the
    /// program's port map ([`XdpProgram::take_port`]: family, address or
    /// wildcard, and port, as the kernel keys sockets), which starts empty
    /// and changes while the program runs (a socket bound or closed);
    /// `dst_port` is then not used.
    pub port_map: bool,
    /// With a port to match (`dst_port` or `port_map`): take IPv4 and
    /// IPv6 fragments of `protocol` too, whatever their port, for a host
    /// that reassembles what reaches it and has no kernel socket behind
    /// its sockets (`rxpath echo`); the kernel then sees no fragment of
    /// that protocol on the interface. Off: fragments go to the kernel.
    pub fragments: bool,
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
            fragments: false,
        }
    }
}

/// The program's object, built from `rxpath_xdp.bpf.c` by
/// `scripts/build-xdp.sh` (clang's BPF target) and checked in.
/// Aligned as the ELF reader needs its headers.
const OBJECT: &[u8] = &Aligned(*include_bytes!("rxpath_xdp.bpf.o")).0;

#[repr(C, align(8))]
struct Aligned<B: ?Sized>(B);

/// The longest frame the program hands to an AF_XDP socket: what one of
/// its 2048-byte frames holds after the kernel's `XDP_PACKET_HEADROOM`
/// (256 bytes). A longer frame (a jumbo frame) goes to the kernel, which
/// would otherwise drop it on the way to the socket.
pub const MAX_FRAME_LEN: u16 = 2048 - 256;

/// The size of `struct rxpath_cfg` (a byte of padding at its end).
pub(in crate::sys) const CFG_LEN: usize = 12;

/// The program's configuration as its `struct rxpath_cfg` lays it out.
pub(in crate::sys) fn cfg_bytes(f: XdpFilter, port_map: bool) -> [u8; CFG_LEN] {
    let port = f.dst_port.unwrap_or(0).to_be_bytes();
    let max = MAX_FRAME_LEN.to_ne_bytes();
    [
        f.all as u8,
        f.ipv4 as u8,
        f.ipv6 as u8,
        f.protocol.unwrap_or(0),
        port_map as u8,
        f.dst_port.is_some() as u8,
        port[0],
        port[1],
        max[0],
        max[1],
        f.fragments as u8,
        0,
    ]
}

/// The program linked to new maps for `queues` queues and `filter`.
struct Built {
    xsks: OwnedFd,
    ports: OwnedFd,
    /// The TCP datagrams whose first fragment the program took, with
    /// when (it holds the map; nothing here reads it).
    _frags: OwnedFd,
    /// The filter asks for the port map.
    port_map: bool,
    /// The configuration's map (the loaded program holds it too).
    _rodata: OwnedFd,
    insns: Vec<Insn>,
}

impl Built {
    fn new(queues: u32, filter: XdpFilter) -> io::Result<Built> {
        let xsks = bpf::map(BPF_MAP_TYPE_XSKMAP, 4, 4, queues.max(1))
            .map_err(|e| ctx(e, "creating the XSKMAP"))?;
        let port_map = match (filter.port_map, filter.protocol) {
            (true, Some(6 | 17) | None) => true,
            (true, _) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a port map needs the protocol UDP or TCP (or none: both)",
                ))
            }
            _ => false,
        };
        // The program names the port map whatever it is asked: without
        // one it never looks in it (the verifier knows), so it is tiny.
        let ports = port_map_new(if port_map { PORT_MAP_ENTRIES } else { 1 })?;
        // Followed when the program takes TCP by port (a port map, or
        // one port).
        let tcp_ports = port_map || (filter.dst_port.is_some() && filter.protocol == Some(6));
        let frags = bpf::map(
            BPF_MAP_TYPE_LRU_HASH,
            FRAG_KEY_LEN,
            8,
            if tcp_ports { FRAG_MAP_ENTRIES } else { 1 },
        )
        .map_err(|e| ctx(e, "creating the fragments' map"))?;
        let obj = Object::parse(OBJECT, "xdp", &MAPS)?;
        let ro = cfg_map(&obj, cfg_bytes(filter, port_map))?;
        let fds = [xsks.as_raw_fd(), ports.as_raw_fd(), frags.as_raw_fd()];
        let insns = obj.linked(&fds, ro.as_raw_fd());
        Ok(Built {
            xsks,
            ports,
            _frags: frags,
            port_map,
            _rodata: ro,
            insns,
        })
    }
}

/// The port map's key for `proto` and `port`, as the program builds it: the
/// port's two bytes in network order read as a little-endian u16, shifted
/// up a byte, or the protocol, stored as a u32 in memory order.
/// A destination the port map takes, keyed as the kernel keys sockets:
/// the protocol, an address (the family's wildcard for a socket bound to
/// it) and a port. A frame is taken when its destination address and port
/// are in the map, or its family's wildcard and the port are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortKey {
    /// The IP protocol (17 UDP, 6 TCP).
    pub proto: u8,
    /// The destination address and port (`0.0.0.0` or `::`: the family's
    /// wildcard).
    pub addr: std::net::SocketAddr,
}

impl PortKey {
    /// The program's `struct port_key`: family, protocol, port in network
    /// order, the address in 16 bytes (IPv4's in the first four).
    pub(in crate::sys) fn bytes(&self) -> [u8; 20] {
        let mut k = [0u8; 20];
        k[1] = self.proto;
        k[2..4].copy_from_slice(&self.addr.port().to_be_bytes());
        match self.addr.ip() {
            std::net::IpAddr::V4(a) => {
                k[0] = 4;
                k[4..8].copy_from_slice(&a.octets());
            }
            std::net::IpAddr::V6(a) => {
                k[0] = 6;
                k[4..20].copy_from_slice(&a.octets());
            }
        }
        k
    }
}

/// The port map's key size (`struct port_key`).
const PORT_KEY_LEN: u32 = 20;

/// The maps the XDP program names, in the order [`Object::linked`] takes
/// their descriptors.
const MAPS: [&str; 3] = ["xsks", "ports", "frags"];

/// `BPF_MAP_TYPE_LRU_HASH`.
const BPF_MAP_TYPE_LRU_HASH: u32 = 9;
/// The fragments' map's key size (`struct frag_key`).
const FRAG_KEY_LEN: u32 = 40;
/// Fragmented TCP datagrams followed at once (more age out, oldest
/// first: a datagram whose last piece never came).
const FRAG_MAP_ENTRIES: u32 = 4096;

/// A new port map of `entries` destinations (a hash map of
/// `struct port_key`).
pub(in crate::sys) fn port_map_new(entries: u32) -> io::Result<OwnedFd> {
    bpf::map(BPF_MAP_TYPE_HASH, PORT_KEY_LEN, 1, entries)
        .map_err(|e| ctx(e, "creating the port map"))
}

/// `obj`'s `.rodata` with `cfg` in place of its configuration, as a
/// frozen map.
pub(in crate::sys) fn cfg_map(obj: &Object, cfg: [u8; CFG_LEN]) -> io::Result<OwnedFd> {
    let mut rodata = obj.rodata.clone();
    rodata[obj.cfg..obj.cfg + CFG_LEN].copy_from_slice(&cfg);
    bpf::rodata_map(&rodata)
}

/// A port map value: the destination is rxpath's.
const TAKE: u8 = 1;
/// A port map value: the destination's socket is the kernel's, which the
/// kernel picks before a wildcard socket on the port.
const KERNEL: u8 = 2;

/// Take (`on`) or give back destination `key` in the port map `map`.
pub(in crate::sys) fn take_in(map: RawFd, key: PortKey, on: bool) -> io::Result<()> {
    if !on {
        return release_port(map, key);
    }
    bpf::update(map, &key.bytes(), &[TAKE]).map_err(|e| ctx(e, "adding a port"))
}

/// Mark `key` (a specific address) the kernel's in the port map `map`:
/// its frames go to the kernel even where rxpath takes the port's
/// wildcard, as the kernel's lookup prefers the bound address.
pub(in crate::sys) fn leave_in(map: RawFd, key: PortKey) -> io::Result<()> {
    bpf::update(map, &key.bytes(), &[KERNEL]).map_err(|e| ctx(e, "marking a port the kernel's"))
}

/// Give destination `key` back to the kernel in the port map `map` (an
/// XDP program's, by its descriptor: a forked child's copy of its
/// parent's). A key not in the map is no error.
pub fn release_port(map: RawFd, key: PortKey) -> io::Result<()> {
    bpf::delete(map, &key.bytes()).map_err(|e| ctx(e, "removing a port"))
}

/// Load `insns` as an XDP program.
fn load(insns: &[Insn]) -> io::Result<OwnedFd> {
    bpf::load(BPF_PROG_TYPE_XDP, BPF_XDP, insns, "the XDP program")
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
        let b = Built::new(queues, filter)?;
        let mut p = Self::load_and_link(ifidx, &b.insns, b.xsks)?;
        p.ports = b.port_map.then_some(b.ports);
        Ok(p)
    }

    /// Take (`on`) or give back to the kernel the frames for destination
    /// `key`. An error if the program has no port map, or the map is full
    /// ([`PORT_MAP_ENTRIES`]).
    pub fn take_port(&self, key: PortKey, on: bool) -> io::Result<()> {
        let Some(ports) = &self.ports else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this XDP program takes no port map",
            ));
        };
        take_in(ports.as_raw_fd(), key, on)
    }

    /// Leave destination `key` (a specific address) to the kernel even
    /// where the program takes its port's wildcard: the kernel has a
    /// socket bound to it. An error without a port map, or when full.
    pub fn leave_port(&self, key: PortKey) -> io::Result<()> {
        match &self.ports {
            Some(ports) => leave_in(ports.as_raw_fd(), key),
            None => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this XDP program takes no port map",
            )),
        }
    }

    /// The program takes ports by its port map.
    pub fn has_port_map(&self) -> bool {
        self.ports.is_some()
    }

    /// The port map's descriptor (a forked child keeps it, to give a
    /// port back with [`release_port`]).
    pub fn port_map_fd(&self) -> Option<RawFd> {
        self.ports.as_ref().map(|f| f.as_raw_fd())
    }

    /// Load `insns` as an XDP program and attach it to `ifidx` with a BPF
    /// link, natively if the driver can, else generically.
    fn load_and_link(ifidx: i32, insns: &[Insn], map: OwnedFd) -> io::Result<XdpProgram> {
        let prog_fd = load(insns)?;
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
        // An array map: it only keeps the struct's shape.
        let map =
            bpf::map(bpf::BPF_MAP_TYPE_ARRAY, 4, 4, 1).map_err(|e| ctx(e, "creating a map"))?;
        let prog = [insn(0xb7, 0, 0, 0, 1), insn(0x95, 0, 0, 0, 0)]; // r0 = XDP_DROP; exit
        Self::load_and_link(ifidx, &prog, map)
    }

    /// Point queue `queue`'s map slot at the socket `fd`.
    pub(super) fn set(&self, queue: u32, fd: i32) -> io::Result<()> {
        bpf::update(
            self.map.as_raw_fd(),
            &queue.to_ne_bytes(),
            &(fd as u32).to_ne_bytes(),
        )
        .map_err(|e| ctx(e, "adding the socket to the XSKMAP"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::bpf::{Target, PSEUDO_MAP_FD, PSEUDO_MAP_VALUE};

    const BPF_FUNC_MAP_LOOKUP_ELEM: i32 = 1;
    const BPF_FUNC_MAP_UPDATE_ELEM: i32 = 2;
    const BPF_FUNC_MAP_DELETE_ELEM: i32 = 3;
    const BPF_FUNC_REDIRECT_MAP: i32 = 51;

    #[test]
    fn the_port_key_is_what_the_program_builds() {
        // struct port_key: family, protocol, the port as it arrives
        // (network order), the address in 16 bytes.
        let k = |a: &str| {
            PortKey {
                proto: 17,
                addr: a.parse().unwrap(),
            }
            .bytes()
        };
        let v4 = k("198.18.0.1:53");
        assert_eq!(v4[..8], [4, 17, 0x00, 0x35, 198, 18, 0, 1]);
        assert_eq!(v4[8..], [0; 12]);
        let v6 = k("[2001:2::1]:53");
        assert_eq!(v6[..6], [6, 17, 0x00, 0x35, 0x20, 0x01]);
        assert_eq!(v6[19], 1);
        // The wildcards are the families' zero addresses, told apart.
        assert_eq!(k("0.0.0.0:53")[4..], [0; 16]);
        assert_ne!(k("0.0.0.0:53"), k("[::]:53"));
        let tcp = PortKey {
            proto: 6,
            addr: "198.18.0.1:53".parse().unwrap(),
        };
        assert_ne!(tcp.bytes(), v4);
    }

    #[test]
    fn the_object_is_built_from_its_source_as_it_is_now() {
        // scripts/build-xdp.sh records the source's CRC-32 beside the
        // object: a change to the source without a rebuild fails here.
        let src = include_bytes!("rxpath_xdp.bpf.c");
        let recorded = include_str!("rxpath_xdp.bpf.o.crc32").trim();
        assert_eq!(
            crc32fast::hash(src).to_string(),
            recorded,
            "rxpath_xdp.bpf.c changed: run scripts/build-xdp.sh"
        );
    }

    #[test]
    fn the_object_links_its_maps_and_configuration() {
        let obj = Object::parse(OBJECT, "xdp", &MAPS).unwrap();
        let has = |t: Target| obj.relocs.iter().any(|r| r.1 == t);
        assert!(has(Target::Map(0)) && has(Target::Map(1)) && has(Target::Map(2)));
        assert!(obj.relocs.iter().any(|r| matches!(r.1, Target::Rodata(_))));
        assert_eq!(obj.rodata.len(), obj.cfg + CFG_LEN, "cfg is all of .rodata");
        let p = obj.linked(&[3, 4, 6], 5);
        for &(at, t) in &obj.relocs {
            let (src, fd) = match t {
                Target::Map(i) => (PSEUDO_MAP_FD, [3, 4, 6][i]),
                Target::Rodata(_) => (PSEUDO_MAP_VALUE, 5),
            };
            assert_eq!((p[at].regs >> 4, p[at].imm), (src, fd), "load at {at}");
        }
        // Two port-map lookups per family (the address, then the
        // family's wildcard), for a segment and for an ICMP error quoting
        // one; a redirect.
        let calls = |n| p.iter().filter(|i| i.code == 0x85 && i.imm == n).count();
        // Per family, a TCP datagram's first fragment looks up its port
        // (two more) and a later one its datagram (one).
        assert_eq!(calls(BPF_FUNC_MAP_LOOKUP_ELEM), 8 + 2 * 3);
        // A TCP datagram's first fragment is recorded, its last forgets
        // it (each a call the compiler may share between the families).
        assert!(calls(BPF_FUNC_MAP_UPDATE_ELEM) >= 1);
        assert!(calls(BPF_FUNC_MAP_DELETE_ELEM) >= 1);
        assert!(calls(BPF_FUNC_REDIRECT_MAP) >= 1);
        // IPv4 fragments go to the kernel: MF and the offset are tested.
        assert!(p.iter().any(|i| i.code == 0x57 && i.imm == 0xff3f));
        // (What the program takes is tested with traffic: the exec and
        // edge tests, IPv6 extension headers and fragments included.)
    }

    /// Root (CI runs it as root): the program loads for every filter the
    /// tools use, and one the verifier refuses comes back with its words.
    #[test]
    fn the_kernel_loads_the_program_and_says_why_when_it_refuses() {
        if !rxpath_os::sched::is_root() {
            eprintln!("SKIPPED the_kernel_loads_the_program: needs root (CAP_BPF)");
            return;
        }
        let udp = XdpFilter {
            protocol: Some(17),
            ..XdpFilter::default()
        };
        let filters = [
            XdpFilter::default(),
            XdpFilter {
                all: true,
                ..XdpFilter::default()
            },
            XdpFilter { ipv6: false, ..udp },
            XdpFilter {
                dst_port: Some(53),
                ..udp
            },
            XdpFilter {
                port_map: true,
                ..udp
            },
            // TCP by port, with the ICMP errors about its segments.
            XdpFilter {
                port_map: true,
                protocol: None,
                ..udp
            },
            XdpFilter {
                protocol: Some(6),
                dst_port: Some(7000),
                ..udp
            },
        ];
        for f in filters {
            let b = Built::new(2, f).unwrap();
            load(&b.insns).unwrap_or_else(|e| panic!("{f:?}: {e}"));
        }
        let mut b = Built::new(
            2,
            XdpFilter {
                port_map: true,
                ..udp
            },
        )
        .unwrap();
        // Without its first bounds check, the program reads past what it
        // knows the packet holds: the verifier must refuse it.
        let i = b.insns.iter().position(|i| i.code == 0x2d).unwrap();
        b.insns[i] = Insn {
            code: 0x05,
            regs: 0,
            off: 0,
            imm: 0,
        };
        let e = load(&b.insns).unwrap_err().to_string();
        assert!(e.contains("the verifier says"), "{e}");
    }

    /// Root: a signal that reaches the loading thread while the verifier
    /// walks the program (it takes a few hundred milliseconds) makes the
    /// kernel answer `EAGAIN`; the load is tried again, not failed.
    #[test]
    fn signals_during_the_verifiers_walk_do_not_fail_the_load() {
        if !rxpath_os::sched::is_root() {
            eprintln!("SKIPPED signals_during_the_verifiers_walk: needs root (CAP_BPF)");
            return;
        }
        extern "C" fn nothing(_: libc::c_int) {}
        // SAFETY: a zeroed sigaction with a handler that touches nothing
        // is a valid action; SIGUSR1 is not used elsewhere in these tests.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = nothing as *const () as usize;
            act.sa_flags = libc::SA_RESTART;
            assert_eq!(
                libc::sigaction(libc::SIGUSR1, &act, std::ptr::null_mut()),
                0
            );
        }
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() } as usize;
        let kicker = std::thread::spawn(move || {
            for _ in 0..3 {
                std::thread::sleep(std::time::Duration::from_millis(10));
                // SAFETY: the loading thread outlives this one (joined
                // below, after the load).
                unsafe { libc::pthread_kill(me as libc::pthread_t, libc::SIGUSR1) };
            }
        });
        let b = Built::new(
            2,
            XdpFilter {
                protocol: Some(17),
                port_map: true,
                ..XdpFilter::default()
            },
        )
        .unwrap();
        let loaded = load(&b.insns);
        kicker.join().unwrap();
        loaded.expect("loaded despite the signals");
    }

    #[test]
    fn the_configuration_is_laid_out_as_the_program_reads_it() {
        let f = XdpFilter {
            protocol: Some(17),
            dst_port: Some(53),
            ipv6: false,
            ..XdpFilter::default()
        };
        let max = MAX_FRAME_LEN.to_ne_bytes();
        assert_eq!(
            cfg_bytes(f, false),
            [0, 1, 0, 17, 0, 1, 0x00, 0x35, max[0], max[1], 0, 0]
        );
        let frags = XdpFilter {
            fragments: true,
            ..f
        };
        assert_eq!(cfg_bytes(frags, false)[10], 1);
        let all = XdpFilter {
            all: true,
            ..XdpFilter::default()
        };
        assert_eq!(cfg_bytes(all, false)[0], 1);
        assert_eq!(cfg_bytes(f, true)[4], 1);
    }
}
