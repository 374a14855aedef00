//! AF_PACKET's steering (C source in `rxpath_tap.bpf.c`, its object
//! checked in): a socket filter on rxpath's packet sockets that keeps the
//! destinations in a port map (keyed as the XDP program's, [`PortKey`]),
//! and a program on the interface's tcx ingress hook that drops, before
//! the kernel's IP input, exactly the frames the filter kept. A frame is
//! rxpath's or the kernel's, never both and never neither, whatever the
//! map does meanwhile; a destination not in the map, a jumbo frame, a
//! fragment, are the kernel's. Dropping [`TapProgram`] (or the process
//! dying) detaches both.

use super::bpf::{self, Object, BPF_LINK_CREATE, BPF_MAP_TYPE_PERCPU_ARRAY};
use super::xdp::prog::{cfg_bytes, cfg_map, leave_in, port_map_new, take_in};
use super::xdp::{ctx, PortKey, XdpFilter, PORT_MAP_ENTRIES};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// The object, built from `rxpath_tap.bpf.c` by `scripts/build-xdp.sh`.
/// Aligned as the ELF reader needs its headers.
const OBJECT: &[u8] = &Aligned(*include_bytes!("rxpath_tap.bpf.o")).0;

#[repr(C, align(8))]
struct Aligned<B: ?Sized>(B);

/// The maps the programs name, in the order their descriptors are given.
const MAPS: [&str; 2] = ["ports", "verdict"];

const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;
const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
const BPF_TCX_INGRESS: u32 = 46;

/// The two programs, their maps, and the tcx link.
#[derive(Debug)]
pub struct TapProgram {
    ports: OwnedFd,
    tap: OwnedFd,
    _verdict: OwnedFd,
    _rodata: OwnedFd,
    _ingress: OwnedFd,
    _link: OwnedFd,
}

impl TapProgram {
    /// Load both programs for `filter` (a port map of UDP or TCP) and
    /// attach the ingress one to `iface`; give [`TapProgram::filter_fd`]
    /// to each of rxpath's packet sockets on it.
    pub fn attach(iface: &str, filter: XdpFilter) -> io::Result<TapProgram> {
        if !filter.port_map || !matches!(filter.protocol, Some(6 | 17)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "AF_PACKET's steering needs a port map of UDP or TCP",
            ));
        }
        let ifidx = super::af_packet::ifindex(iface)?;
        let ports = port_map_new(PORT_MAP_ENTRIES)?;
        let verdict = bpf::map(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 4, 1)
            .map_err(|e| ctx(e, "creating the verdict map"))?;
        let maps = [ports.as_raw_fd(), verdict.as_raw_fd()];
        let tap = Object::parse(OBJECT, "socket", &MAPS)?;
        let ingress = Object::parse(OBJECT, "tc", &MAPS)?;
        // The longest frame taken is what an rxpath frame holds
        // (MAX_FRAME_LEN, as the XDP program's).
        let ro = cfg_map(&tap, cfg_bytes(filter, true))?;
        let (tap_fd, ingress_fd) = load_both(&tap, &ingress, &maps, ro.as_raw_fd())?;
        let mut a = [0u64; 16];
        bpf::put32(&mut a, 0, ingress_fd.as_raw_fd() as u32);
        bpf::put32(&mut a, 4, ifidx as u32);
        bpf::put32(&mut a, 8, BPF_TCX_INGRESS);
        let link = bpf::bpf(BPF_LINK_CREATE, &mut a)
            .map_err(|e| ctx(e, &format!("attaching to {iface}'s tcx ingress")))?;
        Ok(TapProgram {
            ports,
            tap: tap_fd,
            _verdict: verdict,
            _rodata: ro,
            _ingress: ingress_fd,
            _link: link,
        })
    }

    /// The socket filter, for `SO_ATTACH_BPF` on each packet socket.
    pub fn filter_fd(&self) -> RawFd {
        self.tap.as_raw_fd()
    }

    /// Take (`on`) the frames for destination `key`, or give them back
    /// to the kernel, from the next frame on.
    pub fn take_port(&self, key: PortKey, on: bool) -> io::Result<()> {
        take_in(self.ports.as_raw_fd(), key, on)
    }

    /// Leave destination `key` (a specific address) to the kernel even
    /// where its port's wildcard is taken.
    pub fn leave_port(&self, key: PortKey) -> io::Result<()> {
        leave_in(self.ports.as_raw_fd(), key)
    }

    /// The port map's descriptor (a forked child keeps it, to give a port
    /// back with [`super::xdp::release_port`]).
    pub fn port_map_fd(&self) -> RawFd {
        self.ports.as_raw_fd()
    }
}

/// The socket filter and the ingress program, linked to `maps` and
/// `.rodata`'s map `ro`.
fn load_both(
    tap: &Object,
    ingress: &Object,
    maps: &[RawFd],
    ro: RawFd,
) -> io::Result<(OwnedFd, OwnedFd)> {
    let tap = bpf::load(
        BPF_PROG_TYPE_SOCKET_FILTER,
        0,
        &tap.linked(maps, ro),
        "the AF_PACKET tap filter",
    )?;
    let ingress = bpf::load(
        BPF_PROG_TYPE_SCHED_CLS,
        BPF_TCX_INGRESS,
        &ingress.linked(maps, ro),
        "the ingress program",
    )?;
    Ok((tap, ingress))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::bpf::Target;

    #[test]
    fn the_object_is_built_from_its_source_as_it_is_now() {
        let src = include_bytes!("rxpath_tap.bpf.c");
        let recorded = include_str!("rxpath_tap.bpf.o.crc32").trim();
        assert_eq!(
            crc32fast::hash(src).to_string(),
            recorded,
            "rxpath_tap.bpf.c changed: run scripts/build-xdp.sh"
        );
    }

    #[test]
    fn both_programs_name_the_verdict_and_only_the_tap_the_ports() {
        let tap = Object::parse(OBJECT, "socket", &MAPS).unwrap();
        let ingress = Object::parse(OBJECT, "tc", &MAPS).unwrap();
        let names = |o: &Object, t| o.relocs.iter().any(|r| r.1 == t);
        assert!(names(&tap, Target::Map(0)) && names(&tap, Target::Map(1)));
        assert!(names(&ingress, Target::Map(1)) && !names(&ingress, Target::Map(0)));
        // The same configuration layout as the XDP program's.
        assert_eq!(tap.rodata.len(), tap.cfg + super::super::xdp::prog::CFG_LEN);
    }

    /// Root (CI runs it as root): the kernel's verifier takes both.
    #[test]
    fn the_kernel_loads_both_programs() {
        if !rxpath_os::sched::is_root() {
            eprintln!("SKIPPED the_kernel_loads_both_programs: needs root (CAP_BPF)");
            return;
        }
        let filter = XdpFilter {
            protocol: Some(17),
            port_map: true,
            ..XdpFilter::default()
        };
        let ports = port_map_new(4).unwrap();
        let verdict = bpf::map(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 4, 1).unwrap();
        let maps = [ports.as_raw_fd(), verdict.as_raw_fd()];
        let tap = Object::parse(OBJECT, "socket", &MAPS).unwrap();
        let ingress = Object::parse(OBJECT, "tc", &MAPS).unwrap();
        let ro = cfg_map(&tap, cfg_bytes(filter, true)).unwrap();
        load_both(&tap, &ingress, &maps, ro.as_raw_fd()).unwrap_or_else(|e| panic!("{e}"));
    }
}
