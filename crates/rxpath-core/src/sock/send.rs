//! The application's UDP socket, sending: frames built from the payload
//! (one per datagram, or up to 64 from one buffer with a segment size, as
//! `UDP_SEGMENT` does) and handed to the host's TX port in batches.

use super::socket::Socket;
use super::SockError;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

/// IPv6 fragment identifications (`ipv6_select_ident`: the kernel's are
/// hashed per destination; these only need to differ between datagrams
/// in flight).
static FRAG_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0x5eed_0001);

/// The result of a send that sent `sent` datagrams and may have failed.
fn done(sent: usize, err: Option<SockError>) -> Result<usize, SockError> {
    match err {
        Some(e) if sent == 0 => Err(e),
        _ => Ok(sent),
    }
}

/// `UDP_MAX_SEGMENTS`: datagrams one `UDP_SEGMENT` send may make.
pub const UDP_MAX_SEGMENTS: usize = 64;

impl Socket {
    /// `send()` on a connected socket.
    pub fn send(&self, payload: &[u8]) -> Result<usize, SockError> {
        let dst = self.peer_addr().ok_or(SockError::NotConnected)?;
        self.send_to(payload, dst)
    }

    /// `sendto()`: one datagram to `dst` through the host's TX port.
    pub fn send_to(&self, payload: &[u8], dst: SocketAddr) -> Result<usize, SockError> {
        self.send_batch(&[(payload, dst)]).map(|_| payload.len())
    }

    /// `sendmmsg()`: datagrams to their destinations, built and handed to
    /// the TX port in one batch. Returns how many were sent: fewer than
    /// asked when one could not be (as `sendmmsg` stops at the first
    /// failure); an error only if the first failed. The datagram that
    /// failed (the one after those sent) is counted once (`SndbufErrors`,
    /// or `OutNoRoutes`); those after it were not tried and are not
    /// counted, so a caller goes on after the failed one (and a caller that
    /// retries it counts it again, as with the kernel's `sendmmsg`).
    /// Nothing here ends a server.
    pub fn send_batch(&self, msgs: &[(&[u8], SocketAddr)]) -> Result<usize, SockError> {
        let (sent, err) = self.send_batch_until(msgs);
        done(sent, err)
    }

    /// [`Self::send_batch`], saying why the datagram after those sent
    /// failed (`None`: all were sent), for a caller that hands that one
    /// elsewhere (the preload's `sendmmsg`, to the kernel socket).
    pub fn send_batch_until(&self, msgs: &[(&[u8], SocketAddr)]) -> (usize, Option<SockError>) {
        // A datagram that fits the MTU carries DF, as the kernel's default
        // `IP_PMTUDISC_WANT` sets it; a longer one leaves in fragments
        // (`ip_fragment`), unless `IP_PMTUDISC_DO`/`PROBE` refuses it.
        self.send_msgs(msgs, 0, true, !self.pmtudisc_do())
    }

    /// `sendmsg()` with `UDP_SEGMENT` and the ECN bits of `IP_TOS` /
    /// `IPV6_TCLASS`: `contents` cut into datagrams of `segment_size` bytes
    /// (the last may be shorter; `None`: one datagram), each with its own
    /// headers, lengths and checksums, all carrying `ecn` (0-3) and all
    /// handed to the TX port at once. At most [`UDP_MAX_SEGMENTS`]
    /// datagrams, as the kernel allows (`EINVAL` beyond). Returns the
    /// datagrams sent (all of them, or as `send_batch` reports a failure).
    pub fn send_segments(
        &self,
        contents: &[u8],
        segment_size: Option<usize>,
        dst: SocketAddr,
        ecn: u8,
    ) -> Result<usize, SockError> {
        let seg = match segment_size {
            Some(s) if s > 0 && s < contents.len() => s,
            _ => contents.len().max(1),
        };
        if contents.len().div_ceil(seg) > UDP_MAX_SEGMENTS {
            return Err(SockError::TooManySegments {
                len: contents.len(),
                segment: seg,
            });
        }
        // `__ip_make_skb()`: DF with `IP_PMTUDISC_DO`/`PROBE`, else only if
        // the whole buffer fits the MTU (a GSO send's segments go without).
        let hdrs = if dst.is_ipv4() { 28 } else { 48 };
        let df = self.pmtudisc_do() || contents.len() + hdrs <= self.host.cfg.mtu;
        if let Some(n) = self.send_gso(contents, seg, dst, ecn & 3, df) {
            return Ok(n);
        }
        let mut msgs = arrayvec::ArrayVec::<(&[u8], SocketAddr), UDP_MAX_SEGMENTS>::new();
        if contents.is_empty() {
            msgs.push((contents, dst));
        }
        for c in contents.chunks(seg) {
            msgs.push((c, dst));
        }
        let (sent, err) = self.send_msgs(&msgs, ecn & 3, df, false);
        done(sent, err)
    }

    /// A segmented send as one UDP GSO packet, where the TX port sends
    /// them (an interface's: the device or the kernel's software GSO cuts
    /// it, as after the kernel's own `UDP_SEGMENT` send; the payload is
    /// copied once, by the kernel). `None`: not sent this way (one
    /// datagram, a segment past the MTU, no such port, a destination that
    /// does not resolve, or the port's error), and the caller builds each
    /// datagram itself, which says what failed.
    fn send_gso(
        &self,
        contents: &[u8],
        seg: usize,
        dst: SocketAddr,
        tos: u8,
        df: bool,
    ) -> Option<usize> {
        let n = contents.len().div_ceil(seg);
        let local = self.local_addr();
        let (src_ip, dst) = self.route(local, dst).ok()?;
        let c = &self.host.cfg;
        if n < 2 || !super::tx::fits_one(c, seg, dst.is_ipv6()) {
            return None;
        }
        if !crate::ip::routable(&c.prefixes, c.default_route, dst.ip()) {
            return None;
        }
        let src = self
            .host
            .source_for(SocketAddr::new(src_ip, local.port()), &dst)
            .ok()?;
        let mut spec = rxpath_wire::build::Spec::new(src, dst.ip(), local.port(), dst.port());
        spec.src_mac = c.mac;
        spec.dst_mac = self.host.neighbor(dst.ip())?;
        spec.tos = tos;
        spec.df = df;
        // Each datagram takes the next identification, as the kernel's
        // segmentation numbers them.
        spec.ip_id = self.inner.ip_id.fetch_add(n as u16, Ordering::Relaxed);
        match self.host.transmit_udp_gso(&spec, contents, seg as u16)? {
            Ok(true) => {
                self.host.count_send(dst.is_ipv6(), n as u64, 0);
                Some(n)
            }
            // Some of it left: sent, never again; counted once as the
            // kernel's `udp_send_skb` counts `ENOBUFS` (`SndbufErrors`).
            Ok(false) => {
                self.host.count_send(dst.is_ipv6(), 0, 1);
                Some(n)
            }
            // Nothing left: each datagram is built and sent as without GSO.
            Err(_) => None,
        }
    }

    /// `IP_MTU_DISCOVER` = `IP_PMTUDISC_PROBE` (true) or the default
    /// `IP_PMTUDISC_WANT` (false): with it every datagram carries DF, the
    /// segments of a segmented send too (quinn-udp sets it on its sockets).
    pub fn set_pmtudisc_do(&self, on: bool) {
        self.inner.pmtudisc_do.store(on, Ordering::Relaxed);
    }

    /// See [`Self::set_pmtudisc_do`].
    pub fn pmtudisc_do(&self) -> bool {
        self.inner.pmtudisc_do.load(Ordering::Relaxed)
    }

    fn send_msgs(
        &self,
        msgs: &[(&[u8], SocketAddr)],
        tos: u8,
        df: bool,
        frag: bool,
    ) -> (usize, Option<SockError>) {
        use super::tx::{frames_for, Frames, TX_BATCH};
        let local = self.local_addr();
        let mut sent = 0;
        let mut frames = Frames::new();
        // The datagrams built and not yet handed over: frames, family.
        let mut built = arrayvec::ArrayVec::<(usize, bool), TX_BATCH>::new();
        for (payload, dst) in msgs {
            let need = frames_for(&self.host.cfg, payload.len());
            if !frames.is_empty() && (frames.len() + need > TX_BATCH || built.is_full()) {
                let (n, all, err) = self.hand_over(&frames, &built);
                sent += n;
                if !all {
                    return (sent, err);
                }
                frames = Frames::new();
                built.clear();
            }
            let before = frames.len();
            match self.build(&mut frames, local, *dst, (tos, df, frag), payload) {
                Ok(v6) => built.push((frames.len() - before, v6)),
                Err(e) => {
                    match e {
                        SockError::NoRoute(ip) => self.host.count_no_route(ip.is_ipv6()),
                        _ => self.host.count_send(dst.is_ipv6(), 0, 1),
                    }
                    let (n, _, _) = self.hand_over(&frames, &built);
                    return (sent + n, Some(e));
                }
            }
        }
        let (n, _, err) = self.hand_over(&frames, &built);
        (sent + n, err)
    }

    /// Hand the frames built to the TX port. A datagram whose frames it
    /// all took is sent (counted); the first it did not take failed
    /// (counted once, unless the port itself failed); those after it were
    /// not tried. Returns the datagrams sent, whether all were, and the
    /// port's error.
    fn hand_over(
        &self,
        frames: &super::tx::Frames<'_>,
        built: &[(usize, bool)],
    ) -> (usize, bool, Option<SockError>) {
        if frames.is_empty() {
            return (0, true, None);
        }
        let (taken, err) = match self.host.transmit(frames, built) {
            Ok(n) => (n, None),
            Err(e) => (0, Some(e)),
        };
        let (mut at, mut sent) = (0, 0);
        for &(k, v6) in built {
            if at + k > taken {
                if err.is_none() {
                    self.host.count_send(v6, 0, 1);
                }
                return (sent, false, err);
            }
            self.host.count_send(v6, 1, 0);
            at += k;
            sent += 1;
        }
        (sent, true, err)
    }

    /// Build one datagram's frame; returns whether it left as IPv6.
    fn build<'a>(
        &self,
        frames: &mut super::tx::Frames<'a>,
        local: SocketAddr,
        dst: SocketAddr,
        (tos, df, frag): (u8, bool, bool),
        payload: &'a [u8],
    ) -> Result<bool, SockError> {
        let (src_ip, dst) = self.route(local, dst)?;
        let c = &self.host.cfg;
        if !crate::ip::routable(&c.prefixes, c.default_route, dst.ip()) {
            return Err(SockError::NoRoute(dst.ip()));
        }
        let src = self
            .host
            .source_for(SocketAddr::new(src_ip, local.port()), &dst)?;
        let mac = self
            .host
            .neighbor(dst.ip())
            .ok_or(SockError::NoNeighbor(dst.ip()))?;
        let id = self.inner.ip_id.fetch_add(1, Ordering::Relaxed);
        frames.push(
            &self.host.cfg,
            SocketAddr::new(src, local.port()),
            dst,
            mac,
            super::tx::IpFields {
                id,
                tos,
                df,
                frag,
                frag_id: FRAG_ID.fetch_add(1, Ordering::Relaxed),
            },
            payload,
        )?;
        Ok(dst.is_ipv6())
    }

    /// The family a datagram leaves in: a dual-stack socket sends to an
    /// IPv4 or v4-mapped destination as IPv4 (`udpv6_sendmsg` hands those
    /// to `udp_sendmsg`). Returns the local IP to send from (unspecified =
    /// pick one) and the destination.
    fn route(
        &self,
        local: SocketAddr,
        dst: SocketAddr,
    ) -> Result<(std::net::IpAddr, SocketAddr), SockError> {
        use std::net::{IpAddr, Ipv4Addr};
        let mismatch = || SockError::Family(format!("{local} to {dst}"));
        let dst = match dst {
            SocketAddr::V6(a) if local.is_ipv6() => match a.ip().to_ipv4_mapped() {
                Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
                None => dst,
            },
            d => d,
        };
        match (local.ip(), dst.is_ipv4()) {
            (IpAddr::V4(l), true) => Ok((l.into(), dst)),
            (IpAddr::V6(l), false) => Ok((l.into(), dst)),
            (IpAddr::V6(l), true) if !self.only_v6() => match l.to_ipv4_mapped() {
                Some(v4) => Ok((v4.into(), dst)),
                None if l.is_unspecified() => Ok((Ipv4Addr::UNSPECIFIED.into(), dst)),
                None => Err(mismatch()),
            },
            _ => Err(mismatch()),
        }
    }
}
