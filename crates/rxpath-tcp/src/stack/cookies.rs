//! SYN cookies (`net/ipv4/syncookies.c`): when a listener's SYN queue is
//! full (`tcp_syncookies` 1) or always (2), its SYN-ACK carries the
//! connection in its sequence number and keeps nothing; the peer's ACK
//! brings it back. The cookie is the kernel's shape: a keyed hash of the
//! addresses plus the peer's ISN, the minute counter in the top 8 bits and
//! the peer's MSS as an index into `msstab` under a second hash. With
//! timestamps, the SYN-ACK's `tsval` carries the peer's window scale and
//! SACK in its low 6 bits (`cookie_init_timestamp`); without them the
//! connection has neither, as the kernel's.

use super::*;

/// `COOKIEBITS`: the bits below the minute counter.
const COOKIEBITS: u32 = 24;
const COOKIEMASK: u32 = (1 << COOKIEBITS) - 1;
/// `MAX_SYNCOOKIE_AGE`: a cookie is good for this many minutes after the
/// one it was made in.
const MAX_SYNCOOKIE_AGE: u32 = 2;
/// `TCP_SYNCOOKIE_VALID`: ACKs are checked for cookies this long after a
/// listener last sent one (`tcp_synq_no_recent_overflow`).
pub(super) const SYNCOOKIE_VALID: Nanos = 120 * 1_000_000_000;
/// The MSS values a cookie can say (`msstab`, `msstab6` less 60).
const MSSTAB: [u16; 4] = [536, 1300, 1440, 1460];
const MSSTAB6: [u16; 4] = [1280 - 60, 1480 - 60, 1500 - 60, 9000 - 60];
/// `TSBITS` and the fields of a cookie's timestamp.
const TSBITS: u32 = 6;
const TS_OPT_WSCALE_MASK: u32 = 0xf;
const TS_OPT_SACK: u32 = 1 << 4;
const TS_OPT_ECN: u32 = 1 << 5;

/// `tcp_cookie_time`: minutes.
fn minutes(now: Nanos) -> u32 {
    (now / (60 * 1_000_000_000)) as u32
}

impl Stack {
    fn cookie_hash(&self, local: SocketAddr, remote: SocketAddr, count: u32, c: u64) -> u32 {
        let mut h =
            foldhash::fast::FixedState::with_seed(self.secret ^ 0x5c00_c1e5 ^ c).build_hasher();
        h.write(format!("{local}{remote}").as_bytes());
        h.write_u32(count);
        h.finish() as u32
    }

    /// The ISN of a cookie SYN-ACK answering `syn`, and the MSS it keeps
    /// (`__cookie_v4_init_sequence`).
    pub(super) fn cookie_isn(&self, syn: &SegIn<'_>, now: Nanos) -> (u32, u16) {
        let tab = if syn.src.ip().to_canonical().is_ipv4() {
            MSSTAB
        } else {
            MSSTAB6
        };
        let mss = syn.opts.mss.unwrap_or(536);
        let i = (1..tab.len()).rev().find(|&i| mss >= tab[i]).unwrap_or(0);
        let count = minutes(now);
        let isn = self
            .cookie_hash(syn.dst, syn.src, 0, 0)
            .wrapping_add(syn.seq)
            .wrapping_add(count << COOKIEBITS)
            .wrapping_add(
                self.cookie_hash(syn.dst, syn.src, count, 1)
                    .wrapping_add(i as u32)
                    & COOKIEMASK,
            );
        (isn, tab[i])
    }

    /// The MSS an ACK's cookie keeps, if it is one this host made in the
    /// last minutes (`__cookie_v4_check`).
    pub(super) fn cookie_check(&self, ack: &SegIn<'_>, now: Nanos) -> Option<u16> {
        let tab = if ack.src.ip().to_canonical().is_ipv4() {
            MSSTAB
        } else {
            MSSTAB6
        };
        let cookie = ack.ack.wrapping_sub(1);
        let sseq = ack.seq.wrapping_sub(1);
        let rest = cookie
            .wrapping_sub(self.cookie_hash(ack.dst, ack.src, 0, 0))
            .wrapping_sub(sseq);
        let count = minutes(now);
        let diff = count.wrapping_sub(rest >> COOKIEBITS) & (u32::MAX >> COOKIEBITS);
        if diff >= MAX_SYNCOOKIE_AGE {
            return None;
        }
        let made = count.wrapping_sub(diff);
        let i = rest.wrapping_sub(self.cookie_hash(ack.dst, ack.src, made, 1)) & COOKIEMASK;
        tab.get(i as usize).copied()
    }
}

/// The options a cookie SYN-ACK's timestamp carries for `c`
/// (`cookie_init_timestamp`): the peer's window scale (15: none) and SACK.
pub(super) fn ts_options(c: &Conn) -> u32 {
    let mut o = if c.wscale_ok {
        u32::from(c.snd_wscale)
    } else {
        TS_OPT_WSCALE_MASK
    };
    if c.sack_ok {
        o |= TS_OPT_SACK;
    }
    if c.ecn.ok() {
        o |= TS_OPT_ECN;
    }
    o
}

/// The timestamp (before the connection's offset) that carries `options`
/// at `ts_now`: its low bits replaced, never later than `ts_now`.
pub(super) fn ts_with_options(ts_now: u32, options: u32) -> u32 {
    let ts = (ts_now >> TSBITS << TSBITS) | options;
    if ts > ts_now {
        ts.wrapping_sub(1 << TSBITS)
    } else {
        ts
    }
}

/// What a cookie's echoed timestamp (less the offset) says: the peer's
/// window scale, if any, SACK (`cookie_timestamp_decode`) and ECN
/// (`cookie_ecn_ok`).
pub(super) fn ts_decode(tsecr: u32) -> (Option<u8>, bool, bool) {
    let w = tsecr & TS_OPT_WSCALE_MASK;
    (
        (w != TS_OPT_WSCALE_MASK).then_some(w as u8),
        tsecr & TS_OPT_SACK != 0,
        tsecr & TS_OPT_ECN != 0,
    )
}
