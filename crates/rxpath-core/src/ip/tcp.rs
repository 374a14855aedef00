//! TCP input up to the socket table: what `tcp_v4_rcv()` / `tcp_v6_rcv()`
//! decide before the lookup — whether the checksum still has to be summed.
//! The header's own checks (its length, the options) are the TCP
//! machine's (`rxpath_tcp::wire::parse`), which counts them under the
//! kernel's `Tcp:` names, as it counts a checksum that fails.

use super::{CsumStatus, IpConfig, Snmp, L4};
use crate::packet::TcpSeg;

/// `tcp_v4_rcv()`'s `skb_checksum_init()`: the checksum as the device's
/// status and the policy allow (a GRO packet's segments were each checked
/// by GRO). `more`: a GRO packet's bytes in its chain's other frames.
#[inline]
pub(super) fn rcv(
    frame: &[u8],
    more: usize,
    l3: usize,
    l4: L4,
    csum: CsumStatus,
    cfg: &IpConfig,
    snmp: &mut Snmp,
) -> TcpSeg {
    let seg = &frame[l4.off..l4.off + l4.len];
    // A GRO packet's segments were each checked by GRO; a header too
    // short to hold the field is the machine's to count.
    let verified = more > 0
        || (seg.len() >= 20 && {
            let field = u16::from_be_bytes([seg[16], seg[17]]);
            let ends = (l4.src, l4.dst, 6);
            super::l4_csum_ok(cfg, csum, snmp, ends, seg, field, seg.len() as u32)
        });
    TcpSeg {
        l3,
        src: l4.src,
        verified,
    }
}
