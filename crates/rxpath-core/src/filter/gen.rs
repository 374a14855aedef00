//! Rule sets to test with: ClassBench-shaped (Taylor and Turner, 2007),
//! seeded, written as `iptables-save` files, with traffic that hits rules
//! throughout the list and traffic that misses them all.
//!
//! Two shapes, after ClassBench's seed families:
//! * `acl`: specific prefix pairs (many /32 and /24-ish on both sides),
//!   exact well-known destination ports or ranges, mostly TCP;
//! * `fw`: firewall-like: wildcard sources, port ranges on both sides,
//!   multiport lists, some `!` matches, more protocols.
//!
//! Every address lies in 198.18.0.0/15 (IPv4) or 2001:2::/48 (IPv6), the
//! benchmarking ranges, so the traffic may be sent on a lab veth.

use super::rule::Family;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

/// The shape of a generated rule set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Access-control lists.
    Acl,
    /// Firewalls.
    Fw,
}

impl std::str::FromStr for Shape {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "acl" => Ok(Shape::Acl),
            "fw" => Ok(Shape::Fw),
            o => Err(format!("unknown shape {o:?}: acl or fw")),
        }
    }
}

/// A packet of the generated traffic: what a frame builder needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Source address.
    pub src: std::net::IpAddr,
    /// Destination address.
    pub dst: std::net::IpAddr,
    /// 6 (TCP), 17 (UDP) or 1/58 (ICMP echo request).
    pub proto: u8,
    /// Source port (TCP/UDP).
    pub sport: u16,
    /// Destination port (TCP/UDP).
    pub dport: u16,
    /// The rule it was drawn from (index in INPUT), or None for a miss.
    pub aimed_at: Option<usize>,
}

#[derive(Debug, Clone)]
struct R {
    src: Option<(u128, u8)>,
    dst: Option<(u128, u8)>,
    proto: Option<u8>,
    sport: Option<(u16, u16)>,
    dport: Option<(u16, u16)>,
    dports: Option<Vec<u16>>,
    not_dport: bool,
    target: &'static str,
}

fn base(fam: Family) -> (u128, u8, u32) {
    match fam {
        Family::V4 => (
            u32::from(std::net::Ipv4Addr::new(198, 18, 0, 0)) as u128,
            15,
            32,
        ),
        Family::V6 => (
            u128::from(
                "2001:2::"
                    .parse::<std::net::Ipv6Addr>()
                    .unwrap_or(std::net::Ipv6Addr::UNSPECIFIED),
            ),
            48,
            128,
        ),
    }
}

fn addr_str(a: u128, fam: Family) -> String {
    match fam {
        Family::V4 => std::net::Ipv4Addr::from(a as u32).to_string(),
        Family::V6 => std::net::Ipv6Addr::from(a).to_string(),
    }
}

fn ip(a: u128, fam: Family) -> std::net::IpAddr {
    match fam {
        Family::V4 => std::net::IpAddr::V4((a as u32).into()),
        Family::V6 => std::net::IpAddr::V6(a.into()),
    }
}

const WELL_KNOWN: [u16; 16] = [
    22, 25, 53, 80, 110, 123, 143, 161, 389, 443, 514, 993, 1194, 3306, 5432, 8080,
];

/// A generated rule set and its traffic.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The rule set as `iptables-save` (or `ip6tables-save`) prints it.
    pub save: String,
    /// Packets: each aimed at a rule (it may match an earlier one) or at
    /// no rule.
    pub traffic: Vec<Probe>,
}

/// Generate `n` rules in `INPUT` (policy ACCEPT) of the given shape, and
/// `packets` probes of which `hit_fraction` are drawn from rules spread
/// over the whole list and the rest from outside every rule's addresses.
pub fn generate(
    shape: Shape,
    fam: Family,
    n: usize,
    packets: usize,
    hit_fraction: f64,
    seed: u64,
) -> Generated {
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    let sp = Space::new(fam);
    let mut rules = Vec::with_capacity(n);
    for _ in 0..n {
        let r = match shape {
            Shape::Acl => acl_rule(&mut rng, &sp),
            Shape::Fw => fw_rule(&mut rng, &sp),
        };
        let target = match rng.gen_range(0..10) {
            0..=4 => "ACCEPT",
            5..=8 => "DROP",
            _ => "REJECT",
        };
        rules.push(R { target, ..r });
    }
    let save = save_text(&rules, shape, fam, seed);
    let traffic = probes(&mut rng, &sp, &rules, packets, hit_fraction);
    Generated { save, traffic }
}

/// The address space rules and probes are drawn from: rules live in the
/// upper half of the range; misses come from the lower half, so a miss
/// matches no rule with a source or destination.
struct Space {
    fam: Family,
    net: u128,
    upper: u128,
    /// The prefix length of either half.
    half: u8,
    bits: u32,
}

impl Space {
    fn new(fam: Family) -> Space {
        let (net, net_len, bits) = base(fam);
        let half = net_len + 1;
        Space {
            fam,
            net,
            upper: net | 1u128 << (bits - half as u32),
            half,
            bits,
        }
    }

    fn max_len(&self) -> u8 {
        self.bits as u8
    }

    /// A random address in `a/len`.
    fn rand_in(&self, rng: &mut Pcg64Mcg, a: u128, len: u8) -> u128 {
        let hb = self.bits - len as u32;
        if hb == 0 {
            a
        } else {
            let r: u128 = rng.gen::<u128>() & ((1u128 << hb) - 1);
            a | r
        }
    }

    /// A random prefix of length `len` in the upper half.
    fn pfx(&self, rng: &mut Pcg64Mcg, len: u8) -> (u128, u8) {
        let a = self.rand_in(rng, self.upper, self.half);
        let host = self.bits - len as u32;
        let a = if host >= 128 { 0 } else { a >> host << host };
        (a, len)
    }
}

/// A ClassBench ACL-shaped rule (its target drawn by the caller).
fn acl_rule(rng: &mut Pcg64Mcg, sp: &Space) -> R {
    let fam = sp.fam;
    let (src, dst, proto, sport, dport, dports, not_dport);
    let sl: u8 = match rng.gen_range(0..10) {
        0..=2 => sp.max_len(),
        3..=4 => sp.max_len() - 8,
        5..=7 => rng.gen_range(sp.half..=sp.max_len()),
        _ => 0,
    };
    let dl: u8 = match rng.gen_range(0..10) {
        0..=3 => sp.max_len(),
        4..=6 => sp.max_len() - 8,
        7..=8 => rng.gen_range(sp.half..=sp.max_len()),
        // ClassBench ACLs rarely leave both addresses open.
        _ if sl == 0 => sp.max_len(),
        _ => 0,
    };
    src = (sl > 0).then(|| sp.pfx(rng, sl));
    dst = (dl > 0).then(|| sp.pfx(rng, dl));
    proto = Some(match rng.gen_range(0..20) {
        0..=13 => 6,
        14..=18 => 17,
        _ => {
            if fam == Family::V4 {
                1
            } else {
                58
            }
        }
    });
    sport = (proto != Some(1) && proto != Some(58) && rng.gen_range(0..10) == 0)
        .then_some((1024, 65535));
    dport = if matches!(proto, Some(6 | 17)) {
        match rng.gen_range(0..10) {
            0..=5 => {
                let p = WELL_KNOWN[rng.gen_range(0..WELL_KNOWN.len())];
                Some((p, p))
            }
            6..=7 => {
                let a = rng.gen_range(0..60000u16);
                Some((a, a + rng.gen_range(1..5000)))
            }
            _ => None,
        }
    } else {
        None
    };
    dports = None;
    not_dport = false;
    R {
        src,
        dst,
        proto,
        sport,
        dport,
        dports,
        not_dport,
        target: "",
    }
}

/// A ClassBench firewall-shaped rule (its target drawn by the caller).
fn fw_rule(rng: &mut Pcg64Mcg, sp: &Space) -> R {
    let (src, dst, proto, sport, dport, dports, not_dport);
    let sl: u8 = if rng.gen_bool(0.5) {
        0
    } else {
        rng.gen_range(sp.half..=sp.max_len())
    };
    let dl: u8 = rng.gen_range(sp.half..=sp.max_len());
    src = (sl > 0).then(|| sp.pfx(rng, sl));
    dst = Some(sp.pfx(rng, dl));
    proto = match rng.gen_range(0..10) {
        0..=5 => Some(6),
        6..=8 => Some(17),
        _ => None,
    };
    let tcpudp = matches!(proto, Some(6 | 17));
    sport = (tcpudp && rng.gen_bool(0.3)).then(|| {
        let a = rng.gen_range(0..65000u16);
        (a, a.saturating_add(rng.gen_range(0..20000)))
    });
    if tcpudp && rng.gen_bool(0.2) {
        let k = rng.gen_range(2..6);
        dports = Some(
            (0..k)
                .map(|_| WELL_KNOWN[rng.gen_range(0..WELL_KNOWN.len())])
                .collect(),
        );
        dport = None;
        not_dport = false;
    } else {
        dports = None;
        dport = (tcpudp && rng.gen_bool(0.7)).then(|| {
            let a = rng.gen_range(0..65000u16);
            (a, a.saturating_add(rng.gen_range(0..3000)))
        });
        not_dport = dport.is_some() && rng.gen_bool(0.1);
    }
    R {
        src,
        dst,
        proto,
        sport,
        dport,
        dports,
        not_dport,
        target: "",
    }
}

/// The rules as `iptables-save` writes them.
fn save_text(rules: &[R], shape: Shape, fam: Family, seed: u64) -> String {
    let mut save = String::new();
    let tool = if fam == Family::V4 {
        "iptables-save"
    } else {
        "ip6tables-save"
    };
    save.push_str(&format!("# Generated by {tool} (rxpath filter gen, shape {shape:?}, seed {seed})\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"));
    for r in rules {
        let mut l = String::from("-A INPUT");
        if let Some((a, len)) = r.src {
            l += &format!(" -s {}/{len}", addr_str(a, fam));
        }
        if let Some((a, len)) = r.dst {
            l += &format!(" -d {}/{len}", addr_str(a, fam));
        }
        match r.proto {
            Some(6) => l += " -p tcp -m tcp",
            Some(17) => l += " -p udp -m udp",
            Some(1) => l += " -p icmp -m icmp --icmp-type 8",
            Some(58) => l += " -p ipv6-icmp -m icmp6 --icmpv6-type 128",
            _ => {}
        }
        if let Some((a, b)) = r.sport {
            l += &if a == b {
                format!(" --sport {a}")
            } else {
                format!(" --sport {a}:{b}")
            };
        }
        if let Some((a, b)) = r.dport {
            let neg = if r.not_dport { " !" } else { "" };
            l += &if a == b {
                format!("{neg} --dport {a}")
            } else {
                format!("{neg} --dport {a}:{b}")
            };
        }
        if let Some(ps) = &r.dports {
            let list: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
            l += &format!(" -m multiport --dports {}", list.join(","));
        }
        l += &format!(" -j {}\n", r.target);
        save.push_str(&l);
    }
    save.push_str("COMMIT\n");
    save
}

/// `packets` probes, `hit_fraction` of them aimed at a random rule, the
/// rest at no rule.
fn probes(
    rng: &mut Pcg64Mcg,
    sp: &Space,
    rules: &[R],
    packets: usize,
    hit_fraction: f64,
) -> Vec<Probe> {
    let (n, fam, upper, half) = (rules.len(), sp.fam, sp.upper, sp.half);
    let lower = sp.net;
    let mut traffic = Vec::with_capacity(packets);
    for _ in 0..packets {
        if n > 0 && rng.gen_bool(hit_fraction.clamp(0.0, 1.0)) {
            let i = rng.gen_range(0..n);
            let r = &rules[i];
            let (sa, sl) = r.src.unwrap_or((upper, half));
            let s = sp.rand_in(rng, sa, sl);
            let (da, dl) = r.dst.unwrap_or((upper, half));
            let d = sp.rand_in(rng, da, dl);
            let proto = r.proto.unwrap_or(if rng.gen_bool(0.5) { 6 } else { 17 });
            let (sa, sb) = r.sport.unwrap_or((1024, 65534));
            let sport = rng.gen_range(sa..=sb);
            let dport = if let Some(ps) = &r.dports {
                ps[rng.gen_range(0..ps.len())]
            } else if let Some((a, b)) = r.dport {
                if r.not_dport {
                    if a > 0 {
                        rng.gen_range(0..a)
                    } else {
                        b.saturating_add(1)
                    }
                } else {
                    rng.gen_range(a..=b)
                }
            } else {
                rng.gen_range(1..65535)
            };
            traffic.push(Probe {
                src: ip(s, fam),
                dst: ip(d, fam),
                proto,
                sport,
                dport,
                aimed_at: Some(i),
            });
        } else {
            // A miss: both addresses outside every rule's prefix (rules with
            // no address match it if the rest does; it is still a probe).
            let s = sp.rand_in(rng, lower, half);
            let d = sp.rand_in(rng, lower, half);
            traffic.push(Probe {
                src: ip(s, fam),
                dst: ip(d, fam),
                proto: if rng.gen_bool(0.5) { 6 } else { 17 },
                sport: rng.gen_range(1024..65535),
                dport: rng.gen_range(1..65535),
                aimed_at: None,
            });
        }
    }
    traffic
}

impl Probe {
    /// The probe as an Ethernet frame (TCP ACK, UDP, or ICMP echo request;
    /// `payload` bytes of payload for TCP/UDP).
    pub fn frame(&self, src_mac: [u8; 6], dst_mac: [u8; 6], payload: &[u8]) -> Vec<u8> {
        use rxpath_wire::build::{self, Spec};
        use rxpath_wire::checksum;
        let mut spec = Spec::new(self.src, self.dst, self.sport, self.dport);
        spec.src_mac = src_mac;
        spec.dst_mac = dst_mac;
        match self.proto {
            6 => build::tcp(&spec, 1, 1, rxpath_wire::tcp::flags::ACK, &[], payload),
            17 => build::udp(&spec, payload),
            _ => {
                // An echo request: a UDP frame turned into ICMP.
                let mut f = build::udp(&spec, payload);
                let v6 = self.src.is_ipv6();
                let l4 = 14 + if v6 { 40 } else { 20 };
                let (proto, ty) = if v6 { (58u8, 128u8) } else { (1, 8) };
                if v6 {
                    f[14 + 6] = proto;
                } else {
                    f[14 + 9] = proto;
                    rxpath_wire::corpus::fix_ipv4_checksum(&mut f);
                }
                f[l4] = ty;
                f[l4 + 1] = 0;
                f[l4 + 2] = 0;
                f[l4 + 3] = 0;
                let c = if v6 {
                    checksum::l4(self.src, self.dst, 58, &f[l4..])
                } else {
                    !checksum::fold(checksum::sum(&f[l4..]))
                };
                f[l4 + 2..l4 + 4].copy_from_slice(&c.to_be_bytes());
                f
            }
        }
    }
}
