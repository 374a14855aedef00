//! An unmodified DNS server on rxpath (root only; CI runs it as root and
//! installs Debian's knot): `knotd` with two UDP workers on two addresses
//! (four `SO_REUSEPORT` sockets), first on the kernel's sockets, then under
//! `rxpath exec`. A client in the other namespace asks the same queries of
//! both, over IPv4 and IPv6: small answers, a name that does not exist, a
//! TXT set of about 3 KB that comes back in IP fragments with EDNS 4096
//! and truncated with EDNS 1232. Every query is answered, each answer byte
//! for byte what knotd answered on the kernel, and under exec all four
//! sockets are rxpath's.

mod common;

use common::Pair;
use std::process::{Child, Command, Stdio};

const SRV4: &str = "198.18.9.6";
const SRV6: &str = "2001:2:0:9::6";
const PORT: &str = "5353";
const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/dns_client.py");

/// A zone with small records and a large TXT set, and knotd's config
/// (two UDP workers on both addresses, answers up to 4096 bytes), in `dir`.
fn write_config(dir: &std::path::Path) -> String {
    let mut zone = String::from(
        "$ORIGIN example.test.\n$TTL 3600\n\
         @ IN SOA ns1 hostmaster 1 7200 3600 1209600 3600\n\
         @ IN NS ns1\nns1 IN A 198.18.9.6\n\
         www IN A 198.18.9.10\nwww IN AAAA 2001:2:0:9::10\n",
    );
    for i in 0..28 {
        zone.push_str(&format!("big IN TXT \"{}{i:02}\"\n", "x".repeat(98)));
    }
    std::fs::write(dir.join("example.test.zone"), zone).unwrap();
    let d = dir.display();
    let conf = format!(
        "server:\n    rundir: \"{d}/run\"\n    user: root:root\n    \
         listen: [ {SRV4}@{PORT}, {SRV6}@{PORT} ]\n    udp-workers: 2\n    \
         tcp-workers: 1\n    background-workers: 1\n    udp-max-payload: 4096\n\
         database:\n    storage: \"{d}/db\"\n\
         log:\n  - target: stderr\n    any: warning\n\
         zone:\n  - domain: example.test\n    storage: \"{d}\"\n    file: \"example.test.zone\"\n"
    );
    std::fs::create_dir_all(dir.join("run")).unwrap();
    let path = dir.join("knot.conf");
    std::fs::write(&path, conf).unwrap();
    path.display().to_string()
}

fn knotd(p: &Pair, conf: &str, exec: bool) -> Child {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &p.srv]);
    if exec {
        c.arg(env!("CARGO_BIN_EXE_rxpath"))
            .args(["exec", "--iface", &p.srv_if, "--"]);
    }
    c.args(["knotd", "-c", conf])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("knotd (CI installs knot)")
}

/// SIGTERM, then the exit's stdout and stderr.
fn stop(c: Child) -> (String, String) {
    let _ = Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .status();
    common::wait_out(c, "knotd")
}

fn ask(p: &Pair, rounds: usize) -> serde_json::Value {
    let out = p
        .exec(&p.cli, &["python3", CLIENT, SRV4, SRV6, PORT])
        .arg(rounds.to_string())
        .output()
        .expect("client");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    })
}

#[test]
fn knotd_answers_under_exec_byte_for_byte_as_on_the_kernel() {
    let Some(p) = Pair::new("dn", true, &["python3", "knotd"]) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("rxpath-knot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let conf = write_config(&dir);
    let rounds = 20;
    let k = knotd(&p, &conf, false);
    let on_kernel = ask(&p, rounds);
    let (_, kerr) = stop(k);
    let r = knotd(&p, &conf, true);
    let on_rxpath = ask(&p, rounds);
    let (out, err) = stop(r);
    let _ = std::fs::remove_dir_all(&dir);
    let n = 2 * rounds * 7;
    assert_eq!(on_kernel["missing"], 0, "on the kernel: {kerr}");
    assert_eq!(on_kernel["answers"].as_object().unwrap().len(), n);
    assert_eq!(on_kernel["large"], 2 * rounds, "fragmented answers");
    assert_eq!(on_rxpath["missing"], 0, "under exec: {err}\n{out}");
    assert!(
        on_rxpath["answers"] == on_kernel["answers"],
        "byte for byte: {err}"
    );
    assert!(out.contains("sockets on rxpath 4 "), "{out}\n{err}");
    let received: u64 = out
        .split("accounting: received ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    assert!(received >= n as u64, "rxpath received {received}: {out}");
    eprintln!(
        "knotd: {n} answers, {} in fragments, the same under exec; rxpath received {received}",
        on_kernel["large"]
    );
    assert!(out.contains(": ok"), "{out}");
}
