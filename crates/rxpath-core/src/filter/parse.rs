//! `iptables-save` / `ip6tables-save` files, table `filter`.
//!
//! What is read: `*filter`, chain lines (`:INPUT ACCEPT [p:b]`, user chains
//! `:NAME - [0:0]`), rules (`[p:b] -A CHAIN ...`), `COMMIT`, comments. The
//! matches and targets of [`super::rule`]. Anything else (another table, a
//! match module or option not listed, a target not supported) is an error
//! that names the line and what is not supported: no rule is ever skipped.

use super::rule::{Chain, Family, Matches, Neg, Prefix, Range, Rule, Target};
use std::collections::HashMap;
use std::net::IpAddr;

/// A file that could not be read as a rule set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {msg}")]
pub struct ParseError {
    /// 1-based line number (0: the file as a whole).
    pub line: usize,
    /// What is wrong.
    pub msg: String,
}

fn err<T>(line: usize, msg: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        line,
        msg: msg.into(),
    })
}

/// A parsed table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// IPv4 or IPv6.
    pub family: Family,
    /// Chains: the built-ins first as the file lists them, then user
    /// chains; `Target::Jump` indexes this.
    pub chains: Vec<Chain>,
}

impl Table {
    /// The chain called `name`.
    pub fn chain(&self, name: &str) -> Option<usize> {
        self.chains.iter().position(|c| c.name == name)
    }

    /// Number of rules over all chains.
    pub fn rules(&self) -> usize {
        self.chains.iter().map(|c| c.rules.len()).sum()
    }
}

/// Split a line as a shell would for `iptables-save` output: whitespace,
/// double quotes (with `\"` inside).
fn tokens(s: &str, line: usize) -> Result<Vec<String>, ParseError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_tok = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                in_tok = true;
                loop {
                    match chars.next() {
                        Some('\\') => match chars.next() {
                            Some(e) => cur.push(e),
                            None => return err(line, "unterminated quote"),
                        },
                        Some('"') => break,
                        Some(o) => cur.push(o),
                        None => return err(line, "unterminated quote"),
                    }
                }
            }
            c if c.is_whitespace() => {
                if in_tok {
                    out.push(std::mem::take(&mut cur));
                    in_tok = false;
                }
            }
            c => {
                cur.push(c);
                in_tok = true;
            }
        }
    }
    if in_tok {
        out.push(cur);
    }
    Ok(out)
}

fn counters(s: &str, line: usize) -> Result<(u64, u64), ParseError> {
    let inner = s
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .and_then(|x| x.split_once(':'));
    match inner.and_then(|(p, b)| Some((p.parse().ok()?, b.parse().ok()?))) {
        Some(c) => Ok(c),
        None => err(line, format!("bad counters {s:?} (want [packets:bytes])")),
    }
}

fn proto_number(s: &str) -> Option<Option<u8>> {
    Some(Some(match s.to_ascii_lowercase().as_str() {
        "all" | "0" => return Some(None),
        "tcp" => 6,
        "udp" => 17,
        "icmp" => 1,
        "icmpv6" | "ipv6-icmp" | "icmp6" => 58,
        "udplite" => 136,
        "sctp" => 132,
        "esp" => 50,
        "ah" => 51,
        "gre" => 47,
        n => n.parse().ok()?,
    }))
}

fn prefix(s: &str, family: Family, line: usize) -> Result<Prefix, ParseError> {
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let Ok(ip) = a.parse::<IpAddr>() else {
        return err(
            line,
            format!("bad address {s:?} (an address or CIDR; no host names)"),
        );
    };
    let (addr, bits) = match (ip, family) {
        (IpAddr::V4(v), Family::V4) => (u32::from(v) as u128, 32u32),
        (IpAddr::V6(v), Family::V6) => (u128::from(v), 128),
        _ => return err(line, format!("address {s:?} is not of this table's family")),
    };
    let len = match l {
        None => bits as u8,
        Some(l) => match l.parse::<u8>() {
            Ok(n) if n as u32 <= bits => n,
            _ => {
                // A dotted mask (`/255.255.0.0`) as older iptables printed.
                match (l.parse::<std::net::Ipv4Addr>(), family) {
                    (Ok(m), Family::V4) => {
                        let m = u32::from(m);
                        if m.leading_ones() + m.trailing_zeros() != 32 {
                            return err(line, format!("non-contiguous mask in {s:?}"));
                        }
                        m.leading_ones() as u8
                    }
                    _ => return err(line, format!("bad prefix length in {s:?}")),
                }
            }
        },
    };
    Ok(Prefix {
        addr: addr & Prefix::mask(len, bits),
        len,
    })
}

fn port(s: &str, line: usize) -> Result<u32, ParseError> {
    match s.parse::<u16>() {
        Ok(p) => Ok(p as u32),
        Err(_) => err(
            line,
            format!("bad port {s:?} (numbers only; service names are not supported)"),
        ),
    }
}

/// `80`, `1024:65535`, `:1023`, `1024:`.
fn port_range(s: &str, line: usize) -> Result<Range, ParseError> {
    match s.split_once(':') {
        None => {
            let p = port(s, line)?;
            Ok((p, p))
        }
        Some((a, b)) => {
            let a = if a.is_empty() { 0 } else { port(a, line)? };
            let b = if b.is_empty() { 65535 } else { port(b, line)? };
            if a > b {
                return err(line, format!("empty port range {s:?}"));
            }
            Ok((a, b))
        }
    }
}

fn length_range(s: &str, line: usize) -> Result<Range, ParseError> {
    port_range(s, line)
}

fn tcp_flag_bits(s: &str, line: usize) -> Result<u8, ParseError> {
    let mut v = 0u8;
    for f in s.split(',') {
        v |= match f.to_ascii_uppercase().as_str() {
            "FIN" => 0x01,
            "SYN" => 0x02,
            "RST" => 0x04,
            "PSH" => 0x08,
            "ACK" => 0x10,
            "URG" => 0x20,
            "ECE" => 0x40,
            "CWR" => 0x80,
            "ALL" => 0xff,
            "NONE" => 0,
            o => return err(line, format!("unknown TCP flag {o:?}")),
        };
    }
    Ok(v)
}

/// `--icmp-type`: a number, `type/code`, or a name; `(type, code lo, hi)`.
fn icmp_type(s: &str, family: Family, line: usize) -> Result<(u8, u8, u8), ParseError> {
    if let Some((t, c)) = s.split_once('/') {
        return match (t.parse::<u8>(), c.parse::<u8>()) {
            (Ok(t), Ok(c)) => Ok((t, c, c)),
            _ => err(line, format!("bad ICMP type {s:?}")),
        };
    }
    if let Ok(t) = s.parse::<u8>() {
        return Ok((t, 0, 0xff));
    }
    let v4: &[(&str, (u8, u8, u8))] = &[
        ("any", (0xff, 0, 0xff)),
        ("echo-reply", (0, 0, 0xff)),
        ("pong", (0, 0, 0xff)),
        ("destination-unreachable", (3, 0, 0xff)),
        ("network-unreachable", (3, 0, 0)),
        ("host-unreachable", (3, 1, 1)),
        ("protocol-unreachable", (3, 2, 2)),
        ("port-unreachable", (3, 3, 3)),
        ("fragmentation-needed", (3, 4, 4)),
        ("source-route-failed", (3, 5, 5)),
        ("network-prohibited", (3, 9, 9)),
        ("host-prohibited", (3, 10, 10)),
        ("communication-prohibited", (3, 13, 13)),
        ("source-quench", (4, 0, 0xff)),
        ("redirect", (5, 0, 0xff)),
        ("echo-request", (8, 0, 0xff)),
        ("ping", (8, 0, 0xff)),
        ("router-advertisement", (9, 0, 0xff)),
        ("router-solicitation", (10, 0, 0xff)),
        ("time-exceeded", (11, 0, 0xff)),
        ("ttl-exceeded", (11, 0, 0xff)),
        ("ttl-zero-during-transit", (11, 0, 0)),
        ("ttl-zero-during-reassembly", (11, 1, 1)),
        ("parameter-problem", (12, 0, 0xff)),
        ("timestamp-request", (13, 0, 0xff)),
        ("timestamp-reply", (14, 0, 0xff)),
        ("address-mask-request", (17, 0, 0xff)),
        ("address-mask-reply", (18, 0, 0xff)),
    ];
    let v6: &[(&str, (u8, u8, u8))] = &[
        ("destination-unreachable", (1, 0, 0xff)),
        ("no-route", (1, 0, 0)),
        ("communication-prohibited", (1, 1, 1)),
        ("address-unreachable", (1, 3, 3)),
        ("port-unreachable", (1, 4, 4)),
        ("packet-too-big", (2, 0, 0xff)),
        ("time-exceeded", (3, 0, 0xff)),
        ("ttl-exceeded", (3, 0, 0xff)),
        ("parameter-problem", (4, 0, 0xff)),
        ("echo-request", (128, 0, 0xff)),
        ("ping", (128, 0, 0xff)),
        ("echo-reply", (129, 0, 0xff)),
        ("pong", (129, 0, 0xff)),
        ("router-solicitation", (133, 0, 0xff)),
        ("router-advertisement", (134, 0, 0xff)),
        ("neighbour-solicitation", (135, 0, 0xff)),
        ("neighbor-solicitation", (135, 0, 0xff)),
        ("neighbour-advertisement", (136, 0, 0xff)),
        ("neighbor-advertisement", (136, 0, 0xff)),
        ("redirect", (137, 0, 0xff)),
    ];
    let table = if family == Family::V4 { v4 } else { v6 };
    match table.iter().find(|(n, _)| n.eq_ignore_ascii_case(s)) {
        Some((_, v)) => Ok(*v),
        None => err(line, format!("unknown ICMP type {s:?}")),
    }
}

/// Which family a file is for: its `# Generated by ip6tables-save` line,
/// else its addresses, else IPv4.
fn detect_family(text: &str) -> Family {
    for l in text.lines() {
        let l = l.trim();
        if l.starts_with("# Generated by ip6tables") {
            return Family::V6;
        }
        if l.starts_with("# Generated by iptables") {
            return Family::V4;
        }
    }
    for l in text.lines().filter(|l| l.contains("-A ")) {
        for t in l.split_whitespace() {
            if t.contains("icmpv6") || t.contains("icmp6") {
                return Family::V6;
            }
            let a = t.split('/').next().unwrap_or("");
            if a.contains(':') && a.parse::<std::net::Ipv6Addr>().is_ok() {
                return Family::V6;
            }
        }
    }
    Family::V4
}

/// Parse an `iptables-save` (or `ip6tables-save`) file; the family comes
/// from the file.
pub fn parse(text: &str) -> Result<Table, ParseError> {
    parse_family(text, detect_family(text))
}

/// A rule read before the jumps are resolved: chain, rule, counters, and
/// the user chain it jumps to.
type Pending = (usize, Rule, (u64, u64), Option<String>);

/// Parse for a given family.
pub fn parse_family(text: &str, family: Family) -> Result<Table, ParseError> {
    let mut in_filter = false;
    let mut seen_filter = false;
    let mut chains: Vec<Chain> = Vec::new();
    // Rules first collected with their jump targets by name.
    let mut pending: Vec<Pending> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if let Some(t) = l.strip_prefix('*') {
            if t != "filter" {
                return err(line, format!("table {t:?} is not supported (only filter)"));
            }
            if seen_filter {
                return err(line, "a second *filter table");
            }
            in_filter = true;
            seen_filter = true;
            continue;
        }
        if !in_filter {
            return err(line, format!("{l:?} outside a table (expected *filter)"));
        }
        if l == "COMMIT" {
            in_filter = false;
            continue;
        }
        if let Some(c) = l.strip_prefix(':') {
            let t = tokens(c, line)?;
            let (name, policy) = match t.as_slice() {
                [n, p, ..] => (n.clone(), p.as_str()),
                _ => return err(line, "chain line needs a name and a policy"),
            };
            let cnt = match t.get(2) {
                Some(c) => counters(c, line)?,
                None => (0, 0),
            };
            let policy = match (name.as_str(), policy) {
                ("INPUT" | "FORWARD" | "OUTPUT", "ACCEPT") => Some(Target::Accept),
                ("INPUT" | "FORWARD" | "OUTPUT", "DROP") => Some(Target::Drop),
                ("INPUT" | "FORWARD" | "OUTPUT", p) => {
                    return err(line, format!("policy {p:?} of {name} (ACCEPT or DROP)"))
                }
                (_, "-") => None,
                (_, p) => return err(line, format!("user chain {name} with policy {p:?}")),
            };
            if chains.iter().any(|c| c.name == name) {
                return err(line, format!("chain {name} declared twice"));
            }
            chains.push(Chain {
                name,
                policy,
                rules: Vec::new(),
                policy_counters: cnt,
                rule_counters: Vec::new(),
            });
            continue;
        }
        let mut t = tokens(l, line)?;
        let mut cnt = (0, 0);
        if t.first().is_some_and(|x| x.starts_with('[')) {
            cnt = counters(&t.remove(0), line)?;
        }
        let (chain, rest) = match t.as_slice() {
            [a, c, rest @ ..] if a == "-A" => (c.clone(), rest.to_vec()),
            _ => return err(line, format!("not a rule: {l:?} (only -A CHAIN ... lines)")),
        };
        let Some(ci) = chains.iter().position(|c| c.name == chain) else {
            return err(line, format!("chain {chain} is not declared"));
        };
        let (rule, jump) = rule(&rest, family, line, &chains)?;
        pending.push((ci, rule, cnt, jump));
    }
    if in_filter {
        return err(0, "the filter table has no COMMIT");
    }
    if !seen_filter {
        return err(0, "no *filter table in the file");
    }
    let names: HashMap<String, usize> = chains
        .iter()
        .enumerate()
        .map(|(i, c)| (c.name.clone(), i))
        .collect();
    for (ci, mut r, cnt, jump) in pending {
        if let Some(j) = jump {
            match names.get(&j) {
                Some(&t) if chains[t].policy.is_none() => r.target = Target::Jump(t),
                Some(_) => return err(r.line, format!("jump to built-in chain {j}")),
                None => return err(r.line, format!("target {j:?} is not supported (ACCEPT, DROP, REJECT, RETURN, LOG or a user chain)")),
            }
        }
        chains[ci].rules.push(r);
        chains[ci].rule_counters.push(cnt);
    }
    let t = Table { family, chains };
    check_loops(&t)?;
    Ok(t)
}

/// Refuse jump loops, as `iptables-restore` does (`mark_source_chains`).
fn check_loops(t: &Table) -> Result<(), ParseError> {
    // 0 = unvisited, 1 = on the stack, 2 = done.
    fn visit(t: &Table, c: usize, st: &mut [u8], depth: usize) -> Result<(), ParseError> {
        if depth > super::rule::MAX_DEPTH {
            return err(
                0,
                format!("jumps nest deeper than {}", super::rule::MAX_DEPTH),
            );
        }
        st[c] = 1;
        for r in &t.chains[c].rules {
            if let Target::Jump(n) = r.target {
                match st[n] {
                    1 => return err(r.line, format!("jump to {} makes a loop", t.chains[n].name)),
                    0 => visit(t, n, st, depth + 1)?,
                    _ => {}
                }
            }
        }
        st[c] = 2;
        Ok(())
    }
    let mut st = vec![0u8; t.chains.len()];
    for c in 0..t.chains.len() {
        if st[c] == 0 {
            visit(t, c, &mut st, 0)?;
        }
    }
    Ok(())
}

/// One rule's options after `-A CHAIN`. Returns the rule and, for a jump
/// to a name that is not a built-in target, that name.
fn rule(
    t: &[String],
    family: Family,
    line: usize,
    chains: &[Chain],
) -> Result<(Rule, Option<String>), ParseError> {
    let mut m = Matches::default();
    let mut target = Target::None;
    let mut jump = None;
    let mut modules: Vec<String> = Vec::new();
    let mut proto_name: Option<String> = None;
    let mut invert = false;
    let mut i = 0;
    let text = t.iter().map(|x| quote(x)).collect::<Vec<_>>().join(" ");
    let arg = |i: usize, opt: &str| -> Result<&str, ParseError> {
        match t.get(i + 1) {
            Some(v) => Ok(v.as_str()),
            None => err(line, format!("{opt} needs a value")),
        }
    };
    let once = |set: bool, opt: &str| -> Result<(), ParseError> {
        if set {
            err(line, format!("{opt} given twice"))
        } else {
            Ok(())
        }
    };
    while i < t.len() {
        let opt = t[i].as_str();
        if opt == "!" {
            if invert {
                return err(line, "! given twice");
            }
            invert = true;
            i += 1;
            continue;
        }
        let needs_module = |name: &str| -> Result<(), ParseError> {
            if modules.iter().any(|x| x == name) || proto_name.as_deref() == Some(name) {
                Ok(())
            } else {
                err(line, format!("{opt} needs -p {name} or -m {name}"))
            }
        };
        let mut step = 2;
        match opt {
            "-s" | "--source" | "--src" => {
                once(m.src.is_some(), opt)?;
                m.src = Some(neg(prefix(arg(i, opt)?, family, line)?, invert));
            }
            "-d" | "--destination" | "--dst" => {
                once(m.dst.is_some(), opt)?;
                m.dst = Some(neg(prefix(arg(i, opt)?, family, line)?, invert));
            }
            "-p" | "--protocol" => {
                once(m.proto.is_some() || proto_name.is_some(), opt)?;
                let v = arg(i, opt)?;
                match proto_number(v) {
                    Some(Some(n)) => {
                        m.proto = Some(neg(n, invert));
                        if !invert {
                            proto_name = Some(match n {
                                6 => "tcp".into(),
                                17 => "udp".into(),
                                1 => "icmp".into(),
                                58 => "icmp6".into(),
                                _ => String::new(),
                            });
                        }
                    }
                    Some(None) if !invert => {}
                    Some(None) => return err(line, "! -p all matches nothing"),
                    None => return err(line, format!("unknown protocol {v:?}")),
                }
            }
            "-i" | "--in-interface" => {
                once(m.iface.is_some(), opt)?;
                m.iface = Some(neg(arg(i, opt)?.to_string(), invert));
            }
            "-o" | "--out-interface" => {
                return err(
                    line,
                    "-o (output interface) is not supported in an INPUT filter",
                )
            }
            "-f" | "--fragment" => {
                if family == Family::V6 {
                    return err(
                        line,
                        "-f is IPv4 only (ip6tables uses -m frag, not supported)",
                    );
                }
                once(m.frag.is_some(), opt)?;
                m.frag = Some(!invert);
                step = 1;
            }
            "-m" | "--match" => {
                let v = arg(i, opt)?;
                match v {
                    "tcp" | "udp" | "icmp" | "icmp6" | "icmpv6" | "multiport" | "length"
                    | "comment" => modules.push(if v == "icmpv6" {
                        "icmp6".into()
                    } else {
                        v.into()
                    }),
                    "state" | "conntrack" => {
                        return err(
                            line,
                            format!("-m {v}: connection tracking is not supported"),
                        )
                    }
                    o => return err(line, format!("match module {o:?} is not supported")),
                }
                if invert {
                    return err(line, "! before -m");
                }
            }
            "--sport" | "--source-port" | "--dport" | "--destination-port" => {
                if !(modules.iter().any(|x| x == "tcp" || x == "udp")
                    || matches!(proto_name.as_deref(), Some("tcp" | "udp")))
                {
                    return err(line, format!("{opt} needs -p tcp or -p udp"));
                }
                let r = port_range(arg(i, opt)?, line)?;
                let slot = if opt.starts_with("--s") {
                    &mut m.sport
                } else {
                    &mut m.dport
                };
                once(slot.is_some(), opt)?;
                *slot = Some(neg(vec![r], invert));
            }
            "--sports" | "--source-ports" | "--dports" | "--destination-ports" | "--ports" => {
                needs_module("multiport")?;
                if !matches!(proto_name.as_deref(), Some("tcp" | "udp")) {
                    return err(line, format!("{opt} needs -p tcp or -p udp"));
                }
                let list: Vec<Range> = arg(i, opt)?
                    .split(',')
                    .map(|p| port_range(p, line))
                    .collect::<Result<_, _>>()?;
                if list.len() > 15 {
                    return err(line, "multiport takes at most 15 ports");
                }
                let slot = match opt {
                    "--ports" => &mut m.ports,
                    o if o.starts_with("--s") => &mut m.sport,
                    _ => &mut m.dport,
                };
                once(slot.is_some(), opt)?;
                *slot = Some(neg(list, invert));
            }
            "--tcp-flags" => {
                needs_module("tcp")?;
                let mask = tcp_flag_bits(arg(i, opt)?, line)?;
                let comp = tcp_flag_bits(arg(i + 1, opt)?, line)?;
                once(m.tcp_flags.is_some(), opt)?;
                m.tcp_flags = Some(neg((mask, comp & mask), invert));
                step = 3;
            }
            "--syn" => {
                needs_module("tcp")?;
                once(m.tcp_flags.is_some(), opt)?;
                m.tcp_flags = Some(neg((0x17, 0x02), invert));
                step = 1;
            }
            "--icmp-type" => {
                if family != Family::V4 {
                    return err(line, "--icmp-type in an IPv6 table (use --icmpv6-type)");
                }
                needs_module("icmp")?;
                once(m.icmp.is_some(), opt)?;
                m.icmp = Some(neg(icmp_type(arg(i, opt)?, family, line)?, invert));
            }
            "--icmpv6-type" => {
                if family != Family::V6 {
                    return err(line, "--icmpv6-type in an IPv4 table");
                }
                needs_module("icmp6")?;
                once(m.icmp.is_some(), opt)?;
                m.icmp = Some(neg(icmp_type(arg(i, opt)?, family, line)?, invert));
            }
            "--length" => {
                needs_module("length")?;
                once(m.length.is_some(), opt)?;
                m.length = Some(neg(length_range(arg(i, opt)?, line)?, invert));
            }
            "--comment" => {
                needs_module("comment")?;
            }
            "-j" | "--jump" => {
                if invert {
                    return err(line, "! before -j");
                }
                if target != Target::None || jump.is_some() {
                    return err(line, "two targets");
                }
                let v = arg(i, opt)?;
                target = match v {
                    "ACCEPT" => Target::Accept,
                    "DROP" => Target::Drop,
                    "REJECT" => Target::Reject,
                    "RETURN" => Target::Return,
                    "LOG" => Target::Log,
                    o if chains.iter().any(|c| c.name == o) => {
                        jump = Some(o.to_string());
                        Target::None
                    }
                    o => {
                        return err(
                            line,
                            format!(
                                "target {o:?} is not supported (ACCEPT, DROP, REJECT, RETURN, LOG or a user chain)"
                            ),
                        )
                    }
                };
            }
            "-g" | "--goto" => return err(line, "-g (goto) is not supported"),
            "--reject-with" => {
                if target != Target::Reject {
                    return err(line, "--reject-with without -j REJECT");
                }
            }
            "--log-prefix" | "--log-level" => {
                if target != Target::Log {
                    return err(line, format!("{opt} without -j LOG"));
                }
            }
            "--log-tcp-sequence" | "--log-tcp-options" | "--log-ip-options" | "--log-uid" => {
                if target != Target::Log {
                    return err(line, format!("{opt} without -j LOG"));
                }
                step = 1;
            }
            o => return err(line, format!("option {o:?} is not supported")),
        }
        if invert && !matches!(opt, "-j" | "-m") {
            invert = false;
        } else if invert {
            return err(line, format!("! before {opt}"));
        }
        i += step;
    }
    if invert {
        return err(line, "a trailing !");
    }
    Ok((
        Rule {
            m,
            target,
            text,
            line,
        },
        jump,
    ))
}

fn neg<T>(v: T, invert: bool) -> Neg<T> {
    Neg { v, invert }
}

fn quote(s: &str) -> String {
    if s.is_empty() || s.chars().any(|c| c.is_whitespace() || c == '"') {
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        s.to_string()
    }
}
