//! The iptables rule parser and the three evaluators.
//!
//! Raw mode: arbitrary text into `parse_family`: an error or a table,
//! never a panic; a table saves and parses back to itself.
//! Rule mode: a rule set from a small iptables grammar (every match and
//! target rxpath takes, user chains, jumps, RETURN, negations) and packets
//! from the same address and port pools, so that rules match: the linear
//! walk, the compiled classifier and the compiled classifier behind the flow
//! cache give the same verdict for every packet and the same counters.

#![no_main]

use libfuzzer_sys::arbitrary::{self, Unstructured};
use libfuzzer_sys::fuzz_target;
use rxpath_core::filter::{parse_family, Family, Filter, FilterMode, Judge, Key, Ruleset, ABSENT};

const ADDRS: [&str; 6] = [
    "198.18.0.0/15",
    "198.18.0.1",
    "198.18.1.0/24",
    "198.19.0.0/16",
    "198.18.0.2/31",
    "0.0.0.0/0",
];
const ADDR_VALS: [u32; 5] = [
    0xC612_0001,
    0xC612_0002,
    0xC612_0105,
    0xC613_0007,
    0xC612_0003,
];
const PORTS: [u16; 6] = [22, 53, 80, 443, 1024, 65535];

fn pick<'a, T>(u: &mut Unstructured<'_>, xs: &'a [T]) -> arbitrary::Result<&'a T> {
    Ok(&xs[u.choose_index(xs.len())?])
}

fn neg(u: &mut Unstructured<'_>) -> arbitrary::Result<&'static str> {
    Ok(if u.ratio(1, 5)? { "! " } else { "" })
}

fn port(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    let a = *pick(u, &PORTS)?;
    Ok(if u.ratio(1, 3)? {
        let b = *pick(u, &PORTS)?;
        format!("{}:{}", a.min(b), a.max(b))
    } else {
        a.to_string()
    })
}

/// One `-A CHAIN ...` line. Jumps go only forward (INPUT → U1 → U2).
fn rule(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    let chain = *pick(u, &["INPUT", "INPUT", "U1", "U2"])?;
    let mut r = format!("-A {chain}");
    let proto = *pick(u, &["", "tcp", "udp", "icmp", "6", "17", "47"])?;
    if !proto.is_empty() {
        r += &format!(" {}-p {proto}", neg(u)?);
    }
    if u.ratio(1, 3)? {
        r += &format!(" {}-s {}", neg(u)?, pick(u, &ADDRS)?);
    }
    if u.ratio(1, 3)? {
        r += &format!(" {}-d {}", neg(u)?, pick(u, &ADDRS)?);
    }
    if u.ratio(1, 6)? {
        r += &format!(
            " {}-i {}",
            neg(u)?,
            pick(u, &["eth0", "eth+", "lo", "veth+"])?
        );
    }
    let positive = !proto.is_empty() && !r.contains("! -p");
    if positive && matches!(proto, "tcp" | "udp" | "6" | "17") {
        match u.choose_index(4)? {
            0 => r += &format!(" {}--dport {}", neg(u)?, port(u)?),
            1 => r += &format!(" {}--sport {}", neg(u)?, port(u)?),
            2 => {
                let which = *pick(u, &["--dports", "--sports", "--ports"])?;
                r += &format!(" -m multiport {}{which} {},{}", neg(u)?, port(u)?, port(u)?);
            }
            _ => {}
        }
        if matches!(proto, "tcp" | "6") {
            match u.choose_index(3)? {
                0 => r += &format!(" {}--syn", neg(u)?),
                1 => r += " --tcp-flags SYN,ACK,FIN SYN",
                _ => {}
            }
        }
    }
    if positive && proto == "icmp" && u.ratio(1, 2)? {
        r += &format!(
            " {}--icmp-type {}",
            neg(u)?,
            pick(u, &["8", "0", "3/1", "echo-request"])?
        );
    }
    if u.ratio(1, 5)? {
        let a = u.int_in_range(0u16..=1500)?;
        let b = u.int_in_range(a..=1500)?;
        r += &format!(" -m length {}--length {a}:{b}", neg(u)?);
    }
    if u.ratio(1, 10)? {
        r += &format!(" {}-f", neg(u)?);
    }
    let target = match chain {
        "INPUT" => *pick(
            u,
            &["ACCEPT", "DROP", "REJECT", "LOG", "U1", "U2", "RETURN"],
        )?,
        "U1" => *pick(u, &["ACCEPT", "DROP", "REJECT", "LOG", "U2", "RETURN"])?,
        _ => *pick(u, &["ACCEPT", "DROP", "REJECT", "LOG", "RETURN"])?,
    };
    r += &format!(" -j {target}");
    Ok(r)
}

fn key(u: &mut Unstructured<'_>) -> arbitrary::Result<Key> {
    let proto = *pick(u, &[6u8, 17, 1, 47])?;
    let frag = u.ratio(1, 8)?;
    let mut k = Key {
        src: *pick(u, &ADDR_VALS)? as u128,
        dst: *pick(u, &ADDR_VALS)? as u128,
        proto,
        sport: ABSENT,
        dport: ABSENT,
        tcp_flags: ABSENT,
        icmp: ABSENT,
        len: u.int_in_range(20u32..=1600)?,
        frag,
    };
    if !frag {
        match proto {
            6 | 17 => {
                // Ports next to the rules' bounds, inside 0..=65535.
                k.sport = (*pick(u, &PORTS)?).saturating_add(u.int_in_range(0u16..=1)?) as u32;
                k.dport = (*pick(u, &PORTS)?).saturating_sub(u.int_in_range(0u16..=1)?) as u32;
                if proto == 6 {
                    k.tcp_flags = u.arbitrary::<u8>()? as u32 & 0x3f;
                }
            }
            1 => k.icmp = (*pick(u, &[8u32, 0, 3])? << 8) | u.int_in_range(0u32..=2)?,
            _ => {}
        }
    }
    Ok(k)
}

fn set(text: &str, mode: FilterMode) -> Option<Filter> {
    let t = parse_family(text, Family::V4).ok()?;
    Some(Filter::new(Some(Ruleset::new(t, "eth0", mode)), None))
}

fn run(data: &[u8]) -> arbitrary::Result<()> {
    let mut u = Unstructured::new(data);
    if u.arbitrary::<bool>()? {
        // Raw text.
        let text = String::from_utf8_lossy(u.take_rest());
        if let Ok(t) = parse_family(&text, Family::V4) {
            let rs = Ruleset::new(t.clone(), "eth0", FilterMode::Linear);
            let again = parse_family(&rs.save(), Family::V4).expect("a saved table parses");
            assert_eq!(again.rules(), t.rules(), "save and parse keep every rule");
        }
        return Ok(());
    }
    let policy = *pick(&mut u, &["ACCEPT", "DROP"])?;
    let mut text = format!("*filter\n:INPUT {policy} [0:0]\n:U1 - [0:0]\n:U2 - [0:0]\n");
    let n = u.int_in_range(0usize..=40)?;
    for _ in 0..n {
        text += &rule(&mut u)?;
        text.push('\n');
    }
    text += "COMMIT\n";
    let (Some(lin), Some(comp)) = (
        set(&text, FilterMode::Linear),
        set(&text, FilterMode::Compiled),
    ) else {
        // The grammar makes only valid rules; a refusal is a parser bug.
        panic!("refused a rule set of the grammar:\n{text}");
    };
    let mut cache = Judge::new(4);
    let keys = u.int_in_range(1usize..=64)?;
    for _ in 0..keys {
        let k = key(&mut u)?;
        let a = lin.judge(&k, false);
        let b = comp.v4.as_ref().map(|s| s.judge_quiet(&k));
        let c = cache.judge(&comp, &k, false, (k.src as u32) ^ k.dport);
        assert_eq!(a, b, "linear and compiled differ for {k:?}\n{text}");
        assert_eq!(a, c, "linear and cached differ for {k:?}\n{text}");
    }
    cache.flush(&comp);
    let counts = |f: &Filter| -> Vec<(u64, u64)> {
        f.sets()
            .flat_map(|s| s.stats())
            .map(|r| (r.packets, r.bytes))
            .collect()
    };
    assert_eq!(counts(&lin), counts(&comp), "counters differ\n{text}");
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
