//! The kernel as the oracle at the edge (root only; CI runs it as root).
//!
//! Two namespaces joined by a veth pair, the server end in one, the
//! client end in the other:
//!
//! * a plain kernel UDP client, default settings on both ends (checksum
//!   offload on: partial checksums), gets every datagram answered by
//!   `rxpath echo --bind ::` over IPv4 and IPv6, on AF_XDP and on
//!   AF_PACKET, and no ICMP error from the server's kernel;
//! * one seeded corpus of valid and broken frames (`rxpath_wire::corpus`)
//!   is sent from the client namespace first to the kernel's own
//!   dual-stack UDP echo, then to `rxpath echo` on AF_XDP and on AF_PACKET:
//!   the same datagrams must be answered, payload for payload, and rxpath's
//!   SNMP counters must equal the kernel's `/proc/net/snmp`, `netstat` and
//!   `snmp6` deltas for every counter both have; rxpath loses nothing
//!   (received = delivered + dropped by reason, garbage counted
//!   unhandled, every frame home). The corpus holds IP fragments of both
//!   families (in order, reversed, interleaved, overlapping, duplicated,
//!   missing a piece, tiny, over 64 KiB): both reassemble the same
//!   datagrams and count the same `Reasm*`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{echo_report as report, Pair, PORT, SENDER};

/// `/proc/net/snmp`, `/proc/net/netstat` (IpExt, Icmp) and
/// `/proc/net/snmp6` of a namespace, as `Section.Name` → value (IPv6
/// names without their prefix, under `Ip6`, `Udp6`, `Icmp6`).
fn kernel_counters(p: &Pair, ns: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for file in ["/proc/net/snmp", "/proc/net/netstat"] {
        let out = p.exec(ns, &["cat", file]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.chunks(2) {
            let [h, v] = pair else { continue };
            let (sec, names) = h.split_once(':').unwrap_or(("", ""));
            let vals = v.split_once(':').map_or("", |x| x.1);
            for (n, x) in names.split_whitespace().zip(vals.split_whitespace()) {
                m.insert(format!("{sec}.{n}"), x.parse().unwrap_or(0));
            }
        }
    }
    let out = p.exec(ns, &["cat", "/proc/net/snmp6"]).output().unwrap();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut it = line.split_whitespace();
        if let (Some(k), Some(v)) = (it.next(), it.next()) {
            for sec in ["Ip6", "Udp6", "Icmp6"] {
                if let Some(rest) = k.strip_prefix(sec) {
                    if !rest.starts_with("Lite") {
                        m.insert(format!("{sec}.{rest}"), v.parse().unwrap_or(0));
                    }
                }
            }
        }
    }
    m
}

fn delta(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    b.iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(*a.get(k).unwrap_or(&0))))
        .collect()
}

/// The UDP payloads of a pcap file (Ethernet, v4 or v6, untagged) sent to
/// the client's own addresses. (An answer to a source address a bit flip
/// made up reaches nobody: the kernel waits for the neighbour to answer
/// ARP or ND and gives up; rxpath answers through the MAC the frame came
/// from. Both count it in `OutDatagrams`.)
fn pcap_payloads(path: &str) -> Vec<Vec<u8>> {
    let client: [std::net::IpAddr; 2] = [
        "198.18.9.5".parse().unwrap(),
        "2001:2:0:9::5".parse().unwrap(),
    ];
    let b = std::fs::read(path).unwrap_or_default();
    let mut out = Vec::new();
    let mut i = 24;
    while i + 16 <= b.len() {
        let caplen = u32::from_le_bytes([b[i + 8], b[i + 9], b[i + 10], b[i + 11]]) as usize;
        let f = &b[i + 16..(i + 16 + caplen).min(b.len())];
        i += 16 + caplen;
        if let Ok(h) = rxpath_wire::parse(f) {
            if h.l4 == rxpath_wire::L4::Udp && client.contains(&h.flow.dst()) {
                let o = h.payload_offset as usize;
                out.push(f[o..o + h.payload_len as usize].to_vec());
            } else if h.fragment && client.contains(&h.flow.dst()) {
                // An answer in fragments: its first fragment's part (the
                // same bytes if both cut the datagram alike).
                if let Some(p) = first_fragment_payload(f) {
                    out.push(p.to_vec());
                }
            }
        }
    }
    out
}

/// The UDP payload in a first IP fragment (offset 0, MF) of a datagram,
/// after its UDP header.
fn first_fragment_payload(f: &[u8]) -> Option<&[u8]> {
    match f.get(12..14)? {
        [0x08, 0x00] => {
            let ihl = (f.get(14)? & 0xf) as usize * 4;
            let ff = u16::from_be_bytes([*f.get(20)?, *f.get(21)?]);
            (ff & 0x3fff == 0x2000 && f.get(23) == Some(&17)).then(|| f.get(14 + ihl + 8..))?
        }
        [0x86, 0xdd] => {
            let ff = u16::from_be_bytes([*f.get(56)?, *f.get(57)?]);
            let first = f.get(20) == Some(&44) && f.get(54) == Some(&17) && ff & 0xfff9 == 1;
            first.then(|| f.get(70..))?
        }
        _ => None,
    }
}

/// Start tcpdump in the client namespace; returns once it listens.
fn capture(p: &Pair, file: &str) -> Child {
    let mut c = p
        .exec(
            &p.cli,
            &[
                "tcpdump",
                "-i",
                &p.cli_if,
                "-U",
                "-n",
                "-w",
                file,
                "(udp and src port 7) or (ip6 and ip6[6] == 44)",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump (CI installs it)");
    let err = c.stderr.take().unwrap();
    let mut r = BufReader::new(err);
    let mut line = String::new();
    let mut said = String::new();
    while r.read_line(&mut line).unwrap_or(0) > 0 && !line.contains("listening") {
        said.push_str(&line);
        line.clear();
    }
    assert!(
        line.contains("listening"),
        "tcpdump did not start in {} (CI installs it): {said}",
        p.cli
    );
    std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
    c
}

fn stop_capture(c: Child) {
    let _ = Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status();
    let _ = c.wait_with_output();
}

const KERNEL_ECHO: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
s.bind(('::', 7))
s.settimeout(0.1)
print('ready', flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    try:
        d, a = s.recvfrom(65535)
    except socket.timeout:
        continue
    try:
        s.sendto(d, a)
    except OSError:
        pass
"#;

struct Outcome {
    answers: BTreeSet<Vec<u8>>,
    counters: BTreeMap<String, u64>,
    report: Option<serde_json::Value>,
}

/// Send the corpus through the server `which` ("kernel", "xdp", "packet").
fn trial(p: &Pair, which: &str, corpus_file: &str, dir: &str) -> Outcome {
    let cap = format!("{dir}/{which}.pcap");
    let tcpdump = capture(p, &cap);
    let secs = 8;
    let server = if which == "kernel" {
        let mut c = p
            .exec(&p.srv, &["python3", "-c", KERNEL_ECHO, &secs.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut l = String::new();
        BufReader::new(c.stdout.as_mut().unwrap())
            .read_line(&mut l)
            .unwrap();
        c
    } else {
        // "xdp-port": echo's own XDP program (its port and UDP
        // fragments), the kernel answering everything else.
        let (mode, extra): (&str, &[&str]) = match which {
            "xdp" => ("xdp", &["--xdp-take", "all"]),
            "xdp-port" => ("xdp", &[]),
            m => (m, &[]),
        };
        let c = p.echo(mode, extra, secs);
        std::thread::sleep(Duration::from_millis(1500));
        c
    };
    let before = kernel_counters(p, &p.srv);
    let out = p
        .exec(&p.cli, &["python3", "-c", SENDER, &p.cli_if, corpus_file])
        .output()
        .unwrap();
    let sent = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        sent.trim().ends_with(" 0"),
        "every corpus frame sent: {sent}"
    );
    // Incomplete datagrams time out after ipfrag_time (1 s here), in the
    // kernel and in rxpath, which reads the namespace's setting.
    std::thread::sleep(Duration::from_millis(2500));
    let after = kernel_counters(p, &p.srv);
    let report = if which == "kernel" {
        let _ = server.wait_with_output();
        None
    } else {
        Some(report(server))
    };
    stop_capture(tcpdump);
    let answers = pcap_payloads(&cap).into_iter().collect();
    let counters = match &report {
        None => delta(&before, &after),
        Some(v) => {
            let mut m = BTreeMap::new();
            for (sec, rows) in v["snmp"].as_object().unwrap() {
                for (k, x) in rows.as_object().unwrap() {
                    m.insert(format!("{sec}.{k}"), x.as_u64().unwrap());
                }
            }
            m
        }
    };
    Outcome {
        answers,
        counters,
        report,
    }
}

fn tag_of(p: &[u8]) -> String {
    String::from_utf8_lossy(&p[..p.len().min(16)]).into_owned()
}

#[test]
fn the_kernel_is_the_oracle_for_every_datagram() {
    let Some(p) = Pair::new("or", false, &["tcpdump"]) else {
        return;
    };
    let ends = rxpath_wire::corpus::Ends {
        client_mac: [2, 0, 0, 0, 9, 5],
        server_mac: [2, 0, 0, 0, 9, 6],
        client4: "198.18.9.5".parse().unwrap(),
        server4: "198.18.9.6".parse().unwrap(),
        client6: "2001:2:0:9::5".parse().unwrap(),
        server6: "2001:2:0:9::6".parse().unwrap(),
        port: PORT,
    };
    let cases = rxpath_wire::corpus::corpus(ends, 0x5eed);
    let dir = std::env::temp_dir().join(format!("rxpath-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_string_lossy().into_owned();
    let file = format!("{dir}/corpus.bin");
    let mut bytes = Vec::new();
    for c in &cases {
        bytes.extend_from_slice(&(c.frame.len() as u16).to_be_bytes());
        bytes.extend_from_slice(&c.frame);
    }
    std::fs::write(&file, bytes).unwrap();
    let kinds: BTreeMap<String, String> = cases
        .iter()
        .map(|c| (c.tag.clone(), c.kind.clone()))
        .collect();
    let kernel = trial(&p, "kernel", &file, &dir);
    assert!(
        kernel.answers.len() > 100,
        "the kernel answered {} datagrams",
        kernel.answers.len()
    );
    // Every counter rxpath keeps in a kernel section.
    let compared: Vec<&str> = vec![
        "Ip.InReceives",
        "Ip.InHdrErrors",
        "Ip.InAddrErrors",
        "Ip.InUnknownProtos",
        "Ip.InDelivers",
        "Ip.ReasmReqds",
        "Ip.ReasmOKs",
        "Ip.ReasmFails",
        "Ip.ReasmTimeout",
        "IpExt.ReasmOverlaps",
        "IpExt.InTruncatedPkts",
        "IpExt.InCsumErrors",
        "Udp.InDatagrams",
        "Udp.NoPorts",
        "Udp.InErrors",
        "Udp.RcvbufErrors",
        "Udp.InCsumErrors",
        "Udp.OutDatagrams",
        "Ip.OutNoRoutes",
        "Ip6.OutNoRoutes",
        "Ip6.InReceives",
        "Ip6.InHdrErrors",
        "Ip6.InAddrErrors",
        "Ip6.InUnknownProtos",
        "Ip6.InDelivers",
        "Ip6.InTruncatedPkts",
        "Ip6.InNoRoutes",
        "Ip6.ReasmReqds",
        "Ip6.ReasmOKs",
        "Ip6.ReasmFails",
        "Ip6.ReasmTimeout",
        "Udp6.InDatagrams",
        "Udp6.NoPorts",
        "Udp6.InErrors",
        "Udp6.RcvbufErrors",
        "Udp6.InCsumErrors",
        "Udp6.OutDatagrams",
    ];
    for mode in ["xdp", "packet"] {
        let r = trial(&p, mode, &file, &dir);
        let only_k: Vec<_> = kernel.answers.difference(&r.answers).collect();
        let only_r: Vec<_> = r.answers.difference(&kernel.answers).collect();
        let name = |v: &Vec<&Vec<u8>>| -> Vec<String> {
            v.iter()
                .map(|p| {
                    let t = tag_of(p);
                    format!("{t} ({})", kinds.get(&t).map_or("?", |s| s.as_str()))
                })
                .collect()
        };
        let mut diffs = Vec::new();
        for k in &compared {
            let (a, b) = (
                kernel.counters.get(*k).copied().unwrap_or(0),
                r.counters[*k],
            );
            if a != b {
                diffs.push(format!("{k}: kernel {a}, rxpath {b}"));
            }
        }
        eprintln!(
            "oracle {mode}: {} frames, kernel answered {}, rxpath {}; {} counters compared, {} differ",
            cases.len(),
            kernel.answers.len(),
            r.answers.len(),
            compared.len(),
            diffs.len()
        );
        assert!(
            only_k.is_empty() && only_r.is_empty() && diffs.is_empty(),
            "{mode}: answered by the kernel only: {:?}\nby rxpath only: {:?}\ncounters: {diffs:#?}\nrxpath: {}",
            name(&only_k),
            name(&only_r),
            r.report.as_ref().map(|v| v.to_string()).unwrap_or_default()
        );
        // Nothing lost: every frame rxpath took was answered or counted by
        // reason (the garbage as unhandled), and every frame came home.
        let v = r.report.expect("rxpath's report");
        let n = &v["napi"];
        let num = |x: &serde_json::Value| x.as_u64().unwrap_or(0);
        assert_eq!(
            num(&n["received"]),
            num(&n["delivered"]) + num(&n["dropped"]),
            "{mode}: received = delivered + dropped: {v}"
        );
        let garbage = cases
            .iter()
            .filter(|c| c.kind.starts_with("garbage"))
            .count() as u64;
        assert!(
            num(&v["dropped"]["unhandled_proto"]) >= garbage,
            "{mode}: {garbage} garbage frames counted unhandled: {v}"
        );
        assert_eq!(
            v["frames_home"], v["frames_total"],
            "{mode}: every frame home"
        );
    }
    // With echo's own XDP program (its port, and UDP fragments, which it
    // reassembles: it has no kernel socket behind it), the same
    // datagrams are answered: those in fragments and those behind long
    // IPv6 extension-header chains included. (The counters differ: the
    // kernel takes what the program passes.)
    let r = trial(&p, "xdp-port", &file, &dir);
    let only_k: Vec<String> = kernel
        .answers
        .difference(&r.answers)
        .map(|p| {
            let t = tag_of(p);
            format!("{t} ({})", kinds.get(&t).map_or("?", |s| s.as_str()))
        })
        .collect();
    eprintln!(
        "oracle xdp with echo's port filter: kernel answered {}, rxpath {}",
        kernel.answers.len(),
        r.answers.len()
    );
    assert!(only_k.is_empty(), "answered by the kernel only: {only_k:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

const CLIENT: &str = r#"
import socket
res = []
for fam, srv in ((socket.AF_INET, '198.18.9.6'), (socket.AF_INET6, '2001:2:0:9::6')):
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.connect((srv, 7))
    s.settimeout(1.0)
    ok = refused = 0
    for i in range(200):
        m = ('plain-%d-' % i).encode() + bytes(range(i % 100))
        for attempt in range(3):
            try:
                s.send(m)
                d = s.recv(4096)
            except socket.timeout:
                continue
            except ConnectionRefusedError:
                refused += 1
                continue
            if d == m:
                ok += 1
            break
    res += [ok, refused]
print(*res)
"#;

#[test]
fn a_plain_kernel_client_gets_every_answer_on_both_backends() {
    let Some(p) = Pair::new("pl", true, &[]) else {
        return;
    };
    for mode in ["xdp", "packet"] {
        let icmp_before = kernel_counters(&p, &p.srv);
        let child = p.echo(mode, &[], 6);
        std::thread::sleep(Duration::from_millis(1500));
        let out = p.exec(&p.cli, &["python3", "-c", CLIENT]).output().unwrap();
        let got = String::from_utf8_lossy(&out.stdout).into_owned();
        let v = report(child);
        let icmp = delta(&icmp_before, &kernel_counters(&p, &p.srv));
        eprintln!("plain client {mode}: answered v4, refused v4, answered v6, refused v6 = {got}");
        assert_eq!(
            got.trim(),
            "200 0 200 0",
            "{mode}: every datagram answered: {v}"
        );
        assert_eq!(
            icmp["Icmp.OutDestUnreachs"], 0,
            "{mode}: no ICMP from the kernel"
        );
        assert_eq!(
            icmp["Icmp6.OutDestUnreachs"], 0,
            "{mode}: no ICMPv6 from the kernel"
        );
        assert_eq!(v["snmp"]["Udp"]["InCsumErrors"], 0, "{v}");
        assert!(
            v["snmp"]["Rxpath"]["CsumPartial"].as_u64().unwrap() >= 400,
            "{v}"
        );
    }
}

const TCP_SINK: &str = r#"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('198.18.9.6', 5201))
s.listen(1)
s.settimeout(float(sys.argv[1]))
print('ready', flush=True)
try:
    c, _ = s.accept()
    while c.recv(1 << 20):
        pass
except OSError:
    pass
"#;

const TCP_SOURCE: &str = r#"
import socket
s = socket.create_connection(('198.18.9.6', 5201))
buf = bytes(65536)
for _ in range(400):
    s.sendall(buf)
s.close()
"#;

/// GRO on AF_PACKET trusts what the device says: a kernel TCP sender on
/// the veth peer (checksum offload on, TSO/GSO off so the wire carries
/// MSS-sized segments) leaves partial checksums, which `--csum auto` merges
/// as the kernel's GRO does; `--csum verify` finds them wrong and passes
/// every segment up alone.
#[test]
fn gro_merges_a_local_senders_partial_checksums_unless_told_to_verify() {
    let Some(p) = Pair::new("gc", true, &["ethtool"]) else {
        return;
    };
    let _ = p
        .exec(
            &p.cli,
            &["ethtool", "-K", &p.cli_if, "tso", "off", "gso", "off"],
        )
        .output()
        .expect("ethtool (CI installs it)");
    for (csum, merged) in [("auto", true), ("verify", false)] {
        let mut sink = p
            .exec(&p.srv, &["python3", "-c", TCP_SINK, "10"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut l = String::new();
        BufReader::new(sink.stdout.as_mut().unwrap())
            .read_line(&mut l)
            .unwrap();
        let run = p
            .exec(&p.srv, &[env!("CARGO_BIN_EXE_rxpath")])
            .args([
                "run", "--iface", &p.srv_if, "--mode", "packet", "--gro", "on",
            ])
            .args(["--csum", csum, "--duration", "4", "--json", "--no-pin"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1200));
        let src = p
            .exec(&p.cli, &["python3", "-c", TCP_SOURCE])
            .output()
            .unwrap();
        assert!(
            src.status.success(),
            "{}",
            String::from_utf8_lossy(&src.stderr)
        );
        let out = run.wait_with_output().unwrap();
        let _ = sink.wait();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["frames_home"], v["frames_total"], "{v}");
        let segs = v["gro_segs_per_packet"].as_f64().unwrap();
        let received = v["total"]["received"].as_u64().unwrap();
        eprintln!(
            "gro over AF_PACKET, --csum {csum}: {received} frames, {segs:.2} segments per packet"
        );
        assert!(received > 2_000, "the transfer reached rxpath: {v}");
        // run's IP stage counts with the kernel's names: one InReceives
        // per IPv4 packet GRO passed up (ARP and IPv6 ND are the rest),
        // all of them delivered.
        let out = v["gro"]["packets_out"].as_u64().unwrap();
        let ip = &v["snmp"]["Ip"];
        let inr = ip["InReceives"].as_u64().unwrap();
        assert!(inr <= out && inr + 32 >= out, "{out} {}", v["snmp"]);
        assert_eq!(ip["InDelivers"].as_u64(), Some(inr), "{}", v["snmp"]);
        if merged {
            assert!(segs > 2.0, "auto merges partial checksums: {segs}");
        } else {
            assert!(segs < 1.01, "verify refuses partial checksums: {segs}");
        }
    }
}
