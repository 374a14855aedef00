//! The TCP knobs, named and valued as the kernel's sysctls
//! (`/proc/sys/net/ipv4/tcp_*`, `net.core.somaxconn`).
//!
//! The machine never reads a file: whoever drives it (the runtime, the
//! packetdrill adapter) reads the sysctls or takes its own values and
//! passes them in with [`TcpConfig::set`].

/// The TCP sysctls rxpath honours, with the kernel's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpConfig {
    /// `tcp_rmem`: min, default, max receive buffer in bytes.
    pub tcp_rmem: [u32; 3],
    /// `tcp_moderate_rcvbuf`: grow a connection's receive buffer to what
    /// its reader takes per RTT (`rcvbuf.rs`).
    pub tcp_moderate_rcvbuf: bool,
    /// `tcp_rcvbuf_low_rtt` (µs; Linux 6.19): below this receiver RTT
    /// the buffer grows by a fraction of the slow-start allowance. 0 (as a
    /// kernel without the sysctl, 6.18 and before): always the whole.
    pub tcp_rcvbuf_low_rtt: u32,
    /// `tcp_wmem`: min, default, max send buffer in bytes.
    pub tcp_wmem: [u32; 3],
    /// `tcp_timestamps`: offer and accept RFC 7323 timestamps.
    pub tcp_timestamps: bool,
    /// `tcp_window_scaling`.
    pub tcp_window_scaling: bool,
    /// `tcp_sack`.
    pub tcp_sack: bool,
    /// `tcp_dsack`: report duplicate segments in a D-SACK block.
    pub tcp_dsack: bool,
    /// `tcp_frto`: F-RTO after a retransmission timeout (RFC 5682).
    pub tcp_frto: u8,
    /// `tcp_early_retrans`: tail-loss probes with 3 or 4 (the default 3),
    /// none otherwise.
    pub tcp_early_retrans: u8,
    /// `tcp_min_tso_segs`: the fewest segments a TSO packet is sized for.
    pub tcp_min_tso_segs: u32,
    /// `tcp_max_reordering`.
    pub tcp_max_reordering: u32,
    /// `tcp_syn_retries`.
    pub tcp_syn_retries: u8,
    /// `tcp_synack_retries`.
    pub tcp_synack_retries: u8,
    /// `tcp_retries2`: retransmissions before an established connection
    /// is given up.
    pub tcp_retries2: u8,
    /// `tcp_fin_timeout` in seconds (an orphan's FIN_WAIT2 lifetime).
    pub tcp_fin_timeout: u32,
    /// `tcp_keepalive_time`, `tcp_keepalive_intvl` (seconds),
    /// `tcp_keepalive_probes`.
    pub tcp_keepalive_time: u32,
    /// See `tcp_keepalive_time`.
    pub tcp_keepalive_intvl: u32,
    /// See `tcp_keepalive_time`.
    pub tcp_keepalive_probes: u8,
    /// `tcp_syncookies`: 0 never, 1 when the SYN queue overflows, 2 always.
    pub tcp_syncookies: u8,
    /// `tcp_max_syn_backlog`.
    pub tcp_max_syn_backlog: u32,
    /// `net.core.somaxconn`: the cap on `listen()`'s backlog.
    pub somaxconn: u32,
    /// `tcp_notsent_lowat`.
    pub tcp_notsent_lowat: u32,
    /// `tcp_slow_start_after_idle`.
    pub tcp_slow_start_after_idle: bool,
    /// `tcp_fastopen`: bit 0 lets clients use Fast Open (the default 1),
    /// bit 2 sends data in a SYN without a cookie; bit 1 lets listeners
    /// with `TCP_FASTOPEN` take data on a SYN, `0x200` without a cookie,
    /// `0x400` every listener.
    pub tcp_fastopen: u32,
    /// `tcp_fastopen_key`: the primary key a listener's cookies are made
    /// with, as the sysctl's four 32-bit words; all zero (the kernel shows
    /// that before it made one): a key of the host's own.
    pub tcp_fastopen_key: [u32; 4],
    /// `tcp_ecn`: RFC 3168's ECN, asked for by this host's SYNs with 1
    /// (and 4), agreed to when a peer's SYN asks with any other value but
    /// 0 (the default 2: agreed to, never asked). Accurate ECN (3 to 5
    /// asking for it) is not built: such a peer gets classic ECN.
    pub tcp_ecn: u8,
    /// `tcp_ecn_fallback`: a SYN sent again asks for ECN no more.
    pub tcp_ecn_fallback: bool,
    /// The device segments large packets (TSO, or the kernel's GSO before
    /// a device without it): the send queue builds skbs of up to 64 KB.
    /// Off: every skb is one MSS.
    pub gso: bool,
    /// The device MTU the connections leave through (the MSS is derived
    /// from it as `ip_rt_get_mtu` minus headers).
    pub mtu: u32,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            tcp_rmem: [4096, 131072, 6291456],
            tcp_moderate_rcvbuf: true,
            tcp_rcvbuf_low_rtt: 0,
            tcp_wmem: [4096, 16384, 4194304],
            tcp_timestamps: true,
            tcp_window_scaling: true,
            tcp_sack: true,
            tcp_dsack: true,
            tcp_frto: 2,
            tcp_max_reordering: 300,
            tcp_min_tso_segs: 2,
            tcp_early_retrans: 3,
            tcp_syn_retries: 6,
            tcp_synack_retries: 5,
            tcp_retries2: 15,
            tcp_fin_timeout: 60,
            tcp_keepalive_time: 7200,
            tcp_keepalive_intvl: 75,
            tcp_keepalive_probes: 9,
            tcp_syncookies: 1,
            tcp_max_syn_backlog: 1024,
            somaxconn: 4096,
            tcp_notsent_lowat: u32::MAX,
            tcp_slow_start_after_idle: true,
            tcp_fastopen: 1,
            tcp_fastopen_key: [0; 4],
            tcp_ecn: 2,
            tcp_ecn_fallback: true,
            gso: true,
            mtu: 1500,
        }
    }
}

/// The sysctl names [`TcpConfig::set`] knows, without the `net.ipv4.` or
/// `net.core.` prefix.
pub const SYSCTLS: &[&str] = &[
    "tcp_rmem",
    "tcp_moderate_rcvbuf",
    "tcp_rcvbuf_low_rtt",
    "tcp_wmem",
    "tcp_timestamps",
    "tcp_window_scaling",
    "tcp_sack",
    "tcp_dsack",
    "tcp_frto",
    "tcp_max_reordering",
    "tcp_min_tso_segs",
    "tcp_early_retrans",
    "tcp_syn_retries",
    "tcp_synack_retries",
    "tcp_retries2",
    "tcp_fin_timeout",
    "tcp_keepalive_time",
    "tcp_keepalive_intvl",
    "tcp_keepalive_probes",
    "tcp_syncookies",
    "tcp_max_syn_backlog",
    "somaxconn",
    "tcp_notsent_lowat",
    "tcp_slow_start_after_idle",
    "tcp_fastopen",
    "tcp_fastopen_key",
    "tcp_ecn",
    "tcp_ecn_fallback",
];

/// Where `/proc/sys` keeps the sysctl `name` (one of [`SYSCTLS`]).
pub fn sysctl_path(name: &str) -> String {
    let dir = if name == "somaxconn" { "core" } else { "ipv4" };
    format!("/proc/sys/net/{dir}/{name}")
}

impl TcpConfig {
    /// Set one knob from its sysctl text (as `/proc/sys` shows it:
    /// `"4096 131072 6291456"`, `"1"`). Unknown names and bad values are
    /// errors that say which.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        let bad = || format!("{name}: bad value {value:?}");
        let num = || value.trim().parse::<u64>().map_err(|_| bad());
        let triple = || -> Result<[u32; 3], String> {
            let v: Vec<u32> = value
                .split_whitespace()
                .map(|s| s.parse::<u32>())
                .collect::<Result<_, _>>()
                .map_err(|_| bad())?;
            <[u32; 3]>::try_from(v).map_err(|_| bad())
        };
        let small = |max: u64| -> Result<u64, String> {
            let n = num()?;
            if n > max {
                return Err(bad());
            }
            Ok(n)
        };
        match name {
            "tcp_rmem" => self.tcp_rmem = triple()?,
            "tcp_wmem" => self.tcp_wmem = triple()?,
            "tcp_moderate_rcvbuf" => self.tcp_moderate_rcvbuf = small(1)? != 0,
            "tcp_rcvbuf_low_rtt" => self.tcp_rcvbuf_low_rtt = small(i32::MAX as u64)? as u32,
            "tcp_timestamps" => self.tcp_timestamps = small(2)? != 0,
            "tcp_window_scaling" => self.tcp_window_scaling = small(1)? != 0,
            "tcp_sack" => self.tcp_sack = small(1)? != 0,
            "tcp_dsack" => self.tcp_dsack = small(1)? != 0,
            "tcp_early_retrans" => self.tcp_early_retrans = small(4)? as u8,
            "tcp_min_tso_segs" => self.tcp_min_tso_segs = small(255)?.max(1) as u32,
            "tcp_max_reordering" => self.tcp_max_reordering = small(u32::MAX as u64)? as u32,
            "tcp_frto" => self.tcp_frto = small(2)? as u8,
            "tcp_syn_retries" => self.tcp_syn_retries = small(127)? as u8,
            "tcp_synack_retries" => self.tcp_synack_retries = small(255)? as u8,
            "tcp_retries2" => self.tcp_retries2 = small(255)? as u8,
            "tcp_fin_timeout" => self.tcp_fin_timeout = small(u32::MAX as u64)? as u32,
            "tcp_keepalive_time" => self.tcp_keepalive_time = small(u32::MAX as u64)? as u32,
            "tcp_keepalive_intvl" => self.tcp_keepalive_intvl = small(u32::MAX as u64)? as u32,
            "tcp_keepalive_probes" => self.tcp_keepalive_probes = small(255)? as u8,
            "tcp_syncookies" => self.tcp_syncookies = small(2)? as u8,
            "tcp_max_syn_backlog" => self.tcp_max_syn_backlog = small(u32::MAX as u64)? as u32,
            "somaxconn" => self.somaxconn = small(u32::MAX as u64)? as u32,
            "tcp_notsent_lowat" => self.tcp_notsent_lowat = small(u32::MAX as u64)? as u32,
            "tcp_slow_start_after_idle" => self.tcp_slow_start_after_idle = small(1)? != 0,
            "tcp_fastopen" => self.tcp_fastopen = small(u32::MAX as u64)? as u32,
            "tcp_ecn" => self.tcp_ecn = small(5)? as u8,
            "tcp_fastopen_key" => {
                // `%x-%x-%x-%x`, a backup key after a comma (not used).
                let primary = value.trim().split(',').next().unwrap_or("");
                let words: Vec<u32> = primary
                    .split('-')
                    .map(|w| u32::from_str_radix(w, 16))
                    .collect::<Result<_, _>>()
                    .map_err(|_| bad())?;
                self.tcp_fastopen_key = <[u32; 4]>::try_from(words).map_err(|_| bad())?;
            }
            "tcp_ecn_fallback" => self.tcp_ecn_fallback = small(1)? != 0,
            _ => return Err(format!("{name}: not a TCP knob rxpath knows")),
        }
        Ok(())
    }

    /// The MSS this host advertises (`advmss`): the MTU less the IP and
    /// TCP headers.
    pub fn advmss(&self, v6: bool) -> u16 {
        let hdr = if v6 { 60 } else { 40 };
        self.mtu.saturating_sub(hdr).clamp(88, 65535) as u16
    }

    /// The window-scale shift offered in a SYN (`tcp_select_initial_window`):
    /// enough to cover the largest receive buffer `tcp_rmem[2]` may grow to.
    pub fn rcv_wscale(&self) -> u8 {
        if !self.tcp_window_scaling {
            return 0;
        }
        let space = self.tcp_rmem[2].max(212_992);
        (31 - space.leading_zeros()).saturating_sub(15).min(14) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_text_sets_the_knob_and_bad_text_says_which() {
        let mut c = TcpConfig::default();
        c.set("tcp_rmem", "4096 540000 15728640").unwrap();
        assert_eq!(c.tcp_rmem, [4096, 540000, 15728640]);
        // packetdrill's defaults: 15 MiB gives the kernel's wscale 8.
        assert_eq!(c.rcv_wscale(), 8);
        c.set("tcp_sack", "0").unwrap();
        assert!(!c.tcp_sack);
        assert!(c.set("tcp_rmem", "1 2").unwrap_err().contains("tcp_rmem"));
        assert!(c.set("tcp_sack", "7").is_err());
        assert!(c.set("tcp_nonsense", "1").is_err());
        assert_eq!(c.advmss(false), 1460);
        assert_eq!(c.advmss(true), 1440);
    }
}
