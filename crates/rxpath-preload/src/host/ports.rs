//! The port map as the preload keeps it: the destinations a socket takes
//! (keyed as the kernel keys sockets), taken at `bind` and given back when
//! the last socket on them closes or goes back to the kernel, and the
//! specific addresses whose socket is the kernel's.

use super::{say, Fallback, Global, State};
use rxpath_dev::sys::xdp::PortKey;
use rxpath_runtime::{Host, TcpListener, UdpSocket};
use std::net::{IpAddr, SocketAddr};
use std::sync::MutexGuard;

/// The destinations the XDP program takes for a UDP socket bound to
/// `addr`, keyed as the kernel keys sockets: its address (or its family's
/// wildcard) and port; an IPv6 wildcard socket without `IPV6_V6ONLY`
/// takes IPv4 too (as `::ffff:a.b.c.d`), so the IPv4 wildcard as well.
pub(crate) fn map_keys(addr: SocketAddr, v6only: bool) -> Vec<PortKey> {
    keys_of(libc::IPPROTO_UDP as u8, addr, v6only)
}

/// [`map_keys`] for protocol `proto` (17 UDP, 6 TCP).
pub(crate) fn keys_of(proto: u8, addr: SocketAddr, v6only: bool) -> Vec<PortKey> {
    let udp = |addr| PortKey { proto, addr };
    let mut keys = vec![udp(addr)];
    match addr.ip() {
        IpAddr::V6(a) if a.is_unspecified() && !v6only => {
            keys.push(udp(SocketAddr::new([0, 0, 0, 0].into(), addr.port())));
        }
        IpAddr::V6(a) => {
            if let Some(v4) = a.to_ipv4_mapped() {
                keys = vec![udp(SocketAddr::new(v4.into(), addr.port()))];
            }
        }
        IpAddr::V4(_) => {}
    }
    keys
}

/// [`Host::leave_port`], a failure said.
pub(super) fn leave(host: &Host, k: PortKey) {
    if let Err(e) = host.leave_port(k) {
        say(&format!(
            "leaving {} to the kernel in the port map: {e}",
            k.addr
        ));
    }
}

impl Global {
    /// An rxpath socket for `addr`, which the caller's kernel socket has
    /// just bound (the port is held in the kernel), with the destinations
    /// the XDP program now takes for it ([`map_keys`]), or why not.
    pub(crate) fn bind(
        &self,
        addr: SocketAddr,
        opts: rxpath_core::sock::BindOptions,
        v6only: bool,
    ) -> Result<(UdpSocket, Vec<PortKey>), (Fallback, String)> {
        let mut s = self.admit(addr)?;
        let Some(r) = s.running.as_mut() else {
            return Err((Fallback::HostFailed, "no host".into()));
        };
        let sock = r
            .host
            .udp_bind_held_with(addr, opts)
            .map_err(|e| (Fallback::BindRefused, format!("{addr}: {e}")))?;
        let keys = map_keys(addr, v6only);
        take_keys(r, addr, &keys)?;
        if self.cfg.busy_poll_us > 0 {
            sock.set_busy_poll(self.cfg.busy_poll_us);
        }
        sock.set_busy_poll_budget(self.cfg.busy_poll_budget);
        s.accelerated += 1;
        Ok((sock, keys))
    }

    /// An rxpath listener on `addr`, which the caller's kernel socket has
    /// bound (and listens on, for loopback), with the destinations the
    /// XDP program now takes for it, or why not: TCP is served when the
    /// options ask for it, on a device whose frames the kernel does not
    /// also see (AF_XDP, or AF_PACKET's steering): where it saw a SYN it
    /// would answer it.
    pub(crate) fn tcp_listen(
        &self,
        addr: SocketAddr,
        backlog: i32,
        share: rxpath_runtime::ListenShare,
    ) -> Result<(TcpListener, Vec<PortKey>), (Fallback, String)> {
        if !self.cfg.protocols.tcp() {
            return Err((Fallback::Protocol, "TCP (--protocols udp)".into()));
        }
        let mut s = self.admit(addr)?;
        let r = tcp_running(&mut s)?;
        let l = r
            .host
            .tcp_listen_held(addr, backlog, share)
            .map_err(|e| (Fallback::BindRefused, format!("{addr}: {e}")))?;
        let keys = keys_of(libc::IPPROTO_TCP as u8, addr, share.v6only);
        take_keys(r, addr, &keys)?;
        if self.cfg.busy_poll_us > 0 {
            l.set_busy_poll(self.cfg.busy_poll_us);
        }
        s.accelerated += 1;
        Ok((l, keys))
    }

    /// An rxpath connection from `from` (bound by the caller's kernel
    /// socket, which holds the port) to `to`, the SYN sent, with the
    /// destinations the port map now takes for it; or why not. Served:
    /// destinations on a link of the interface (the next hop is the
    /// destination), whose neighbour the kernel's table has or resolves
    /// (asked as its own connect would); others are the kernel's. `how`:
    /// a plain SYN or Fast Open's; the count is the bytes the SYN carried.
    pub(crate) fn tcp_connect(
        &self,
        from: SocketAddr,
        to: SocketAddr,
        how: rxpath_runtime::Opening<'_>,
    ) -> Result<(rxpath_runtime::TcpStream, Vec<PortKey>, usize), (Fallback, String)> {
        let iface = self.cfg.iface.clone().unwrap_or_default();
        // The next hop as the kernel's connect finds it: the peer itself
        // on a link of the interface, else the gateway of the kernel's
        // route, if that route leaves by the interface.
        let on_link = rxpath_dev::sys::iface::prefixes(&iface)
            .unwrap_or_default()
            .iter()
            .any(|&(p, len)| same_prefix(p, to.ip(), len));
        let hop = if on_link {
            to.ip()
        } else {
            match rxpath_dev::sys::route::get(to.ip()) {
                Ok(Some(h)) if h.ifindex == self.ifindex() => h.gateway.unwrap_or(to.ip()),
                Ok(_) => {
                    return Err((
                        Fallback::Protocol,
                        format!("connect to {to}: the kernel's route does not leave by {iface}"),
                    ))
                }
                Err(e) => {
                    return Err((
                        Fallback::Protocol,
                        format!("connect to {to}: the kernel's route: {e}"),
                    ))
                }
            }
        };
        let known = {
            let mut s = self.admit(from)?;
            let r = tcp_running(&mut s)?;
            r.host.sockets().neighbor(to.ip()).is_some()
        };
        // Resolved with no lock held: other threads bind and close
        // meanwhile (the kernel's connect waits for its neighbour too).
        let mac = if known {
            None
        } else {
            let patience = std::time::Duration::from_secs(1);
            match rxpath_dev::sys::neigh::resolve(self.ifindex(), hop, patience) {
                Ok(Some(mac)) => Some(mac),
                Ok(None) => {
                    return Err((
                        Fallback::Protocol,
                        format!("connect to {to}: no neighbour {hop}"),
                    ))
                }
                Err(e) => {
                    return Err((
                        Fallback::Protocol,
                        format!("connect to {to}: the kernel's neighbour table: {e}"),
                    ))
                }
            }
        };
        let mut s = self.state();
        let r = tcp_running(&mut s)?;
        if let Some(mac) = mac {
            // The peer's frames go to the next hop's address.
            r.host.sockets().add_neighbor(to.ip(), mac);
        }
        let keys = keys_of(libc::IPPROTO_TCP as u8, from, true);
        take_keys(r, from, &keys)?;
        match r.host.tcp_open_held(from, to, how) {
            Ok((c, carried)) => {
                s.accelerated += 1;
                Ok((c, keys, carried))
            }
            Err(e) => {
                drop(s);
                self.release(&keys);
                Err((
                    Fallback::BindRefused,
                    format!("connect {from} to {to}: {e}"),
                ))
            }
        }
    }

    /// May rxpath take a socket bound to `addr`? The host runs (started
    /// now if it was not), with its state locked; else why not.
    fn admit(&self, addr: SocketAddr) -> Result<MutexGuard<'_, State>, (Fallback, String)> {
        let Some(iface) = self.cfg.iface.clone() else {
            return Err((Fallback::NoIface, "no RXPATH_IFACE".into()));
        };
        if let Err(why) = self.cfg.allowed(addr) {
            return Err((Fallback::Rule, why));
        }
        if addr.port() == 0 {
            return Err((
                Fallback::EphemeralPort,
                format!("{addr}: an ephemeral port"),
            ));
        }
        let mut s = self.state();
        if let Some(why) = &s.gone {
            return Err((Fallback::IfaceGone, format!("{addr}: {why}")));
        }
        if let Err(e) = self.ensure_running(&mut s, &iface) {
            return Err((Fallback::HostFailed, e));
        }
        let Some(r) = s.running.as_ref() else {
            return Err((Fallback::HostFailed, "no host".into()));
        };
        // A group or broadcast address takes what is sent to it here.
        let c = r.host.sockets().config();
        let ours = addr.ip().is_unspecified()
            || addr.ip().is_multicast()
            || c.local_addrs.contains(&addr.ip())
            || matches!(addr.ip(), IpAddr::V4(a) if rxpath_core::ip::is_broadcast(&c.prefixes, a));
        if !ours {
            return Err((
                Fallback::OtherAddress,
                format!("{addr} is not an address of {iface}"),
            ));
        }
        Ok(s)
    }

    /// An rxpath socket that took `keys` closed (or went back to the
    /// kernel): the last one on each gives it back to the kernel.
    /// True if another rxpath socket still takes one of them (a
    /// `SO_REUSEPORT` sibling): its datagrams still come to rxpath.
    pub(crate) fn release(&self, keys: &[PortKey]) -> bool {
        let mut s = self.state();
        let State {
            running,
            kernel_keys,
            ..
        } = &mut *s;
        let Some(r) = running.as_mut() else {
            return false;
        };
        let mut shared = false;
        for k in keys {
            let Some(n) = r.ports.get_mut(k) else {
                continue;
            };
            *n -= 1;
            if *n == 0 {
                r.ports.remove(k);
                if kernel_keys.contains(k) {
                    leave(&r.host, *k);
                } else if let Err(e) = r.host.take_port(*k, false) {
                    say(&format!("giving {} back to the kernel: {e}", k.addr));
                }
            } else {
                shared = true;
            }
        }
        shared
    }

    /// At a `fork`, the destinations `keys` go to the kernel
    /// ([`Global::take_back`] when this process reads them again): until
    /// then the kernel socket, which every process shares, queues what
    /// comes, so a child that reads it finds it whether or not this
    /// process ever reads again (a pre-forking server's parent does not).
    pub(crate) fn lend(&self, keys: &[PortKey]) {
        self.flip(keys, false);
    }

    /// This process reads a socket whose `keys` it lent at a `fork`:
    /// rxpath takes them again.
    pub(crate) fn take_back(&self, keys: &[PortKey]) {
        self.flip(keys, true);
    }

    /// The port map takes (`on`) or leaves `keys` that rxpath sockets
    /// hold, their count unchanged.
    fn flip(&self, keys: &[PortKey], on: bool) {
        let mut s = self.state();
        let Some(r) = s.running.as_mut() else {
            return;
        };
        for k in keys.iter().filter(|k| r.ports.contains_key(k)) {
            if let Err(e) = r.host.take_port(*k, on) {
                let what = if on {
                    "taking back"
                } else {
                    "lending the kernel"
                };
                say(&format!("{what} {} at a fork: {e}", k.addr));
            }
        }
    }

    /// A socket bound to `addr` is the kernel's (it stayed there at
    /// `bind`, or was handed back): if `addr` is a specific address, the
    /// port map leaves it to the kernel even where an rxpath socket takes
    /// the port's wildcard, as the kernel's lookup prefers the bound
    /// address. Kept until the process exits: should that socket close,
    /// the kernel gives what comes to its wildcard socket, the one behind
    /// rxpath's fd, which the program reads all the same.
    pub(crate) fn kernel_keeps(&self, addr: SocketAddr, v6only: bool) {
        if addr.port() == 0 {
            return;
        }
        let mut s = self.state();
        for k in map_keys(addr, v6only) {
            if k.addr.ip().is_unspecified() || !s.kernel_keys.insert(k) {
                continue;
            }
            if let Some(r) = s.running.as_ref().filter(|r| !r.ports.contains_key(&k)) {
                leave(&r.host, k);
            }
        }
    }
}

/// The port map takes `keys` for a socket on `addr` (counted per key; the
/// first socket on a key puts it in the map), or none of them.
fn take_keys(
    r: &mut super::Running,
    addr: SocketAddr,
    keys: &[PortKey],
) -> Result<(), (Fallback, String)> {
    for (i, k) in keys.iter().enumerate() {
        if r.ports.contains_key(k) {
            continue;
        }
        if let Err(e) = r.host.take_port(*k, true) {
            for k in keys[..i].iter().filter(|k| !r.ports.contains_key(k)) {
                let _ = r.host.take_port(*k, false);
            }
            return Err((
                Fallback::PortMapFull,
                format!("{addr}: the XDP program's port map: {e}"),
            ));
        }
    }
    for k in keys {
        *r.ports.entry(*k).or_default() += 1;
    }
    Ok(())
}

/// Do `a` and `b` share their first `len` bits (same family)?
fn same_prefix(a: IpAddr, b: IpAddr, len: u8) -> bool {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let m = u32::MAX
                .checked_shl(32 - u32::from(len.min(32)))
                .unwrap_or(0);
            u32::from(a) & m == u32::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let m = u128::MAX
                .checked_shl(128 - u32::from(len.min(128)))
                .unwrap_or(0);
            u128::from(a) & m == u128::from(b) & m
        }
        _ => false,
    }
}

/// The running host, if it serves TCP: a device whose frames the kernel
/// does not also see (where it saw a SYN it would answer it).
fn tcp_running(s: &mut State) -> Result<&mut super::Running, (Fallback, String)> {
    let Some(r) = s.running.as_mut() else {
        return Err((Fallback::HostFailed, "no host".into()));
    };
    if r.host.kernel_sees_frames() || !r.host.runs_tcp() {
        return Err((
            Fallback::Protocol,
            format!("TCP on {}: the kernel sees its frames", r.host.backend()),
        ));
    }
    Ok(r)
}
