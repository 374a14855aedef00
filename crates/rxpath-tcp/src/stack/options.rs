//! Socket options by the kernel's names (`setsockopt`, `getsockopt`),
//! `TCP_INFO` and the `TCP_INQ` hint.

use super::*;

impl Stack {
    /// `getsockopt(TCP_INFO)`.
    pub fn tcp_info(&self, id: SockId, now: Nanos) -> Result<crate::info::TcpInfo, Errno> {
        let s = self.sock(id)?;
        Ok(match (&s.conn, &s.listener) {
            (Some(c), _) => c.tcp_info(now),
            (None, l) => crate::info::TcpInfo {
                tcpi_state: if l.is_some() {
                    State::Listen
                } else {
                    State::Closed
                }
                .kernel_code(),
                tcpi_rto: 1_000_000,
                tcpi_snd_mss: crate::conn::TCP_MSS_DEFAULT,
                tcpi_snd_cwnd: TCP_INIT_CWND,
                tcpi_snd_ssthresh: TCP_INFINITE_SSTHRESH,
                tcpi_reordering: 3,
                tcpi_pmtu: 1500,
                ..crate::info::TcpInfo::default()
            },
        })
    }

    /// `tcp_inq_hint`: bytes left to read, 1 at the end of the stream
    /// (so the reader goes on to see it).
    pub fn inq_hint(&self, id: SockId) -> Result<i32, Errno> {
        let s = self.sock(id)?;
        Ok(match &s.conn {
            Some(c) if c.rcvq.is_empty() && c.fin_rcvd => 1,
            Some(c) => c.rcvq.len() as i32,
            None => 0,
        })
    }

    /// Set an option.
    pub fn set_option(
        &mut self,
        id: SockId,
        opt: SockOpt,
        val: i32,
        now: Nanos,
    ) -> Result<(), Errno> {
        self.touch(id);
        let sysctl_lowat = self.cfg.tcp_notsent_lowat;
        let fastopen = self.cfg.tcp_fastopen;
        let somaxconn = self.cfg.somaxconn;
        let s = self.sock_mut(id)?;
        match opt {
            SockOpt::NoDelay => {
                s.nodelay = val != 0;
                if let Some(c) = s.conn.as_deref_mut() {
                    c.nodelay = val != 0;
                }
            }
            SockOpt::Cork => {
                s.cork = val != 0;
                if let Some(c) = s.conn.as_deref_mut() {
                    c.cork = val != 0;
                }
            }
            SockOpt::ReuseAddr => s.reuseaddr = val != 0,
            SockOpt::ReusePort => s.reuseport = val != 0,
            SockOpt::DeferAccept => s.defer_accept = secs_to_retrans(val),
            SockOpt::KeepAlive => s.keepalive = val != 0,
            SockOpt::SynCnt => {
                if !(1..=127).contains(&val) {
                    return Err(libc::EINVAL);
                }
                s.syn_retries = Some(val as u8);
                if let Some(c) = s.conn.as_deref_mut() {
                    c.syn_retries = Some(val as u8);
                }
            }
            SockOpt::Fastopen => {
                // `do_tcp_setsockopt`: a closed or listening socket only.
                if val < 0 || s.conn.is_some() {
                    return Err(libc::EINVAL);
                }
                s.fastopen_qlen = (val as u32).min(somaxconn);
            }
            SockOpt::FastopenConnect => {
                if !(0..=1).contains(&val) {
                    return Err(libc::EINVAL);
                }
                if fastopen & crate::fastopen::TFO_CLIENT_ENABLE == 0 {
                    return Err(libc::EOPNOTSUPP);
                }
                if s.conn.is_some() || s.listener.is_some() {
                    return Err(libc::EINVAL);
                }
                s.fastopen_connect = val != 0;
            }
            SockOpt::KeepIdle | SockOpt::KeepIntvl | SockOpt::KeepCnt => {
                let max = if opt == SockOpt::KeepCnt { 127 } else { 32767 };
                if !(1..=max).contains(&val) {
                    return Err(libc::EINVAL);
                }
                match opt {
                    SockOpt::KeepIdle => s.keep_idle = Some(val as u32),
                    SockOpt::KeepIntvl => s.keep_intvl = Some(val as u32),
                    _ => s.keep_cnt = Some(val as u8),
                }
            }
            SockOpt::SndBuf => {
                let v = (val.max(2304) as u32).saturating_mul(2);
                s.sndbuf = Some(v);
                if let Some(c) = s.conn.as_deref_mut() {
                    // `SOCK_SNDBUF_LOCK`: no autotuning from here on.
                    c.sk_sndbuf = v;
                    c.sndbuf_locked = true;
                }
            }
            SockOpt::RcvBuf => {
                let v = (val.max(1152) as u32).saturating_mul(2);
                s.rcvbuf = Some(v);
                if let Some(c) = s.conn.as_deref_mut() {
                    // `SOCK_RCVBUF_LOCK`: no autotuning from here on.
                    c.sk_rcvbuf = v;
                    c.rcvbuf_locked = true;
                }
            }
            SockOpt::Linger => s.linger = (val >= 0).then_some(val as u32),
            SockOpt::MaxSeg => {
                if !(88..=65535).contains(&val) {
                    return Err(libc::EINVAL);
                }
                s.user_mss = Some(val as u32);
            }
            SockOpt::NotsentLowat => {
                s.notsent_lowat = Some(val as u32);
                if let Some(c) = s.conn.as_deref_mut() {
                    // 0: the sysctl's value (`tcp_notsent_lowat`).
                    c.notsent_lowat = if val == 0 { sysctl_lowat } else { val as u32 };
                }
            }
            SockOpt::Tos => {
                s.tos = val as u8;
                if let Some(c) = s.conn.as_deref_mut() {
                    c.tos = val as u8;
                }
            }
            SockOpt::Inq => s.inq = val != 0,
            SockOpt::V6Only => {
                if !s.v6 || s.bound.is_some() {
                    return Err(libc::EINVAL);
                }
                s.v6only = val != 0;
            }
            SockOpt::Error => return Err(libc::ENOPROTOOPT),
        }
        if matches!(
            opt,
            SockOpt::KeepAlive | SockOpt::KeepIdle | SockOpt::KeepIntvl | SockOpt::KeepCnt
        ) {
            self.keepalive_changed(id, opt, now)?;
            return Ok(());
        }
        // TCP_NODELAY on pushes what waits (`TCP_NAGLE_PUSH`); TCP_CORK
        // off pushes too, past Nagle only with TCP_NODELAY.
        let push = match opt {
            SockOpt::NoDelay if val != 0 => Some(Nonagle::Push),
            SockOpt::Cork if val == 0 => Some(if s.nodelay {
                Nonagle::Push
            } else {
                Nonagle::Nagle
            }),
            _ => None,
        };
        if let Some(nonagle) = push {
            let mut ctx = ctx!(self, now);
            if let Some(c) = self.socks[id.0]
                .as_mut()
                .and_then(|s| s.conn.as_deref_mut())
            {
                c.write_xmit(&mut ctx, nonagle);
            }
        }
        Ok(())
    }

    /// A keepalive option set on a connection: `tcp_set_keepalive` arms
    /// or stops the timer; `TCP_KEEPIDLE` re-arms it for what is left of
    /// the new idle time (`tcp_sock_set_keepidle_locked`).
    pub(super) fn keepalive_changed(
        &mut self,
        id: SockId,
        opt: SockOpt,
        now: Nanos,
    ) -> Result<(), Errno> {
        let s = self.sock(id)?;
        let (on, idle, intvl, cnt) = (s.keepalive, s.keep_idle, s.keep_intvl, s.keep_cnt);
        let ctx = ctx!(self, now);
        let Some(c) = self.socks[id.0]
            .as_mut()
            .and_then(|s| s.conn.as_deref_mut())
        else {
            return Ok(());
        };
        let was_on = c.keepalive;
        (c.keepalive, c.keep_idle, c.keep_intvl, c.keep_cnt) = (on, idle, intvl, cnt);
        match opt {
            SockOpt::KeepAlive if on && !was_on => c.arm_keepalive(&ctx),
            SockOpt::KeepAlive if !on => c.ka_at = None,
            SockOpt::KeepIdle if on && c.synchronized() => {
                let elapsed = now.saturating_sub(c.ack.lrcvtime.max(c.rcv_tstamp));
                c.ka_at = Some(now + c.keep_time(&ctx).saturating_sub(elapsed));
            }
            _ => {}
        }
        Ok(())
    }

    /// Read an option.
    pub fn option(&mut self, id: SockId, opt: SockOpt) -> Result<i32, Errno> {
        let (snd, rcv) = {
            let s = self.sock(id)?;
            self.bufs(s)
        };
        let syn_retries = self.cfg.tcp_syn_retries;
        let (ka_time, ka_intvl, ka_cnt) = (
            self.cfg.tcp_keepalive_time,
            self.cfg.tcp_keepalive_intvl,
            self.cfg.tcp_keepalive_probes,
        );
        let s = self.sock_mut(id)?;
        Ok(match opt {
            SockOpt::NoDelay => s.nodelay as i32,
            SockOpt::Cork => s.cork as i32,
            SockOpt::ReuseAddr => s.reuseaddr as i32,
            SockOpt::ReusePort => s.reuseport as i32,
            SockOpt::DeferAccept => retrans_to_secs(s.defer_accept),
            SockOpt::KeepAlive => s.keepalive as i32,
            SockOpt::SndBuf => snd as i32,
            // A connection's buffer as autotuning grew it (`sk_rcvbuf`).
            SockOpt::RcvBuf => s.conn.as_ref().map_or(rcv, |c| c.sk_rcvbuf) as i32,
            SockOpt::Linger => s.linger.map(|l| l as i32).unwrap_or(-1),
            SockOpt::MaxSeg => match (&s.conn, s.user_mss) {
                (Some(c), _) if c.synchronized() => c.mss_cache as i32,
                (_, Some(m)) => m as i32,
                _ => crate::conn::TCP_MSS_DEFAULT as i32,
            },
            SockOpt::NotsentLowat => s.notsent_lowat.unwrap_or(0) as i32,
            SockOpt::Tos => s.tos as i32,
            SockOpt::Inq => s.inq as i32,
            SockOpt::V6Only => s.v6only as i32,
            SockOpt::FastopenConnect => s.fastopen_connect as i32,
            SockOpt::Fastopen => s.fastopen_qlen as i32,
            SockOpt::SynCnt => s.syn_retries.unwrap_or(syn_retries) as i32,
            SockOpt::KeepIdle => s.keep_idle.unwrap_or(ka_time) as i32,
            SockOpt::KeepIntvl => s.keep_intvl.unwrap_or(ka_intvl) as i32,
            SockOpt::KeepCnt => s.keep_cnt.unwrap_or(ka_cnt) as i32,
            SockOpt::Error => s.conn.as_mut().and_then(|c| c.err.take()).unwrap_or(0),
        })
    }
}

/// `secs_to_retrans`: the SYN-ACK retransmissions (from a 1 s timeout,
/// doubling up to `TCP_RTO_MAX`) that cover `secs`.
fn secs_to_retrans(secs: i32) -> u8 {
    if secs <= 0 {
        return 0;
    }
    let (mut res, mut timeout, mut period) = (1u8, 1i32, 1i32);
    while secs > period && res < 255 {
        res += 1;
        timeout = (timeout << 1).min(120);
        period += timeout;
    }
    res
}

/// `retrans_to_secs`: the seconds `retrans` SYN-ACK retransmissions
/// take (what `getsockopt(TCP_DEFER_ACCEPT)` says).
fn retrans_to_secs(retrans: u8) -> i32 {
    let (mut timeout, mut period) = (1i32, 0i32);
    for i in 0..retrans {
        if i > 0 {
            timeout = (timeout << 1).min(120);
        }
        period += timeout;
    }
    period
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defer_accept_seconds_round_to_retransmissions_as_the_kernels() {
        assert_eq!(secs_to_retrans(0), 0);
        assert_eq!(secs_to_retrans(1), 1);
        assert_eq!(secs_to_retrans(5), 3);
        assert_eq!(retrans_to_secs(3), 7);
        assert_eq!(retrans_to_secs(secs_to_retrans(1)), 1);
        assert_eq!(retrans_to_secs(0), 0);
    }
}
