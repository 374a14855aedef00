//! The application's UDP socket, sending: frames built from the payload
//! (one per datagram, or up to 64 from one buffer with a segment size, as
//! `UDP_SEGMENT` does) and handed to the host's TX port in batches.

use super::socket::UdpSocket;
use super::SockError;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

impl UdpSocket {
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
        let local = self.local_addr();
        let mut sent = 0;
        for chunk in msgs.chunks(super::tx::TX_BATCH) {
            let mut frames = super::tx::Frames::new();
            let mut fams = [false; super::tx::TX_BATCH];
            let mut err = None;
            for (payload, dst) in chunk {
                match self.build(&mut frames, local, *dst, payload) {
                    Ok(v6) => fams[frames.len() - 1] = v6,
                    Err(e) => {
                        match e {
                            SockError::NoRoute(ip) => self.host.count_no_route(ip.is_ipv6()),
                            _ => self.host.count_send(dst.is_ipv6(), 0, 1),
                        }
                        err = Some(e);
                        break;
                    }
                }
            }
            let n = if frames.len() == 0 {
                0
            } else {
                match self.host.transmit(&frames) {
                    Ok(n) => n,
                    Err(e) => {
                        err = Some(e);
                        0
                    }
                }
            };
            for (i, &v6) in fams.iter().enumerate().take(frames.len()) {
                if i < n {
                    self.host.count_send(v6, 1, 0);
                } else if i == n && err.is_none() {
                    // The first frame the TX port did not take failed; the
                    // rest were not tried.
                    self.host.count_send(v6, 0, 1);
                }
            }
            sent += n;
            if let Some(e) = err {
                return if sent > 0 { Ok(sent) } else { Err(e) };
            }
            if n < frames.len() {
                break;
            }
        }
        Ok(sent)
    }

    /// Build one datagram's frame; returns whether it left as IPv6.
    fn build(
        &self,
        frames: &mut super::tx::Frames,
        local: SocketAddr,
        dst: SocketAddr,
        payload: &[u8],
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
            id,
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
