//! The kernel's settings rxpath takes as its own where it does the
//! kernel's work: IP reassembly's `net.ipv4.ipfrag_*` and
//! `net.ipv6.ip6frag_*`, TCP's `net.ipv4.tcp_*` and `net.core.somaxconn`,
//! read from the namespace rxpath runs in.

use rxpath_core::ip::Reasm;

fn read(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `base` with the namespace's reassembly settings (limits, times in
/// seconds, `ipfrag_max_dist`) where `/proc/sys` has them.
pub fn reasm(base: Reasm) -> Reasm {
    let mut r = base;
    let sec = 1_000_000_000;
    let v4 = "/proc/sys/net/ipv4/ipfrag_";
    let v6 = "/proc/sys/net/ipv6/ip6frag_";
    if let Some(x) = read(&format!("{v4}high_thresh")) {
        r.v4.high_thresh = x as usize;
    }
    if let Some(x) = read(&format!("{v4}time")) {
        r.v4.time_ns = x * sec;
    }
    if let Some(x) = read(&format!("{v4}max_dist")) {
        r.v4.max_dist = x as u32;
    }
    if let Some(x) = read(&format!("{v6}high_thresh")) {
        r.v6.high_thresh = x as usize;
    }
    if let Some(x) = read(&format!("{v6}time")) {
        r.v6.time_ns = x * sec;
    }
    r
}

/// `base` whose tables hold at most a quarter of a queue's `frames`
/// (fragments that never complete must not starve the device of buffers).
pub fn reasm_frames(base: Reasm, frames: usize) -> Reasm {
    let mut r = base;
    let cap = (frames / 4).max(64);
    r.v4.max_frames = cap;
    r.v6.max_frames = cap;
    r
}

/// TCP's knobs as the namespace's sysctls set them, for a device whose
/// link MTU is `mtu`. `gso`: the machine builds packets of up to 64 KB
/// (`sk_can_gso`), which the TX port hands over whole as GSO packets
/// where it can (AF_XDP's packet socket beside the ring) and cuts at the
/// MSS itself where it cannot; off, every packet is one MSS.
pub fn tcp(mtu: usize, gso: bool) -> rxpath_tcp::TcpConfig {
    let mut c = rxpath_tcp::TcpConfig {
        mtu: mtu as u32,
        gso,
        ..Default::default()
    };
    for name in rxpath_tcp::config::SYSCTLS {
        if let Ok(v) = std::fs::read_to_string(rxpath_tcp::config::sysctl_path(name)) {
            if let Err(e) = c.set(name, v.trim()) {
                log::warn!("TCP: {e}; keeping the default");
            }
        }
    }
    c
}

/// A fresh secret for TCP's sequence numbers and timestamp offsets
/// (`secure_tcp_seq`'s key): the standard library's per-process random
/// hasher keys, drawn from the OS.
pub fn tcp_secret() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(rxpath_dev::mono_ns());
    h.finish()
}
