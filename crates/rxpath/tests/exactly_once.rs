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
    blast_in_bursts(ns, port, n, quit, tag, 20)
}

/// [`blast`] with a pause every `burst` datagrams.
fn blast_in_bursts(
    ns: &str,
    port: u16,
    n: usize,
    quit: bool,
    tag: &str,
    burst: usize,
) -> serde_json::Value {
    blast_to(ns, SRV, port, n, quit, tag, burst)
}

/// `udp_blast.py` in namespace `ns` to `dst:port`, a pause every `burst`.
fn blast_to(
    ns: &str,
    dst: &str,
    port: u16,
    n: usize,
    quit: bool,
    tag: &str,
    burst: usize,
) -> serde_json::Value {
    let (port, n, burst) = (port.to_string(), n.to_string(), burst.to_string());
    let mut c = Command::new("ip");
    c.args([
        "netns", "exec", ns, "python3", BLAST, dst, &port, &n, "--tag", tag, "--burst", &burst,
    ]);
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

/// Wait for `ready` on `c`'s stdout; what it prints after, on a thread
/// (for a second server beside the one [`wait_ready`] follows).
fn ready_then_rest(c: &mut std::process::Child) -> std::thread::JoinHandle<String> {
    use std::io::{BufRead, Read};
    let mut r = std::io::BufReader::new(c.stdout.take().unwrap());
    let mut l = String::new();
    while l.trim() != "ready" {
        l.clear();
        assert!(r.read_line(&mut l).unwrap() > 0, "ended before ready");
    }
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
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

/// A second exec on an interface whose XDP slot the first one holds: it
/// falls back to AF_PACKET, says why, and both programs read each of
/// their datagrams once.
#[test]
fn a_second_exec_on_the_interface_falls_back_and_says_why() {
    let Some(p) = pair("e2") else { return };
    let first = ["python3", SINK, "--port", "5402"];
    let mut a = server(&p, Some(&[]), &first);
    let rest_a = ready_then_rest(&mut a);
    let (r, out, err) = sink_run(&p, Some(&[]));
    assert_eq!(r["read"], 320, "the second exec: {out}\n{err}");
    assert_eq!(r["distinct"], 320, "the second exec: {out}\n{err}");
    assert!(out.contains("AF_PACKET on"), "{out}");
    assert!(out.contains("AF_XDP failed"), "says why: {out}\n{err}");
    // The first still serves its port, once each.
    blast(&p.cli, 5402, 100, true, "first");
    let st = a.wait().unwrap();
    let out1 = rest_a.join().unwrap();
    let mut err1 = String::new();
    let _ = std::io::Read::read_to_string(&mut a.stderr.take().unwrap(), &mut err1);
    assert!(st.success(), "{err1}");
    let r1 = sink_line(&out1);
    assert_eq!(r1["read"], 100, "the first exec: {out1}\n{err1}");
    assert_eq!(r1["distinct"], 100, "{out1}");
    assert!(out1.contains("AF_XDP"), "{out1}");
}

/// A socket handed back to the kernel (an option rxpath does not honour,
/// set after `bind`) while a stream arrives: every datagram is read once,
/// on AF_PACKET (where the kernel taps nothing rxpath takes) as on
/// AF_XDP. Run several times, so a window between rxpath letting go and
/// the kernel taking over would show.
#[test]
fn a_hand_back_under_a_stream_reads_each_datagram_once() {
    let Some(p) = pair("eh") else { return };
    for mode in ["packet", "xdp"] {
        for round in 0..3 {
            let after = (200 + 150 * round).to_string();
            let prog = [
                "python3",
                SINK,
                "--port",
                "5409",
                "--handback-after",
                &after,
            ];
            let mut s = server(&p, Some(&["--mode", mode]), &prog);
            wait_ready(&mut s);
            blast_in_bursts(&p.cli, 5409, 3000, false, "wire", 50);
            std::thread::sleep(std::time::Duration::from_millis(200));
            assert_eq!(blast(&p.cli, 5409, 0, true, "quit")["bye"], true);
            let (st, out, err) = finish(s);
            assert!(st.success(), "{mode}: {err}\n{out}");
            let r = sink_line(&out);
            assert_eq!(
                r["distinct"], 3000,
                "{mode} round {round}: {r}\n{out}\n{err}"
            );
            assert_eq!(
                r["read"], 3000,
                "{mode} round {round}, read twice: {r}\n{out}"
            );
            assert!(err.contains("handed back to the kernel"), "{mode}: {err}");
        }
    }
}

/// An anycast address on `lo` (as DNS servers announce theirs) that
/// queries reach through the interface: the kernel takes them as its own
/// (any interface's address is the host's), and a wildcard socket on
/// rxpath gets them too.
#[test]
fn an_address_on_lo_reached_through_the_interface_is_served() {
    let Some(p) = pair("el") else { return };
    const ANYCAST: &str = "198.18.9.17";
    common::sh(&[
        "ip",
        "-n",
        &p.srv,
        "addr",
        "add",
        &format!("{ANYCAST}/32"),
        "dev",
        "lo",
    ]);
    let run = |exec: Option<&[&str]>| {
        let prog = ["python3", SINK, "--port", "5412"];
        let mut s = server(&p, exec, &prog);
        wait_ready(&mut s);
        blast_to(&p.cli, ANYCAST, 5412, 100, false, "anycast", 20);
        blast(&p.cli, 5412, 100, false, "unicast");
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(blast(&p.cli, 5412, 0, true, "quit")["bye"], true);
        let (st, out, err) = finish(s);
        assert!(st.success(), "{exec:?}: {err}\n{out}");
        (sink_line(&out), out, err)
    };
    let (k, _, _) = run(None);
    assert_eq!(k["read"], 200, "the kernel: {k}");
    for mode in ["xdp", "packet"] {
        let (r, out, err) = run(Some(&["--mode", mode]));
        assert_eq!(r, k, "{mode}: {out}\n{err}");
        assert!(out.contains("sockets on rxpath 1 "), "{mode}: {out}");
    }
}

/// An address added to the interface while the program runs (a VIP): a
/// socket bound to the wildcard gets its datagrams, as on the kernel,
/// beside those for the address it had.
#[test]
fn an_address_added_under_a_running_exec_is_served() {
    let Some(p) = pair("ea") else { return };
    const VIP: &str = "198.18.9.16";
    let run = |exec: Option<&[&str]>| {
        let prog = ["python3", SINK, "--port", "5410"];
        let mut s = server(&p, exec, &prog);
        wait_ready(&mut s);
        common::sh(&[
            "ip",
            "-n",
            &p.srv,
            "addr",
            "add",
            &format!("{VIP}/24"),
            "dev",
            &p.srv_if,
        ]);
        std::thread::sleep(std::time::Duration::from_millis(1500));
        blast_to(&p.cli, VIP, 5410, 100, false, "vip", 20);
        blast(&p.cli, 5410, 100, false, "old");
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(blast(&p.cli, 5410, 0, true, "quit")["bye"], true);
        let (st, out, err) = finish(s);
        common::sh(&[
            "ip",
            "-n",
            &p.srv,
            "addr",
            "del",
            &format!("{VIP}/24"),
            "dev",
            &p.srv_if,
        ]);
        assert!(st.success(), "{exec:?}: {err}\n{out}");
        (sink_line(&out), out, err)
    };
    let (k, _, _) = run(None);
    assert_eq!(k["read"], 200, "the kernel: {k}");
    for mode in ["xdp", "packet"] {
        let (r, out, err) = run(Some(&["--mode", mode]));
        assert_eq!(r, k, "{mode}: {out}\n{err}");
        assert!(out.contains("sockets on rxpath 1 "), "{mode}: {out}");
    }
}

const WILD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/apps/wild_and_specific.py"
);

/// A socket on a specific address beside a wildcard socket on the same
/// port, the specific one the kernel's (an option before `bind`, or one
/// after it that hands it back) while the wildcard one is rxpath's: the
/// kernel gives the address's datagrams to the specific socket, and so
/// must rxpath (the port map's exact key says the kernel's, before its
/// wildcard key).
#[test]
fn a_specific_socket_on_the_kernel_keeps_its_datagrams_beside_a_wildcard() {
    let Some(p) = pair("ew") else { return };
    for how in ["--kernel", "--handback"] {
        specific_beside_wildcard(&p, how);
    }
}

fn specific_beside_wildcard(p: &Pair, how: &str) {
    let run = |exec: Option<&[&str]>| {
        let prog = ["python3", WILD, "--port", "5411", "--addr", SRV, how];
        let mut s = server(p, exec, &prog);
        wait_ready(&mut s);
        blast(&p.cli, 5411, 100, false, "to-addr");
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(blast(&p.cli, 5411, 0, true, "quit")["bye"], true);
        let (st, out, err) = finish(s);
        assert!(st.success(), "{exec:?}: {err}\n{out}");
        let l = out
            .lines()
            .find(|l| l.starts_with('{'))
            .expect("a JSON line");
        (
            serde_json::from_str::<serde_json::Value>(l).unwrap(),
            out,
            err,
        )
    };
    let (k, _, _) = run(None);
    assert_eq!(k["specific"], 100, "the kernel: {k}");
    assert_eq!(k["wildcard"], 0, "the kernel: {k}");
    for mode in ["xdp", "packet"] {
        let (r, out, err) = run(Some(&["--mode", mode]));
        assert_eq!(r, k, "{how} {mode}: {out}\n{err}");
        assert!(out.contains("sockets on rxpath "), "{how} {mode}: {out}");
    }
}

const TWO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/two_sockets.py");
const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/udp_client.py");

/// `udp_client.py` in the client namespace with `args` after the address.
fn client(p: &Pair, args: &[&str]) -> serde_json::Value {
    common::exec::python_client(p, &[&[CLIENT, SRV][..], args].concat())
}

/// Finding 8: once an rxpath socket has read a datagram through the
/// kernel socket behind it (one that came in fragments), `poll`,
/// `select` and `epoll` must still report another kernel socket of the
/// program readable.
#[test]
fn readiness_of_kernel_fds_survives_a_read_through_the_kernel_side() {
    let Some(p) = pair("e8") else { return };
    let muxes = ["poll", "select", "epoll"];
    for (mux, blocking) in muxes.iter().flat_map(|m| [(*m, false), (*m, true)]) {
        for exec in [None, Some(&["--kernel-ports", "5406"][..])] {
            let mut prog = vec!["python3", TWO, "--port", "5405", "--other", "5406"];
            prog.extend(["--mux", mux]);
            if blocking {
                prog.push("--blocking");
            }
            let mut s = server(&p, exec, &prog);
            wait_ready(&mut s);
            let big = client(&p, &["5405", "1", "--no-quit", "--big", "3000"]);
            assert_eq!(
                big["missing"], 0,
                "{mux} {exec:?}: the fragmented one: {big}"
            );
            let other = client(&p, &["5406", "3", "--tries", "4"]);
            let (st, out, err) = finish(s);
            assert!(st.success(), "{mux} {exec:?}: {err}\n{out}");
            assert_eq!(other["missing"], 0, "{mux} {exec:?}: {other}\n{out}\n{err}");
            assert_eq!(other["bye"], true, "{mux} {exec:?}: {other}");
        }
    }
}

const CLOSE_BLOCKED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/close_blocked.py");

/// Finding 5: `close()` while another thread is blocked in `recvfrom` on
/// the socket. The kernel keeps the open file with the blocked call: the
/// port stays bound (`EADDRINUSE` for a new bind) and the call returns
/// the next datagram. The kernel run is the oracle.
#[test]
fn close_while_a_read_is_blocked_keeps_the_file_as_the_kernel_does() {
    let Some(p) = pair("e5") else { return };
    let prog = ["python3", CLOSE_BLOCKED, "--port", "5407"];
    let mut said = Vec::new();
    for exec in [None, Some(&[][..])] {
        let mut s = server(&p, exec, &prog);
        let before = wait_ready(&mut s);
        let c = client(&p, &["5407", "1", "--no-quit", "--tries", "8"]);
        let (st, out, err) = finish(s);
        assert!(st.success(), "{exec:?}: {before:?}\n{out}\n{err}");
        assert_eq!(c["missing"], 0, "{exec:?}: {c}\n{out}\n{err}");
        assert!(out.contains("blocked read returned"), "{exec:?}: {out}");
        said.push(before);
    }
    assert_eq!(said[0], ["rebind: EADDRINUSE"], "the kernel");
    assert_eq!(said[1], said[0], "exec as the kernel");
}

const DOUBLE_CLOSE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/double_close.py");

/// A program that closes a number twice (iperf3's server does): between
/// the closes the preload may make a descriptor of its own on the freed
/// number (an epoll set's eventfd, the device it sleeps on). The second
/// close fails with `EBADF`, as on the kernel, and takes nothing from the
/// path: every datagram after it is answered at its first try. The
/// kernel run is the oracle.
#[test]
fn a_second_close_of_a_number_takes_nothing_from_the_path() {
    let Some(p) = pair("ed") else { return };
    second_close_takes_nothing(&p, &["python3", DOUBLE_CLOSE, "--port", "5414"]);
}

/// The same with the first close before the bind that starts rxpath's
/// host: the number is free while the host makes its own descriptors
/// (its AF_XDP and packet sockets, BPF maps and program, eventfds, the
/// control socket), and none of them may be on it.
#[test]
fn a_second_close_after_the_host_started_takes_nothing_from_the_path() {
    let Some(p) = pair("ee") else { return };
    let prog = ["python3", DOUBLE_CLOSE, "--port", "5415", "--before-bind"];
    second_close_takes_nothing(&p, &prog);
}

/// `prog` (double_close.py) on the kernel, then under exec: the second
/// close fails `EBADF` both times, and 50 datagrams, each tried once,
/// are all answered.
fn second_close_takes_nothing(p: &Pair, prog: &[&str]) {
    let port = prog[3];
    let mut said = Vec::new();
    for exec in [None, Some(&[][..])] {
        let mut s = server(p, exec, prog);
        let before = wait_ready(&mut s);
        let c = client(p, &[port, "50", "--tries", "1", "--wait", "3"]);
        let (st, out, err) = finish(s);
        assert!(st.success(), "{exec:?}: {before:?}\n{out}\n{err}");
        assert_eq!(c["missing"], 0, "{exec:?}: {c}\n{out}\n{err}");
        assert_eq!(c["bye"], true, "{exec:?}: {c}\n{out}\n{err}");
        if exec.is_some() {
            assert!(!out.contains("MISMATCH"), "{out}");
            assert!(out.contains("back in the pool: ok"), "{out}");
        }
        said.push(before);
    }
    assert_eq!(said[0], ["second close: EBADF"], "the kernel");
    assert_eq!(said[1], said[0], "exec as the kernel");
}

const ECHO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/udp_echo.py");

/// Finding 2: a socket served by forked workers, children or grandchildren
/// of the process that bound it (NSD's shape), answers every datagram at
/// the first try, as on the kernel, on AF_XDP and AF_PACKET.
#[test]
fn forked_workers_and_grandchildren_answer_every_datagram() {
    let Some(p) = pair("e2f") else { return };
    workers_answer_at_the_first_try(&p, 5408, &[], 300);
}

/// A pre-forking server that starts under traffic: the first datagram
/// waits in the socket's queue while the process that bound it has not
/// forked its workers yet (it never reads the socket itself), and the
/// rest come while the workers start. Every one is answered at its first
/// try, as on the kernel: at the fork the queue moves where the workers
/// read it and the port goes to the kernel socket they share, which the
/// parent takes back only if it reads the socket again.
#[test]
fn a_server_forking_its_workers_under_traffic_answers_every_datagram() {
    let Some(p) = pair("e2t") else { return };
    workers_answer_at_the_first_try(&p, 5413, &["--fork-after", "0.6"], 0);
}

/// `udp_echo.py --mux prefork` and `grandchild` (with `extra`) on the
/// kernel, then under exec on AF_XDP and AF_PACKET, `settle_ms` after it
/// is ready: 20 datagrams, each tried once, all answered with the
/// kernel's bytes; then "quit".
fn workers_answer_at_the_first_try(p: &Pair, port: u16, extra: &[&str], settle_ms: u64) {
    let port = port.to_string();
    let once = [&port, "20", "--no-quit", "--tries", "1", "--wait", "3"];
    for mux in ["prefork", "grandchild"] {
        let mut prog = vec!["python3", ECHO, "--port", &port, "--mux", mux];
        prog.extend_from_slice(extra);
        let mut k = server(p, None, &prog);
        wait_ready(&mut k);
        let on_kernel = client(p, &once);
        let _ = client(p, &[&port, "0"]);
        let (st, _, err) = finish(k);
        assert!(st.success(), "{mux} on the kernel: {err}");
        assert_eq!(on_kernel["missing"], 0, "{mux}: {on_kernel}");
        for mode in ["xdp", "packet"] {
            let mut r = server(p, Some(&["--mode", mode]), &prog);
            wait_ready(&mut r);
            std::thread::sleep(std::time::Duration::from_millis(settle_ms));
            let first = client(p, &once);
            let bye = client(p, &[&port, "0"]);
            let (st, out, err) = finish(r);
            assert!(st.success(), "{mux} {mode}: {err}\n{out}");
            assert_eq!(
                first["missing"], 0,
                "{mux} {mode}: at the first try: {first}\n{out}\n{err}"
            );
            assert_eq!(first["answers"], on_kernel["answers"], "{mux} {mode}");
            assert_eq!(bye["bye"], true, "{mux} {mode}: {bye}");
            assert!(!out.contains("MISMATCH"), "{out}");
        }
    }
}

/// Both ends of the pair at MTU `mtu`.
fn set_mtu(p: &Pair, mtu: u32) {
    let m = mtu.to_string();
    for (ns, dev) in [(&p.srv, &p.srv_if), (&p.cli, &p.cli_if)] {
        common::sh(&["ip", "-n", ns, "link", "set", "dev", dev, "mtu", &m]);
    }
}

/// Finding 4: jumbo frames. MTU 9000 on both ends, 8000-byte datagrams
/// (one frame each, larger than rxpath's 2048-byte frames): every one is
/// answered under exec as on the kernel, on AF_XDP (generic: native XDP
/// on a veth takes no frame that large; through the kernel socket behind
/// the fd, no drop blamed on a full ring) and with --mode packet (whose
/// tap filter leaves them to the kernel socket behind the fd too).
#[test]
fn jumbo_frames_are_answered_as_on_the_kernel() {
    let Some(p) = pair("e4") else { return };
    set_mtu(&p, 9000);
    let prog = ["python3", ECHO, "--port", "5409"];
    let args = ["5409", "30", "--big", "8000", "--tries", "3"];
    let mut k = server(&p, None, &prog);
    wait_ready(&mut k);
    let on_kernel = client(&p, &args);
    let (st, _, err) = finish(k);
    assert!(st.success(), "on the kernel: {err}");
    assert_eq!(on_kernel["missing"], 0, "the kernel: {on_kernel}");
    for mode in ["xdp", "packet"] {
        let mut r = server(&p, Some(&["--mode", mode]), &prog);
        wait_ready(&mut r);
        let on_rxpath = client(&p, &args);
        let (st, out, err) = finish(r);
        assert!(st.success(), "{mode}: {err}\n{out}");
        assert_eq!(on_rxpath["missing"], 0, "{mode}: {out}\n{err}");
        assert_eq!(on_rxpath["answers"], on_kernel["answers"], "{mode}");
        assert!(!out.contains("MISMATCH"), "{mode}: {out}");
        // The XDP program and AF_PACKET's tap filter pass frames longer
        // than an rxpath frame holds to the kernel socket behind the fd;
        // nothing is blamed on a full ring or cut short.
        assert!(out.contains("sockets on rxpath 1 "), "{mode}: {out}");
        for counter in ["rx_missed", "rx_too_long"] {
            let n = common::exec::device(&out, counter);
            assert_eq!(n, Some(0), "{mode}: {counter}: {out}");
        }
    }
}

/// Finding 3: the interface deleted and made again under a running exec
/// (same name, same addresses, a new index): exec notices, says so on
/// stderr and in its report, hands the sockets back to the kernel, and
/// the program answers what comes after as it would on the kernel.
#[test]
fn an_interface_deleted_and_made_again_is_noticed_and_survived() {
    let Some(p) = pair("e3") else { return };
    let prog = ["python3", ECHO, "--port", "5410"];
    for mode in ["xdp", "packet"] {
        let mut r = server(&p, Some(&["--mode", mode]), &prog);
        wait_ready(&mut r);
        let before = client(&p, &["5410", "10", "--no-quit"]);
        assert_eq!(before["missing"], 0, "{mode}: before: {before}");
        common::sh(&["ip", "-n", &p.srv, "link", "del", &p.srv_if]);
        std::thread::sleep(std::time::Duration::from_millis(300));
        p.make_link(true);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let after = client(&p, &["5410", "10", "--tries", "8"]);
        let (st, out, err) = finish(r);
        assert!(st.success(), "{mode}: {err}\n{out}");
        assert_eq!(after["missing"], 0, "{mode}: after: {after}\n{out}\n{err}");
        assert_eq!(after["bye"], true, "{mode}: {after}");
        assert!(err.contains("was deleted"), "{mode}: said: {err}");
        assert!(out.contains("was deleted"), "{mode}: reported: {out}");
        assert!(!out.contains("MISMATCH"), "{mode}: {out}");
    }
}

const TWO_PROCESSES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/two_processes.py");

/// A program that starts another (fork and exec) which serves a socket of
/// its own: both are answered, each process's report is kept and exec's
/// summary is their sum.
#[test]
fn each_process_report_is_kept_and_summed() {
    let Some(p) = pair("e9") else { return };
    let prog = ["python3", TWO_PROCESSES, "--port", "5411"];
    let mut s = server(&p, Some(&[]), &prog);
    wait_ready(&mut s);
    let child = client(&p, &["5412", "5"]);
    let parent = client(&p, &["5411", "5"]);
    let (st, out, err) = finish(s);
    assert!(st.success(), "{err}\n{out}");
    assert_eq!(child["missing"], 0, "the child: {child}\n{err}");
    assert_eq!(parent["missing"], 0, "the parent: {parent}\n{err}");
    assert!(out.contains("processes with a host: 2"), "{out}\n{err}");
    assert!(out.contains("sockets on rxpath 2 "), "{out}");
    assert!(out.contains("0.0.0.0:5411 rxpath"), "{out}");
    assert!(out.contains("0.0.0.0:5412 rxpath"), "{out}");
    assert!(!out.contains("MISMATCH"), "{out}");
}

/// A daemon that chroots after it binds (NSD, `named -t`) no longer sees
/// /sys: the interface watch must not take that for the interface gone
/// and send every socket back to the kernel.
#[test]
fn a_chrooted_server_keeps_its_sockets_on_rxpath() {
    let Some(p) = pair("ec") else { return };
    let dir = std::env::temp_dir().join(format!("rxpath-chroot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display().to_string();
    let prog = ["python3", ECHO, "--port", "5413", "--chroot", &d];
    let mut s = server(&p, Some(&[]), &prog);
    wait_ready(&mut s);
    // The watch looks every second.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let c = client(&p, &["5413", "10"]);
    let (st, out, err) = finish(s);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(st.success(), "{err}\n{out}");
    assert_eq!(c["missing"], 0, "{c}\n{err}");
    assert!(!err.contains("was deleted"), "{err}");
    assert!(out.contains("0.0.0.0:5413 rxpath"), "{out}");
}
