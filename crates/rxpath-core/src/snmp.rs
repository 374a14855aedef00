//! The SNMP counters of `/proc/net/snmp`, `/proc/net/netstat` (`IpExt:`)
//! and `/proc/net/snmp6`, with the kernel's names, plus rxpath's own
//! counters for what the kernel drops without an SNMP counter.
//!
//! Each NAPI keeps its own [`Snmp`] (plain integers, no atomics: only the
//! NAPI's owner writes it); a host's figure is the sum over its NAPIs plus
//! the socket layer's send side.

use serde::Serialize;

/// One IP MIB (`Ip:` + `IpExt:` for IPv4, `Ip6` for IPv6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct IpMib {
    /// Packets that reached IP input (`InReceives`).
    pub in_receives: u64,
    /// Bad version, header length, header checksum, options (`InHdrErrors`).
    pub in_hdr_errors: u64,
    /// Destination not ours, forwarding off (`InAddrErrors`).
    pub in_addr_errors: u64,
    /// No route to the destination (`InNoRoutes`, IPv6).
    pub in_no_routes: u64,
    /// No handler for the protocol (`InUnknownProtos`).
    pub in_unknown_protos: u64,
    /// The total length is past the frame (`InTruncatedPkts`).
    pub in_truncated_pkts: u64,
    /// Dropped for lack of resources (`InDiscards`).
    pub in_discards: u64,
    /// Handed to a transport protocol (`InDelivers`).
    pub in_delivers: u64,
    /// Bad IPv4 header checksum (`IpExt: InCsumErrors`; IPv6 has none).
    pub in_csum_errors: u64,
    /// Fragments that asked for reassembly (`ReasmReqds`).
    pub reasm_reqds: u64,
    /// Datagrams reassembled (`ReasmOKs`; IPv6 atomic fragments count here).
    pub reasm_oks: u64,
    /// Failures of reassembly (`ReasmFails`): a queue that timed out or
    /// broke, a fragment refused for want of room.
    pub reasm_fails: u64,
    /// Queues that timed out (`ReasmTimeout`).
    pub reasm_timeout: u64,
    /// Queues dropped for an overlapping fragment (`IpExt:
    /// ReasmOverlaps`; IPv6 counts them without showing them).
    pub reasm_overlaps: u64,
    /// Sends with no route to the destination (`OutNoRoutes`).
    pub out_no_routes: u64,
}

impl IpMib {
    pub(crate) fn merge(&mut self, o: &IpMib) {
        self.in_receives += o.in_receives;
        self.in_hdr_errors += o.in_hdr_errors;
        self.in_addr_errors += o.in_addr_errors;
        self.in_no_routes += o.in_no_routes;
        self.in_unknown_protos += o.in_unknown_protos;
        self.in_truncated_pkts += o.in_truncated_pkts;
        self.in_discards += o.in_discards;
        self.in_delivers += o.in_delivers;
        self.in_csum_errors += o.in_csum_errors;
        self.reasm_reqds += o.reasm_reqds;
        self.reasm_oks += o.reasm_oks;
        self.reasm_fails += o.reasm_fails;
        self.reasm_timeout += o.reasm_timeout;
        self.reasm_overlaps += o.reasm_overlaps;
        self.out_no_routes += o.out_no_routes;
    }
}

/// One UDP MIB (`Udp:` or `Udp6`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct UdpMib {
    /// Datagrams queued to a socket (`InDatagrams`; the kernel counts them
    /// when read, rxpath when queued: equal once the reader caught up).
    pub in_datagrams: u64,
    /// No socket for the port (`NoPorts`).
    pub no_ports: u64,
    /// Datagrams in error: bad length, checksum, receive buffer full
    /// (`InErrors`).
    pub in_errors: u64,
    /// Datagrams sent (`OutDatagrams`).
    pub out_datagrams: u64,
    /// Receive queue full (`RcvbufErrors`).
    pub rcvbuf_errors: u64,
    /// Sends that failed for lack of room or a route (`SndbufErrors`).
    pub sndbuf_errors: u64,
    /// Bad checksum (`InCsumErrors`).
    pub in_csum_errors: u64,
    /// Multicast or broadcast datagrams no socket took (`IgnoredMulti`).
    pub ignored_multi: u64,
}

impl UdpMib {
    fn merge(&mut self, o: &UdpMib) {
        self.in_datagrams += o.in_datagrams;
        self.no_ports += o.no_ports;
        self.in_errors += o.in_errors;
        self.out_datagrams += o.out_datagrams;
        self.rcvbuf_errors += o.rcvbuf_errors;
        self.sndbuf_errors += o.sndbuf_errors;
        self.in_csum_errors += o.in_csum_errors;
        self.ignored_multi += o.ignored_multi;
    }
}

/// The ICMP errors IP input took for rxpath's TCP (`Icmp:`, `Icmp6`):
/// the rest of ICMP is the kernel's and counted there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct IcmpMib {
    /// Messages received (`InMsgs`).
    pub in_msgs: u64,
    /// Messages with an error: a bad checksum, a quote cut short (`InErrors`).
    pub in_errors: u64,
    /// Bad ICMP checksums (`InCsumErrors`).
    pub in_csum_errors: u64,
    /// "Destination unreachable" (`InDestUnreachs`).
    pub in_dest_unreachs: u64,
    /// "Time exceeded" (`InTimeExcds`).
    pub in_time_excds: u64,
    /// "Parameter problem" (`InParmProbs`; ICMPv6 `InParmProblems`).
    pub in_parm_probs: u64,
    /// "Source quench" (`InSrcQuenchs`, IPv4).
    pub in_src_quenchs: u64,
    /// Redirects (`InRedirects`, IPv4).
    pub in_redirects: u64,
    /// "Packet too big" (`InPktTooBigs`, ICMPv6).
    pub in_pkt_too_bigs: u64,
}

impl IcmpMib {
    fn merge(&mut self, o: &IcmpMib) {
        self.in_msgs += o.in_msgs;
        self.in_errors += o.in_errors;
        self.in_csum_errors += o.in_csum_errors;
        self.in_dest_unreachs += o.in_dest_unreachs;
        self.in_time_excds += o.in_time_excds;
        self.in_parm_probs += o.in_parm_probs;
        self.in_src_quenchs += o.in_src_quenchs;
        self.in_redirects += o.in_redirects;
        self.in_pkt_too_bigs += o.in_pkt_too_bigs;
    }
}

/// What rxpath counts where the kernel has no SNMP counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RxExt {
    /// Frames for another MAC address (`PACKET_OTHERHOST`; the kernel's
    /// `rx_otherhost_dropped`).
    pub otherhost: u64,
    /// Frames tagged for a VLAN this interface does not serve (the kernel
    /// marks them `PACKET_OTHERHOST`).
    pub vlan_otherhost: u64,
    /// Neither IPv4 nor IPv6 (ARP, LLDP, ...): the kernel's business.
    pub not_ip: u64,
    /// Source address is one of ours (`martian source`).
    pub martian_source: u64,
    /// IPv4 source routing refused (`accept_source_route` 0).
    pub source_route: u64,
    /// A protocol the kernel handles and rxpath does not (TCP, ICMP, ...):
    /// counted `InReceives`, left out of `InDelivers`.
    pub left_to_kernel: u64,
    /// UDP checksums trusted as a local sender's offloaded partial checksum
    /// (`CHECKSUM_PARTIAL`: the device said so, or `--csum auto` saw the
    /// pseudo-header sum in the field on a driver that carries local
    /// traffic).
    pub csum_partial: u64,
    /// UDP checksums the device verified (`CHECKSUM_UNNECESSARY`).
    pub csum_device: u64,
    /// UDP checksums not verified because the policy is `trust`.
    pub csum_trusted: u64,
}

impl RxExt {
    fn merge(&mut self, o: &RxExt) {
        self.otherhost += o.otherhost;
        self.vlan_otherhost += o.vlan_otherhost;
        self.not_ip += o.not_ip;
        self.martian_source += o.martian_source;
        self.source_route += o.source_route;
        self.left_to_kernel += o.left_to_kernel;
        self.csum_partial += o.csum_partial;
        self.csum_device += o.csum_device;
        self.csum_trusted += o.csum_trusted;
    }
}

/// All SNMP counters of one NAPI (or, summed, one host).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Snmp {
    /// IPv4 (`Ip:`, `IpExt:`).
    pub ip: IpMib,
    /// IPv6 (`Ip6*`).
    pub ip6: IpMib,
    /// UDP over IPv4 (`Udp:`).
    pub udp: UdpMib,
    /// UDP over IPv6 (`Udp6*`).
    pub udp6: UdpMib,
    /// ICMP errors taken for TCP (`Icmp:`).
    pub icmp: IcmpMib,
    /// ICMPv6 errors taken for TCP (`Icmp6*`).
    pub icmp6: IcmpMib,
    /// rxpath's own.
    pub ext: RxExt,
}

impl Snmp {
    /// Add another instance's counters.
    pub fn merge(&mut self, o: &Snmp) {
        self.ip.merge(&o.ip);
        self.ip6.merge(&o.ip6);
        self.udp.merge(&o.udp);
        self.udp6.merge(&o.udp6);
        self.icmp.merge(&o.icmp);
        self.icmp6.merge(&o.icmp6);
        self.ext.merge(&o.ext);
    }

    /// The IP MIB of a family.
    pub fn ip_mut(&mut self, v6: bool) -> &mut IpMib {
        if v6 {
            &mut self.ip6
        } else {
            &mut self.ip
        }
    }

    /// The UDP MIB of a family.
    pub fn udp_mut(&mut self, v6: bool) -> &mut UdpMib {
        if v6 {
            &mut self.udp6
        } else {
            &mut self.udp
        }
    }

    /// The ICMP MIB of a family.
    pub fn icmp_mut(&mut self, v6: bool) -> &mut IcmpMib {
        if v6 {
            &mut self.icmp6
        } else {
            &mut self.icmp
        }
    }

    /// The counters by section and name, as the kernel prints them:
    /// `Ip:`, `Icmp:` and `Udp:` of `/proc/net/snmp`, `IpExt:` of
    /// `/proc/net/netstat`, and `Ip6`/`Icmp6`/`Udp6` of `/proc/net/snmp6` (whose
    /// names carry the section as a prefix: `Ip6InReceives`), then `Rxpath`.
    pub fn sections(&self) -> Vec<(&'static str, Vec<(&'static str, u64)>)> {
        let ip = |m: &IpMib, v6: bool| {
            let mut v = vec![
                ("InReceives", m.in_receives),
                ("InHdrErrors", m.in_hdr_errors),
                ("InAddrErrors", m.in_addr_errors),
                ("InUnknownProtos", m.in_unknown_protos),
                ("InDiscards", m.in_discards),
                ("InDelivers", m.in_delivers),
                ("ReasmTimeout", m.reasm_timeout),
                ("ReasmReqds", m.reasm_reqds),
                ("ReasmOKs", m.reasm_oks),
                ("ReasmFails", m.reasm_fails),
                ("OutNoRoutes", m.out_no_routes),
            ];
            if v6 {
                v.push(("InNoRoutes", m.in_no_routes));
                v.push(("InTruncatedPkts", m.in_truncated_pkts));
            }
            v
        };
        let udp = |m: &UdpMib| {
            vec![
                ("InDatagrams", m.in_datagrams),
                ("NoPorts", m.no_ports),
                ("InErrors", m.in_errors),
                ("OutDatagrams", m.out_datagrams),
                ("RcvbufErrors", m.rcvbuf_errors),
                ("SndbufErrors", m.sndbuf_errors),
                ("InCsumErrors", m.in_csum_errors),
                ("IgnoredMulti", m.ignored_multi),
            ]
        };
        let icmp = |m: &IcmpMib, v6: bool| {
            let mut v = vec![
                ("InMsgs", m.in_msgs),
                ("InErrors", m.in_errors),
                ("InCsumErrors", m.in_csum_errors),
                ("InDestUnreachs", m.in_dest_unreachs),
                ("InTimeExcds", m.in_time_excds),
            ];
            if v6 {
                v.push(("InParmProblems", m.in_parm_probs));
                v.push(("InPktTooBigs", m.in_pkt_too_bigs));
            } else {
                v.push(("InParmProbs", m.in_parm_probs));
                v.push(("InSrcQuenchs", m.in_src_quenchs));
                v.push(("InRedirects", m.in_redirects));
            }
            v
        };
        let e = &self.ext;
        vec![
            ("Ip", ip(&self.ip, false)),
            (
                "IpExt",
                vec![
                    ("InTruncatedPkts", self.ip.in_truncated_pkts),
                    ("InCsumErrors", self.ip.in_csum_errors),
                    ("ReasmOverlaps", self.ip.reasm_overlaps),
                ],
            ),
            ("Icmp", icmp(&self.icmp, false)),
            ("Udp", udp(&self.udp)),
            ("Ip6", ip(&self.ip6, true)),
            ("Icmp6", icmp(&self.icmp6, true)),
            ("Udp6", udp(&self.udp6)),
            (
                "Rxpath",
                vec![
                    ("Otherhost", e.otherhost),
                    ("VlanOtherhost", e.vlan_otherhost),
                    ("NotIp", e.not_ip),
                    ("MartianSource", e.martian_source),
                    ("SourceRoute", e.source_route),
                    ("LeftToKernel", e.left_to_kernel),
                    ("CsumPartial", e.csum_partial),
                    ("CsumDevice", e.csum_device),
                    ("CsumTrusted", e.csum_trusted),
                ],
            ),
        ]
    }

    /// `{"Ip": {"InReceives": n, ...}, "IpExt": {...}, ...}`: the kernel's
    /// names (Ip6/Udp6 without their prefix).
    pub fn to_json(&self) -> serde_json::Value {
        let mut top = serde_json::Map::new();
        for (sec, rows) in self.sections() {
            let m: serde_json::Map<_, _> = rows
                .into_iter()
                .map(|(k, v)| (k.to_string(), serde_json::Value::from(v)))
                .collect();
            top.insert(sec.to_string(), serde_json::Value::Object(m));
        }
        serde_json::Value::Object(top)
    }

    /// The table `netstat -s` style: one line per section, non-zero
    /// counters only (a section with none is left out).
    pub fn table(&self) -> String {
        let mut out = String::new();
        for (sec, rows) in self.sections() {
            let nz: Vec<_> = rows.into_iter().filter(|r| r.1 > 0).collect();
            if nz.is_empty() {
                continue;
            }
            out.push_str(sec);
            out.push(':');
            for (k, v) in nz {
                out.push_str(&format!(" {k} {v}"));
            }
            out.push('\n');
        }
        out
    }
}
