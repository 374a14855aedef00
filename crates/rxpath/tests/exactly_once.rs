//! Exactly once (root only; CI runs it as root): a program under `rxpath
//! exec` reads each datagram the kernel would have delivered once, on
//! every backend, and what a program that works on the kernel does keeps
//! working. The kernel run of the same program is the oracle.

mod common;

use common::exec::{finish, server, wait_ready};
use common::Pair;
use std::process::Command;

const SRV: &str = "198.18.9.6";
const SINK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/udp_sink.py");
const BLAST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/udp_blast.py");

fn pair(tag: &str) -> Option<Pair> {
    Pair::new(tag, true, &["python3"])
}

/// `udp_blast.py` in namespace `ns`: `n` datagrams to `SRV:port`, then quit.
fn blast(ns: &str, port: u16, n: usize, quit: bool, tag: &str) -> serde_json::Value {
    let (port, n) = (port.to_string(), n.to_string());
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "python3", BLAST, SRV, &port, &n, "--tag", tag]);
    if !quit {
        c.arg("--no-quit");
    }
    let out = c.output().expect("blast");
    assert!(
        out.status.success(),
        "blast: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("blast json")
}

/// The sink's JSON line in what the server printed after `ready`.
fn sink_line(out: &str) -> serde_json::Value {
    let l = out
        .lines()
        .find(|l| l.starts_with("{\"read\""))
        .unwrap_or_else(|| panic!("no sink line: {out}"));
    serde_json::from_str(l).unwrap()
}

/// The sink under `exec_args` (or on the kernel): 300 datagrams from the
/// client's namespace and 20 over loopback (the server's own namespace),
/// then quit; what the sink read, and exec's report.
fn sink_run(p: &Pair, exec_args: Option<&[&str]>) -> (serde_json::Value, String, String) {
    let prog = ["python3", SINK, "--port", "5401"];
    let mut s = server(p, exec_args, &prog);
    wait_ready(&mut s);
    blast(&p.cli, 5401, 300, false, "wire");
    blast(&p.srv, 5401, 20, false, "lo");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let b = blast(&p.cli, 5401, 0, true, "quit");
    assert_eq!(b["bye"], true, "{b}");
    let (st, out, err) = finish(s);
    assert!(st.success(), "{exec_args:?}: {err}\n{out}");
    (sink_line(&out), out, err)
}

/// Finding 1 of "nothing doubled, nothing lost": on AF_PACKET the kernel
/// still sees each frame and queues it on the kernel socket behind the
/// served fd; the program must read it once, and what came over loopback
/// (the kernel's only) must still arrive.
#[test]
fn af_packet_delivers_each_datagram_once() {
    let Some(p) = pair("e1") else { return };
    let (k, _, _) = sink_run(&p, None);
    assert_eq!(k["read"], 320, "the kernel: {k}");
    assert_eq!(k["distinct"], 320, "the kernel: {k}");
    let (r, out, err) = sink_run(&p, Some(&["--mode", "packet"]));
    assert_eq!(r, k, "AF_PACKET reads as the kernel does: {out}\n{err}");
    assert!(out.contains("sockets on rxpath 1 "), "{out}");
    assert!(!out.contains("MISMATCH"), "{out}");
}
