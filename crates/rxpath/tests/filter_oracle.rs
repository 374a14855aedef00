//! The kernel as the oracle for the filter (root only; CI runs it as root).
//!
//! One rule set of a few hundred rules that uses every supported match is
//! loaded with `iptables-restore` into a fresh server namespace; one stream
//! of frames is sent to it through a veth from the client namespace, with
//! every destination local to the server (a /32 local route each), so
//! every frame reaches `INPUT`. `iptables-save -c` gives the kernel's
//! per-rule counters. Then the rules are flushed and `rxpath run --iface
//! --filter` receives the same frames over AF_XDP (GRO off: the kernel's
//! veth without XDP does no GRO either) and writes its counters: packets
//! and bytes must be equal, rule for rule, and the policy's too.

mod common;

use common::{sh, Pair, SENDER};
use rxpath_core::filter::gen::{generate, Shape};
use rxpath_core::filter::{parse, Family};
use std::process::Stdio;
use std::time::Duration;

/// Chains and matches a generated set does not have: user chains three
/// deep, RETURN, interfaces, TCP flags, ICMP types, lengths, LOG, REJECT,
/// multiport --ports and negations.
fn hand_rules(srv_if: &str) -> String {
    format!(
        "-A INPUT -i lo -j ACCEPT\n\
         -A INPUT ! -i {srv_if} -j DROP\n\
         -A INPUT -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN -j synchk\n\
         -A INPUT -p icmp -m icmp --icmp-type echo-request -m length --length 0:100 -j ACCEPT\n\
         -A INPUT -p icmp -m icmp ! --icmp-type 0 -j DROP\n\
         -A INPUT -s 198.18.128.0/17 -j edge\n\
         -A INPUT -p udp -m multiport --ports 53,123,5000:5100 -j ACCEPT\n\
         -A INPUT -p udp -m udp --dport 0:200 -m length --length 1000:65535 -j LOG --log-prefix \"rxpath-oracle \"\n\
         -A synchk -p tcp -m tcp ! --sport 1024:65535 -j REJECT --reject-with tcp-reset\n\
         -A synchk -j deep\n\
         -A synchk -p tcp -m tcp --dport 22 -j DROP\n\
         -A deep -p tcp -m tcp --dport 5000:5001 -j ACCEPT\n\
         -A deep -j RETURN\n\
         -A edge -s 198.18.200.0/24 -j RETURN\n\
         -A edge -p udp -m udp ! --dport 0:1023 -j DROP\n"
    )
}

#[test]
fn per_rule_counters_equal_the_kernels() {
    let Some(p) = Pair::new("fo", false, &["iptables-restore", "iptables-save"]) else {
        return;
    };
    let in_srv = |a: &[&str]| {
        let mut v = vec!["ip", "netns", "exec", &p.srv];
        v.extend_from_slice(a);
        sh(&v)
    };
    // A generated firewall set after the hand-written rules.
    let g = generate(Shape::Fw, Family::V4, 300, 4000, 0.85, 0x0f17);
    let gen_rules: String = g
        .save
        .lines()
        .filter(|l| l.starts_with("-A INPUT"))
        .map(|l| format!("{l}\n"))
        .collect();
    let rules = format!(
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:synchk - [0:0]\n:deep - [0:0]\n:edge - [0:0]\n{}{}COMMIT\n",
        hand_rules(&p.srv_if),
        gen_rules
    );
    let dir = std::env::temp_dir().join(format!("rxpath-filter-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules_file = dir.join("rules");
    std::fs::write(&rules_file, &rules).unwrap();
    let ours = parse(&rules).expect("our parser reads the set");
    // The frames: the generated probes as TCP (ACK and SYN), UDP and ICMP,
    // some long. Each destination becomes a local address of the server
    // (a /32 local route), unless it is also some frame's source: a local
    // source is a martian the kernel drops before INPUT, so such frames
    // are left out.
    let srcs: std::collections::HashSet<std::net::IpAddr> =
        g.traffic.iter().map(|p| p.src).collect();
    let mut frames = Vec::new();
    let mut dsts = std::collections::BTreeSet::new();
    for (i, pr) in g.traffic.iter().enumerate() {
        let mut pr = *pr;
        if srcs.contains(&pr.dst) || pr.dst == pr.src {
            continue;
        }
        dsts.insert(pr.dst);
        if i % 7 == 0 {
            pr.proto = 1;
        }
        let payload = vec![0u8; if i % 5 == 0 { 1200 } else { 18 }];
        let mut f = pr.frame([2, 0, 0, 0, 9, 5], [2, 0, 0, 0, 9, 6], &payload);
        if pr.proto == 6 && i % 3 == 0 {
            // A SYN instead of an ACK. The TCP checksum goes stale, which
            // neither side looks at before INPUT (tcp_v4_rcv checks it
            // after; rxpath's run with GRO off does not check it).
            f[14 + 20 + 13] = 0x02;
        }
        frames.push(f);
    }
    let batch: String = dsts
        .iter()
        .map(|d| format!("route add local {d}/32 dev lo\n"))
        .collect();
    let batch_file = dir.join("routes");
    std::fs::write(&batch_file, batch).unwrap();
    in_srv(&["ip", "-batch", batch_file.to_str().unwrap()]);
    let mut bytes = Vec::new();
    for f in &frames {
        bytes.extend_from_slice(&(f.len() as u16).to_be_bytes());
        bytes.extend_from_slice(f);
    }
    let frames_file = dir.join("frames");
    std::fs::write(&frames_file, bytes).unwrap();
    let send = || {
        let out = p
            .exec(
                &p.cli,
                &[
                    "python3",
                    "-c",
                    SENDER,
                    &p.cli_if,
                    frames_file.to_str().unwrap(),
                ],
            )
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(s.trim().ends_with(" 0"), "every frame sent: {s}");
    };
    // The kernel.
    let restore = p
        .exec(&p.srv, &["iptables-restore", rules_file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        restore.status.success(),
        "iptables-restore: {}",
        String::from_utf8_lossy(&restore.stderr)
    );
    send();
    std::thread::sleep(Duration::from_millis(500));
    let kernel_save = in_srv(&["iptables-save", "-c", "-t", "filter"]);
    in_srv(&["iptables", "-F"]);
    in_srv(&["iptables", "-X"]);
    in_srv(&["iptables", "-Z"]);
    let kernel = parse(&kernel_save).expect("kernel's iptables-save -c parses");
    // rxpath.
    let counters_file = dir.join("counters");
    let run = p
        .exec(&p.srv, &[env!("CARGO_BIN_EXE_rxpath")])
        .args(["run", "--iface", &p.srv_if, "--mode", "xdp", "--gro", "off"])
        .args(["--filter", rules_file.to_str().unwrap()])
        .args(["--filter-counters", counters_file.to_str().unwrap()])
        .args(["--duration", "6", "--no-pin", "--json"])
        // The destinations the kernel has as local routes.
        .args(["--local-route", "198.18.0.0/15"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    send();
    let out = run.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["frames_home"], v["frames_total"]);
    assert_eq!(
        v["total"]["received"].as_u64().unwrap(),
        frames.len() as u64,
        "rxpath received every frame: {}",
        v["device"]
    );
    let mine = parse(&std::fs::read_to_string(&counters_file).unwrap()).unwrap();
    // Rule for rule.
    let mut diffs = Vec::new();
    let mut compared = 0;
    let mut counted = 0u64;
    for c in &ours.chains {
        let (Some(ki), Some(mi)) = (kernel.chain(&c.name), mine.chain(&c.name)) else {
            panic!("chain {} missing", c.name);
        };
        let (kc, mc) = (&kernel.chains[ki], &mine.chains[mi]);
        assert_eq!(
            kc.rules.len(),
            c.rules.len(),
            "kernel's {} has every rule",
            c.name
        );
        if kc.policy.is_some() && kc.policy_counters != mc.policy_counters {
            diffs.push(format!(
                "{} policy: kernel {:?}, rxpath {:?}",
                c.name, kc.policy_counters, mc.policy_counters
            ));
        }
        for (i, r) in c.rules.iter().enumerate() {
            compared += 1;
            counted += kc.rule_counters[i].0;
            if kc.rule_counters[i] != mc.rule_counters[i] {
                diffs.push(format!(
                    "{} #{i} ({}): kernel {:?}, rxpath {:?}",
                    c.name, r.text, kc.rule_counters[i], mc.rule_counters[i]
                ));
            }
        }
    }
    eprintln!(
        "filter oracle: {} frames, {compared} rules compared, {counted} rule hits in the kernel, {} differ",
        frames.len(),
        diffs.len()
    );
    assert!(
        diffs.is_empty(),
        "{}\nrxpath's drops: {}",
        diffs.join("\n"),
        v["drops"]
    );
    assert!(
        counted > frames.len() as u64 / 2,
        "the traffic exercises the rules"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
