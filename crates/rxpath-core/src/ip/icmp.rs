//! ICMP input in front of a socket layer with TCP (`icmp_rcv()`,
//! `icmpv6_rcv()`): an error message quoting a TCP segment goes to the TCP
//! machine (its `err_handler`, `tcp_v4_err()`); any other ICMP (echo,
//! errors about UDP) is the kernel's, as before, counted `LeftToKernel`.
//! The messages taken are counted under the kernel's `Icmp:` and `Icmp6`
//! names.

use rxpath_wire::icmp::{self, Bad};

use super::{Snmp, L4};
use crate::packet::TcpSeg;
use crate::snmp::IcmpMib;
use crate::stats::DropReason;

/// The IP packet at `l3` parsed once, if this stage takes it: an error
/// quoting TCP (its type), or one too damaged to say what it quotes
/// (counted and dropped by [`rcv`], as `icmp_rcv` counts it). `None`:
/// anything else, left to the kernel.
pub(super) fn wanted(frame: &[u8], l3: usize) -> Option<Result<u8, Bad>> {
    match icmp::parse_error(&frame[l3..]) {
        Ok(e) if e.proto == 6 => Some(Ok(e.typ)),
        Ok(_) | Err(Bad::NotError) => None,
        Err(bad) => Some(Err(bad)),
    }
}

/// `icmp_rcv()` of a message [`wanted`] took: its counters, then on to TCP.
pub(super) fn rcv(
    parsed: Result<u8, Bad>,
    l3: usize,
    l4: &L4,
    snmp: &mut Snmp,
) -> Result<TcpSeg, DropReason> {
    let v6 = l4.proto == 58;
    let m = snmp.icmp_mut(v6);
    m.in_msgs += 1;
    match parsed {
        Ok(typ) => {
            count_type(m, v6, typ);
            Ok(TcpSeg {
                l3,
                src: l4.src,
                verified: true,
            })
        }
        Err(Bad::Checksum) => {
            m.in_csum_errors += 1;
            m.in_errors += 1;
            Err(DropReason::BadChecksum)
        }
        Err(_) => {
            m.in_errors += 1;
            Err(DropReason::Malformed)
        }
    }
}

/// The per-type counters (`IcmpMsg: InTypeN` summed into `Icmp:`).
fn count_type(m: &mut IcmpMib, v6: bool, typ: u8) {
    let c = match (v6, typ) {
        (false, icmp::ICMP_DEST_UNREACH) | (true, icmp::ICMPV6_DEST_UNREACH) => {
            &mut m.in_dest_unreachs
        }
        (false, icmp::ICMP_TIME_EXCEEDED) | (true, icmp::ICMPV6_TIME_EXCEED) => {
            &mut m.in_time_excds
        }
        (false, icmp::ICMP_PARAMETERPROB) | (true, icmp::ICMPV6_PARAMPROB) => &mut m.in_parm_probs,
        (false, icmp::ICMP_SOURCE_QUENCH) => &mut m.in_src_quenchs,
        (false, icmp::ICMP_REDIRECT) => &mut m.in_redirects,
        (true, icmp::ICMPV6_PKT_TOOBIG) => &mut m.in_pkt_too_bigs,
        _ => return,
    };
    *c += 1;
}
