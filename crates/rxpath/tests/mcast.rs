//! The kernel as the oracle for multicast (root; CI runs it as root): one
//! unmodified Python program with eight receivers on two ports — joined
//! by index, by address and through `MCAST_JOIN_GROUP`, bound to a group
//! and to the wildcard, source-specific and source-blocking, IPv6 only
//! and dual stack, `IP_MULTICAST_ALL` on and off, one group joined and
//! left — runs on the kernel's sockets and under `rxpath exec`; a client
//! in another namespace sends the same corpus to each (groups joined and
//! not, broadcast, all-hosts, both sources, a port nobody holds). The
//! same datagrams must reach the same sockets, and under exec every
//! socket is rxpath's and the accounting holds.

mod common;

use common::exec::{finish, python_client, received, server, wait_ready};
use common::{sh, Pair};

const MC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/mcast.py");
const SRV: &str = "198.18.9.6";
const SRC: &str = "198.18.9.5";
const OTHER: &str = "198.18.9.7";

/// Each socket's tags in one run.
fn run(p: &Pair, exec: Option<&[&str]>) -> (serde_json::Value, String) {
    let prog = ["python3", MC, "server", &p.srv_if, SRV, SRC, OTHER];
    let mut s = server(p, exec, &prog);
    wait_ready(&mut s);
    let c = python_client(p, &[MC, "client", &p.cli_if, SRC, OTHER, SRV]);
    assert_eq!(c["sent"], 15, "{c}");
    let (st, rest, err) = finish(s);
    assert!(st.success(), "{exec:?}: {err}\n{rest}");
    let line = rest.lines().find(|l| l.starts_with('{')).expect("tags");
    (serde_json::from_str(line).unwrap(), rest)
}

#[test]
fn the_same_datagrams_reach_the_same_receivers_as_on_the_kernel() {
    let Some(p) = Pair::new("mc", true, &["python3"]) else {
        return;
    };
    sh(&[
        "ip",
        "-n",
        &p.cli,
        "addr",
        "add",
        &format!("{OTHER}/24"),
        "dev",
        &p.cli_if,
    ]);
    let (kernel, _) = run(&p, None);
    // The kernel's answers, as its code says (a check on the corpus, so
    // that the comparison below compares something).
    let tags = |k: &str| -> Vec<&str> {
        kernel[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect()
    };
    assert_eq!(
        tags("A"),
        ["all-hosts", "broadcast", "g1", "g2"],
        "{kernel}"
    );
    assert_eq!(tags("B"), ["broadcast", "g2"], "{kernel}");
    assert_eq!(tags("C"), ["g1"], "{kernel}");
    assert_eq!(tags("D"), ["broadcast", "end"], "{kernel}");
    assert_eq!(tags("E"), ["g4-from-src", "g5-from-src"], "{kernel}");
    assert_eq!(tags("F"), ["g4-from-src", "g5-from-src"], "{kernel}");
    assert_eq!(tags("V"), ["all-nodes", "g6"], "{kernel}");
    // Dual stack: an IPv6 socket's IP_MULTICAST_ALL starts off.
    assert_eq!(
        tags("W"),
        ["all-nodes", "broadcast", "g2", "g6"],
        "{kernel}"
    );
    let (rx, out) = run(&p, Some(&[]));
    assert_eq!(rx, kernel, "rxpath vs the kernel:\n{out}");
    assert!(out.contains("sockets on rxpath 8 "), "{out}");
    assert!(out.contains("left to the kernel {}"), "{out}");
    assert!(received(&out) >= 10, "{out}");
}
