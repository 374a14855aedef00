//! The UDP socket table: which socket a datagram belongs to.
//!
//! Three maps, tried in the order the kernel's `compute_score` prefers:
//! a connected socket matching the full 5-tuple, then a socket bound to the
//! destination address and port, then one bound to the wildcard address of
//! the family. An IPv6 wildcard socket also receives IPv4 (dual stack, as
//! with `net.ipv6.bindv6only = 0`) when no IPv4 socket wants the datagram,
//! unless it was set `IPV6_V6ONLY` ([`Socket::set_only_v6`]).
//!
//! [`Socket::set_only_v6`]: super::Socket::set_only_v6
//! A socket bound to a specific address and one bound to the wildcard may
//! share a port (the kernel allows it with `SO_REUSEADDR`); the specific one
//! wins.
//!
//! Sockets that all set `SO_REUSEPORT` before `bind` share one key as a
//! group (`struct sock_reuseport`, net/core/sock_reuseport.c): a datagram
//! goes to the member `reciprocal_scale(hash, n)` picks, the hash of its
//! addresses and ports, so a flow stays on one member while the group
//! does not change, as `reuseport_select_sock` does. The kernel hashes with
//! a secret of its own (`udp_ehashfn`), so the member a flow lands on is
//! not the kernel's; the spread over the members is the same. A connected
//! socket still wins over the group (it sits in the connected map, as
//! `udp4_lib_lookup2` returns an established socket before asking the
//! group).

use super::cbpf::Cbpf;
use super::socket::SockInner;
use super::{lock, SockError, Sockets};
use rxpath_frames::sync::write_lock;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Ephemeral ports, as `net.ipv4.ip_local_port_range`.
const EPHEMERAL: std::ops::RangeInclusive<u16> = 32768..=60999;

/// The socket table for a change; GRO's kept `UDP_GRO` answers go stale
/// when the guard is dropped (the change made, the lock still held).
fn lock_write(host: &Sockets) -> DemuxWrite<'_> {
    DemuxWrite {
        guard: write_lock(&host.demux),
        host,
    }
}

struct DemuxWrite<'a> {
    guard: std::sync::RwLockWriteGuard<'a, Demux>,
    host: &'a Sockets,
}

impl std::ops::Deref for DemuxWrite<'_> {
    type Target = Demux;
    fn deref(&self) -> &Self::Target {
        &self.guard
    }
}

impl std::ops::DerefMut for DemuxWrite<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.guard
    }
}

impl Drop for DemuxWrite<'_> {
    fn drop(&mut self) {
        self.host.gro_changed();
    }
}

impl Sockets {
    /// `bind()`'s half in the table: pick an ephemeral port for port 0,
    /// refuse a taken address, and put the socket `make` builds for the
    /// final address in the table.
    pub(crate) fn bind_entry(
        &self,
        mut addr: SocketAddr,
        opts: super::BindOptions,
        make: impl FnOnce(SocketAddr) -> Arc<SockInner>,
    ) -> Result<Arc<SockInner>, SockError> {
        let mut t = lock_write(self);
        if addr.port() == 0 {
            let span = (EPHEMERAL.end() - EPHEMERAL.start()) as u32 + 1;
            let start = self.next_port.fetch_add(1, Ordering::Relaxed) as u32;
            let free = (0..span)
                .map(|i| EPHEMERAL.start() + ((start + i) % span) as u16)
                .find(|&p| !t.port_used(addr.is_ipv6(), p))
                .ok_or(SockError::NoPorts)?;
            addr.set_port(free);
        }
        let key = Key::of(addr, None);
        if !t.may_join(key, opts.reuseport, opts.reuseaddr) {
            return Err(SockError::AddrInUse(addr));
        }
        let inner = make(addr);
        t.insert(key, inner.clone());
        Ok(inner)
    }

    /// `connect()`'s half in the table: the socket moves to its full
    /// 5-tuple (which wins over bound and wildcard sockets).
    pub(crate) fn connect_entry(
        &self,
        s: &Arc<SockInner>,
        remote: SocketAddr,
    ) -> Result<(), SockError> {
        let mut t = lock_write(self);
        let mut a = lock(&s.addrs);
        if a.0.is_ipv4() != remote.is_ipv4() {
            return Err(SockError::Family(format!("{} to {remote}", a.0)));
        }
        let new = Key::of(a.0, Some(remote));
        if new != Key::of(a.0, a.1) && !t.may_join(new, s.reuseport, s.reuseaddr) {
            return Err(SockError::AddrInUse(a.0));
        }
        t.remove(Key::of(a.0, a.1), s.id);
        t.insert(new, s.clone());
        a.1 = Some(remote);
        Ok(())
    }

    /// `SO_ATTACH_REUSEPORT_CBPF` on `s` (`None`: `SO_DETACH_REUSEPORT_BPF`):
    /// its group runs `prog` to pick a member. A socket without
    /// `SO_REUSEPORT` has no group (`EINVAL`, as the kernel's).
    pub(crate) fn attach_prog(
        &self,
        s: &SockInner,
        prog: Option<Arc<Cbpf>>,
    ) -> Result<(), SockError> {
        if !s.reuseport {
            return Err(SockError::Invalid(
                "a reuseport program on a socket without SO_REUSEPORT".into(),
            ));
        }
        let (l, r) = s.addrs();
        lock_write(self).set_prog(Key::of(l, r), prog);
        Ok(())
    }

    /// The socket leaves the table (its last handle went).
    pub(crate) fn unbind(&self, s: &SockInner) {
        let (l, r) = s.addrs();
        lock_write(self).remove(Key::of(l, r), s.id);
    }
}

// The table's maps: every datagram is looked up (twice with UDP GRO on:
// GRO asks whether its socket wants merged datagrams), so they hash with
// foldhash (hashbrown's own default; seeded per process, so no one outside
// picks the collisions) instead of SipHash, which a profile of a QUIC
// upload showed at 2 % of the server's CPU.
use foldhash::HashMap;

/// Where a socket sits in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    /// Connected: local (address may be unspecified) and remote.
    Connected(SocketAddr, SocketAddr),
    /// Bound to a specific local address.
    Bound(SocketAddr),
    /// Bound to the wildcard address of a family (v6?) on a port.
    Wildcard(bool, u16),
}

impl Key {
    /// The key of a socket with these addresses.
    pub(crate) fn of(local: SocketAddr, remote: Option<SocketAddr>) -> Key {
        match remote {
            Some(r) => Key::Connected(local, r),
            None if local.ip().is_unspecified() => Key::Wildcard(local.is_ipv6(), local.port()),
            None => Key::Bound(local),
        }
    }
}

/// The sockets on one key: one socket, or several in the order they
/// joined: a `SO_REUSEPORT` group, with the classic BPF program a member
/// attached (`SO_ATTACH_REUSEPORT_CBPF`), if any, or sockets that share
/// the address by `SO_REUSEADDR`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Group {
    members: Vec<Arc<SockInner>>,
    prog: Option<Arc<Cbpf>>,
    /// Every member set `SO_REUSEPORT`: the hash (or the program) picks.
    hashed: bool,
}

impl Group {
    /// The member for a datagram from `src` to `dst`
    /// (`reuseport_select_sock`): the index the group's program returns
    /// (`run` runs it on the datagram), else, or if that index is past
    /// the group, `reciprocal_scale(hash, n)`. Sockets that share the
    /// address by `SO_REUSEADDR` alone: the one bound last (the head of
    /// the kernel's hash chain).
    #[inline]
    fn pick(
        &self,
        dst: SocketAddr,
        src: SocketAddr,
        run: impl FnOnce(&Cbpf) -> u32,
    ) -> &Arc<SockInner> {
        let all = self.members.as_slice();
        if let [one] = all {
            return one;
        }
        if !self.hashed {
            return &all[all.len() - 1];
        }
        if let Some(p) = &self.prog {
            if let Some(s) = all.get(run(p) as usize) {
                return s;
            }
        }
        &all[reciprocal_scale(flow_hash(dst, src), all.len() as u32) as usize]
    }

    /// The first member (the one a single-socket key holds).
    fn first(&self) -> &Arc<SockInner> {
        &self.members[0]
    }

    fn push(&mut self, s: Arc<SockInner>) {
        self.members.push(s);
        self.hashed = self.members.iter().all(|s| s.reuseport);
    }

    fn take(&mut self, id: u64) -> Option<Arc<SockInner>> {
        let i = self.members.iter().position(|s| s.id == id)?;
        let s = self.members.remove(i);
        self.hashed = self.members.iter().all(|s| s.reuseport);
        Some(s)
    }
}

/// `reciprocal_scale()` (include/linux/kernel.h): `val` scaled into
/// `0..ep_ro` without a division.
#[inline]
pub(crate) fn reciprocal_scale(val: u32, ep_ro: u32) -> u32 {
    ((val as u64 * ep_ro as u64) >> 32) as u32
}

/// The hash of a datagram's addresses and ports a group picks by: fixed
/// for a flow (a process-wide seed, as the kernel's boot-time secret).
/// `reciprocal_scale` reads its high bits, so it must mix every input bit
/// into them: foldhash's quality variant, its halves folded.
fn flow_hash(dst: SocketAddr, src: SocketAddr) -> u32 {
    static SEED: std::sync::OnceLock<foldhash::quality::RandomState> = std::sync::OnceLock::new();
    flow_hash_with(SEED.get_or_init(Default::default), dst, src)
}

fn flow_hash_with(seed: &foldhash::quality::RandomState, dst: SocketAddr, src: SocketAddr) -> u32 {
    use std::hash::BuildHasher;
    let h = seed.hash_one((dst, src));
    (h ^ (h >> 32)) as u32
}

#[derive(Debug, Default)]
pub(crate) struct Demux {
    connected: HashMap<(SocketAddr, SocketAddr), Group>,
    bound: HashMap<SocketAddr, Group>,
    wildcard: HashMap<(bool, u16), Group>,
}

fn unspecified(v6: bool) -> IpAddr {
    if v6 {
        Ipv6Addr::UNSPECIFIED.into()
    } else {
        Ipv4Addr::UNSPECIFIED.into()
    }
}

impl Demux {
    /// The socket for a datagram from `src` to `dst`, a group's program
    /// not run (its hash picks).
    #[inline]
    pub(crate) fn lookup(&self, dst: SocketAddr, src: SocketAddr) -> Option<&Arc<SockInner>> {
        self.lookup_with(dst, src, |_| u32::MAX)
    }

    /// The socket for a datagram from `src` to `dst`; a group with a
    /// program picks by what `run` makes of it.
    #[inline]
    pub(crate) fn lookup_with(
        &self,
        dst: SocketAddr,
        src: SocketAddr,
        run: impl FnOnce(&Cbpf) -> u32,
    ) -> Option<&Arc<SockInner>> {
        if !self.connected.is_empty() {
            if let Some(g) = self.connected.get(&(dst, src)).or_else(|| {
                let any = SocketAddr::new(unspecified(dst.is_ipv6()), dst.port());
                self.connected.get(&(any, src))
            }) {
                return Some(g.pick(dst, src, run));
            }
        }
        if !self.bound.is_empty() {
            if let Some(g) = self.bound.get(&dst) {
                return Some(g.pick(dst, src, run));
            }
        }
        self.wildcard
            .get(&(dst.is_ipv6(), dst.port()))
            .or_else(|| match dst {
                SocketAddr::V4(_) => self
                    .wildcard
                    .get(&(true, dst.port()))
                    .filter(|g| !g.first().v6only.load(std::sync::atomic::Ordering::Relaxed)),
                SocketAddr::V6(_) => None,
            })
            .map(|g| g.pick(dst, src, run))
    }

    /// Every socket a datagram from `src` to a multicast group or a
    /// broadcast address `dst` may go to, into `out`: those on its port
    /// bound to `dst` or to the wildcard (an IPv6 one takes IPv4 unless
    /// `IPV6_V6ONLY`), or connected to `src` — `__udp_is_mcast_sock()`'s
    /// address tests, all members of a `SO_REUSEPORT` group alike. The
    /// caller applies the membership filters.
    pub(crate) fn multi_candidates(
        &self,
        dst: SocketAddr,
        src: SocketAddr,
        out: &mut Vec<Arc<SockInner>>,
    ) {
        let any = SocketAddr::new(unspecified(dst.is_ipv6()), dst.port());
        for k in [(dst, src), (any, src)] {
            if let Some(g) = self.connected.get(&k) {
                out.extend(g.members.iter().cloned());
            }
        }
        if let Some(g) = self.bound.get(&dst) {
            out.extend(g.members.iter().cloned());
        }
        if let Some(g) = self.wildcard.get(&(dst.is_ipv6(), dst.port())) {
            out.extend(g.members.iter().cloned());
        }
        if dst.is_ipv4() {
            if let Some(g) = self.wildcard.get(&(true, dst.port())) {
                let dual = g
                    .members
                    .iter()
                    .filter(|s| !s.v6only.load(Ordering::Relaxed));
                out.extend(dual.cloned());
            }
        }
    }

    /// Attach `prog` to the group on `key` (`None`: detach), as
    /// `reuseport_attach_prog` replaces a group's program. False if
    /// nothing sits on `key`.
    pub(crate) fn set_prog(&mut self, key: Key, prog: Option<Arc<Cbpf>>) -> bool {
        let g = match key {
            Key::Connected(l, r) => self.connected.get_mut(&(l, r)),
            Key::Bound(a) => self.bound.get_mut(&a),
            Key::Wildcard(v6, p) => self.wildcard.get_mut(&(v6, p)),
        };
        g.map(|g| g.prog = prog).is_some()
    }

    fn group(&self, key: Key) -> Option<&Group> {
        match key {
            Key::Connected(l, r) => self.connected.get(&(l, r)),
            Key::Bound(a) => self.bound.get(&a),
            Key::Wildcard(v6, p) => self.wildcard.get(&(v6, p)),
        }
    }

    /// A socket may take `key`: it is free, or every socket on it and
    /// this one set `SO_REUSEPORT` (the group of `reuseport_add_sock`;
    /// one process here, so one owner), or all set `SO_REUSEADDR`
    /// (`udp_lib_lport_inuse()`).
    pub(crate) fn may_join(&self, key: Key, reuseport: bool, reuseaddr: bool) -> bool {
        match self.group(key) {
            None => true,
            Some(g) => {
                (reuseport && g.members.iter().all(|s| s.reuseport))
                    || (reuseaddr && g.members.iter().all(|s| s.reuseaddr))
            }
        }
    }

    /// True if any socket uses local port `port` of family `v6`.
    pub(crate) fn port_used(&self, v6: bool, port: u16) -> bool {
        self.wildcard.contains_key(&(v6, port))
            || self
                .bound
                .keys()
                .any(|a| a.is_ipv6() == v6 && a.port() == port)
            || self
                .connected
                .keys()
                .any(|(l, _)| l.is_ipv6() == v6 && l.port() == port)
    }

    /// Put `s` on `key`: alone, or as the last member of its group.
    pub(crate) fn insert(&mut self, key: Key, s: Arc<SockInner>) {
        fn join<K: std::hash::Hash + Eq>(m: &mut HashMap<K, Group>, k: K, s: Arc<SockInner>) {
            m.entry(k).or_default().push(s);
        }
        match key {
            Key::Connected(l, r) => join(&mut self.connected, (l, r), s),
            Key::Bound(a) => join(&mut self.bound, a, s),
            Key::Wildcard(v6, p) => join(&mut self.wildcard, (v6, p), s),
        }
    }

    /// Take socket `id` off `key` (`reuseport_detach_sock`: the others
    /// stay, in their order).
    pub(crate) fn remove(&mut self, key: Key, id: u64) -> Option<Arc<SockInner>> {
        fn take<K: std::hash::Hash + Eq>(
            m: &mut HashMap<K, Group>,
            k: K,
            id: u64,
        ) -> Option<Arc<SockInner>> {
            let g = m.get_mut(&k)?;
            let s = g.take(id)?;
            if g.members.is_empty() {
                m.remove(&k);
            }
            Some(s)
        }
        match key {
            Key::Connected(l, r) => take(&mut self.connected, (l, r), id),
            Key::Bound(a) => take(&mut self.bound, a, id),
            Key::Wildcard(v6, p) => take(&mut self.wildcard, (v6, p), id),
        }
    }

    /// Empty the table (host shutdown).
    pub(crate) fn take_all(&mut self) -> Vec<Arc<SockInner>> {
        let mut v: Vec<_> = self
            .connected
            .drain()
            .flat_map(|(_, g)| g.members)
            .collect();
        v.extend(self.bound.drain().flat_map(|(_, g)| g.members));
        v.extend(self.wildcard.drain().flat_map(|(_, g)| g.members));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_sharing_an_address_by_reuseaddr_give_unicast_to_the_last() {
        use super::super::{read_lock, BindOptions, SockConfig, Socket};
        let host = Sockets::new(SockConfig::default(), Vec::new());
        let addr: SocketAddr = "0.0.0.0:5000".parse().unwrap();
        let ra = BindOptions {
            reuseaddr: true,
            ..Default::default()
        };
        let a = Socket::bind_with(&host, addr, ra).unwrap();
        assert!(matches!(
            Socket::bind(&host, addr),
            Err(SockError::AddrInUse(_))
        ));
        let b = Socket::bind_with(&host, addr, ra).unwrap();
        let (dst, src) = (
            "198.18.0.1:5000".parse().unwrap(),
            "198.18.0.2:9".parse().unwrap(),
        );
        let to = || read_lock(&host.demux).lookup(dst, src).map(|s| s.id);
        assert_eq!(to(), Some(b.inner.id), "the socket bound last");
        drop(b);
        assert_eq!(to(), Some(a.inner.id));
        let mut out = Vec::new();
        let c = Socket::bind_with(&host, addr, ra).unwrap();
        let group: SocketAddr = "239.1.1.1:5000".parse().unwrap();
        read_lock(&host.demux).multi_candidates(group, src, &mut out);
        let ids: Vec<u64> = out.iter().map(|s| s.id).collect();
        assert_eq!(ids, vec![a.inner.id, c.inner.id], "multicast: every one");
    }

    #[test]
    fn reciprocal_scale_is_the_kernels() {
        assert_eq!(reciprocal_scale(0, 4), 0);
        assert_eq!(reciprocal_scale(u32::MAX, 4), 3);
        assert_eq!(reciprocal_scale(1 << 31, 4), 2);
        assert_eq!(reciprocal_scale(0x4000_0000, 3), 0);
    }

    #[test]
    fn the_flow_hash_spreads_consecutive_ports_over_a_group_for_any_seed() {
        // One peer, 64 consecutive source ports (what a client pool or a
        // load generator sends from): for every seed, each of four
        // members gets some (all in one half would mean the high bits,
        // which reciprocal_scale reads, ignore the port).
        let dst: SocketAddr = "198.18.0.1:53".parse().unwrap();
        for _ in 0..200 {
            let seed = foldhash::quality::RandomState::default();
            let mut per = [0u32; 4];
            for p in 0..64u16 {
                let src = SocketAddr::new("198.18.0.2".parse().unwrap(), 20000 + p);
                per[reciprocal_scale(flow_hash_with(&seed, dst, src), 4) as usize] += 1;
            }
            assert!(per.iter().all(|&n| n > 0), "{per:?}");
        }
    }
}
